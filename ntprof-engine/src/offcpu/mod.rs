//! Off-CPU time (`--off-cpu`): every interval a profiled thread spends off CPU, from its switch-out to its next
//! switch-in (the kernel's switch records: exact times), with the user-space call stack it blocked at and the
//! system call it waits in, voluntary waits apart from preemptions.
//!
//! Two mechanisms, the best one the kernel allows:
//!
//! * **switch samples** (CAP_PERFMON, CAP_SYS_ADMIN, or `kernel.perf_event_paranoid` <= 1): the
//!   `context-switches` software event sampled at every switch, kernel side included, so that the sample carries
//!   the user registers and stack (or the frame-pointer chain) saved at the thread's kernel entry, and the
//!   kernel's own chain names the system call (`__x64_sys_NAME`). Nothing is read from the threads.
//! * **switch records + /proc** (an unprivileged user at paranoid 2, on their own processes): the switch records
//!   alone, read in rounds of about a millisecond by a watcher at nice 19 (a wake-up per record took CPUs from
//!   the profiled threads); each thread switched out for 100 µs or more at a round is read: its system call,
//!   stack and instruction pointers (`/proc/PID/task/TID/syscall`) and its user stack (`process_vm_readv`)
//!   through the library's [`ntprofile::BlockedThreadReader`]. A wait that is over before the reading keeps its
//!   exact time but not its stack: it is counted under `[wait not read]`. A preemption (the thread was
//!   runnable: `/proc` does not describe it) is placed at the thread's last CPU sample (see `tree::wait`).
//!
//! The watcher runs on its own thread and hands finished intervals to the session, which applies them in time
//! order with the other records ([`crate::tree::order`]).

mod watch;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::thread::JoinHandle;

use ntprofile::{NtStatus, ProfileSource, Sampler, SamplerBuilder};

use crate::options::CallGraph;
pub use crate::waits::{Interval, Wait};
use watch::Watch;

/// The stack bytes copied from a blocked thread without `--call-graph dwarf,SIZE`.
pub const DEFAULT_STACK_BYTES: u32 = 8192;

/// Which mechanism ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mechanism {
    /// `context-switches` samples with the user state at the kernel entry, and switch records.
    SwitchSamples,
    /// Switch records, and each blocked thread read from `/proc` and its memory.
    SwitchRecordsProc,
}

impl Mechanism {
    /// Its name in the report.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::SwitchSamples => "switch-samples",
            Mechanism::SwitchRecordsProc => "switch-records+proc",
        }
    }
}

/// What the watcher counted, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct WatchStats {
    /// Switch-outs seen.
    pub switches: u64,
    /// Blocked threads read (`/proc` path).
    pub reads: u64,
    /// Readings that found the thread running again (its wait was over).
    pub missed: u64,
    /// Readings refused because the thread may not be read by this user (its process made itself
    /// non-dumpable, changed its user or runs a set-uid program): not late readings.
    pub denied: u64,
    /// Readings that failed for another reason (the thread exited).
    pub refused: u64,
    /// Records the kernel dropped in the watcher's rings.
    pub lost: u64,
    /// Switch records of threads whose switch-out was not seen (the wait started before the run).
    pub unpaired: u64,
}

/// The off-CPU watcher of a session.
pub struct OffCpu {
    /// The mechanism that runs.
    pub mechanism: Mechanism,
    /// Why the better mechanism was not used, when it was not.
    pub fallback: Option<String>,
    rx: Receiver<Interval>,
    stop: Arc<AtomicBool>,
    /// Every interval that ended before this time (sampler clock) has been sent.
    done_until: Arc<AtomicU64>,
    thread: Option<JoinHandle<WatchStats>>,
    /// The watcher's counts, once stopped.
    pub stats: WatchStats,
}

/// `perf_event_attr.type` of the software events.
const PERF_TYPE_SOFTWARE: u32 = 1;
/// The software event that counts nothing: a carrier for side-band records (as `perf record` uses it).
const PERF_COUNT_SW_DUMMY: u64 = 9;

impl OffCpu {
    /// Open the switch sampler on the targets `add` names (following their children when `follow`) and start
    /// watching: the switch samples where the kernel allows them, else the switch records with `/proc` readings.
    pub fn start(
        add: &dyn Fn(SamplerBuilder) -> SamplerBuilder,
        follow: bool,
        call_graph: Option<CallGraph>,
        cpus: Option<&[usize]>,
    ) -> Result<OffCpu, ntprofile::Error> {
        let base = |source: ProfileSource| {
            let mut b = Sampler::builder()
                .source(source)
                .interval(1)
                .sideband(false)
                .inherit(follow)
                .context_switches(true);
            b = add(b);
            if let Some(list) = cpus {
                b = b.cpus(list.iter().copied());
            }
            b
        };
        let stack_bytes = match call_graph {
            Some(CallGraph::Dwarf(bytes)) => bytes,
            _ => DEFAULT_STACK_BYTES,
        };
        // The blocking stacks are unwound with CFI in every mode: a system call's wrapper keeps no frame
        // pointer, so a frame-pointer walk from it would skip its caller (the function that blocked).
        let privileged = base(ProfileSource::ContextSwitches)
            .kernel(true)
            .callchain(u16::MAX)
            .user_stack(stack_bytes)
            .build();
        let (sampler, mechanism, fallback) = match privileged {
            Ok(s) => (s, Mechanism::SwitchSamples, None),
            Err(e) if e.status() == NtStatus::PRIVILEGE_NOT_HELD => {
                // The switch records alone need no privilege. They come with any event, so the sampler's
                // event is the software `dummy` event (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY), which never
                // takes a sample (the context-switch event is refused: it is sampled in the kernel). The
                // watcher reads the rings in short rounds rather than at each record (see `watch`).
                let dummy =
                    ntprofile::register_raw_source(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_DUMMY, 0, 0)
                        .map_err(|status| {
                        ntprofile::Error::new(
                            status,
                            "registering the dummy event for the switch records",
                        )
                    })?;
                let s = base(dummy).build()?;
                (s, Mechanism::SwitchRecordsProc, Some(e.to_string()))
            }
            Err(e) => return Err(e),
        };
        sampler.enable()?;
        let stack_bytes = stack_bytes as usize;
        let (tx, rx) = channel();
        let stop = Arc::new(AtomicBool::new(false));
        let done_until = Arc::new(AtomicU64::new(0));
        let watch = Watch::new(
            sampler,
            mechanism,
            stack_bytes,
            tx,
            Arc::clone(&stop),
            Arc::clone(&done_until),
        );
        let thread = std::thread::Builder::new()
            .name("ntprof-offcpu".into())
            .spawn(move || watch.run())
            .map_err(|e| {
                ntprofile::Error::new(
                    NtStatus::INSUFFICIENT_RESOURCES,
                    format!("starting the off-CPU watcher thread: {e}"),
                )
            })?;
        Ok(OffCpu {
            mechanism,
            fallback,
            rx,
            stop,
            done_until,
            thread: Some(thread),
            stats: WatchStats::default(),
        })
    }

    /// The time before which every interval that ended has been handed over.
    pub fn done_until(&self) -> u64 {
        // Acquire: pairs with the watcher's Release store, made after it sent the intervals it covers.
        self.done_until.load(Ordering::Acquire)
    }

    /// The intervals handed over so far.
    pub fn drain(&self, mut f: impl FnMut(Interval)) {
        while let Ok(i) = self.rx.try_recv() {
            f(i);
        }
    }

    /// Stop watching: the watcher reads what is left, hands over the intervals that ended, and stops (threads
    /// still off CPU now are in a wait the run does not see the end of: not counted).
    pub fn stop(&mut self) {
        // Relaxed: a flag polled by the watcher; nothing else is published through it.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            self.stats = t.join().unwrap_or_default();
        }
    }
}

impl Drop for OffCpu {
    fn drop(&mut self) {
        self.stop();
    }
}
