//! The per-thread layout of a sampler: descriptors by threads, not by threads × processors, for a caller who may
//! not observe every task of a processor.
//!
//! Per thread: its sampling event on any processor, without `inherit`, owning a small ring that only this thread
//! writes (the kernel lets an event on any processor share a ring only with events of the same thread), with the
//! task records (fork, exit) among its side-band records; without side-band, a `dummy` event of the thread
//! writes them into the ring instead, so that the sampling event's own count of the records it could not write
//! counts samples only (the ring's Lost records, which count the dummy's drops too, are then not used; Linux 6.0
//! and later); and for each thread of the start, one counting event with `inherit` (no ring), whose count takes
//! in every task it creates from the moment that task exists.
//!
//! Tasks created later are opened as they appear: a fork record read from a followed thread's ring opens the new
//! thread's events (and a new process's, when children are followed) at the end of that read, and a new
//! process's threads and children created before its events opened (their fork records never reached a ring)
//! are looked up in `/proc` at once, and so are every followed process's after a ring dropped records; every 500 ms, at
//! the first read after `enable`, and whenever a ring dropped records, the thread lists of the followed
//! processes are read again, which opens any thread missed and closes the rings of threads gone without their
//! exit record read. What a late task ran before its events opened is the difference between the counting
//! events and the sampling events, handed on as lost samples; what it mapped or exec'ed before is read from
//! `/proc` (`late`). A thread's exit record is the last record of its ring: its ring is closed at the end of the
//! read that found it, its event's count kept.
//!
//! The affinity (`cpus`) is applied from each record's processor: samples and switches of other processors are
//! read and not delivered.

mod build;
mod changes;

pub(super) use build::{Built, build};

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use super::CpuRing;
use super::late::Late;
use super::lost::RingLost;
use super::open::{Target, refused, shortage, threads};
use super::wait::WaitSet;
use crate::affinity::CpuSet;
use crate::error::Error;
use crate::perf::event;
use crate::perf::records::SampleRecord;
use crate::perf::ring::{Ring, SampleLayout};
use crate::perf::sampler_event::{SamplerEventParams, open_sampler_counter, open_sampler_event};
use crate::perf::sys::{self, Tid};
use crate::status::NtStatus;

/// How often the thread lists of the followed processes are read again.
const SWEEP_INTERVAL: Duration = Duration::from_millis(500);
/// How often, at most, the counts are read to report what late tasks ran unobserved.
const GAP_INTERVAL: Duration = Duration::from_millis(250);
/// How many times a target's thread list is read again at the start while threads keep appearing.
const RESCAN_LIMIT: usize = 64;
/// The longest a per-thread sampler's wait lasts: a fork record wakes nobody (a ring's watermark counts bytes),
/// and the new task runs unobserved until a read finds the record.
pub(super) const FOLLOW_WAIT: Duration = Duration::from_millis(10);
/// A per-thread ring belongs to no processor.
pub(super) const NO_CPU: usize = usize::MAX;

/// What to do with a record read from a per-thread ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Note {
    Keep,
    /// A sample or switch of a processor the sampler does not sample.
    Skip,
}

/// A per-thread sampler's events (its rings are the sampler's, in the same order as `tasks`).
pub(super) struct PerThread {
    /// The sampling events' parameters: on any processor, no `inherit`, task records with the side-band.
    params: SamplerEventParams,
    /// Without side-band: each thread has a task-record event (a `dummy` with task records, redirected into the
    /// ring; its parameters are the sampling events', `records_params`).
    task_record_events: bool,
    /// Data pages of each ring.
    pub(super) pages: usize,
    /// Per ring: its thread's process and thread ids, its sampling event (which owns the ring) and its
    /// task-record event (without side-band).
    tasks: Vec<(u32, u32)>,
    events: Vec<OwnedFd>,
    task_records: Vec<Option<OwnedFd>>,
    /// The threads with events now.
    observed: HashSet<u32>,
    /// The counting events of the threads of the start.
    counters: Vec<OwnedFd>,
    /// The counts of the sampling events closed so far.
    retired: u64,
    /// Samples reported lost for what late tasks ran before their events opened.
    gap_reported: u64,
    /// Tasks were found late since the counts were last read.
    gap_due: bool,
    /// The sampled processors, when not all of them.
    cpus: Option<CpuSet>,
    /// Found during a read: new tasks (process, thread, a new process), rings whose thread exited.
    born: Vec<(u32, u32, bool)>,
    ended: Vec<usize>,
    /// Threads gone without their exit record read: closed after the next read drained their rings.
    vanished: Vec<u32>,
    /// The calling process when it is a target, and the library's threads in it (never observed).
    me: Option<u32>,
    own: Vec<u32>,
    late: Late,
    last_sweep: Instant,
    last_gap: Instant,
    /// `enable` asks the next read to read the thread lists again (threads created since the start).
    sweep_due: AtomicBool,
    /// The events are enabled: a thread opened now is enabled at once.
    enabled: AtomicBool,
    raised_nofile: bool,
    /// Late tasks whose events could not be opened (no descriptor or locked memory left): what they run is
    /// reported lost through the counts.
    pub(super) unobserved: u64,
}

impl PerThread {
    /// The events of every thread of `targets` (less the library's threads `own` in the calling process `me`),
    /// each with a ring of `pages` data pages (returned, in order, and watched by `waits`); `cpus`: the sampled
    /// processors when not all.
    pub(super) fn open(
        params: SamplerEventParams,
        pages: usize,
        cpus: Option<CpuSet>,
        targets: &[Target],
        me: u32,
        own: &[Tid],
        waits: &WaitSet,
    ) -> Result<(PerThread, Vec<CpuRing>), Error> {
        let mut rings = Vec::new();
        let rings = &mut rings;
        let params = SamplerEventParams {
            inherit: false,
            task: params.sideband,
            ..params
        };
        let current = targets.iter().any(|t| matches!(t, Target::Current));
        let mut pt = PerThread {
            params,
            task_record_events: !params.sideband,
            pages,
            tasks: Vec::new(),
            events: Vec::new(),
            task_records: Vec::new(),
            observed: HashSet::new(),
            counters: Vec::new(),
            retired: 0,
            gap_reported: 0,
            gap_due: false,
            cpus,
            born: Vec::new(),
            ended: Vec::new(),
            vanished: Vec::new(),
            me: current.then_some(me),
            own: own.iter().map(|t| t.0 as u32).collect(),
            late: Late::default(),
            last_sweep: Instant::now(),
            last_gap: Instant::now(),
            sweep_due: AtomicBool::new(false),
            enabled: AtomicBool::new(false),
            raised_nofile: false,
            unobserved: 0,
        };
        for target in targets {
            let pid = match target {
                Target::Current => me,
                Target::Process(p) => p.pid(),
            };
            let who = (!matches!(target, Target::Current)).then_some(pid);
            let fail = |e: Fail| start_error(e, who, pages);
            // Threads found again while the first ones open: each gets its own events; the counter of its
            // creator, opened before it existed, takes it in (else it is observed from before `enable`).
            let mut counted = true;
            for _ in 0..RESCAN_LIMIT {
                let fresh: Vec<u32> = threads(target)?
                    .into_iter()
                    .map(|t| t.0 as u32)
                    .filter(|t| !(pt.observed.contains(t) || (pid == me && pt.own.contains(t))))
                    .collect();
                if fresh.is_empty() {
                    break;
                }
                for tid in fresh {
                    pt.observe(pid, tid, counted, rings, waits).map_err(fail)?;
                }
                counted = false;
            }
            // Opened by pid: if the process is gone now, its pid may name another process. Keep nothing of it.
            if let Target::Process(p) = target
                && p.has_exited()
            {
                pt.vanished = pt
                    .tasks
                    .iter()
                    .filter(|t| t.0 == pid)
                    .map(|t| t.1)
                    .collect();
                pt.close_vanished(rings, waits);
            }
        }
        let rings = std::mem::take(rings);
        Ok((pt, rings))
    }

    /// Open thread `tid`'s events (with a counter for a thread of the start): `Ok(false)` when it is gone.
    fn observe(
        &mut self,
        pid: u32,
        tid: u32,
        counter: bool,
        rings: &mut Vec<CpuRing>,
        waits: &WaitSet,
    ) -> Result<bool, Fail> {
        let tid_ = Tid(tid as i32);
        let Some(fd) = self
            .open_retrying(|p| open_sampler_event(p, tid_, None))
            .map_err(Fail::Events)?
        else {
            return Ok(false);
        };
        let layout = SampleLayout {
            tid: true,
            user_ip: false,
            cpu: false,
        };
        let ring = Ring::map(fd.as_fd(), self.pages, layout).map_err(Fail::Ring)?;
        // The task-record event, redirected into the ring (both events are of this thread).
        let records = if self.task_record_events {
            let Some(records) = self
                .open_retrying(|p| open_sampler_event(&records_params(p), tid_, None))
                .map_err(Fail::Events)?
            else {
                return Ok(false);
            };
            event::set_output(records.as_fd(), fd.as_fd()).map_err(Fail::Events)?;
            Some(records)
        } else {
            None
        };
        let counter = if counter {
            match self
                .open_retrying(|p| open_sampler_counter(p, tid_))
                .map_err(Fail::Events)?
            {
                Some(c) => Some(c),
                None => return Ok(false),
            }
        } else {
            None
        };
        // Relaxed: `enabled` is written by `enable`/`disable` of the same sampler, which its owner calls in turn
        // with its reads (the C API holds the sampler's lock for each); an event enabled late is enabled by them.
        if self.enabled.load(Ordering::Relaxed) {
            for e in [Some(&fd), records.as_ref(), counter.as_ref()]
                .into_iter()
                .flatten()
            {
                let _ = event::enable(e.as_fd());
            }
        }
        waits.add_ring(fd.as_raw_fd()).map_err(Fail::Events)?;
        let fds = vec![fd.as_raw_fd()];
        rings.push(CpuRing {
            cpu: NO_CPU,
            ring,
            lost: if records.is_some() && self.params.read_lost {
                RingLost::events_only(fds)
            } else {
                RingLost::new(fds)
            },
        });
        self.tasks.push((pid, tid));
        self.events.push(fd);
        self.task_records.push(records);
        self.counters.extend(counter);
        self.observed.insert(tid);
        Ok(true)
    }

    /// Open one event with `open`: `None` when the task is gone. A full descriptor table raises the soft limit to
    /// the hard one once; a kernel without `PERF_FORMAT_LOST` (before 6.0) gets events without it.
    fn open_retrying(
        &mut self,
        open: impl Fn(&SamplerEventParams) -> Result<OwnedFd, Errno>,
    ) -> Result<Option<OwnedFd>, Errno> {
        let mut interrupted = 0;
        loop {
            match open(&self.params) {
                Ok(fd) => return Ok(Some(fd)),
                Err(Errno::ESRCH) => return Ok(None),
                Err(Errno::EINTR) if interrupted < 3 => interrupted += 1,
                Err(Errno::EMFILE) if !self.raised_nofile && sys::raise_nofile_limit() => {
                    self.raised_nofile = true;
                }
                Err(Errno::EINVAL) if self.params.read_lost => self.params.read_lost = false,
                Err(errno) => return Err(errno),
            }
        }
    }

    /// Enable every event: the sampling events first, so that the counters never count what no sampling
    /// event could have seen. The next read reads the thread lists again.
    pub(super) fn enable(&self) {
        let records = self.task_records.iter().flatten();
        for fd in self.events.iter().chain(records).chain(&self.counters) {
            let _ = event::enable(fd.as_fd());
        }
        // Relaxed: see `observe`.
        self.enabled.store(true, Ordering::Relaxed);
        self.sweep_due.store(true, Ordering::Relaxed);
    }

    /// Disable every event, the counters first.
    pub(super) fn disable(&self) {
        // Relaxed: see `observe`.
        self.enabled.store(false, Ordering::Relaxed);
        let records = self.task_records.iter().flatten();
        for fd in self.counters.iter().chain(&self.events).chain(records) {
            let _ = event::disable(fd.as_fd());
        }
    }

    /// The events count the records they could not write (`PERF_FORMAT_LOST`, Linux 6.0 and later).
    pub(super) fn read_lost(&self) -> bool {
        self.params.read_lost
    }

    /// Descriptors held: sampling and counting events.
    pub(super) fn descriptors(&self) -> usize {
        self.events.len() + self.task_records.iter().flatten().count() + self.counters.len()
    }

    /// The threads with events now.
    pub(super) fn threads(&self) -> usize {
        self.tasks.len()
    }

    /// What a record read from ring `index` says of the threads (fork and exit records; `follows`: whether a
    /// process is followed, after the record was decided), and whether to deliver it at all (the affinity).
    pub(super) fn note(
        &mut self,
        index: usize,
        record: &SampleRecord<'_>,
        follows: impl Fn(u32) -> bool,
    ) -> Note {
        let cpu = match *record {
            SampleRecord::Sample(ref s) => s.cpu,
            SampleRecord::Switch { cpu, .. } => cpu,
            SampleRecord::Fork { pid, ppid, tid, .. } => {
                if follows(pid) && !self.observed.contains(&tid) {
                    self.born.push((pid, tid, pid != ppid));
                }
                return Note::Keep;
            }
            SampleRecord::Exit { tid, .. } => {
                if self.tasks.get(index).is_some_and(|t| t.1 == tid) {
                    self.ended.push(index);
                }
                return Note::Keep;
            }
            _ => return Note::Keep,
        };
        match &self.cpus {
            Some(set) if !set.contains(cpu as usize) => Note::Skip,
            _ => Note::Keep,
        }
    }
}

/// The task-record event of a sampler without side-band whose sampling events have `params`: a `dummy` with the
/// same layout and task records.
fn records_params(params: &SamplerEventParams) -> SamplerEventParams {
    SamplerEventParams {
        task: true,
        ..*params
    }
    .sideband_only()
}

/// Why a thread's events could not be had.
#[derive(Clone, Copy, Debug)]
enum Fail {
    /// `perf_event_open` or the epoll set refused.
    Events(Errno),
    /// Its ring could not be mapped (the locked-memory budget).
    Ring(Errno),
}

/// The error of a thread's events refused at the start (`who`: another process's pid).
fn start_error(fail: Fail, who: Option<u32>, pages: usize) -> Error {
    match fail {
        Fail::Ring(errno @ (Errno::EPERM | Errno::ENOMEM)) => Error::new(
            NtStatus::INSUFFICIENT_RESOURCES,
            format!(
                "no locked memory left for one more per-thread ring of {pages} data pages ({}): raise \
                 RLIMIT_MEMLOCK (ulimit -l) or kernel.perf_event_mlock_kb, close other perf rings of this user, \
                 or record a smaller user stack or call chain",
                std::io::Error::from_raw_os_error(errno as i32)
            ),
        ),
        Fail::Ring(errno) => shortage(errno, "mapping a per-thread sampler's ring"),
        Fail::Events(errno @ (Errno::EMFILE | Errno::ENFILE)) => {
            shortage(errno, "the per-thread sampler's events")
        }
        Fail::Events(errno) => refused(errno, who, "opening a per-thread sampler's events"),
    }
}
