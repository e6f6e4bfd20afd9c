//! The processes a `cpu-filtered` sampler follows: its events sample every task of their processors, and only
//! the records of the target processes (and, with `inherit`, of every process they create afterwards) reach
//! the caller.
//!
//! The tree is followed from the kernel's own fork records. A fork record is written into the ring of the
//! processor where the parent ran, before the child first runs; the child's first records may be written into
//! another processor's ring, which one pass may read before the fork record is there. So a record of a process
//! not known yet is not dropped at once: it is copied aside and decided at the end of the pass (after every
//! ring was read once), and if its process is still unknown, once more at the end of the next pass. By then
//! every fork record written before it has been read: each ring is read again after the end of the pass that
//! found it. Then it is dropped (another process's) or delivered (its fork record made it a follower).
//!
//! A followed process leaves when it has exited (its pidfd polls readable), two passes after the pass that saw
//! it: the records it wrote before exiting are read by then, and so are those of its children held for their
//! fork record. Until then a new process that got its pid would be followed as well; the kernel hands a pid
//! out again only after going round the whole pid range.

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};

use crate::api::Process;
use crate::perf::records::SampleRecord;
use crate::perf::sampler_decode::decode_record;
use crate::perf::sampler_event::SampleFormat;
use crate::perf::sys;

/// What to do with one record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Verdict {
    /// A followed process's, or no process's (lost, throttle): hand it to the caller.
    Deliver,
    /// A process not known (yet): keep it aside until its fork record may have been read.
    Hold,
    /// The library's own threads (a sampler of the calling process): never delivered.
    Drop,
}

/// How a followed process's exit is seen.
enum Liveness {
    /// The calling process: it does not exit while its sampler lives.
    Current,
    /// A target, opened by the caller (its pidfd).
    Target(Process),
    /// A child found by its fork record: its pidfd, or `None` when none could be opened (no descriptor left),
    /// and then its `/proc` entry.
    Child(Option<OwnedFd>),
}

struct Followed {
    liveness: Liveness,
    /// The pass that found it exited.
    gone_at: Option<u64>,
}

impl Followed {
    fn exited(&self, pid: u32) -> bool {
        match &self.liveness {
            Liveness::Current => false,
            Liveness::Target(p) => p.has_exited(),
            Liveness::Child(Some(fd)) => sys::pidfd_exited_within(fd.as_fd(), 0),
            Liveness::Child(None) => !std::path::Path::new(&format!("/proc/{pid}")).exists(),
        }
    }
}

/// Records copied aside: their words, one after the other.
#[derive(Default)]
struct Held {
    words: Vec<u64>,
    /// Per record: its first word in `words` and its length in words.
    spans: Vec<(usize, usize)>,
}

impl Held {
    fn push(&mut self, record: &[u64]) {
        self.spans.push((self.words.len(), record.len()));
        self.words.extend_from_slice(record);
    }

    fn clear(&mut self) {
        self.words.clear();
        self.spans.clear();
    }

    fn record(&self, i: usize) -> &[u64] {
        let (start, len) = self.spans[i];
        &self.words[start..start + len]
    }
}

/// The followed processes and the records held for their fork records.
pub(super) struct Follow {
    procs: HashMap<u32, Followed>,
    /// Processes created by a followed one are followed (`inherit`).
    children: bool,
    /// The caller asked for side-band records: fork and exit records are delivered (else they serve the
    /// following only).
    sideband: bool,
    /// The calling process, when it is a target, and the library's threads in it (never delivered).
    me: Option<u32>,
    own: Vec<u32>,
    /// Held by the previous pass (decided for good at the end of this one) and by this pass.
    older: Held,
    newer: Held,
    /// Per held record (older, then newer) at the end of a pass: delivered already.
    done: Vec<bool>,
    pass: u64,
    format: SampleFormat,
}

impl Follow {
    /// Following `targets` (the calling process `me` among them when it is one, without its threads `own`);
    /// `children`: the processes they create too; `sideband`: the caller takes fork and exit records.
    pub(super) fn new(
        targets: &[Process],
        me: Option<u32>,
        own: &[u32],
        children: bool,
        sideband: bool,
        format: SampleFormat,
    ) -> Follow {
        let mut procs = HashMap::new();
        for p in targets {
            procs.insert(
                p.pid(),
                Followed {
                    liveness: Liveness::Target(p.clone()),
                    gone_at: None,
                },
            );
        }
        if let Some(pid) = me {
            procs.insert(
                pid,
                Followed {
                    liveness: Liveness::Current,
                    gone_at: None,
                },
            );
        }
        Follow {
            procs,
            children,
            sideband,
            me,
            own: own.to_vec(),
            older: Held::default(),
            newer: Held::default(),
            done: Vec::new(),
            pass: 0,
            format,
        }
    }

    /// The processes followed now (exited ones included until they leave).
    pub(super) fn processes(&self) -> usize {
        self.procs.len()
    }

    /// True when process `pid` is followed now.
    pub(super) fn follows(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The followed processes not seen exited yet.
    pub(super) fn live_pids(&self) -> Vec<u32> {
        self.procs
            .iter()
            .filter(|(_, p)| p.gone_at.is_none())
            .map(|(&pid, _)| pid)
            .collect()
    }

    /// Descriptors held for followed children (their pidfds).
    pub(super) fn descriptors(&self) -> usize {
        self.procs
            .values()
            .filter(|p| matches!(p.liveness, Liveness::Child(Some(_))))
            .count()
    }

    /// True when every followed process has exited (never for a sampler of the calling process).
    pub(super) fn all_exited(&self) -> bool {
        self.procs
            .iter()
            .all(|(&pid, p)| p.gone_at.is_some() || p.exited(pid))
    }

    /// The verdict on `record`, as it is read from its ring. A fork record of a followed process's child makes
    /// the child followed (with `children`).
    pub(super) fn decide(&mut self, record: &SampleRecord<'_>) -> Verdict {
        let (pid, tid) = match *record {
            SampleRecord::Sample(ref s) => (s.pid, Some(s.tid)),
            SampleRecord::Switch { pid, tid, .. } => (pid, Some(tid)),
            SampleRecord::Mmap(ref m) => (m.pid, None),
            SampleRecord::Comm { pid, .. } | SampleRecord::Exit { pid, .. } => (pid, None),
            SampleRecord::Fork { pid, ppid, .. } => {
                if pid != ppid && self.children && self.procs.contains_key(&ppid) {
                    self.adopt(pid);
                }
                // A followed process's fork of a child not followed (children not followed) is its parent's
                // record, as a `thread-cpu` sampler delivers it from the parent's events.
                let pid = if self.procs.contains_key(&pid) {
                    pid
                } else {
                    ppid
                };
                (pid, None)
            }
            SampleRecord::Lost { .. } | SampleRecord::Throttle { .. } => return Verdict::Deliver,
        };
        if !self.procs.contains_key(&pid) {
            return Verdict::Hold;
        }
        if !self.sideband
            && matches!(
                record,
                SampleRecord::Fork { .. } | SampleRecord::Exit { .. }
            )
        {
            return Verdict::Drop;
        }
        if let (Some(me), Some(tid)) = (self.me, tid)
            && pid == me
            && self.own.contains(&tid)
        {
            return Verdict::Drop;
        }
        Verdict::Deliver
    }

    /// Processes created by a followed one are followed.
    pub(super) fn follows_children(&self) -> bool {
        self.children
    }

    /// Follow a new child process of a followed one, found in `/proc` (its fork record was never read: its parent
    /// created it before its own events were opened, or the record was dropped).
    pub(super) fn adopt_child(&mut self, pid: u32) {
        self.adopt(pid);
    }

    /// Follow a new child process (found by its fork record).
    fn adopt(&mut self, pid: u32) {
        if self.procs.contains_key(&pid) {
            return;
        }
        let (fd, gone_at) = match i32::try_from(pid).map(sys::pidfd_open) {
            Ok(Ok(fd)) => (Some(fd), None),
            // Exited and reaped already: its records are in the rings, and it leaves as an exited one does.
            Ok(Err(nix::errno::Errno::ESRCH)) | Err(_) => (None, Some(self.pass)),
            Ok(Err(_)) => (None, None),
        };
        self.procs.insert(
            pid,
            Followed {
                liveness: Liveness::Child(fd),
                gone_at,
            },
        );
    }

    /// Keep `record` (its words) until the end of the pass.
    pub(super) fn hold(&mut self, words: &[u64]) {
        self.newer.push(words);
    }

    /// The end of a pass over every ring: the held records whose process is followed now are handed to
    /// `deliver` in the order they were read (fork records first adopt their children, as often as that makes
    /// more known); the previous pass's others are dropped, this pass's kept for one more pass. Then the exits
    /// are taken, and processes gone for two passes leave. `deliver` returns false to stop at once (the
    /// process forked in it): the held records are then left alone.
    pub(super) fn end_pass(&mut self, mut deliver: impl FnMut(&SampleRecord<'_>) -> bool) -> bool {
        let format = self.format;
        let total = self.older.spans.len() + self.newer.spans.len();
        self.done.clear();
        self.done.resize(total, false);
        // Fork records until nothing changes: a grandchild's fork record may come before its parent's.
        loop {
            let mut adopted = false;
            for i in 0..total {
                let words = if i < self.older.spans.len() {
                    self.older.record(i)
                } else {
                    self.newer.record(i - self.older.spans.len())
                };
                if let Some(SampleRecord::Fork { pid, ppid, .. }) = decode_record(words, format)
                    && pid != ppid
                    && self.children
                    && self.procs.contains_key(&ppid)
                    && !self.procs.contains_key(&pid)
                {
                    self.adopt(pid);
                    adopted = true;
                }
            }
            if !adopted {
                break;
            }
        }
        for i in 0..total {
            let words = if i < self.older.spans.len() {
                self.older.record(i)
            } else {
                self.newer.record(i - self.older.spans.len())
            };
            let Some(record) = decode_record(words, format) else {
                self.done[i] = true;
                continue;
            };
            let pid = match record {
                SampleRecord::Sample(ref s) => s.pid,
                SampleRecord::Switch { pid, .. }
                | SampleRecord::Comm { pid, .. }
                | SampleRecord::Exit { pid, .. }
                | SampleRecord::Fork { pid, .. } => pid,
                SampleRecord::Mmap(ref m) => m.pid,
                SampleRecord::Lost { .. } | SampleRecord::Throttle { .. } => {
                    self.done[i] = true;
                    continue;
                }
            };
            if self.procs.contains_key(&pid) {
                self.done[i] = true;
                if !self.sideband
                    && matches!(
                        record,
                        SampleRecord::Fork { .. } | SampleRecord::Exit { .. }
                    )
                {
                    continue;
                }
                if !deliver(&record) {
                    return false;
                }
            }
        }
        // The previous pass's records are decided; this pass's undecided ones wait one more pass.
        let older = self.older.spans.len();
        self.older.clear();
        for i in 0..self.newer.spans.len() {
            if !self.done[older + i] {
                let (start, len) = self.newer.spans[i];
                self.older.spans.push((self.older.words.len(), len));
                self.older
                    .words
                    .extend_from_slice(&self.newer.words[start..start + len]);
            }
        }
        self.newer.clear();
        let pass = self.pass;
        for (&pid, p) in self.procs.iter_mut() {
            if p.gone_at.is_none() && p.exited(pid) {
                p.gone_at = Some(pass);
            }
        }
        self.procs
            .retain(|_, p| p.gone_at.is_none_or(|at| at + 2 > pass));
        self.pass += 1;
        true
    }
}

#[cfg(test)]
mod tests;
