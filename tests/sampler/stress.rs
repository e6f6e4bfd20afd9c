//! The sampler's own stress test: reads racing with close, enable and query on one handle; `fork()` while
//! reading; a tree of short-lived children with full call stacks in one-page rings, where every sample the kernel
//! took is delivered or counted lost, to the sample (checked against an independent kernel counter).

use std::ffi::c_void;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;

use ntprofile::ffi::exports::NtClose;
use ntprofile::ffi::sampler::{
    NtprofileEnableSampler, NtprofileQuerySamplerStatistics, NtprofileReadSampler, NtprofileRecord,
    SamplerStatistics,
};

use super::promises::{c_config, c_create, spin};
use super::*;

static RECORDS: AtomicU64 = AtomicU64::new(0);
static FORKER: AtomicU32 = AtomicU32::new(0);
static FORKS: AtomicU32 = AtomicU32::new(0);

extern "C" fn count_and_sometimes_fork(record: *const NtprofileRecord, _context: *mut c_void) {
    RECORDS.fetch_add(1, Ordering::Relaxed);
    // SAFETY: the record is valid during the call (the library's promise under test).
    let r = unsafe { &*record };
    if r.type_ == 0 || r.type_ > 8 {
        std::process::abort();
    }
    if FORKER.load(Ordering::Relaxed) == std::process::id()
        && RECORDS.load(Ordering::Relaxed) % 101 == 0
    {
        // SAFETY: the child returns into the read and leaves with _exit (see `reader`).
        if unsafe { libc::fork() } >= 0 {
            FORKS.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The reader of a round: reads (and, in the forking rounds, forks from the routine) until the handle is
/// closed; the status that ended it.
fn reader(h: usize, parent: u32) -> NtStatus {
    loop {
        let mut n = 0u32;
        let s = NtStatus(NtprofileReadSampler(
            h as *mut c_void,
            20,
            Some(count_and_sometimes_fork),
            std::ptr::null_mut(),
            &mut n,
        ));
        if std::process::id() != parent {
            // SAFETY: a child forked from the routine ends here, saying whether its read failed as it must.
            unsafe { libc::_exit(if s == NtStatus::INVALID_HANDLE { 0 } else { 1 }) };
        }
        if s != NtStatus::SUCCESS {
            return s;
        }
    }
}

/// Rounds of: a sampler of this process (which spins), a reader, an enabler and a querier racing on its handle,
/// closed at a varying moment; in every other round the routine forks now and then. Every thread ends within
/// 5 s of the close with STATUS_INVALID_HANDLE, every forked child's read says the same, nothing crashes.
#[test]
fn reads_race_with_close_enable_query_and_fork() {
    let _serial = common::serial();
    let parent = std::process::id();
    let rounds = 60;
    let (mut enables, mut queries) = (0u64, 0u64);
    RECORDS.store(0, Ordering::Relaxed);
    FORKS.store(0, Ordering::Relaxed);
    for round in 0..rounds {
        let mut c = c_config(&[]);
        c.interval = 1000;
        c.max_callchain = 64;
        let h = c_create(&c).expect("create") as usize;
        FORKER.store(if round % 2 == 1 { parent } else { 0 }, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<(&str, NtStatus, u64)>();
        let mut threads = Vec::new();
        let t = tx.clone();
        threads.push(std::thread::spawn(move || {
            let _ = t.send(("read", reader(h, parent), 0));
        }));
        let t = tx.clone();
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let s = loop {
                let s = NtStatus(NtprofileEnableSampler(h as *mut c_void, (n % 3 != 2) as u8));
                if s != NtStatus::SUCCESS {
                    break s;
                }
                n += 1;
                std::thread::sleep(Duration::from_micros(200));
            };
            let _ = t.send(("enable", s, n));
        }));
        let t = tx;
        threads.push(std::thread::spawn(move || {
            let mut n = 0u64;
            let s = loop {
                let mut st = SamplerStatistics::default();
                let s = NtStatus(NtprofileQuerySamplerStatistics(h as *mut c_void, &mut st));
                if s != NtStatus::SUCCESS {
                    break s;
                }
                n += 1;
                std::thread::sleep(Duration::from_micros(300));
            };
            let _ = t.send(("query", s, n));
        }));
        spin(5 + (round as u64 * 7) % 30);
        assert_eq!(NtStatus(NtClose(h as *mut c_void)), NtStatus::SUCCESS);
        let closed = Instant::now();
        for _ in 0..3 {
            let (who, status, n) = rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| {
                panic!("round {round}: a thread did not end within 5 s of NtClose")
            });
            assert_eq!(status, NtStatus::INVALID_HANDLE, "round {round}: {who}");
            match who {
                "enable" => enables += n,
                "query" => queries += n,
                _ => {}
            }
        }
        assert!(closed.elapsed() < Duration::from_secs(5));
        for t in threads {
            t.join().expect("thread");
        }
    }
    FORKER.store(0, Ordering::Relaxed);
    let children = common::reap_children();
    let records = RECORDS.load(Ordering::Relaxed);
    println!(
        "{rounds} rounds: {records} records read, {enables} enables and {queries} queries during the reads, {} \
         forks from the routine, children's exits {:?}",
        FORKS.load(Ordering::Relaxed),
        summary(&children)
    );
    assert!(records > 0);
    assert_eq!(children.len() as u32, FORKS.load(Ordering::Relaxed));
    assert!(children.iter().all(|&c| c == 0), "{:?}", summary(&children));
}

fn summary(codes: &[i32]) -> BTreeMap<i32, usize> {
    let mut m = BTreeMap::new();
    for &c in codes {
        *m.entry(c).or_default() += 1;
    }
    m
}

/// A tree of 300 short-lived children (8 alive at once), each 100 frames deep, sampled at every page fault with
/// 127-frame call chains into one-page rings, read every 20 ms: the rings overflow all the time. Samples + Lost
/// equals the page faults an independent counting event of the same tree saw (the samples the kernel took), to
/// the sample; Samples equals the Sample records delivered and Lost the sum of the Lost records.
#[test]
fn a_tree_of_short_lived_children_loses_nothing_silently() {
    let _serial = common::serial();
    let programs = Programs::new("faulttree");
    let faults = programs.build("faults", &["-fno-omit-frame-pointer", "-O0"]);
    let mut last = String::new();
    for attempt in 0..3 {
        let mut program = Waiting::spawn(&faults, &["300", "50", "100"]);
        let pid = program.pid();
        let mut sampler = Sampler::builder()
            .pid(pid)
            .source(ProfileSource::PageFaults)
            .interval(1)
            .callchain(127)
            .ring_pages(1)
            .sideband(false)
            .build()
            .expect("build");
        let mut counter = common::page_fault_counter(pid);
        check_forced_layout(&sampler);
        sampler.enable().expect("enable");
        counter.enable().expect("enable the counter");
        program.go();
        let (mut samples, mut lost, mut lost_records, mut deep) = (0u64, 0u64, 0u64, 0u64);
        let start = Instant::now();
        let mut record = |r: &SampleRecord<'_>| match r {
            SampleRecord::Sample(s) => {
                samples += 1;
                if s.callchain.len() >= 100 {
                    deep += 1;
                }
            }
            SampleRecord::Lost { lost: n, .. } => {
                lost += n;
                lost_records += 1;
            }
            _ => {}
        };
        while !sampler.targets_exited() {
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "the tree did not end"
            );
            std::thread::sleep(Duration::from_millis(20));
            sampler.read(&mut record).expect("read");
        }
        sampler.read(&mut record).expect("read");
        program.finish();
        let took = counter.read().expect("read the counter");
        let stats = sampler.stats();
        last = format!(
            "attempt {attempt}: the kernel took {took} samples; delivered {samples} samples ({deep} with 100+ \
             frames) + {lost} lost in {lost_records} Lost records = {}; {stats:?}",
            samples + lost
        );
        println!("{last}");
        assert_eq!((stats.samples, stats.lost), (samples, lost), "{last}");
        if stats.throttled > 0 {
            // The kernel throttled the event (a loaded machine): it then takes fewer samples than the counter
            // counts events, and the comparison says nothing. Try again.
            continue;
        }
        // In the per-thread layout (`per_thread`) most children end before a read finds their fork record: their
        // samples are reported lost, and a deep chain may never be delivered.
        assert!(
            lost > 0 && samples > 0 && (deep > 0 || per_thread_layout()),
            "{last}"
        );
        assert_eq!(samples + lost, took, "{last}");
        return;
    }
    panic!("throttled in every attempt: {last}");
}
