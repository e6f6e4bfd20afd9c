//! Stress: 8 threads make random calls (create, start, stop, close, set/query interval, statistics) on shared
//! handles while 2 threads burn CPU in the profiled range. Checked throughout: every status is one the contract
//! lists for that call; a closed (or stopped, while nobody can start it) profile's buffer never changes again;
//! statistics seen by a thread never go backwards; a stopped profile's counters sum to its `counted`. Then the
//! process has the descriptors, threads and mappings it had before. Bounded: about 8 s of calls.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ntprofile::NtStatus;
use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtQueryIntervalProfile, NtSetIntervalProfile, NtStartProfile,
    NtStopProfile, NtprofileQueryStatistics,
};
use ntprofile::profile::ProfileStats;

use crate::{CURRENT_PROCESS, hot_in_section, isolated, snapshot, st};

hot_in_section!(hot, range, "ntp_stress_hot", 0x3D);

const CALLERS: usize = 8;
const BURNERS: usize = 2;
const SLOTS: usize = 6;
const SOURCES: [u32; 2] = [0, 0x1_0000]; // ProfileTime, task-clock

/// One shared profile slot: its handle (0: none) and its buffer. Calls on the handle hold the lock shared; the
/// checks that need the profile to themselves (create, close, stop-and-watch) hold it exclusively.
struct Slot {
    lock: RwLock<()>,
    handle: AtomicUsize,
    buffer: Box<[AtomicU64]>,
}

impl Slot {
    fn counters(&self) -> Vec<u32> {
        // The buffer is u32 counters; it is held as u64 atomics for alignment, read back as u32 pairs.
        self.buffer
            .iter()
            .flat_map(|w| {
                let v = w.load(Ordering::Relaxed);
                [v as u32, (v >> 32) as u32]
            })
            .collect()
    }

    fn ptr(&self) -> *mut u32 {
        self.buffer.as_ptr() as *mut u32
    }
}

/// A tiny deterministic generator per thread (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Default)]
struct Tally {
    calls: AtomicU64,
    successes: AtomicU64,
    barrier_checks: AtomicU64,
    sum_checks: AtomicU64,
    /// `counted` summed over the stop checks (the profiles did count).
    counted: AtomicU64,
}

fn check(call: &str, s: NtStatus, allowed: &[NtStatus]) {
    assert!(
        allowed.contains(&s),
        "{call} returned {s:?}, outside the contract ({allowed:?})"
    );
}

fn watch_unchanged(slot: &Slot, what: &str) {
    let before = slot.counters();
    std::thread::sleep(Duration::from_millis(3));
    assert!(
        slot.counters() == before,
        "a {what} profile's buffer changed afterwards"
    );
}

fn caller(slots: &[Slot], seed: u64, deadline: Instant, tally: &Tally) {
    let mut rng = Rng(seed | 1);
    let (base, size) = range();
    // Statistics this thread saw last, per handle value.
    let mut seen: std::collections::HashMap<usize, ProfileStats> = std::collections::HashMap::new();
    while Instant::now() < deadline {
        let slot = &slots[rng.below(SLOTS as u64) as usize];
        tally.calls.fetch_add(1, Ordering::Relaxed);
        let op = rng.below(100);
        let status = match op {
            // Create into an empty slot (exclusive: the buffer is zeroed first).
            0..=9 => {
                let _g = slot.lock.write().unwrap();
                if slot.handle.load(Ordering::Relaxed) != 0 {
                    continue;
                }
                for w in slot.buffer.iter() {
                    w.store(0, Ordering::Relaxed);
                }
                let mut h: *mut c_void = std::ptr::null_mut();
                let source = SOURCES[rng.below(2) as usize];
                let s = st(NtCreateProfile(
                    &mut h,
                    CURRENT_PROCESS,
                    base as *mut c_void,
                    size,
                    3,
                    slot.ptr(),
                    (slot.buffer.len() * 8) as u32,
                    source,
                    usize::MAX,
                ));
                check(
                    "create",
                    s,
                    &[NtStatus::SUCCESS, NtStatus::INSUFFICIENT_RESOURCES],
                );
                if s.is_success() {
                    slot.handle.store(h as usize, Ordering::Relaxed);
                }
                s
            }
            // Close (exclusive): afterwards the buffer never changes.
            10..=14 => {
                let _g = slot.lock.write().unwrap();
                let h = slot.handle.swap(0, Ordering::Relaxed);
                if h == 0 {
                    continue;
                }
                let s = st(NtClose(h as *mut c_void));
                check("close", s, &[NtStatus::SUCCESS]);
                watch_unchanged(slot, "closed");
                assert_eq!(
                    st(NtClose(h as *mut c_void)),
                    NtStatus::INVALID_HANDLE,
                    "a closed handle"
                );
                tally.barrier_checks.fetch_add(1, Ordering::Relaxed);
                s
            }
            // Stop and watch (exclusive): the counters sum to counted, and nothing changes after the stop.
            15..=21 => {
                let _g = slot.lock.write().unwrap();
                let h = slot.handle.load(Ordering::Relaxed);
                if h == 0 {
                    continue;
                }
                let s = st(NtStopProfile(h as *mut c_void));
                check(
                    "stop",
                    s,
                    &[NtStatus::SUCCESS, NtStatus::PROFILING_NOT_STARTED],
                );
                let mut stats = ProfileStats::default();
                assert_eq!(
                    st(NtprofileQueryStatistics(h as *mut c_void, &mut stats)),
                    NtStatus::SUCCESS
                );
                let sum: u64 = slot.counters().iter().map(|&c| u64::from(c)).sum();
                assert_eq!(sum, stats.counted, "the counters do not sum to counted");
                watch_unchanged(slot, "stopped");
                tally.sum_checks.fetch_add(1, Ordering::Relaxed);
                tally.counted.fetch_add(stats.counted, Ordering::Relaxed);
                tally.barrier_checks.fetch_add(1, Ordering::Relaxed);
                s
            }
            // Shared calls: several threads at once on the same handle.
            _ => {
                let _g = slot.lock.read().unwrap();
                let h = slot.handle.load(Ordering::Relaxed);
                // Now and then a handle value that is not live: 0 stays 0, a handle's table slot under another
                // generation (bit 22 flipped) is a closed handle of that slot's past or future. (Bits above 31
                // would not do: only a handle's low 32 bits are read.)
                let h = if h != 0 && rng.below(20) == 0 {
                    h ^ (1 << 22)
                } else {
                    h
                };
                let hp = h as *mut c_void;
                match op {
                    22..=49 => {
                        let s = st(NtStartProfile(hp));
                        check(
                            "start",
                            s,
                            &[
                                NtStatus::SUCCESS,
                                NtStatus::PROFILING_NOT_STOPPED,
                                NtStatus::INVALID_HANDLE,
                                NtStatus::INSUFFICIENT_RESOURCES,
                            ],
                        );
                        s
                    }
                    50..=69 => {
                        let s = st(NtStopProfile(hp));
                        check(
                            "stop",
                            s,
                            &[
                                NtStatus::SUCCESS,
                                NtStatus::PROFILING_NOT_STARTED,
                                NtStatus::INVALID_HANDLE,
                            ],
                        );
                        s
                    }
                    70..=89 => {
                        let mut stats = ProfileStats::default();
                        let s = st(NtprofileQueryStatistics(hp, &mut stats));
                        check(
                            "statistics",
                            s,
                            &[NtStatus::SUCCESS, NtStatus::INVALID_HANDLE],
                        );
                        if s.is_success() {
                            if let Some(prev) = seen.get(&h) {
                                assert!(
                                    stats.counted >= prev.counted
                                        && stats.outside >= prev.outside
                                        && stats.lost >= prev.lost
                                        && stats.throttled >= prev.throttled,
                                    "statistics went backwards: {prev:?} then {stats:?}"
                                );
                            }
                            seen.insert(h, stats);
                        }
                        s
                    }
                    90..=94 => {
                        let interval = [1000u32, 5000, 10_000, 20_000][rng.below(4) as usize];
                        let source = SOURCES[rng.below(2) as usize];
                        let s = st(NtSetIntervalProfile(interval, source));
                        check("set interval", s, &[NtStatus::SUCCESS]);
                        s
                    }
                    _ => {
                        let mut interval = 0u32;
                        let source = SOURCES[rng.below(2) as usize];
                        let s = st(NtQueryIntervalProfile(source, &mut interval));
                        check("query interval", s, &[NtStatus::SUCCESS]);
                        assert!(
                            (100..=20_000).contains(&interval),
                            "interval {interval} outside what was set"
                        );
                        s
                    }
                }
            }
        };
        if status.is_success() {
            tally.successes.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn run(seconds: u64, seed: u64) -> (Tally, u64) {
    let (_, size) = range();
    let slots: Arc<Vec<Slot>> = Arc::new(
        (0..SLOTS)
            .map(|_| Slot {
                lock: RwLock::new(()),
                handle: AtomicUsize::new(0),
                // 8-byte buckets over the range: size / 8 counters, as u64 pairs.
                buffer: (0..size / 16 + 1).map(|_| AtomicU64::new(0)).collect(),
            })
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let burned = Arc::new(AtomicU64::new(0));
    let burners: Vec<_> = (0..BURNERS)
        .map(|i| {
            let (stop, burned) = (stop.clone(), burned.clone());
            std::thread::spawn(move || {
                let mut x = i as u64 + 1;
                while !stop.load(Ordering::Relaxed) {
                    x = hot(x, 50_000);
                    burned.fetch_add(1, Ordering::Relaxed);
                }
                std::hint::black_box(x);
            })
        })
        .collect();
    let tally = Arc::new(Tally::default());
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let callers: Vec<_> = (0..CALLERS)
        .map(|i| {
            let (slots, tally) = (slots.clone(), tally.clone());
            std::thread::spawn(move || {
                caller(&slots, seed ^ (i as u64 * 0x9E37_79B9), deadline, &tally)
            })
        })
        .collect();
    let mut failed = None;
    for c in callers {
        if let Err(e) = c.join() {
            failed = Some(e);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for b in burners {
        b.join().unwrap();
    }
    if let Some(e) = failed {
        std::panic::resume_unwind(e);
    }
    // Close what is left, checking the last invariants.
    for slot in slots.iter() {
        let h = slot.handle.swap(0, Ordering::Relaxed);
        if h != 0 {
            let _ = NtStopProfile(h as *mut c_void);
            let mut stats = ProfileStats::default();
            assert_eq!(
                st(NtprofileQueryStatistics(h as *mut c_void, &mut stats)),
                NtStatus::SUCCESS
            );
            let sum: u64 = slot.counters().iter().map(|&c| u64::from(c)).sum();
            assert_eq!(sum, stats.counted, "the counters do not sum to counted");
            assert_eq!(st(NtClose(h as *mut c_void)), NtStatus::SUCCESS);
        }
    }
    NtSetIntervalProfile(10_000, SOURCES[0]);
    NtSetIntervalProfile(10_000, SOURCES[1]);
    let tally = Arc::try_unwrap(tally).ok().unwrap();
    (tally, burned.load(Ordering::Relaxed))
}

#[test]
fn eight_threads_of_random_calls() {
    isolated("stress::eight_threads_of_random_calls", || {
        // A short warm-up first: thread stacks and the allocator's arenas exist before the baseline.
        let _ = run(1, 0x1234_5678);
        let before = snapshot();
        let started = Instant::now();
        let (tally, burned) = run(8, 0xDEAD_BEEF_F00D);
        // Threads of ours leave /proc a moment after their join.
        let mut after = snapshot();
        for _ in 0..200 {
            if after == before {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
            after = snapshot();
        }
        println!(
            "stress: {} calls ({} succeeded) in {:.1} s from {CALLERS} threads, {} barrier checks, {} sum checks \
             ({} samples counted at them), {burned} burn rounds",
            tally.calls.load(Ordering::Relaxed),
            tally.successes.load(Ordering::Relaxed),
            started.elapsed().as_secs_f64(),
            tally.barrier_checks.load(Ordering::Relaxed),
            tally.sum_checks.load(Ordering::Relaxed),
            tally.counted.load(Ordering::Relaxed),
        );
        assert_eq!(
            after, before,
            "descriptors, threads or mappings left behind"
        );
        assert!(tally.barrier_checks.load(Ordering::Relaxed) > 10);
        assert!(
            tally.counted.load(Ordering::Relaxed) > 0,
            "nothing was ever counted"
        );
    });
}
