//! Following a process tree from its fork records: held records, adoption, exits.

use super::*;
use perf_event_open_sys::bindings as b;

const FORMAT: SampleFormat = SampleFormat {
    callchain: false,
    regs: false,
    user_stack: false,
    user_entry: false,
};

fn pair(a: u32, c: u32) -> u64 {
    u64::from(a) | u64::from(c) << 32
}

fn with_header(kind: u32, body: Vec<u64>) -> Vec<u64> {
    let mut words = vec![u64::from(kind) | ((body.len() as u64 + 1) * 8) << 48];
    words.extend(body);
    words
}

/// A sample of `pid`/`tid` at `ip`.
fn sample(pid: u32, tid: u32, ip: u64) -> Vec<u64> {
    with_header(b::PERF_RECORD_SAMPLE, vec![ip, pair(pid, tid), 1, 0])
}

/// A fork record: `pid` created by `ppid`.
fn fork(pid: u32, ppid: u32) -> Vec<u64> {
    with_header(
        b::PERF_RECORD_FORK,
        vec![pair(pid, ppid), pair(pid, ppid), 1, pair(pid, pid), 1, 0],
    )
}

/// Feed one pass (rings' records in read order) and end it: the ips of the samples delivered, in order.
fn pass(f: &mut Follow, records: &[Vec<u64>]) -> Vec<u64> {
    let mut out = Vec::new();
    for words in records {
        let record = decode_record(words, FORMAT).unwrap();
        match f.decide(&record) {
            Verdict::Deliver => {
                if let SampleRecord::Sample(s) = record {
                    out.push(s.ip);
                }
            }
            Verdict::Hold => f.hold(words),
            Verdict::Drop => {}
        }
    }
    f.end_pass(|r| {
        if let SampleRecord::Sample(s) = r {
            out.push(s.ip);
        }
        true
    });
    out
}

/// The calling process as the target (it never exits), threads 901 and 902 the library's own.
fn following_me() -> (Follow, u32) {
    let me = std::process::id();
    (
        Follow::new(&[], Some(me), &[901, 902], true, false, FORMAT),
        me,
    )
}

/// A child's (and a grandchild's) samples read before their fork records, in the same pass or the next, are
/// delivered once the fork records are read; another process's are not, ever; the library's own threads'
/// are dropped; fork records are not delivered to a caller who did not ask for side-band records.
#[test]
fn records_of_processes_forked_unseen_wait_for_their_fork_record() {
    let (mut f, me) = following_me();
    // Pass 1: the target's sample, a child's sample before its fork record (same pass), a grandchild's
    // sample whose fork record comes next pass, another process's sample, an own thread's sample.
    let got = pass(
        &mut f,
        &[
            sample(me, me, 1),
            sample(50_001, 50_001, 2),
            fork(50_001, me),
            sample(50_002, 50_002, 3),
            sample(777, 777, 4),
            sample(me, 901, 5),
        ],
    );
    assert_eq!(got, [1, 2]);
    // Pass 2: the grandchild's fork record (its parent is the child), in a ring read after its sample.
    let got = pass(&mut f, &[fork(50_002, 50_001), sample(777, 777, 6)]);
    assert_eq!(got, [3]);
    // Pass 3: a grandchild's sample is delivered at once now; 777's held ones are gone for good.
    let got = pass(&mut f, &[sample(50_002, 50_002, 7)]);
    assert_eq!(got, [7]);
    let got = pass(&mut f, &[]);
    assert!(got.is_empty());
    assert!(!f.all_exited(), "the calling process never exits");
    // A grandchild whose fork record came before its parent's, both read in one pass after its sample.
    // (These made-up pids name no live process: each is followed as an exited one, for two more passes.)
    let (mut f, me) = following_me();
    let got = pass(
        &mut f,
        &[
            sample(50_004, 50_004, 8),
            fork(50_004, 50_003),
            fork(50_003, me),
        ],
    );
    assert_eq!(got, [8]);
}

/// Without `children`, forked processes are not followed (their threads' records are the target's).
#[test]
fn without_children_only_the_targets_records_are_delivered() {
    let me = std::process::id();
    let mut f = Follow::new(&[], Some(me), &[], false, true, FORMAT);
    let got = pass(
        &mut f,
        &[
            fork(50_001, me),
            sample(50_001, 50_001, 1),
            sample(me, 12_345, 2),
        ],
    );
    assert_eq!(got, [2]);
    let got = pass(&mut f, &[sample(50_001, 50_001, 3)]);
    assert!(got.is_empty());
}

/// A child that already exited (and was reaped) when its fork record is read is still followed for two
/// more passes, then leaves; a target that exited makes `all_exited` true.
#[test]
fn exited_processes_leave_after_two_passes() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let target = Process::open(std::process::id()).unwrap();
    let mut f = Follow::new(&[target], None, &[], true, false, FORMAT);
    // The child's fork record is made up (its parent is the target); the child is gone: no pidfd opens.
    let got = pass(
        &mut f,
        &[fork(pid, std::process::id()), sample(pid, pid, 1)],
    );
    assert_eq!(got, [1]);
    assert_eq!(f.processes(), 2);
    let got = pass(&mut f, &[sample(pid, pid, 2)]);
    assert_eq!(got, [2]);
    assert_eq!(f.processes(), 2);
    let got = pass(&mut f, &[sample(pid, pid, 3)]);
    assert_eq!(got, [3]);
    assert_eq!(f.processes(), 1, "the child left");
    assert!(!f.all_exited());
    let got = pass(&mut f, &[sample(pid, pid, 4)]);
    assert!(got.is_empty());
}
