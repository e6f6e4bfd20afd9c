/*
 * workload.c -- the benchmark suite's workload with designed truth, and the in-process samplers it is measured
 * under (compiled with gcc by the harness, benches/suite/harness/).
 *
 * Four hot functions, each in a section of its own (GNU ld gives a C-identifier section's bounds as
 * __start_<name> / __stop_<name>), run the same loop body in chunks of random length (1,000-31,000 iterations,
 * a few to tens of microseconds) chosen with probabilities 40/30/20/10 %. The truth is the workload's own count of
 * iterations per function: the bodies are identical and 64-byte aligned, so an iteration costs the same in
 * each. THREADS threads share the ITERS iterations equally, each with its own seeded chunk sequence.
 *
 * Usage: workload MODE RATE_HZ THREADS ITERS SEED    (ITERS may be a duration: `10s` runs each thread 10 s)
 * MODE is what samples the workload in this process:
 *   plain      nothing (also the mode run under `perf record` and `ntprof record`)
 *   profil     glibc profil(3) over the four sections (16-bit counters; its rate is fixed by glibc)
 *   sprofil    glibc sprofil(3), one region per function, 32-bit counters (PROF_UINT)
 *   timer      a POSIX CPU-time timer per thread (timer_create(CLOCK_THREAD_CPUTIME_ID), SIGEV_THREAD_ID) with
 *              a SIGPROF handler reading the interrupted PC; overruns (timer_getoverrun) are its lost samples
 *   ntprofile  NtCreateProfile over the four sections at NtSetIntervalProfile(10^7 / RATE_HZ, ProfileTime)
 *   ntprofile-task  the same with the task-clock source registered through NtprofileRegisterSource
 * and prints one line of `key=value` fields (times in ns):
 *   work_ns     CPU time of the workload threads (sum of their CLOCK_THREAD_CPUTIME_ID)
 *   proc_ns     CPU time of the whole process (getrusage RUSAGE_SELF, after the sampler stopped)
 *   main_ns     CPU time of the main thread (creates and stops the sampler, starts and joins the threads)
 *   start_ns stop_ns  wall time of the sampler's start and stop calls
 *   start2_ns stop2_ns  the same for a second start and stop of the same profile (ntprofile; 0 otherwise)
 *   cons_ns cons_switches  CPU time and context switches of ntprofile's consumer thread up to the stop
 *   truth0..3   iterations per function;  hot0..3  samples per function
 *   samples     every sample the sampler took (ntprofile: counted + outside; timer: every signal), or -1 when
 *               the sampler cannot tell (profil, sprofil: samples outside their ranges are not recorded)
 *   lost throttled  as the sampler reports them (-1: it cannot tell)
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/profil.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include "ntprofile.h"

#define NFUNC 4

#define HOT(N)                                                                                                 \
    __attribute__((noinline, noclone, aligned(64), section("ntp_bench_hot" #N))) uint64_t hot##N(uint64_t n, \
                                                                                                uint64_t x)   \
    {                                                                                                          \
        for (uint64_t i = 0; i < n; i++) {                                                                     \
            x = (x << 7 | x >> 57) ^ (i * 0x9E3779B97F4A7C15ULL);                                              \
            __asm__ volatile("" : "+r"(x));                                                                    \
        }                                                                                                      \
        return x;                                                                                              \
    }

HOT(0)
HOT(1)
HOT(2)
HOT(3)

extern const char __start_ntp_bench_hot0[], __stop_ntp_bench_hot0[];
extern const char __start_ntp_bench_hot1[], __stop_ntp_bench_hot1[];
extern const char __start_ntp_bench_hot2[], __stop_ntp_bench_hot2[];
extern const char __start_ntp_bench_hot3[], __stop_ntp_bench_hot3[];

static uintptr_t lo[NFUNC], hi[NFUNC];
static uintptr_t span_lo, span_hi;
/* Cumulative probabilities (per mille) of the four functions. */
static const unsigned cumulative[NFUNC] = {400, 700, 900, 1000};

static uint64_t (*const fns[NFUNC])(uint64_t, uint64_t) = {hot0, hot1, hot2, hot3};

static int func_of(uintptr_t pc)
{
    for (int i = 0; i < NFUNC; i++)
        if (pc >= lo[i] && pc < hi[i])
            return i;
    return -1;
}

static uint64_t thread_cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

static uint64_t wall_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ULL + (uint64_t)t.tv_nsec;
}

/* ---- the POSIX CPU-time timer peer ---------------------------------------------------------------------- */

static long rate_hz;
static __thread timer_t thread_timer;
static __thread int thread_timer_armed;
static __thread uint64_t tl_hot[NFUNC], tl_samples, tl_lost;

static void on_sigprof(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)si;
    ucontext_t *uc = ctx;
    int f = func_of((uintptr_t)uc->uc_mcontext.gregs[REG_RIP]);
    if (f >= 0)
        tl_hot[f]++;
    tl_samples++;
    if (thread_timer_armed) {
        int over = timer_getoverrun(thread_timer);
        if (over > 0)
            tl_lost += (uint64_t)over;
    }
}

static int arm_thread_timer(void)
{
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGPROF;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    if (timer_create(CLOCK_THREAD_CPUTIME_ID, &sev, &thread_timer) != 0)
        return -1;
    long period = 1000000000L / rate_hz;
    struct itimerspec its = {{period / 1000000000L, period % 1000000000L},
                             {period / 1000000000L, period % 1000000000L}};
    thread_timer_armed = 1;
    return timer_settime(thread_timer, 0, &its, NULL);
}

/* ---- the consumer thread's own CPU time and wake-ups ------------------------------------------------------- */

/* Sum the CPU time (schedstat, ns) and context switches of this process's threads named `prefix*`. */
static void threads_named(const char *prefix, uint64_t *cpu_ns, uint64_t *switches)
{
    *cpu_ns = 0;
    *switches = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[320], buf[4096];
        snprintf(path, sizeof path, "/proc/self/task/%s/comm", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        int match = fgets(buf, sizeof buf, f) && strncmp(buf, prefix, strlen(prefix)) == 0;
        fclose(f);
        if (!match)
            continue;
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        if ((f = fopen(path, "r")) != NULL) {
            unsigned long long ns = 0;
            if (fscanf(f, "%llu", &ns) == 1)
                *cpu_ns += ns;
            fclose(f);
        }
        snprintf(path, sizeof path, "/proc/self/task/%s/status", e->d_name);
        if ((f = fopen(path, "r")) != NULL) {
            while (fgets(buf, sizeof buf, f)) {
                unsigned long long n;
                if (sscanf(buf, "voluntary_ctxt_switches: %llu", &n) == 1 ||
                    sscanf(buf, "nonvoluntary_ctxt_switches: %llu", &n) == 1)
                    *switches += n;
            }
            fclose(f);
        }
    }
    closedir(d);
}

/* ---- threads --------------------------------------------------------------------------------------------- */

static const char *mode;
static uint64_t per_thread_iters;
static unsigned long seed;
static pthread_barrier_t go, armed, finished, released;
static double run_seconds; /* > 0: run each thread for this long (wall time) instead of ITERS iterations */
static pthread_mutex_t sum_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t sum_truth[NFUNC], sum_work_ns, sum_hot[NFUNC], sum_samples, sum_lost;
volatile uint64_t sink;

static void *worker(void *arg)
{
    uint64_t s = seed * 0x9E3779B97F4A7C15ULL + (uintptr_t)arg * 0xD1B54A32D192ED03ULL + 1;
    uint64_t truth[NFUNC] = {0}, x = s, done = 0;
    int timer = strcmp(mode, "timer") == 0;
    if (timer && arm_thread_timer() != 0) {
        perror("timer_create");
        exit(3);
    }
    pthread_barrier_wait(&armed);
    pthread_barrier_wait(&go);
    uint64_t t0 = thread_cpu_ns();
    uint64_t deadline = run_seconds > 0 ? wall_ns() + (uint64_t)(run_seconds * 1e9) : 0;
    while (deadline ? wall_ns() < deadline : done < per_thread_iters) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        unsigned pick = (unsigned)(s % 1000);
        uint64_t n = 1000 + (s >> 20) % 30001;
        if (!deadline && n > per_thread_iters - done)
            n = per_thread_iters - done;
        int f = 0;
        while (pick >= cumulative[f])
            f++;
        x = fns[f](n, x);
        truth[f] += n;
        done += n;
    }
    uint64_t dt = thread_cpu_ns() - t0;
    if (timer) {
        thread_timer_armed = 0;
        timer_delete(thread_timer);
    }
    sink = x;
    pthread_mutex_lock(&sum_lock);
    for (int i = 0; i < NFUNC; i++) {
        sum_truth[i] += truth[i];
        sum_hot[i] += tl_hot[i];
    }
    sum_samples += tl_samples;
    sum_lost += tl_lost;
    sum_work_ns += dt;
    pthread_mutex_unlock(&sum_lock);
    /* Stay alive until the sampler has stopped: its stop is measured with every thread still there. */
    pthread_barrier_wait(&finished);
    pthread_barrier_wait(&released);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s MODE RATE_HZ THREADS ITERS SEED\n", argv[0]);
        return 2;
    }
    mode = argv[1];
    rate_hz = atol(argv[2]);
    long threads = atol(argv[3]);
    char *unit = NULL;
    uint64_t iters = strtoull(argv[4], &unit, 10);
    if (unit && *unit == 's') {
        run_seconds = (double)iters;
        iters = (uint64_t)atol(argv[3]);
    }
    seed = strtoul(argv[5], NULL, 10);
    if (rate_hz <= 0 || threads <= 0 || threads > 4096 || iters < (uint64_t)threads) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    per_thread_iters = iters / (uint64_t)threads;
    const char *starts[NFUNC] = {__start_ntp_bench_hot0, __start_ntp_bench_hot1, __start_ntp_bench_hot2,
                                 __start_ntp_bench_hot3};
    const char *stops[NFUNC] = {__stop_ntp_bench_hot0, __stop_ntp_bench_hot1, __stop_ntp_bench_hot2,
                                __stop_ntp_bench_hot3};
    span_lo = UINTPTR_MAX;
    span_hi = 0;
    for (int i = 0; i < NFUNC; i++) {
        lo[i] = (uintptr_t)starts[i];
        hi[i] = (uintptr_t)stops[i];
        if (lo[i] < span_lo)
            span_lo = lo[i];
        if (hi[i] > span_hi)
            span_hi = hi[i];
    }
    /* Round the span out to 64 bytes: every function starts on a 64-byte boundary. */
    span_lo &= ~(uintptr_t)63;
    span_hi = (span_hi + 63) & ~(uintptr_t)63;
    size_t span = span_hi - span_lo;

    pthread_barrier_init(&go, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&armed, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&finished, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&released, NULL, (unsigned)threads + 1);
    pthread_t *tids = calloc((size_t)threads, sizeof *tids);
    if (strcmp(mode, "timer") == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_sigprof;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGPROF, &sa, NULL);
    }
    for (long t = 0; t < threads; t++)
        if (pthread_create(&tids[t], NULL, worker, (void *)(uintptr_t)t) != 0) {
            perror("pthread_create");
            return 3;
        }
    pthread_barrier_wait(&armed);

    /* The sampler's start. */
    uint64_t main0 = thread_cpu_ns();
    int64_t samples = -1, lost = -1, throttled = -1;
    uint64_t hot[NFUNC] = {0};
    unsigned short *pbuf = NULL;
    unsigned int *sbuf[NFUNC] = {NULL};
    ULONG *nbuf = NULL;
    HANDLE profile = NULL;
    uint64_t w0 = wall_ns();
    if (strcmp(mode, "profil") == 0) {
        /* One 16-bit counter per 2 bytes of the span (scale 0x10000). */
        pbuf = calloc(span / 2, sizeof *pbuf);
        if (profil(pbuf, span, span_lo, 0x10000) != 0) {
            perror("profil");
            return 3;
        }
    } else if (strcmp(mode, "sprofil") == 0) {
        struct prof regions[NFUNC];
        for (int i = 0; i < NFUNC; i++) {
            size_t len = hi[i] - lo[i];
            sbuf[i] = calloc(len / 2 + 1, sizeof(unsigned int));
            regions[i].pr_base = sbuf[i];
            regions[i].pr_size = (len / 2 + 1) * sizeof(unsigned int);
            regions[i].pr_off = lo[i];
            /* Scale 0x10000: the finest bins (2 bytes of text per 16-bit counter; glibc bins PROF_UINT regions
             * by 4 bytes). The buffer is large enough for either; every counter of a region is its function's. */
            regions[i].pr_scale = 0x10000;
        }
        struct timeval tv;
        if (sprofil(regions, NFUNC, &tv, PROF_UINT) != 0) {
            perror("sprofil");
            return 3;
        }
    } else if (strncmp(mode, "ntprofile", 9) == 0) {
        KPROFILE_SOURCE source = ProfileTime;
        if (strcmp(mode, "ntprofile-task") == 0) {
            /* PERF_TYPE_SOFTWARE (1), PERF_COUNT_SW_TASK_CLOCK (1). */
            NTSTATUS st = NtprofileRegisterSource(1, 1, 0, 0, &source);
            if (!NT_SUCCESS(st)) {
                fprintf(stderr, "NtprofileRegisterSource: 0x%08x\n", (unsigned)st);
                return 3;
            }
            /* A registered software event's interval is in events: task-clock counts nanoseconds. */
            NtSetIntervalProfile((ULONG)(1000000000L / rate_hz), source);
        } else {
            NtSetIntervalProfile((ULONG)(10000000L / rate_hz), source);
        }
        /* 4-byte buckets over the span. */
        nbuf = calloc(span / 4, sizeof *nbuf);
        NTSTATUS st = NtCreateProfile(&profile, NtCurrentProcess(), (PVOID)span_lo, span, 2, nbuf,
                                      (ULONG)(span / 4 * sizeof *nbuf), source, (KAFFINITY)-1);
        if (!NT_SUCCESS(st)) {
            fprintf(stderr, "NtCreateProfile: 0x%08x\n", (unsigned)st);
            return 3;
        }
        st = NtStartProfile(profile);
        if (!NT_SUCCESS(st)) {
            fprintf(stderr, "NtStartProfile: 0x%08x\n", (unsigned)st);
            return 3;
        }
    } else if (strcmp(mode, "plain") != 0 && strcmp(mode, "timer") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    uint64_t start_ns = wall_ns() - w0;

    pthread_barrier_wait(&go);
    pthread_barrier_wait(&finished);

    /* The consumer's CPU and wake-ups while the workload ran (read before the stop, which may end the thread). */
    uint64_t cons_ns = 0, cons_switches = 0;
    threads_named("ntprofile-cons", &cons_ns, &cons_switches);

    /* The sampler's stop. */
    w0 = wall_ns();
    if (pbuf || sbuf[0])
        /* Discard any SIGPROF still pending for a thread before glibc frees its regions (sprofil(NULL) frees
         * them while a signal generated just before could still be delivered to another thread: a crash). */
        signal(SIGPROF, SIG_IGN);
    if (pbuf) {
        profil(pbuf, 0, 0, 0);
    } else if (sbuf[0]) {
        struct timeval tv;
        sprofil(NULL, 0, &tv, 0);
    } else if (profile) {
        NTSTATUS st = NtStopProfile(profile);
        if (!NT_SUCCESS(st)) {
            fprintf(stderr, "NtStopProfile: 0x%08x\n", (unsigned)st);
            return 3;
        }
    }
    uint64_t stop_ns = wall_ns() - w0;
    uint64_t main_ns = thread_cpu_ns() - main0;
    uint64_t start2_ns = 0, stop2_ns = 0;

    if (pbuf) {
        for (size_t i = 0; i < span / 2; i++) {
            int f = func_of(span_lo + 2 * i);
            if (f >= 0)
                hot[f] += pbuf[i];
        }
    } else if (sbuf[0]) {
        for (int f = 0; f < NFUNC; f++)
            for (size_t i = 0; i <= (hi[f] - lo[f]) / 2; i++)
                hot[f] += sbuf[f][i];
    } else if (profile) {
        for (size_t i = 0; i < span / 4; i++) {
            int f = func_of(span_lo + 4 * i);
            if (f >= 0)
                hot[f] += nbuf[i];
        }
        NTPROFILE_STATISTICS stats;
        if (!NT_SUCCESS(NtprofileQueryStatistics(profile, &stats)))
            return 3;
        samples = (int64_t)(stats.SamplesCounted + stats.SamplesOutside);
        lost = (int64_t)stats.SamplesLost;
        throttled = (int64_t)stats.ThrottleEvents;
        /* A second start and stop in the same process, every thread still alive: without the first use's work. */
        w0 = wall_ns();
        if (NT_SUCCESS(NtStartProfile(profile))) {
            start2_ns = wall_ns() - w0;
            w0 = wall_ns();
            NtStopProfile(profile);
            stop2_ns = wall_ns() - w0;
        }
        NtClose(profile);
    } else if (strcmp(mode, "timer") == 0) {
        for (int f = 0; f < NFUNC; f++)
            hot[f] = sum_hot[f];
        samples = (int64_t)sum_samples;
        lost = (int64_t)sum_lost;
        throttled = 0;
    } else {
        samples = 0;
        lost = 0;
        throttled = 0;
    }
    pthread_barrier_wait(&released);
    for (long t = 0; t < threads; t++)
        pthread_join(tids[t], NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    uint64_t proc_ns = (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ULL +
                       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ULL;
    printf("work_ns=%llu proc_ns=%llu main_ns=%llu start_ns=%llu stop_ns=%llu start2_ns=%llu stop2_ns=%llu "
           "cons_ns=%llu cons_switches=%llu samples=%lld lost=%lld throttled=%lld",
           (unsigned long long)sum_work_ns, (unsigned long long)proc_ns, (unsigned long long)main_ns,
           (unsigned long long)start_ns, (unsigned long long)stop_ns, (unsigned long long)start2_ns,
           (unsigned long long)stop2_ns, (unsigned long long)cons_ns, (unsigned long long)cons_switches,
           (long long)samples, (long long)lost, (long long)throttled);
    for (int f = 0; f < NFUNC; f++)
        printf(" truth%d=%llu hot%d=%llu", f, (unsigned long long)sum_truth[f], f, (unsigned long long)hot[f]);
    printf("\n");
    return 0;
}
