//! The sampler extension: perf_event sampling of whole process trees (or of everything) that hands the caller
//! every decoded record — samples with pid, tid, time, CPU, ip, optionally the call chain and a copy of the user
//! registers and stack, and the kernel's side-band records (executable mappings, comm/exec, fork, exit, lost,
//! throttle).
//!
//! Why it exists: an NT profile counts one process's samples into bucket ranges. That cannot tell processes
//! apart, learn mappings as they appear (a child's `exec`, a `dlopen`, JIT code), or keep call stacks. A
//! profiler that follows a process tree (`ntprof`) needs the records themselves, and the kernel reports the
//! tree's events itself (perf's side-band records), so nothing has to poll `/proc`. The NT calls are
//! unchanged: a profile on a process still counts that process only.
//!
//! The caller drives the reading, like `perf record`'s poll loop: [`Sampler::wait`] blocks until a ring holds
//! enough data (or every target exited, or a timeout), [`Sampler::read`] drains every ring once and calls the
//! caller's function for each record. No thread of the library is involved.
//!
//! ```no_run
//! use std::time::Duration;
//! use ntprofile::{Process, Sampler, SampleRecord};
//!
//! let child = std::process::Command::new("sh").args(["-c", "ls -R /usr >/dev/null"]).spawn()?;
//! let process = Process::open(child.id())?;
//! let mut sampler = Sampler::builder()
//!     .process(&process)   // and, by default, every process it creates
//!     .callchain(64)       // frame-pointer call chains
//!     .build()?;
//! sampler.enable()?;
//! let mut samples = 0;
//! while !sampler.targets_exited() {
//!     sampler.wait(Duration::from_millis(100))?;
//!     sampler.read(|record| match record {
//!         SampleRecord::Sample(s) => { samples += 1; let _ = (s.pid, s.ip); }
//!         SampleRecord::Comm { comm, exec: true, .. } => println!("exec {}", String::from_utf8_lossy(comm)),
//!         _ => {}
//!     })?;
//! }
//! sampler.read(|_| {})?; // the records written before the last exit
//! println!("{samples} samples, {:?}", sampler.stats());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # How it maps onto perf_event
//! For each target process, one event per (thread × CPU), with `inherit` (and, with `inherit(false)`,
//! `inherit_thread`, so that only new threads are followed, not new processes); the first event of each CPU
//! owns that CPU's ring and the others write into it (`PERF_EVENT_IOC_SET_OUTPUT`). Threads created while the
//! events open are caught by scanning again until the thread list is stable (as the engine does). This is the
//! `thread-cpu` layout. A caller who may observe every task (CAP_PERFMON, CAP_SYS_ADMIN, or
//! `kernel.perf_event_paranoid` 0 or less) gets the `cpu-filtered` layout instead once (thread × CPU) events
//! would need more than 1,024 descriptors or more than the hard limit leaves: one event per CPU for every task,
//! of which only the targets' records are delivered, the tree followed from the kernel's fork records (a
//! child's records read before its fork record are held back for up to two reads; see `follow`).
//! Without that privilege, past the same 1,024 descriptors, the `per-thread` layout where it takes fewer
//! descriptors (more than two CPUs) and its rings fit the locked memory: per thread one event on any CPU
//! without `inherit`, owning a ring of its own, and a counting event with `inherit` per thread of the start;
//! each [`Sampler::read`] opens the events of the tasks whose fork records it read (and, with them, reports what
//! they mapped or exec'ed before, from `/proc`), closes the rings of threads that exited, lists the threads again
//! every 500 ms, and reports what late tasks ran before their events opened as lost (see `per_thread`).
//! `NTPROFILE_EVENTS=thread-cpu`, `per-thread` or `cpu-filtered` forces one. A global sampler opens one event
//! per CPU for every task (`cpu`), a sampler of a cgroup ([`SamplerBuilder::cgroup`]) one per CPU on the
//! cgroup, which the kernel filters (`cgroup`). [`Sampler::event_usage`] tells which. Samples carry `IP|TID|TIME|CPU` (+`CALLCHAIN`,
//! +`REGS_USER|STACK_USER`); every record carries pid, tid, time and CPU (`sample_id_all`); times are
//! `CLOCK_MONOTONIC` nanoseconds ([`sampler_clock_ns`]). A source the kernel samples in its own code (context
//! switches, CPU migrations) also takes kernel samples with `REGS_USER`, and a user-space sampler reports each
//! at the user ip where the thread entered the kernel (`docs/linux-mapping.md`). A sampler of the calling
//! process starts the library's threads before its events open and keeps them while it lives, so that they
//! never inherit its events.
//!
//! Rings: `ring_pages` data pages per CPU (default 128, 512 with a user-stack copy), at least what two of the
//! largest samples and a Lost record need; every CPU's ring the same size, all halved together while the
//! locked-memory budget (`kernel.perf_event_mlock_kb` per CPU for the user, then `RLIMIT_MEMLOCK`) refuses a
//! mapping; the wake-up watermark is a quarter of a ring, so a target that sleeps costs no wake-up at all. The
//! events count the records they could not write (`PERF_FORMAT_LOST`), so that lost counts stay exact when a
//! ring is too full for the kernel to write its own Lost record.
//!
//! Waiting holds nothing the reading needs: [`Sampler::wait`] waits on the events' epoll set and an eventfd that
//! a [`SamplerWaker`] (or the C API's `NtClose`) signals.
//!
//! # Lifetime
//! Dropping a sampler closes every event and unmaps every ring. A sampler is dead in a `fork()`ed child (its
//! rings are not mapped there): every call returns `STATUS_INVALID_HANDLE`, and dropping it only closes the
//! child's copies of the descriptors. A `fork()` inside the read function leaves the child's `read` at once with
//! that status; the record's borrowed parts point into the parent's rings and must not be read in the child.

mod blocked;
mod build;
mod builder;
mod follow;
mod late;
mod layout;
mod lost;
mod open;
mod per_thread;
mod read;
mod thread_state;
mod wait;

use std::os::fd::OwnedFd;
use std::time::Duration;

pub use crate::perf::records::{
    CallchainContext, Mmap, Sample, SampleRecord, SamplerStats, UserRegs,
};

use crate::api::Process;
use crate::error::Error;
use crate::perf::ring::Ring;
use crate::perf::sampler_event::SampleFormat;
use crate::perf::sys;
use crate::source::ProfileSource;
use crate::status::NtStatus;
pub use blocked::{BlockedThread, BlockedThreadReader, read_blocked_thread};
pub use builder::SamplerBuilder;
use builder::TargetSpec;
use lost::RingLost;
pub use wait::SamplerWaker;
pub(crate) use wait::WaitEnd;

/// The clock of every record's `time`: `CLOCK_MONOTONIC` in nanoseconds (the events are opened with
/// `use_clockid`), so that a caller can compare record times with its own `clock_gettime(CLOCK_MONOTONIC)`.
///
/// ```
/// let a = ntprofile::sampler_clock_ns();
/// let b = ntprofile::sampler_clock_ns();
/// assert!(a > 0 && b >= a);
/// ```
pub fn sampler_clock_ns() -> u64 {
    sys::monotonic_ns()
}

/// One CPU's ring.
struct CpuRing {
    cpu: usize,
    ring: Ring,
    /// Its lost-record accounting (and the events that write into it).
    lost: RingLost,
}

/// A sampler: perf events on one or more processes (and, by default, every process they create), or on every
/// process, whose records the caller reads with [`Sampler::read`]. Built with [`Sampler::builder`]; created
/// disabled.
pub struct Sampler {
    /// Every event descriptor (ring owners and redirected ones), in the order of the wait set's tokens.
    fds: Vec<OwnedFd>,
    /// One ring per CPU that has events.
    rings: Vec<CpuRing>,
    /// The epoll set over the events, shared with the sampler's wakers.
    waits: SamplerWaker,
    /// Data pages of each ring.
    pages: usize,
    /// The layout of the events: `thread-cpu` (processes), `cpu-filtered` (processes, privileged, many
    /// threads) or `cpu` (global).
    mode: crate::engine::mode::EventMode,
    /// A `cpu-filtered` or `per-thread` sampler's followed processes and the records held for their fork records.
    follow: Option<follow::Follow>,
    /// A `per-thread` sampler's events (one ring per thread, in the order of `rings`).
    per_thread: Option<per_thread::PerThread>,
    /// The events count the records they could not write (`PERF_FORMAT_LOST`): lost counts are exact.
    events_count_lost: bool,
    /// The free bytes above which a ring dropped nothing since the last read (`lost::no_loss_free_bytes`).
    no_loss_free: u64,
    /// Where a record that wraps round a ring's end is copied.
    scratch: Box<[u64]>,
    format: SampleFormat,
    watermark: u64,
    stats: SamplerStats,
    interval: u32,
    source: ProfileSource,
    /// The process that built the sampler: in a `fork()`ed child it is dead.
    owner: u32,
    /// The target processes, kept open so that their pids name them for the sampler's life.
    _processes: Vec<Process>,
    /// A sampler of the calling process keeps the library's threads running (started before its events, never
    /// observed by them): see `build::pin_library_threads`.
    pin: Option<crate::engine::ThreadsPin>,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("source", &self.source)
            .field("interval", &self.interval)
            .field("events", &self.fds.len())
            .field(
                "cpus",
                &self.rings.iter().map(|r| r.cpu).collect::<Vec<_>>(),
            )
            .field("ring_pages", &self.pages)
            .field("stats", &self.stats)
            .finish()
    }
}

impl Sampler {
    /// A builder with the defaults: the calling process (unless a target is named), children followed,
    /// [`ProfileSource::Time`] at its current interval, every online CPU, user space only, side-band on, no
    /// call chain, no stack copy.
    pub fn builder() -> SamplerBuilder {
        SamplerBuilder::default()
    }

    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child.
    fn check_owner(&self) -> Result<(), Error> {
        if self.owner == std::process::id() {
            Ok(())
        } else {
            Err(forked())
        }
    }

    /// Start sampling (every event and every copy inherited so far).
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child.
    pub fn enable(&self) -> Result<(), Error> {
        self.check_owner()?;
        for fd in &self.fds {
            // An event whose task exited answers an error or nothing: the others are enabled all the same.
            let _ = crate::perf::event::enable(std::os::fd::AsFd::as_fd(fd));
        }
        if let Some(pt) = &self.per_thread {
            pt.enable();
        }
        Ok(())
    }

    /// Stop sampling (records already written stay readable).
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child.
    pub fn disable(&self) -> Result<(), Error> {
        self.check_owner()?;
        if let Some(pt) = &self.per_thread {
            pt.disable();
        }
        for fd in &self.fds {
            let _ = crate::perf::event::disable(std::os::fd::AsFd::as_fd(fd));
        }
        Ok(())
    }

    /// Waits until some ring holds at least its wake-up watermark (a quarter of the ring), every target has
    /// exited, a [`SamplerWaker`] wakes it, or the timeout. `Ok(true)` when there is something to read (or
    /// targets ended), `Ok(false)` on timeout or wake-up. A `per-thread` sampler's wait also ends within 10 ms
    /// once any ring holds a record (a fork record must be read for the new task's events to open).
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child.
    pub fn wait(&self, timeout: Duration) -> Result<bool, Error> {
        // As `wait_any` of this one sampler, without its lists (a wait allocates nothing).
        let Some(waker) = self.prepare_wait()? else {
            return Ok(true);
        };
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |d| {
                d.saturating_duration_since(std::time::Instant::now())
            });
            if let Some(ready) = wait_result(waker.wait(left), left, || self.holds_records()) {
                return Ok(ready);
            }
        }
    }

    /// Waits as [`wait`](Self::wait) does, on several samplers at once: until one of them would have ended its
    /// wait (a ring at its watermark, every target of one gone, a wake-up of one) or the timeout. For a
    /// side-band-only sampler woken at each record ([`SamplerBuilder::samples`]) beside the samplers that take
    /// the samples. An empty list waits for the timeout.
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child.
    pub fn wait_any(samplers: &[&Sampler], timeout: Duration) -> Result<bool, Error> {
        let mut wakers = Vec::with_capacity(samplers.len());
        for s in samplers {
            match s.prepare_wait()? {
                None => return Ok(true),
                Some(w) => wakers.push(w),
            }
        }
        if wakers.is_empty() {
            std::thread::sleep(timeout);
            return Ok(false);
        }
        let sets: Vec<&wait::WaitSet> = wakers.iter().map(|w| &*w.0).collect();
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |d| {
                d.saturating_duration_since(std::time::Instant::now())
            });
            let holds = || samplers.iter().any(|s| s.holds_records());
            if let Some(ready) = wait_result(wait::wait_any(&sets, left), left, holds) {
                return Ok(ready);
            }
        }
    }

    /// True when a per-thread sampler's ring holds a record (below its watermark).
    pub(crate) fn holds_records(&self) -> bool {
        self.per_thread.is_some() && self.rings.iter().any(|r| r.ring.fill().0 > 0)
    }

    /// The first half of [`wait`](Self::wait), which needs the sampler: `None` when there is something to read
    /// already (a ring at its watermark, or every target gone), else the waker to wait on without the sampler.
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` in a `fork()`ed child.
    pub(crate) fn prepare_wait(&self) -> Result<Option<SamplerWaker>, Error> {
        self.check_owner()?;
        if self.waits.0.all_hung_up() || self.follow_exited() || self.ring_ready() {
            return Ok(None);
        }
        Ok(Some(self.waits.clone()))
    }

    /// A handle that cuts short a [`wait`](Self::wait) from another thread.
    pub fn waker(&self) -> SamplerWaker {
        self.waits.clone()
    }

    /// True when some ring holds at least the watermark.
    fn ring_ready(&self) -> bool {
        self.rings.iter().any(|r| r.ring.fill().0 >= self.watermark)
    }

    /// What the sampler delivered so far: records, samples, lost, throttled, unthrottled.
    pub fn stats(&self) -> SamplerStats {
        self.stats
    }

    /// The effective interval, in the source's units (after clamping).
    pub fn interval(&self) -> u32 {
        self.interval
    }

    /// The profile source.
    pub fn source(&self) -> ProfileSource {
        self.source
    }

    /// The sampler's perf events: their layout (`thread-cpu`: one event per thread and processor; `per-thread`:
    /// per thread one event with a ring of its own; `cpu-filtered`: one per processor for every task, of which the
    /// targets' records are delivered; `cpu`: a global sampler), descriptors (with, for `cpu-filtered` and
    /// `per-thread`, the pidfds of the children it follows, and for `per-thread` the counting events of the
    /// threads of the start), rings and the bytes of their mappings. `threads` is the number of events per ring
    /// for `thread-cpu` (the threads observed directly, of all target processes together), the threads with
    /// events now for `per-thread`, the processes followed now for `cpu-filtered`.
    pub fn event_usage(&self) -> crate::engine::mode::EventUsage {
        let rings = self.rings.len();
        crate::engine::mode::EventUsage {
            mode: self.mode,
            descriptors: self.fds.len()
                + self.follow.as_ref().map_or(0, follow::Follow::descriptors)
                + self
                    .per_thread
                    .as_ref()
                    .map_or(0, per_thread::PerThread::descriptors),
            rings,
            ring_bytes: rings * (self.pages + 1) * crate::perf::ring::page_size(),
            threads: match (&self.per_thread, &self.follow) {
                (Some(pt), _) => pt.threads(),
                (None, Some(f)) => f.processes(),
                (None, None) => self.fds.len().checked_div(rings).unwrap_or(0),
            },
        }
    }

    /// Data pages of each CPU's ring: what was asked for (or the default), or less where the locked-memory
    /// budget is short (every ring gets the same size), never less than two of the largest samples need.
    pub fn ring_pages(&self) -> usize {
        self.pages
    }

    /// True when every target process (and, with [`inherit`](SamplerBuilder::inherit), every process they
    /// created) has exited: every event reported hang-up (`thread-cpu`), or every followed process's pidfd
    /// polls readable (`cpu-filtered`). Never true for a global sampler, nor for a sampler of the calling
    /// process. Records written
    /// before the exits stay readable: read once more after this turns true.
    pub fn targets_exited(&self) -> bool {
        if self.owner != std::process::id() {
            return false;
        }
        if self.follow.is_some() {
            return self.follow_exited();
        }
        if !self.waits.0.all_hung_up() && !self.poll_exits() {
            return false;
        }
        self.waits.0.all_hung_up()
    }

    /// A `cpu-filtered` sampler whose followed processes have all exited.
    fn follow_exited(&self) -> bool {
        self.follow.as_ref().is_some_and(follow::Follow::all_exited)
    }

    /// Take the hang-ups reported so far (without waiting); true when something changed.
    fn poll_exits(&self) -> bool {
        let (ready, hung, _) = self.waits.0.poll(0, false);
        ready || hung
    }
}

/// What a wait that ended with `end` returns, `None` to wait on: a per-thread sampler's wait ends every 10 ms
/// (`Capped`) to look whether a ring holds anything (`holds`: a fork record to read), and waits on if not, for
/// the `left` of its timeout.
fn wait_result(end: WaitEnd, left: Duration, holds: impl Fn() -> bool) -> Option<bool> {
    match end {
        WaitEnd::Ready => Some(true),
        WaitEnd::Timeout | WaitEnd::Woken | WaitEnd::Closed => Some(false),
        WaitEnd::Capped if holds() => Some(true),
        WaitEnd::Capped if left.is_zero() => Some(false),
        WaitEnd::Capped => None,
    }
}

/// The error of a sampler used in a `fork()`ed child.
fn forked() -> Error {
    Error::new(
        NtStatus::INVALID_HANDLE,
        "this sampler was built by the parent of this fork()ed process: its rings do not exist here (build a \
         new sampler in the child)",
    )
}

impl Drop for Sampler {
    fn drop(&mut self) {
        if self.owner != std::process::id() {
            // A fork()ed child: the rings are not mapped here (perf mappings are not copied), and the addresses
            // may hold the child's own mappings by now. Never unmap them; only the descriptors close.
            for r in self.rings.drain(..) {
                std::mem::forget(r.ring);
            }
            // The child's engine forgot the parent's threads and pins.
            std::mem::forget(self.pin.take());
        }
        // The rings unmap, then the descriptors close (fields drop in order: `fds` first is fine too, a mapping
        // holds its own reference to the buffer). A waker kept by the caller keeps only the epoll set and the
        // eventfd.
    }
}
