//! Dispatch, the hot path: a stream's rings drained to empty, each sample matched through the range index to
//! the started profiles it falls in and counted into their buckets, the statistics published. The consumer
//! thread runs it on every pass, and the unstable replay entry point runs the same code on recorded rings.

use std::os::fd::RawFd;
use std::sync::Arc;

use super::cadence::Fill;
use super::counters::{CounterBuf, Counts, ProfileStats, StreamId};
use super::follow::{Gap, Notes, TaskNote};
use super::index::RangeIndex;
use crate::affinity::CpuSet;
use crate::buckets::BucketLayout;
use crate::perf::ring::{Record, Ring};

/// One CPU's (or one thread's) mapped ring of a stream, handed to the consumer, which reads and finally unmaps it.
pub(crate) struct CpuRing {
    /// The ring's processor; `None` for a per-thread ring, whose samples carry their processor.
    pub cpu: Option<usize>,
    pub ring: Ring,
    /// The descriptor that owns the ring, for epoll (owned by the API side until `RemoveStream` is acked).
    pub fd: RawFd,
    /// The sampling events that write into the ring, opened with `PERF_FORMAT_LOST` (none: a kernel before
    /// 6.0): each counts the records it and its inherited copies could not write, which holds even when the
    /// ring stayed full until its writers stopped and no Lost record could follow (the kernel writes a Lost
    /// record only before the next record it manages to write). One per ring in the per-thread and
    /// processor-wide layouts; every thread's event of the ring's processor in the (thread × processor) one.
    pub lost_fds: Vec<RawFd>,
    /// The drops the ring's Lost records reported, and the drops counted into the profiles so far (the larger
    /// of that and the event's count: both count the same drops, the records late or never).
    pub lost_records: u64,
    pub lost_counted: u64,
    /// Throttle and Unthrottle records read, and the throttle episodes counted into the profiles so far. An
    /// episode writes one of each (the Unthrottle at the next tick), and either may be dropped by a full ring:
    /// the episodes are at least the larger of the two counts (the records of several events interleave in a
    /// ring, so their order tells no more), and each is counted by the time its second record is read.
    pub throttles: u64,
    pub unthrottles: u64,
    pub throttled_counted: u64,
    /// Bytes the previous drain consumed from the ring: with this drain's, they bound how far the kernel may
    /// have written since the tail it last saw (see `may_have_dropped`).
    pub drained_before: u64,
    /// A processor-wide ring of a process's stream (`EventMode::CpuFiltered`): only that process's samples
    /// count; the others are read and dropped, seen by no profile.
    pub filter: Option<TaskFilter>,
    /// The ring is about to be dropped (its thread exited): the next drain reads its events' lost counts.
    pub settle: bool,
    /// A per-thread ring, which also holds its thread's task records (fork, exit): its Lost records count those
    /// too, so its lost samples are its sampling event's own count alone.
    pub samples_lost_from_event: bool,
    /// The count of the events that write into the ring, as the last read of their lost counts found it (`None`:
    /// not read yet), for what a per-thread stream's threads ran unobserved (`follow::Gap`).
    pub events: Option<u64>,
}

/// The task a processor-wide filtered ring's samples must come from: its process id, less the library's own
/// threads in it.
#[derive(Clone, Debug)]
pub(crate) struct TaskFilter {
    pid: u32,
    skip: Arc<[u32]>,
}

impl TaskFilter {
    /// Samples of process `pid` only, none of the threads `skip`.
    pub(crate) fn new(pid: i32, skip: &[crate::perf::sys::Tid]) -> TaskFilter {
        TaskFilter {
            pid: pid as u32,
            skip: skip.iter().map(|t| t.0 as u32).collect(),
        }
    }

    /// True for a sample of another task.
    #[inline]
    fn rejects(&self, pid: u32, tid: u32) -> bool {
        pid != self.pid || self.skip.contains(&tid)
    }
}

impl CpuRing {
    /// A ring as the stream opened it: nothing read yet.
    pub(crate) fn new(cpu: Option<usize>, ring: Ring, fd: RawFd, lost_fds: Vec<RawFd>) -> CpuRing {
        CpuRing {
            cpu,
            ring,
            fd,
            lost_fds,
            lost_records: 0,
            lost_counted: 0,
            throttles: 0,
            unthrottles: 0,
            throttled_counted: 0,
            drained_before: 0,
            filter: None,
            settle: false,
            samples_lost_from_event: false,
            events: None,
        }
    }

    /// The count of the ring's sampling event: as the last read of its lost count found it (every drain that
    /// settles the statistics reads it), or read now (an event without `PERF_FORMAT_LOST`); 0 when the read fails.
    pub(crate) fn sampled(&self) -> u64 {
        self.events
            .unwrap_or_else(|| crate::perf::sys::read_count(self.fd).unwrap_or(0))
    }
}

/// Whether the kernel may have dropped records into a ring since its previous drain, so that its event's lost
/// count must be read. The kernel drops a record only when the ring holds no room for it above the tail it last
/// saw, which is the tail stored by the previous drain (or by the one before, for a drop that came while the
/// previous drain was running). The bytes between that tail and the head this drain read are the bytes the two
/// drains consumed (`drained_before + drained`): a drop since means they reach the ring's size, less one record.
/// A ring that looked nearly full before the drain, or a Lost record read, say so too. (Testing only the fill
/// before the drain missed every drop made while a drain ran when the ring's writers then stopped: no Lost record
/// followed, and the next drain found the ring empty.)
fn may_have_dropped(
    drained_before: u64,
    drained: u64,
    nearly_full: bool,
    lost: u64,
    size: u64,
) -> bool {
    nearly_full || lost > 0 || drained_before + drained + NEARLY_FULL_SLACK >= size
}

/// A ring with less free space than this may have dropped records since it was last drained (the largest
/// record of the engine's streams and a Lost record fit in it).
const NEARLY_FULL_SLACK: u64 = 256;

/// A started profile as the consumer sees it.
pub(super) struct Active {
    pub(super) counts: Arc<Counts>,
    layout: BucketLayout,
    buf: CounterBuf,
    cpus: CpuSet,
    /// Not yet published to `counts.stats`: samples matched, samples seen on its CPUs, lost, throttled.
    pending: ProfileStats,
    seen: u64,
}

/// The consumer's side of a stream: its rings, and the started profiles its samples are dispatched to.
pub(super) struct StreamDispatch {
    pub(super) id: StreamId,
    pub(super) rings: Vec<CpuRing>,
    pub(super) active: Vec<Active>,
    index: RangeIndex,
    /// The started profiles changed since the index was built: rebuild it before matching the next sample.
    stale: bool,
    /// The fullest ring seen by the drains since the consumer last took it (`take_fill`).
    pub(super) fill: Fill,
    /// Samples of a per-thread ring by processor during one ring's drain (sized when rings are added, so the
    /// hot path never allocates); the last slot takes samples of a processor beyond the others.
    pub(super) cpu_seen: Vec<u64>,
    /// A per-thread stream: where its rings' fork and exit records go, and what its threads ran unobserved.
    pub(super) notes: Option<Notes>,
    pub(super) gap: Option<Gap>,
}

impl Active {
    /// A profile started on `cpus`, counting into `counts`.
    pub(super) fn new(counts: Arc<Counts>, cpus: CpuSet) -> Active {
        let layout = counts.layout;
        let buf = counts.storage.buf();
        Active {
            counts,
            layout,
            buf,
            cpus,
            pending: ProfileStats::default(),
            seen: 0,
        }
    }
}

impl Active {
    /// The KPROFILE rule for one sample: on a processor of the affinity and inside the range, its bucket
    /// counts it.
    #[inline]
    fn count(&mut self, ip: u64, cpu: usize) {
        if self.cpus.contains(cpu)
            && let Some(i) = self.layout.index(ip)
        {
            self.buf.increment(i);
            self.pending.counted += 1;
        }
    }
}

impl StreamDispatch {
    /// A stream with no ring and no started profile yet.
    pub(super) fn new(id: StreamId) -> StreamDispatch {
        StreamDispatch {
            id,
            rings: Vec::new(),
            active: Vec::new(),
            index: RangeIndex::default(),
            stale: false,
            fill: Fill::default(),
            cpu_seen: Vec::new(),
            notes: None,
            gap: None,
        }
    }

    /// Make room for the processors of per-thread rings' samples (`cpus`: the highest processor number + 1).
    pub(super) fn size_cpu_counts(&mut self, cpus: usize) {
        if self.cpu_seen.len() < cpus + 1 {
            self.cpu_seen.resize(cpus + 1, 0);
        }
    }

    /// The set of started profiles changed. The index is rebuilt lazily, before the next sample is matched:
    /// a burst of starts or stops with no sample in between costs one rebuild, not one per call.
    pub(super) fn rebuild_index(&mut self) {
        self.stale = true;
    }

    /// Drain every ring of the stream to empty and publish the statistics; returns the records read. The hot
    /// path.
    pub(super) fn drain(&mut self) -> u64 {
        self.drain_with(false)
    }

    /// [`drain`](Self::drain), and read the lost counts of every ring's events whatever its fill: for the
    /// drains that settle the statistics (a start, a stop, a live read, rings retired or removed). A ring still
    /// full when its writers stopped gets no Lost record for its last drops, and a per-thread ring whose kernel
    /// head stalled (see docs/limits.md) shows no data and no Lost record, yet the events keep counting the
    /// records they drop; only this read finds them.
    pub(super) fn drain_exact(&mut self) -> u64 {
        self.drain_with(true)
    }

    fn drain_with(&mut self, exact: bool) -> u64 {
        // An exact drain with a stale index (a start or stop right after another) matches its few samples
        // against every started profile instead of rebuilding: the set changes again right after it, and a
        // rebuild per call made N starts cost O(N² log N). The consumer's own drains rebuild, once per change
        // of the set that has samples to match. Never match with a stale index (its slots would not match
        // `active`).
        let scan = self.stale && exact;
        if self.stale && !exact {
            if !self.rings.iter().any(|r| r.ring.has_data() || r.settle) {
                // Nothing to match: keep the rebuild for later.
                return 0;
            }
            let ranges: Vec<(u64, u64)> = self
                .active
                .iter()
                .map(|a| (a.layout.base, a.layout.end()))
                .collect();
            self.index = RangeIndex::build(&ranges);
            self.stale = false;
        }
        let StreamDispatch {
            id,
            rings,
            active,
            index,
            fill,
            cpu_seen,
            notes,
            gap,
            ..
        } = self;
        let (stream, notes) = (*id, notes.as_ref());
        let mut records = 0;
        let spill = cpu_seen.len().saturating_sub(1);
        for r in rings.iter_mut() {
            let (bytes, ring_bytes) = r.ring.fill();
            *fill = fill.max(Fill { bytes, ring_bytes });
            let nearly_full = bytes + NEARLY_FULL_SLACK >= ring_bytes;
            let ring_cpu = r.cpu;
            let (mut samples, mut lost, mut throttles, mut unthrottles) = (0u64, 0u64, 0u64, 0u64);
            let tail = r.ring.consumed();
            let filter = r.filter.as_ref();
            records += r.ring.drain(|rec| match rec {
                // Another task's sample on a processor-wide filtered ring: no profile of the stream saw it.
                Record::Sample { pid, tid, .. } if filter.is_some_and(|f| f.rejects(pid, tid)) => {}
                Record::Sample { ip, cpu, .. } => {
                    samples += 1;
                    let cpu = match ring_cpu {
                        Some(c) => c,
                        None => {
                            let c = cpu as usize;
                            if let Some(n) = cpu_seen.get_mut(c.min(spill)) {
                                *n += 1;
                            }
                            c
                        }
                    };
                    if scan {
                        for a in active.iter_mut() {
                            a.count(ip, cpu);
                        }
                    } else {
                        for &slot in index.lookup(ip) {
                            active[slot as usize].count(ip, cpu);
                        }
                    }
                }
                Record::Lost(n) => lost += n,
                Record::Throttle => throttles += 1,
                Record::Unthrottle => unthrottles += 1,
                Record::Fork { pid, tid } => {
                    if let Some(n) = notes {
                        n.send(TaskNote::Born { stream, pid, tid });
                    }
                }
                Record::Exit { tid, .. } => {
                    if let Some(n) = notes {
                        n.send(TaskNote::Died { stream, tid });
                    }
                }
                Record::Other => {}
            });
            r.throttles += throttles;
            r.unthrottles += unthrottles;
            let episodes = r.throttles.max(r.unthrottles);
            let throttled = episodes - r.throttled_counted;
            r.throttled_counted = episodes;
            let drained = r.ring.consumed().wrapping_sub(tail);
            let dropped =
                may_have_dropped(r.drained_before, drained, nearly_full, lost, ring_bytes);
            r.drained_before = drained;
            if lost > 0
                && let Some(n) = notes
            {
                // A fork or exit record may be among the drops: the helper scans the thread list.
                n.rescan();
            }
            if !r.lost_fds.is_empty() {
                r.lost_records += lost;
                let mut total = if r.samples_lost_from_event {
                    r.lost_counted
                } else {
                    r.lost_records
                };
                if dropped || exact || r.settle {
                    // Every event that writes into the ring counts its own drops (an event whose read fails
                    // adds nothing: the Lost records still bound the total from below).
                    let (events, counted) = r
                        .lost_fds
                        .iter()
                        .filter_map(|&fd| crate::perf::sys::read_count_and_lost(fd).ok())
                        .fold((0, 0), |(e, l), (count, lost)| (e + count, l + lost));
                    r.events = Some(events);
                    total = total.max(counted);
                }
                lost = total.saturating_sub(r.lost_counted);
                r.lost_counted = r.lost_counted.max(total);
            }
            if samples | lost | throttled == 0 {
                continue;
            }
            match ring_cpu {
                Some(cpu) => {
                    for a in active.iter_mut().filter(|a| a.cpus.contains(cpu)) {
                        a.seen += samples;
                        a.pending.lost += lost;
                        a.pending.throttled += throttled;
                    }
                }
                // A per-thread ring: each profile saw the samples of its processors; a lost or throttle
                // record names no processor, so every profile of the stream is told of it.
                None => {
                    for a in active.iter_mut() {
                        a.seen += cpu_seen[..spill]
                            .iter()
                            .enumerate()
                            .filter(|&(c, &n)| n != 0 && a.cpus.contains(c))
                            .map(|(_, &n)| n)
                            .sum::<u64>();
                        a.seen += cpu_seen.get(spill).copied().unwrap_or(0);
                        a.pending.lost += lost;
                        a.pending.throttled += throttled;
                    }
                    cpu_seen.iter_mut().for_each(|n| *n = 0);
                }
            }
        }
        // What threads created later ran before their sampling events were opened: samples never taken, lost for
        // every profile of the stream (they name no processor).
        if exact && let Some(g) = gap.as_mut() {
            let missed = g.settle(rings.iter().map(|r| r.sampled()));
            for a in active.iter_mut() {
                a.pending.lost += missed;
            }
        }
        for a in active.iter_mut() {
            if a.seen | a.pending.lost | a.pending.throttled != 0 {
                a.pending.outside = a.seen - a.pending.counted;
                a.counts.stats.add(&a.pending);
                a.pending = ProfileStats::default();
                a.seen = 0;
            }
        }
        records
    }
}

/// A stream drained outside the consumer thread, by the same code: the engine of the unstable replay entry
/// point (`engine::replay`), which feeds recorded ring contents through decode → match → increment.
pub(crate) struct ReplayStream(StreamDispatch);

impl ReplayStream {
    /// A stream of `rings` (CPU, ring) with `profiles` started on it (each counting on the given CPUs).
    pub(crate) fn new(
        rings: Vec<(usize, Ring)>,
        profiles: &[(Arc<Counts>, CpuSet)],
    ) -> ReplayStream {
        let mut s = StreamDispatch::new(StreamId(0));
        s.rings = rings
            .into_iter()
            .map(|(cpu, ring)| CpuRing::new(Some(cpu), ring, -1, Vec::new()))
            .collect();
        for (counts, cpus) in profiles {
            s.active.push(Active::new(counts.clone(), cpus.clone()));
        }
        s.rebuild_index();
        ReplayStream(s)
    }

    /// Drain every ring, as the consumer's pass does; returns the records read.
    pub(crate) fn drain(&mut self) -> u64 {
        self.0.drain()
    }

    /// The stream's rings, to rewind them.
    pub(crate) fn rings_mut(&mut self) -> impl Iterator<Item = &mut Ring> {
        self.0.rings.iter_mut().map(|r| &mut r.ring)
    }
}

#[cfg(test)]
mod tests;
