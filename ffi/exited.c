/*
 * exited.c -- a process that has exited is still a process: NtOpenProcess of it, and NtCreateProfile,
 * NtStartProfile, NtStopProfile and NtClose of a profile of it, all succeed; the profile counts nothing.
 *
 * The cases (docs/api.md section 5, docs/limits.md "Processes"):
 *   1. a child that has exited and is not reaped yet (a zombie): opened, profiled, started, stopped, restarted;
 *   2. a child opened while alive, which then exits and is reaped while the handle is kept;
 *   3. a started profile whose process exits: stopped, started again, closed while started;
 *   4. 500 starts racing the child's exit: each child exits (or execs /bin/true, which exits) after a random
 *      delay of 0 to 2 ms from its fork, while the parent opens it and starts a profile of it.
 * Every call must return STATUS_SUCCESS, every profile must count 0 samples, and the process must have the
 * same descriptors, threads and memory mappings after each case as before it. A profile of this process runs
 * all along and must go on counting (the other profiles keep working). A pid that no longer names a process
 * is STATUS_INVALID_CID.
 *
 * Every check prints one line (the race prints its tally); the last line is "N passed, M failed" and the exit
 * status is non-zero when anything failed.
 *
 * Build: gcc -O2 -std=c11 -I include ffi/exited.c -L <dir> -lntprofile -Wl,-rpath,<dir>
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ntprofile.h"

/* ------------------------------------------------------------------------------------------------------------
 * Reporting.
 */

#define CHECKS_FILE "exited.c"
#include "checks.h"

/* ------------------------------------------------------------------------------------------------------------
 * What a leak would change: descriptors, threads, memory mappings.
 */

struct snapshot {
    int fds;
    int threads;
    int maps;
};

static int count_entries(const char *dir)
{
    int n = 0;
    struct dirent *e;
    DIR *d = opendir(dir); /* its own descriptor is in every count alike */
    if (!d)
        return -1;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n;
}

static int count_lines(const char *path)
{
    int n = 0, c;
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    while ((c = fgetc(f)) != EOF)
        if (c == '\n')
            n++;
    fclose(f);
    return n;
}

static struct snapshot snapshot(void)
{
    struct snapshot s;
    s.fds = count_entries("/proc/self/fd");
    s.threads = count_entries("/proc/self/task");
    s.maps = count_lines("/proc/self/maps");
    return s;
}

#define CHECK_BASELINE(what, before)                                                                              \
    do {                                                                                                          \
        struct snapshot now_ = snapshot();                                                                        \
        CHECK(what, now_.fds == (before).fds && now_.threads == (before).threads && now_.maps == (before).maps,  \
              "descriptors %d (before %d), threads %d (before %d), mappings %d (before %d)", now_.fds,            \
              (before).fds, now_.threads, (before).threads, now_.maps, (before).maps);                            \
    } while (0)

/* ------------------------------------------------------------------------------------------------------------
 * Children and profiles.
 */

/* Every user address, in 2 GiB buckets: whatever a child runs falls in the range. */
#define RANGE_BASE ((PVOID)0)
#define RANGE_SIZE ((SIZE_T)1 << 47)
#define BUCKET_SIZE 31
#define BUCKETS (1u << (47 - BUCKET_SIZE))

static ULONG buckets[BUCKETS];
static ULONG own_buckets[BUCKETS];

struct child {
    pid_t pid;
    int go; /* closing it lets the child exit */
};

/* A forked child that exits at once (wait == 0) or when `go` is closed. */
static struct child spawn_child(int wait)
{
    struct child c = {-1, -1};
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        perror("pipe2");
        exit(2);
    }
    c.pid = fork();
    if (c.pid < 0) {
        perror("fork");
        exit(2);
    }
    if (c.pid == 0) {
        char byte;
        close(p[1]);
        if (wait)
            while (read(p[0], &byte, 1) > 0) {
            }
        _exit(0);
    }
    close(p[0]);
    c.go = p[1];
    return c;
}

static void let_exit(struct child *c)
{
    close(c->go);
    c->go = -1;
}

/* Wait until the child has exited, leaving it a zombie (not reaped). */
static void wait_zombie(pid_t pid)
{
    siginfo_t info;
    memset(&info, 0, sizeof info);
    if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT) != 0) {
        perror("waitid");
        exit(2);
    }
}

/* True when the child has exited (zombie), without reaping it. */
static int has_exited(pid_t pid)
{
    siginfo_t info;
    memset(&info, 0, sizeof info);
    return waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
}

static void reap(struct child *c)
{
    if (c->go >= 0)
        let_exit(c);
    while (waitpid(c->pid, NULL, 0) < 0) {
    }
}

static NTSTATUS open_pid(pid_t pid, HANDLE *process)
{
    CLIENT_ID client_id;
    OBJECT_ATTRIBUTES attributes;
    InitializeObjectAttributes(&attributes, NULL, 0, NULL, NULL);
    client_id.UniqueProcess = (HANDLE)(ULONG_PTR)pid;
    client_id.UniqueThread = NULL;
    *process = NULL;
    return NtOpenProcess(process, PROCESS_QUERY_INFORMATION, &attributes, &client_id);
}

static NTSTATUS create_on(HANDLE process, HANDLE *profile, ULONG *buffer)
{
    memset(buffer, 0, sizeof buckets);
    *profile = NULL;
    return NtCreateProfile(profile, process, RANGE_BASE, RANGE_SIZE, BUCKET_SIZE, buffer, sizeof buckets,
                           ProfileTime, (KAFFINITY)-1);
}

static ULONGLONG total(const ULONG *b)
{
    ULONGLONG sum = 0;
    unsigned i;
    for (i = 0; i < BUCKETS; i++)
        sum += b[i];
    return sum;
}

/* The profile's statistics must be readable and show no sample at all; its buckets must be all zero. */
static void expect_nothing_counted(int line, HANDLE profile)
{
    NTPROFILE_STATISTICS st;
    char detail[160];
    memset(&st, 0xFF, sizeof st);
    expect_status(line, "  NtprofileQueryStatistics", NtprofileQueryStatistics(profile, &st), STATUS_SUCCESS);
    snprintf(detail, sizeof detail, "counted %llu, outside %llu, lost %llu; buckets sum %llu",
             (unsigned long long)st.SamplesCounted, (unsigned long long)st.SamplesOutside,
             (unsigned long long)st.SamplesLost, (unsigned long long)total(buckets));
    expect_true(line, "  nothing counted", st.SamplesCounted == 0 && st.SamplesOutside == 0 && total(buckets) == 0,
                detail);
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* ------------------------------------------------------------------------------------------------------------
 * The cases.
 */

static void zombie_case(void)
{
    HANDLE process, profile;
    struct child c;
    struct snapshot before;

    printf("-- 1. a child that has exited and is not reaped yet (a zombie)\n");
    before = snapshot();
    c = spawn_child(0);
    wait_zombie(c.pid);
    EXPECT("NtOpenProcess of the zombie", open_pid(c.pid, &process), STATUS_SUCCESS);
    EXPECT("NtCreateProfile of it", create_on(process, &profile, buckets), STATUS_SUCCESS);
    EXPECT("NtStartProfile", NtStartProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStartProfile again (already started)", NtStartProfile(profile), STATUS_PROFILING_NOT_STOPPED);
    expect_nothing_counted(__LINE__, profile);
    EXPECT("NtStopProfile", NtStopProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStopProfile again (not started)", NtStopProfile(profile), STATUS_PROFILING_NOT_STARTED);
    EXPECT("NtStartProfile (restart)", NtStartProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStopProfile", NtStopProfile(profile), STATUS_SUCCESS);
    expect_nothing_counted(__LINE__, profile);
    EXPECT("NtClose of the profile", NtClose(profile), STATUS_SUCCESS);
    EXPECT("NtClose of the process handle", NtClose(process), STATUS_SUCCESS);
    reap(&c);
    CHECK_BASELINE("  nothing left open", before);
    EXPECT("NtOpenProcess of its pid once reaped (no process)", open_pid(c.pid, &process), STATUS_INVALID_CID);
}

static void reaped_case(void)
{
    HANDLE process, profile;
    struct child c;
    struct snapshot before;

    printf("-- 2. opened while alive; then it exits and is reaped; the handle is kept\n");
    before = snapshot();
    c = spawn_child(1);
    EXPECT("NtOpenProcess of the live child", open_pid(c.pid, &process), STATUS_SUCCESS);
    reap(&c);
    EXPECT("NtCreateProfile of it, reaped", create_on(process, &profile, buckets), STATUS_SUCCESS);
    EXPECT("NtStartProfile", NtStartProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStopProfile", NtStopProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStartProfile (restart)", NtStartProfile(profile), STATUS_SUCCESS);
    expect_nothing_counted(__LINE__, profile);
    EXPECT("NtClose of the profile while started", NtClose(profile), STATUS_SUCCESS);
    EXPECT("NtClose of the process handle", NtClose(process), STATUS_SUCCESS);
    CHECK_BASELINE("  nothing left open", before);
}

static void started_case(void)
{
    HANDLE process, profile;
    struct child c;
    struct snapshot before;

    printf("-- 3. a started profile whose process exits; stopped, then started again\n");
    before = snapshot();
    c = spawn_child(1);
    EXPECT("NtOpenProcess of the live child", open_pid(c.pid, &process), STATUS_SUCCESS);
    EXPECT("NtCreateProfile of it", create_on(process, &profile, buckets), STATUS_SUCCESS);
    EXPECT("NtStartProfile (alive)", NtStartProfile(profile), STATUS_SUCCESS);
    let_exit(&c);
    wait_zombie(c.pid);
    EXPECT("NtStopProfile (a zombie now)", NtStopProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStartProfile (restart on the zombie)", NtStartProfile(profile), STATUS_SUCCESS);
    reap(&c);
    EXPECT("NtStopProfile (reaped now)", NtStopProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStartProfile (restart once reaped)", NtStartProfile(profile), STATUS_SUCCESS);
    EXPECT("NtStopProfile", NtStopProfile(profile), STATUS_SUCCESS);
    expect_nothing_counted(__LINE__, profile);
    EXPECT("NtClose of the profile", NtClose(profile), STATUS_SUCCESS);
    EXPECT("NtClose of the process handle", NtClose(process), STATUS_SUCCESS);
    CHECK_BASELINE("  nothing left open", before);
}

#define ROUNDS 500
#define MAX_DELAY_US 2000

/* The child of one race round: run for `delay_us` microseconds, then exit (or exec a program that exits). */
static void race_child(double delay_us, int exec_it)
{
    double until = now_us() + delay_us;
    while (now_us() < until) {
    }
    if (exec_it)
        execl("/bin/true", "true", (char *)NULL);
    _exit(0);
}

static void race_case(void)
{
    int round, opened = 0, created = 0, started = 0, stopped = 0, closed = 0;
    int exited_before_start = 0, exited_during = 0, alive_at_stop = 0;
    NTSTATUS first_bad = STATUS_SUCCESS;
    const char *first_bad_call = "";
    int first_bad_round = -1;
    struct snapshot before;
    double t0;

    printf("-- 4. starts racing the child's exit (%d rounds, exit after 0-%d us)\n", ROUNDS, MAX_DELAY_US);
    srand(20240518);
    before = snapshot();
    t0 = now_us();
    for (round = 0; round < ROUNDS; round++) {
        HANDLE process = NULL, profile = NULL;
        NTSTATUS st;
        double delay = (double)(rand() % (MAX_DELAY_US + 1));
        int exec_it = round % 4 == 3, gone_before;
        /* Where the exit lands is left to timing in most rounds, but on a loaded (or an idle) machine timing can
         * put every round on one side. Every 25th round pins each side, so both are run whatever the load: the
         * child has surely exited before the start (waited for as a zombie), or is surely alive at the stop
         * (it waits on a pipe that is closed only after the stop). */
        int pin_exited = round % 25 == 0, pin_alive = round % 25 == 1;
        struct child c = {-1, -1};

        if (pin_alive) {
            c = spawn_child(1);
        } else {
            c.pid = fork();
            if (c.pid < 0) {
                perror("fork");
                exit(2);
            }
            if (c.pid == 0)
                race_child(delay, exec_it);
        }

#define RACE_CALL(name, call, counter)                                                                            \
    do {                                                                                                          \
        st = (call);                                                                                              \
        if (st == STATUS_SUCCESS)                                                                                 \
            counter++;                                                                                            \
        else if (first_bad_round < 0) {                                                                           \
            first_bad = st;                                                                                       \
            first_bad_call = (name);                                                                              \
            first_bad_round = round;                                                                              \
        }                                                                                                         \
    } while (0)

        RACE_CALL("NtOpenProcess", open_pid(c.pid, &process), opened);
        RACE_CALL("NtCreateProfile", create_on(process, &profile, buckets), created);
        if (pin_exited)
            wait_zombie(c.pid);
        gone_before = has_exited(c.pid);
        RACE_CALL("NtStartProfile", NtStartProfile(profile), started);
        if (gone_before)
            exited_before_start++;
        else if (has_exited(c.pid))
            exited_during++;
        else
            alive_at_stop++;
        RACE_CALL("NtStopProfile", NtStopProfile(profile), stopped);
        RACE_CALL("NtClose (profile)", NtClose(profile), closed);
        RACE_CALL("NtClose (process)", NtClose(process), closed);
        reap(&c);
    }
    printf("   %d rounds in %.2f s: NtOpenProcess %d, NtCreateProfile %d, NtStartProfile %d, NtStopProfile %d "
           "and NtClose %d of %d STATUS_SUCCESS\n",
           ROUNDS, (now_us() - t0) / 1e6, opened, created, started, stopped, closed, 2 * ROUNDS);
    printf("   the child had exited before the start in %d rounds, exited while it started in %d, was alive at the "
           "stop in %d\n",
           exited_before_start, exited_during, alive_at_stop);
    CHECK("every call of every round STATUS_SUCCESS",
          opened == ROUNDS && created == ROUNDS && started == ROUNDS && stopped == ROUNDS && closed == 2 * ROUNDS,
          first_bad_round < 0 ? "all %d rounds" : "round %d: %s -> %s", first_bad_round < 0 ? ROUNDS : first_bad_round,
          first_bad_call, status_name(first_bad));
    CHECK("  the race was run on both sides", exited_before_start > 0 && exited_during + alive_at_stop > 0,
          "%d rounds exited before the start, %d after it", exited_before_start, exited_during + alive_at_stop);
    CHECK_BASELINE("  nothing left open", before);
}

/* ------------------------------------------------------------------------------------------------------------ */

static volatile ULONGLONG sink;

static void spin_cpu_ms(double ms)
{
    struct timespec a, b;
    ULONGLONG x = 1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    do {
        int i;
        for (i = 0; i < 10000; i++)
            x = (x ^ (ULONGLONG)i) * 0x9E3779B97F4A7C15ULL;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    } while ((b.tv_sec - a.tv_sec) * 1e3 + (b.tv_nsec - a.tv_nsec) / 1e6 < ms);
    sink = x;
}

int main(void)
{
    HANDLE own = NULL, process = NULL;
    NTPROFILE_STATISTICS st;
    struct snapshot baseline;

    setvbuf(stdout, NULL, _IOLBF, 0);
    /* Warm-up: the library's one-time state (its allocator arenas, the fork handlers) exists before the
     * baseline, so that the baseline compares like with like. */
    if (create_on(NtCurrentProcess(), &own, own_buckets) != STATUS_SUCCESS || NtStartProfile(own) != 0 ||
        NtClose(own) != STATUS_SUCCESS || open_pid(getpid(), &process) != STATUS_SUCCESS ||
        NtClose(process) != STATUS_SUCCESS) {
        printf("FAIL the warm-up (a profile of this process) failed\n");
        return 1;
    }
    baseline = snapshot();

    printf("-- a profile of this process runs through every case\n");
    EXPECT("NtCreateProfile (this process)", create_on(NtCurrentProcess(), &own, own_buckets), STATUS_SUCCESS);
    EXPECT("NtStartProfile (this process)", NtStartProfile(own), STATUS_SUCCESS);

    zombie_case();
    reaped_case();
    started_case();
    race_case();

    printf("-- the profile of this process kept counting\n");
    spin_cpu_ms(100);
    EXPECT("NtStopProfile (this process)", NtStopProfile(own), STATUS_SUCCESS);
    EXPECT("NtprofileQueryStatistics", NtprofileQueryStatistics(own, &st), STATUS_SUCCESS);
    CHECK("  it counted this process's 100 ms of work", st.SamplesCounted >= 50 && total(own_buckets) >= 50,
          "counted %llu, buckets sum %llu", (unsigned long long)st.SamplesCounted, (unsigned long long)total(own_buckets));
    EXPECT("NtClose (this process)", NtClose(own), STATUS_SUCCESS);
    CHECK_BASELINE("descriptors, threads and mappings back to the baseline", baseline);

    return checks_summary();
}
