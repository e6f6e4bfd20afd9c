//! A sampling session: one sampler per source on the targets (following their children unless
//! `--no-inherit`), read in rounds; each round's records are put in time order and applied to the model of the
//! run ([`Tracker`]).

use std::time::{Duration, Instant};

use ntprofile::{ProfileSource, SampleRecord, Sampler, sampler_clock_ns};

pub use super::checks::check_sources;
use super::{EXIT_USAGE, Failure, explain};
use crate::collect::SourceInfo;
use crate::offcpu::OffCpu;
use crate::options::{CallGraph, ProfileOptions};
use crate::progress::SourceProgress;
use crate::tree::hash::FastSet;
use crate::tree::order::Order;
use crate::tree::{Filter, Tracker};

/// How long one round waits for data: the latency of noticing the command's exit and of progress.
pub const ROUND: Duration = Duration::from_millis(100);
/// How long a round waits at most while the tree is changing (a fork or an exec was read within [`BUSY_FOR`]):
/// an exec record is read this soon after the exec, so that the new program's command line is read from
/// `/proc` while it still runs (a compiler pass of a small file lives a few tens of milliseconds).
const FAST_ROUND: Duration = Duration::from_millis(2);
/// How long rounds stay fast after the last fork or exec read.
const BUSY_FOR: Duration = Duration::from_secs(3);

/// Who is sampled.
#[derive(Clone, Copy)]
pub enum Targets<'a> {
    /// These processes (and, following, their children).
    Pids(&'a [u32]),
    /// These opened processes (and, following, their children).
    Processes(&'a [ntprofile::Process]),
    /// Every process (the kernel profile).
    Global,
    /// The tasks of the cgroup with this directory, filtered by the kernel (`--cgroup`, privileged).
    Cgroup(&'a std::path::Path),
}

impl Targets<'_> {
    /// `b` with these processes as its targets (a global profile names none).
    pub(super) fn add_to(&self, b: ntprofile::SamplerBuilder) -> ntprofile::SamplerBuilder {
        match self {
            Targets::Pids(pids) => pids.iter().fold(b, |b, &pid| b.pid(pid)),
            Targets::Processes(procs) => procs.iter().fold(b, |b, p| b.process(p)),
            Targets::Global => b,
            Targets::Cgroup(dir) => b.cgroup(dir),
        }
    }
}

/// The samplers of a run and the model they feed.
pub struct Session {
    samplers: Vec<Sampler>,
    /// Samplers opened later on processes that joined the run (`--cgroup` without the privilege), with the
    /// index of their source.
    joined: Vec<(usize, Sampler)>,
    /// Processes whose samples are dropped as they are read (they left the cgroup of a `--cgroup` run).
    left: FastSet<u32>,
    /// The samples dropped so far for that.
    pub left_samples: u64,
    /// The side-band sampler, woken at each record (`None`: the first sampler carries the side-band).
    sideband: Option<Sampler>,
    /// An exec read in the last round whose command line was not set up yet: the next round is fast.
    line_pending: bool,
    /// The sources, in command-line order.
    pub infos: Vec<SourceInfo>,
    /// The interval asked for each source (`-F`, `--interval`), `None` for its default: the notes say when the
    /// kernel's limits changed it.
    pub asked: Vec<Option<u32>>,
    /// The model of the run.
    pub tracker: Tracker,
    order: Order,
    /// The off-CPU watcher (`--off-cpu`).
    pub off_cpu: Option<OffCpu>,
    /// The samplers take kernel samples too (`--kernel`).
    pub kernel: bool,
    /// The perf events of the CPU samplers, every source's together.
    pub events: Option<crate::report::EventsInfo>,
    /// Rounds are fast ([`FAST_ROUND`]) until then: a fork or an exec was read shortly before.
    busy_until: Option<Instant>,
    /// Rounds read so far (the recorder's fixed cost: a sleeping command costs one per [`ROUND`]).
    pub rounds: u64,
    /// The first target, whose first exec read is the recorded command's own (`record` starts the command
    /// with an exec once the events are open): it starts nothing, so it does not make the rounds fast.
    own_exec: Option<u32>,
    /// The objects opened to name the code, kept for the next window's report.
    pub symbols: crate::collect::SymbolCache,
    /// Every record older than this (sampler clock) has been applied.
    applied_until: u64,
    /// Per sampler, the library's lost and throttled counts when the window began (a run cut into windows
    /// counts each window's own).
    stats_base: Vec<(u64, u64)>,
}

impl Session {
    /// Open (disabled) one sampler per source of `opts` on `targets`. Side-band records (mappings, execs,
    /// forks, exits) come from a side-band sampler that wakes the wait at each record (`sideband`: a recorded
    /// command), or else from the first sampler: every round reads all samplers and orders their records
    /// together, so every source's samples are resolved with the same model.
    pub fn open(
        targets: Targets<'_>,
        opts: &ProfileOptions,
        kernel: bool,
        read_unknown: bool,
    ) -> Result<Session, Failure> {
        let sources = check_sources(opts)?;
        let mut tracker = tracker_for(opts, sources.len(), read_unknown);
        let follow = !opts.no_inherit;
        let mut samplers = Vec::new();
        let mut infos = Vec::new();
        let first_pid = match targets {
            Targets::Pids(p) => p.first().copied(),
            Targets::Processes(p) => p.first().map(ntprofile::Process::pid),
            Targets::Global | Targets::Cgroup(_) => None,
        };
        // Only for a command `record` started (see `sideband::open`).
        let sideband = match targets {
            Targets::Pids(pids) => super::sideband::open(pids, follow),
            _ => None,
        };
        for (i, &source) in sources.iter().enumerate() {
            let carries = i == 0 && sideband.is_none() && !matches!(targets, Targets::Global);
            let b = builder_for(source, targets, opts, kernel, carries);
            let sampler = b
                .build()
                .map_err(|e| explain("creating the sampler", &e, first_pid))?;
            // The sampler keeps a fixed period (the library's jitter drives NT profiles' events only, and
            // `check_sources` refused --jitter).
            infos.push(SourceInfo {
                source,
                interval: sampler.interval(),
                jitter: 0,
            });
            samplers.push(sampler);
        }
        let off_cpu = match (opts.off_cpu, targets) {
            (false, _) => None,
            (true, Targets::Global) => {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "--off-cpu follows processes: give a command or --pid, not a system-wide --kernel profile",
                ));
            }
            (true, Targets::Cgroup(_)) => {
                return Err(Failure::new(
                    EXIT_USAGE,
                    "--off-cpu follows processes, and a --cgroup run with the privilege samples the cgroup \
                     with processor-wide events: drop --off-cpu, or profile the cgroup's processes with -p PID",
                ));
            }
            (true, Targets::Pids(_) | Targets::Processes(_)) => {
                // The same targets as the CPU samplers: an opened process (a descendant found at an attach)
                // that exits meanwhile is still a process, where its pid would no longer open.
                let add = |b: ntprofile::SamplerBuilder| targets.add_to(b);
                tracker.enable_waits();
                let cpus = opts.cpus.as_ref().map(|c| c.0.as_slice());
                Some(
                    OffCpu::start(&add, follow, opts.call_graph(), cpus)
                        .map_err(|e| explain("starting the off-CPU recording", &e, first_pid))?,
                )
            }
        };
        let events = samplers.first().map(|first| {
            let usage: Vec<ntprofile::EventUsage> = samplers
                .iter()
                .chain(&sideband)
                .map(Sampler::event_usage)
                .collect();
            crate::report::EventsInfo {
                mode: first.event_usage().mode.name().to_string(),
                descriptors: usage.iter().map(|u| u.descriptors as u64).sum(),
                rings: usage.iter().map(|u| u.rings as u64).sum(),
                ring_bytes: usage.iter().map(|u| u.ring_bytes as u64).sum(),
            }
        });
        Ok(Session {
            events,
            samplers,
            joined: Vec::new(),
            left: FastSet::default(),
            left_samples: 0,
            sideband,
            line_pending: false,
            asked: sources.iter().map(|&s| opts.interval_for(s)).collect(),
            infos,
            tracker,
            order: Order::default(),
            off_cpu,
            kernel,
            busy_until: None,
            rounds: 0,
            own_exec: first_pid,
            symbols: crate::collect::SymbolCache::new(opts.debuginfod.clone()),
            applied_until: 0,
            stats_base: Vec::new(),
        })
    }

    /// Start sampling. Rounds are slow ([`ROUND`]) until a fork or an exec is read: a command that starts
    /// nothing costs one round per [`ROUND`].
    pub fn enable(&mut self) -> Result<(), Failure> {
        for s in self.sideband.iter().chain(&self.samplers) {
            s.enable()
                .map_err(|e| explain("starting the sampler", &e, None))?;
        }
        Ok(())
    }

    /// One round: wait up to `timeout` for data, read every sampler, apply what is old enough.
    pub fn round(&mut self, timeout: Duration) -> Result<(), Failure> {
        self.rounds += 1;
        // With the side-band sampler a fork or an exec wakes the wait itself: rounds are fast only while a
        // command line is still to be read. Without it, for a while after each fork or exec read.
        let fast = match &self.sideband {
            Some(_) => self.line_pending || self.tracker.wants_lines(),
            None => self.busy_until.is_some_and(|until| Instant::now() < until),
        };
        let timeout = if fast {
            timeout.min(FAST_ROUND)
        } else {
            timeout
        };
        let joined = self.joined.iter().map(|(_, s)| s);
        let all: Vec<&Sampler> = self
            .sideband
            .iter()
            .chain(&self.samplers)
            .chain(joined)
            .collect();
        Sampler::wait_any(&all, timeout).map_err(|e| explain("waiting for samples", &e, None))?;
        let mut cutoff = sampler_clock_ns();
        if let Some(w) = &self.off_cpu {
            // Intervals arrive when they end: wait for the watcher to have handed over those before the cutoff.
            cutoff = cutoff.min(w.done_until());
            let order = &mut self.order;
            w.drain(|i| order.push_interval(&i));
        }
        self.read_all()?;
        let tracker = &mut self.tracker;
        self.order.drain(cutoff, |time, event, names| {
            tracker.apply(time, event, names)
        });
        tracker.read_wanted_lines();
        self.applied_until = self.applied_until.max(cutoff);
        Ok(())
    }

    /// Read every sampler once. An exec record has its process's command line read at once (see
    /// [`Tracker::exec_read`]); a fork or an exec makes the next rounds fast.
    fn read_all(&mut self) -> Result<(), Failure> {
        let order = &mut self.order;
        let tracker = &mut self.tracker;
        let own_exec = &mut self.own_exec;
        let (left, left_samples) = (&self.left, &mut self.left_samples);
        let mut changed = false;
        let mut line_pending = false;
        // The side-band sampler's records count as the first source's (its lost records are mappings lost).
        let sideband = self.sideband.iter_mut().map(|s| (0usize, s));
        let joined = self.joined.iter_mut().map(|(i, s)| (*i, s));
        for (i, s) in sideband
            .chain(self.samplers.iter_mut().enumerate())
            .chain(joined)
        {
            s.read(|r| {
                match *r {
                    SampleRecord::Sample(ref sample)
                        if !left.is_empty() && left.contains(&sample.pid) =>
                    {
                        *left_samples += 1;
                        return;
                    }
                    SampleRecord::Comm {
                        pid,
                        time,
                        comm,
                        exec: true,
                        ..
                    } => {
                        line_pending |= !tracker.exec_read(pid, time, comm);
                        if *own_exec == Some(pid) {
                            *own_exec = None;
                        } else {
                            changed = true;
                        }
                    }
                    SampleRecord::Fork { pid, ppid, .. } if pid != ppid => {
                        tracker.forked_read(pid);
                        changed = true
                    }
                    SampleRecord::Mmap(ref m) => {
                        let dev = crate::tree::mapped::device(m.maj, m.min);
                        let range = (m.addr, m.addr.wrapping_add(m.len));
                        tracker.mmap_read(m.pid, range, m.filename, (dev, m.ino));
                    }
                    _ => {}
                }
                order.push(i as u8, r)
            })
            .map_err(|e| explain("reading the samples", &e, None))?;
        }
        if changed {
            self.busy_until = Some(Instant::now() + BUSY_FOR);
        }
        self.line_pending = line_pending;
        Ok(())
    }

    /// Stop sampling, read what is left and apply everything.
    pub fn finish(&mut self) -> Result<(), Failure> {
        let joined = self.joined.iter().map(|(_, s)| s);
        for s in self.sideband.iter().chain(&self.samplers).chain(joined) {
            let _ = s.disable();
        }
        if let Some(w) = &mut self.off_cpu {
            w.stop();
            let order = &mut self.order;
            w.drain(|i| order.push_interval(&i));
        }
        self.read_all()?;
        let tracker = &mut self.tracker;
        self.order.drain(u64::MAX, |time, event, names| {
            tracker.apply(time, event, names)
        });
        // JIT code named by time, now that the runtimes have written their dump files out.
        self.tracker.resolve_jit();
        self.applied_until = sampler_clock_ns();
        self.settle_window_stats();
        Ok(())
    }

    /// Every record older than this instant (sampler clock) has been applied: where a window cut now ends.
    pub fn applied_until(&self) -> u64 {
        self.applied_until
    }

    /// The library's own account of lost records and throttling since the window began, when it saw more than
    /// the records said; the next window counts from here.
    pub fn settle_window_stats(&mut self) {
        self.stats_base.resize(self.samplers.len(), (0, 0));
        let (samplers, joined) = (&self.samplers, &self.joined);
        for (i, (counts, base)) in self
            .tracker
            .sources
            .iter_mut()
            .zip(&mut self.stats_base)
            .enumerate()
        {
            // The source's sampler and those opened later on processes that joined.
            let of_source = joined.iter().filter(|(j, _)| *j == i).map(|(_, s)| s);
            let (lost, throttled) = samplers[i..=i]
                .iter()
                .chain(of_source)
                .map(Sampler::stats)
                .fold((0, 0), |(l, t), st| (l + st.lost, t + st.throttled));
            counts.lost = counts.lost.max(lost.saturating_sub(base.0));
            counts.throttled = counts.throttled.max(throttled.saturating_sub(base.1));
            *base = (lost, throttled);
        }
    }

    /// Sample `processes` too from now on, and (following) every process they create: one more sampler per
    /// source, enabled, the first carrying their side-band records (a `--cgroup` run without the privilege, when
    /// processes join the cgroup).
    ///
    /// # Errors
    /// The library's, when the samplers cannot be built (the process is another user's, or descriptors or
    /// ring memory ran out).
    pub fn add_processes(
        &mut self,
        processes: &[ntprofile::Process],
        opts: &ProfileOptions,
    ) -> Result<(), ntprofile::Error> {
        let mut built = Vec::new();
        for (i, info) in self.infos.iter().enumerate() {
            let targets = Targets::Processes(processes);
            let sampler = builder_for(info.source, targets, opts, false, i == 0).build()?;
            sampler.enable()?;
            built.push((i, sampler));
        }
        if let Some(e) = &mut self.events {
            for (_, s) in &built {
                let u = s.event_usage();
                e.descriptors += u.descriptors as u64;
                e.rings += u.rings as u64;
                e.ring_bytes += u.ring_bytes as u64;
            }
        }
        self.joined.extend(built);
        Ok(())
    }

    /// The processes whose samples are dropped from now on, as they are read (they left the cgroup).
    pub fn set_left(&mut self, left: FastSet<u32>) {
        self.left = left;
    }

    /// True when every target and every process they started has exited (every event hung up).
    pub fn targets_exited(&self) -> bool {
        self.sideband
            .as_ref()
            .or(self.samplers.first())
            .is_some_and(Sampler::targets_exited)
    }

    /// The counts so far, for the progress line.
    pub fn progress(&self) -> Vec<SourceProgress> {
        self.infos
            .iter()
            .zip(&self.tracker.sources)
            .map(|(info, c)| {
                let outside: u64 = c.outside.values().sum();
                SourceProgress {
                    name: info.source.name().to_string(),
                    counted: c.samples - outside,
                    outside,
                    lost: c.lost,
                }
            })
            .collect()
    }
}

/// The sampler of `source` on `targets` for the options `opts` (`kernel`: kernel samples too; `sideband`: it
/// carries the side-band records).
fn builder_for(
    source: ProfileSource,
    targets: Targets<'_>,
    opts: &ProfileOptions,
    kernel: bool,
    sideband: bool,
) -> ntprofile::SamplerBuilder {
    let follow = !opts.no_inherit;
    let mut b = Sampler::builder()
        .source(source)
        .kernel(kernel)
        .sideband(sideband)
        .inherit(follow && !matches!(targets, Targets::Global));
    b = match targets {
        Targets::Global => b.global(),
        _ => targets.add_to(b),
    };
    if let Targets::Cgroup(_) = targets {
        // Processor-wide events: nothing to inherit (a child created in the cgroup is in it).
        b = b.inherit(false);
    }
    if let Some(interval) = opts.interval_for(source) {
        b = b.interval(interval);
    }
    if let Some(list) = &opts.cpus {
        b = b.cpus(list.0.iter().copied());
    }
    match opts.call_graph() {
        None => b,
        // The kernel's limit (perf_event_max_stack) caps it.
        Some(CallGraph::Fp) => b.callchain(u16::MAX),
        // The user stack is unwound here; the kernel's part of a stack only the kernel can walk.
        Some(CallGraph::Dwarf(bytes)) => {
            let b = b.user_stack(bytes);
            if kernel { b.callchain(u16::MAX) } else { b }
        }
    }
}

/// A model for a run of `opts` (`read_unknown`: a process first seen in a sample has its mappings read from
/// `/proc`).
fn tracker_for(opts: &ProfileOptions, sources: usize, read_unknown: bool) -> Tracker {
    let filter = Filter {
        modules: opts.modules.clone(),
        ranges_only: !opts.ranges.is_empty(),
        ..Filter::default()
    };
    let mut t = Tracker::new(
        sources,
        !opts.no_inherit,
        read_unknown,
        opts.bucket.unwrap_or(0),
        filter,
    );
    t.call_graph = opts.call_graph();
    for r in &opts.ranges {
        let name = format!("range:{:#x}-{:#x}", r.start, r.end);
        t.add_fixed(
            &name,
            "[range]",
            crate::tree::space::ModuleKind::Range,
            r.start,
            r.end,
        );
    }
    t
}
