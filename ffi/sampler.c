/*
 * sampler.c -- the sampler extension from C (docs/api.md section 8): a forked child that forks a grandchild is
 * sampled with NtprofileCreateSampler / NtprofileEnableSampler / NtprofileReadSampler /
 * NtprofileQuerySamplerStatistics / NtClose, and the statuses of bad input are checked. Every check prints one
 * line; the last line is "N passed, M failed" and the exit status is non-zero when anything failed.
 *
 * Build: gcc -O2 -std=c11 -I include ffi/sampler.c -L <dir> -lntprofile -Wl,-rpath,<dir>
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntprofile.h"

#define CHECKS_FILE "sampler.c"
#include "checks.h"

static double cpu_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void spin(double ms)
{
    volatile unsigned long x = 1;
    double end = cpu_ms() + ms;
    while (cpu_ms() < end)
        for (int i = 0; i < 10000; i++) x = x * 6364136223846793005UL + 1;
}

/* Fork a child that waits for a byte on a pipe before it goes on: in the parent, the child's pid, with *go the
   pipe's end to write the byte to; in the child, 0 once the byte came (when the pipe closes first, the child
   exits with `closed_status`). */
static pid_t fork_gated(int *go, int closed_status)
{
    int fds[2];
    if (pipe(fds) != 0) exit(2);
    pid_t pid = fork();
    if (pid < 0) exit(2);
    if (pid == 0) {
        char c;
        close(fds[1]);
        if (read(fds[0], &c, 1) != 1) _exit(closed_status);
        return 0;
    }
    close(fds[0]);
    *go = fds[1];
    return pid;
}

/* The child: waits for a byte on the pipe, forks a grandchild, both spin 200 ms, the child reaps it. */
static pid_t start_child(int *go)
{
    pid_t pid = fork_gated(go, 3);
    if (pid == 0) {
        pid_t grandchild = fork();
        spin(200);
        if (grandchild == 0) _exit(0);
        waitpid(grandchild, NULL, 0);
        _exit(0);
    }
    return pid;
}

/* What the record routine saw. */
struct seen {
    ULONG child;
    ULONG grandchild;     /* from the Fork record */
    ULONG child_samples;
    ULONG grandchild_samples;
    ULONG other_samples;
    /* Samples of processes other than the child, by pid: classified once every record is read, since rings are
       per CPU and a grandchild's samples may be read from one ring before its Fork record from another. */
    ULONG pid[16];
    ULONG pid_samples[16];
    ULONG pids;
    ULONG samples;
    ULONG records;
    ULONG exits;          /* Exit records of a main thread of the tree */
    ULONG bad;            /* records with impossible fields */
};

static VOID NTAPI on_record(const NTPROFILE_RECORD *r, PVOID context)
{
    struct seen *s = (struct seen *)context;
    s->records++;
    switch (r->Type) {
    case NtprofileRecordSample:
        s->samples++;
        if (r->Pid == s->child) {
            s->child_samples++;
        } else {
            ULONG i = 0;
            while (i < s->pids && s->pid[i] != r->Pid) i++;
            if (i == s->pids && s->pids < 16) s->pid[s->pids++] = r->Pid;
            if (i < s->pids)
                s->pid_samples[i]++;
            else
                s->other_samples++; /* a 17th process: only the child and the grandchild are sampled */
        }
        if (r->Time == 0 || r->Address == 0) s->bad++;
        break;
    case NtprofileRecordFork:
        if (r->ParentPid == s->child && r->Pid != s->child) s->grandchild = r->Pid;
        break;
    case NtprofileRecordExit:
        if (r->Pid == r->Tid && (r->Pid == s->child || r->Pid == s->grandchild)) s->exits++;
        break;
    case NtprofileRecordComm:
    case NtprofileRecordMmap:
        if (!r->Name || strlen(r->Name) != r->NameLength) s->bad++;
        break;
    default:
        break;
    }
}

/* Once every record is read: the samples of processes other than the child are the grandchild's (named by its
   Fork record) or another process's. */
static void classify(struct seen *s)
{
    for (ULONG i = 0; i < s->pids; i++) {
        if (s->grandchild && s->pid[i] == s->grandchild)
            s->grandchild_samples += s->pid_samples[i];
        else
            s->other_samples += s->pid_samples[i];
    }
    s->pids = 0;
}

static NTPROFILE_SAMPLER_CONFIG config_for(const ULONG *pids, ULONG count)
{
    NTPROFILE_SAMPLER_CONFIG c;
    memset(&c, 0, sizeof c);
    c.Size = sizeof c;
    c.Flags = NTPROFILE_SAMPLER_INHERIT | NTPROFILE_SAMPLER_SIDEBAND;
    c.Source = ProfileTime;
    c.ProcessCount = count;
    c.ProcessIds = pids;
    return c;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* A child that waits for a byte on the pipe, then spins `ms` of CPU time (0: waits on, idle, until the pipe
   closes). */
static pid_t start_spinner(int *go, double ms)
{
    pid_t pid = fork_gated(go, 0);
    if (pid == 0) {
        spin(ms);
        _exit(0);
    }
    return pid;
}

struct totals {
    ULONGLONG samples;
    ULONGLONG lost;
};

static VOID NTAPI add_up(const NTPROFILE_RECORD *r, PVOID context)
{
    struct totals *t = (struct totals *)context;
    if (r->Type == NtprofileRecordSample) t->samples++;
    if (r->Type == NtprofileRecordLost) t->lost += r->Length;
}

struct waiting_read {
    HANDLE sampler;
    ULONG timeout;
    NTSTATUS status;
    double ended;
};

static void *read_in_thread(void *arg)
{
    struct waiting_read *w = (struct waiting_read *)arg;
    w->status = NtprofileReadSampler(w->sampler, w->timeout, NULL, NULL, NULL);
    w->ended = now_ms();
    return NULL;
}

static pid_t fork_parent;
static int forks_left;

static VOID NTAPI fork_once(const NTPROFILE_RECORD *r, PVOID context)
{
    (void)r;
    (void)context;
    if (getpid() == fork_parent && forks_left > 0) {
        forks_left--;
        fork();
    }
}

/* Nothing lost silently, a waiting read that blocks nobody, fork() inside the routine (docs/api.md section 8). */
static void promises(void)
{
    printf("-- a ring too small for two samples is refused\n");
    HANDLE h = NULL;
    NTPROFILE_SAMPLER_CONFIG c = config_for(NULL, 0);
    c.UserStackSize = 65528;
    c.RingPages = 1;
    EXPECT("UserStackSize 65528, RingPages 1", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c.RingPages = 16;
    EXPECT("UserStackSize 65528, RingPages 16", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);

    printf("-- a full ring that cannot write a Lost record still counts every sample\n");
    int go;
    pid_t child = start_spinner(&go, 400);
    ULONG pids[1] = {(ULONG)child};
    c = config_for(pids, 1);
    c.Flags = NTPROFILE_SAMPLER_INHERIT;
    c.Interval = 10000;
    c.UserStackSize = 65528;
    c.RingPages = 64;
    EXPECT("UserStackSize 65528, RingPages 64", NtprofileCreateSampler(&h, &c), STATUS_SUCCESS);
    EXPECT("NtprofileEnableSampler", NtprofileEnableSampler(h, 1), STATUS_SUCCESS);
    if (write(go, "g", 1) != 1) exit(2);
    close(go);
    int status;
    struct rusage ru;
    wait4(child, &status, 0, &ru);
    double user_ms = ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3;
    /* The event counts the task's whole run time; the kernel splits it into user and system time from where its
     * ticks land, and the 64 KiB stack copies of the samples (in the kernel, on the task's time) take ticks too:
     * a loaded run saw 376 samples and losses for 320 ms of user time. So the ceiling is of user + system time. */
    double cpu_ms = user_ms + ru.ru_stime.tv_sec * 1e3 + ru.ru_stime.tv_usec / 1e3;
    struct totals t = {0, 0};
    EXPECT("NtprofileReadSampler (once, at the end)", NtprofileReadSampler(h, 0, add_up, &t, NULL), STATUS_SUCCESS);
    NTPROFILE_SAMPLER_STATISTICS stats;
    EXPECT("NtprofileQuerySamplerStatistics", NtprofileQuerySamplerStatistics(h, &stats), STATUS_SUCCESS);
    CHECK("Samples + Lost as the CPU time says", t.samples + t.lost >= 0.8 * user_ms && t.samples + t.lost <= 1.15 * cpu_ms + 2,
          "%llu samples + %llu lost for %.0f ms of user time (%.0f ms with system time) at 1 ms",
          (unsigned long long)t.samples, (unsigned long long)t.lost, user_ms, cpu_ms);
    CHECK("Lost records sum to Lost", stats.Lost == t.lost && stats.Samples == t.samples, "%llu/%llu",
          (unsigned long long)stats.Lost, (unsigned long long)t.lost);
    /* One thread on a few processors: one event per thread and processor (the processor-wide layout is for
     * thousands of threads). */
    CHECK("EventMode names the layout", stats.EventMode == NTPROFILE_EVENTS_THREAD_CPU, "EventMode %lu",
          (unsigned long)stats.EventMode);
    EXPECT("NtClose", NtClose(h), STATUS_SUCCESS);

    printf("-- a waiting read blocks nobody, and NtClose ends it\n");
    child = start_spinner(&go, 0);
    pids[0] = (ULONG)child;
    c = config_for(pids, 1);
    EXPECT("NtprofileCreateSampler(idle child)", NtprofileCreateSampler(&h, &c), STATUS_SUCCESS);
    EXPECT("NtprofileEnableSampler", NtprofileEnableSampler(h, 1), STATUS_SUCCESS);
    struct waiting_read w = {h, 0xFFFFFFFFu, -1, 0};
    pthread_t thread;
    if (pthread_create(&thread, NULL, read_in_thread, &w) != 0) exit(2);
    usleep(100000);
    double t0 = now_ms();
    EXPECT("NtprofileQuerySamplerStatistics during the wait", NtprofileQuerySamplerStatistics(h, &stats),
           STATUS_SUCCESS);
    EXPECT("NtprofileEnableSampler(FALSE) during the wait", NtprofileEnableSampler(h, 0), STATUS_SUCCESS);
    double took = now_ms() - t0;
    CHECK("query and enable answer during the wait", took < 50, "%.3f ms", took);
    double closed = now_ms();
    EXPECT("NtClose during the wait", NtClose(h), STATUS_SUCCESS);
    double deadline = now_ms() + 5000;
    while (w.ended == 0 && now_ms() < deadline) usleep(1000);
    CHECK("NtClose ends a read waiting with an endless timeout", w.ended != 0 && w.ended - closed < 500,
          "%s %.3f ms after NtClose", w.ended != 0 ? "ended" : "still waiting", (w.ended ? w.ended : now_ms()) - closed);
    if (w.ended != 0) {
        pthread_join(thread, NULL);
        EXPECT("the closed read's status", w.status, STATUS_INVALID_HANDLE);
    }
    close(go);
    waitpid(child, NULL, 0);

    printf("-- fork() inside the record routine\n");
    c = config_for(NULL, 0);
    c.Interval = 1000;
    EXPECT("NtprofileCreateSampler(current)", NtprofileCreateSampler(&h, &c), STATUS_SUCCESS);
    EXPECT("NtprofileEnableSampler", NtprofileEnableSampler(h, 1), STATUS_SUCCESS);
    spin(50);
    fork_parent = getpid();
    forks_left = 1;
    NTSTATUS s = NtprofileReadSampler(h, 0, fork_once, NULL, NULL);
    if (getpid() != fork_parent) _exit(s == STATUS_INVALID_HANDLE ? 0 : 1);
    EXPECT("the parent's read", s, STATUS_SUCCESS);
    pid_t forked = wait(&status);
    CHECK("the child's read returns STATUS_INVALID_HANDLE (no crash)",
          forked > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "pid %d, status 0x%x", (int)forked, status);
    EXPECT("NtClose", NtClose(h), STATUS_SUCCESS);
}

int main(void)
{
    printf("-- a forked child and its own child, sampled\n");
    int go;
    pid_t child = start_child(&go);
    ULONG pids[1] = {(ULONG)child};
    NTPROFILE_SAMPLER_CONFIG config = config_for(pids, 1);
    HANDLE sampler = NULL;
    EXPECT("NtprofileCreateSampler(child)", NtprofileCreateSampler(&sampler, &config), STATUS_SUCCESS);
    EXPECT("NtprofileEnableSampler(TRUE)", NtprofileEnableSampler(sampler, 1), STATUS_SUCCESS);
    if (write(go, "g", 1) != 1) return 2;
    close(go);
    struct seen seen;
    memset(&seen, 0, sizeof seen);
    seen.child = (ULONG)child;
    NTPROFILE_SAMPLER_STATISTICS stats;
    memset(&stats, 0, sizeof stats);
    ULONG total = 0;
    for (int i = 0; i < 400; i++) {
        ULONG n = 0;
        NTSTATUS s = NtprofileReadSampler(sampler, 50, on_record, &seen, &n);
        if (s != STATUS_SUCCESS) {
            EXPECT("NtprofileReadSampler", s, STATUS_SUCCESS);
            break;
        }
        total += n;
        if (NtprofileQuerySamplerStatistics(sampler, &stats) != STATUS_SUCCESS || stats.TargetsExited) break;
    }
    EXPECT("NtprofileReadSampler (the last records)", NtprofileReadSampler(sampler, 0, on_record, &seen, NULL),
           STATUS_SUCCESS);
    EXPECT("NtprofileQuerySamplerStatistics", NtprofileQuerySamplerStatistics(sampler, &stats), STATUS_SUCCESS);
    waitpid(child, NULL, 0);
    classify(&seen);
    printf("child %u: %u samples; grandchild %u: %u samples; other %u; %u records\n", (unsigned)child,
           (unsigned)seen.child_samples, (unsigned)seen.grandchild, (unsigned)seen.grandchild_samples,
           (unsigned)seen.other_samples, (unsigned)seen.records);
    CHECK("TargetsExited", stats.TargetsExited == 1, "%u", (unsigned)stats.TargetsExited);
    CHECK("the child's samples", seen.child_samples >= 40, "%u", (unsigned)seen.child_samples);
    CHECK("a Fork record of the grandchild", seen.grandchild != 0, "pid %u", (unsigned)seen.grandchild);
    CHECK("the grandchild's samples", seen.grandchild_samples >= 40, "%u", (unsigned)seen.grandchild_samples);
    CHECK("no sample of another process", seen.other_samples == 0, "%u", (unsigned)seen.other_samples);
    CHECK("Exit records of both", seen.exits == 2, "%u", (unsigned)seen.exits);
    CHECK("well-formed records", seen.bad == 0, "%u bad", (unsigned)seen.bad);
    CHECK("Samples == Sample records", stats.Samples == seen.samples, "%llu vs %u",
          (unsigned long long)stats.Samples, (unsigned)seen.samples);
    CHECK("Records == records delivered", stats.Records == seen.records, "%llu vs %u",
          (unsigned long long)stats.Records, (unsigned)seen.records);
    CHECK("RecordCount summed", total <= seen.records && total > 0, "%u of %u", (unsigned)total,
          (unsigned)seen.records);

    printf("-- handles of the wrong kind, stale handles\n");
    EXPECT("NtStartProfile(sampler)", NtStartProfile(sampler), STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("NtStopProfile(sampler)", NtStopProfile(sampler), STATUS_OBJECT_TYPE_MISMATCH);
    static ULONG buffer[64];
    HANDLE profile = NULL;
    EXPECT("NtCreateProfile", NtCreateProfile(&profile, NtCurrentProcess(), (PVOID)0x10000, 0x1000, 8, buffer,
                                              sizeof buffer, ProfileTime, (KAFFINITY)-1),
           STATUS_SUCCESS);
    EXPECT("NtprofileReadSampler(profile)", NtprofileReadSampler(profile, 0, on_record, &seen, NULL),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("NtprofileEnableSampler(profile)", NtprofileEnableSampler(profile, 1), STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("NtprofileQuerySamplerStatistics(profile)", NtprofileQuerySamplerStatistics(profile, &stats),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("NtprofileEnableSampler(NtCurrentProcess())", NtprofileEnableSampler(NtCurrentProcess(), 1),
           STATUS_OBJECT_TYPE_MISMATCH);
    EXPECT("NtClose(profile)", NtClose(profile), STATUS_SUCCESS);
    EXPECT("NtprofileQuerySamplerStatistics(NULL)", NtprofileQuerySamplerStatistics(sampler, NULL),
           STATUS_ACCESS_VIOLATION);
    EXPECT("NtClose(sampler)", NtClose(sampler), STATUS_SUCCESS);
    EXPECT("NtprofileReadSampler(closed)", NtprofileReadSampler(sampler, 0, on_record, &seen, NULL),
           STATUS_INVALID_HANDLE);
    EXPECT("NtClose(closed)", NtClose(sampler), STATUS_INVALID_HANDLE);

    printf("-- bad configurations\n");
    HANDLE h = NULL;
    NTPROFILE_SAMPLER_CONFIG c = config_for(NULL, 0);
    EXPECT("Config NULL", NtprofileCreateSampler(&h, NULL), STATUS_INVALID_PARAMETER);
    EXPECT("SamplerHandle NULL", NtprofileCreateSampler(NULL, &c), STATUS_ACCESS_VIOLATION);
    EXPECT("SamplerHandle unwritable", NtprofileCreateSampler((PHANDLE)(uintptr_t)8, &c), STATUS_ACCESS_VIOLATION);
    EXPECT("Config unreadable", NtprofileCreateSampler(&h, (const NTPROFILE_SAMPLER_CONFIG *)(uintptr_t)64),
           STATUS_ACCESS_VIOLATION);
    static unsigned char raw[sizeof(NTPROFILE_SAMPLER_CONFIG) + 8];
    memcpy(raw + 4, &c, sizeof c);
    EXPECT("Config misaligned", NtprofileCreateSampler(&h, (const NTPROFILE_SAMPLER_CONFIG *)(raw + 4)),
           STATUS_DATATYPE_MISALIGNMENT);
    c.Size = sizeof c - 8;
    EXPECT("Size too small", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c = config_for(NULL, 0);
    c.Flags |= 0x100;
    EXPECT("unknown flag", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c = config_for(NULL, 0);
    c.Reserved1 = 1;
    EXPECT("Reserved1 set", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c = config_for(pids, 1);
    c.Flags |= NTPROFILE_SAMPLER_GLOBAL;
    EXPECT("GLOBAL with ProcessIds", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c = config_for(NULL, 1);
    EXPECT("ProcessIds NULL", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c = config_for((const ULONG *)(uintptr_t)64, 1);
    EXPECT("ProcessIds unreadable", NtprofileCreateSampler(&h, &c), STATUS_ACCESS_VIOLATION);
    ULONG missing[1] = {0x7FFFFFFF};
    c = config_for(missing, 1);
    EXPECT("no such pid", NtprofileCreateSampler(&h, &c), STATUS_INVALID_CID);
    c = config_for(NULL, 0);
    c.Source = ProfileLoadInstructions;
    EXPECT("a source with no perf event", NtprofileCreateSampler(&h, &c), STATUS_NOT_SUPPORTED);
    c = config_for(NULL, 0);
    c.UserStackSize = 65536;
    EXPECT("UserStackSize 65536", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    c = config_for(NULL, 0);
    c.RingPages = 3;
    EXPECT("RingPages 3", NtprofileCreateSampler(&h, &c), STATUS_INVALID_PARAMETER);
    CHECK("no handle written by a failed create", h == NULL, "%p", h);

    printf("-- the current process (ProcessCount 0), with call chains\n");
    c = config_for(NULL, 0);
    c.MaxCallchain = 16;
    c.Interval = 1000;
    EXPECT("NtprofileCreateSampler(current)", NtprofileCreateSampler(&h, &c), STATUS_SUCCESS);
    EXPECT("NtprofileEnableSampler(TRUE)", NtprofileEnableSampler(h, 1), STATUS_SUCCESS);
    spin(100);
    EXPECT("NtprofileEnableSampler(FALSE)", NtprofileEnableSampler(h, 0), STATUS_SUCCESS);
    memset(&seen, 0, sizeof seen);
    seen.child = (ULONG)getpid();
    EXPECT("NtprofileReadSampler(current)", NtprofileReadSampler(h, 0, on_record, &seen, NULL), STATUS_SUCCESS);
    classify(&seen);
    CHECK("own samples", seen.child_samples >= 100 && seen.other_samples == 0, "%u own, %u other",
          (unsigned)seen.child_samples, (unsigned)seen.other_samples);
    EXPECT("NtClose", NtClose(h), STATUS_SUCCESS);

    promises();

    return checks_summary();
}
