//! **Unstable, for benchmarks only**: feed recorded perf ring contents through the consumer's hot path
//! (decode → match → increment) outside the consumer thread, so that its cost per sample can be measured in
//! nanoseconds (criterion) and in instructions (callgrind) without the wake-ups, the kernel and the machine's load.
//! Hidden from the documentation; it may change or go away in any release.
//!
//! The replay runs exactly the code the consumer thread runs on a pass (the stream's drain over its rings, the
//! range index, the bucket arithmetic, the atomic increments, the statistics), on a ring in anonymous memory laid
//! out like a kernel ring.

use std::os::fd::AsFd;
use std::sync::Arc;

use nix::errno::Errno;

use super::counters::{CounterStorage, Counts, ProfileStats};
use super::dispatch::ReplayStream;
use crate::affinity::CpuSet;
use crate::buckets::check_layout;
use crate::perf::event::{self, EventParams};
use crate::perf::ring::{Ring, SampleLayout, page_size};
use crate::source::ProfileSource;
use crate::status::NtStatus;

/// `PERF_RECORD_SAMPLE`.
const RECORD_SAMPLE: u64 = 9;
/// `PERF_RECORD_MISC_USER`.
const MISC_USER: u64 = 2;

/// Ring contents: whole records in the kernel's format (IP-only samples, as the consumer's streams for user
/// ranges record them).
#[derive(Clone, Debug, Default)]
pub struct Recording {
    bytes: Vec<u8>,
}

impl Recording {
    /// Record the calling thread's ring while `work` runs: a `cpu-clock` event sampling every `period_ns`
    /// nanoseconds of the thread's CPU time (user mode only), mapped with `data_pages` data pages (a power of
    /// two; samples past the ring's size are lost, not recorded).
    ///
    /// # Errors
    /// The errno of `sched_getcpu(3)` or `sched_setaffinity(2)` (the thread is held on its CPU while recorded),
    /// of `perf_event_open(2)`, `mmap(2)` or the enabling ioctl; `ENOENT` when `ProfileTime` has no perf event.
    pub fn record(
        period_ns: u64,
        data_pages: usize,
        work: impl FnOnce(),
    ) -> Result<Recording, Errno> {
        let params = EventParams {
            spec: ProfileSource::Time.perf_event().ok_or(Errno::ENOENT)?,
            period: period_ns,
            exclude_kernel: true,
            sample_tid: false,
            sample_cpu: false,
            inherit_threads: false,
            wakeup_watermark: data_pages * page_size(),
            precise_ip: 0,
            user_ip: false,
            read_lost: false,
        };
        // One ring, as the consumer has per CPU: the thread stays on the CPU it runs on while it is recorded.
        use nix::sched::{CpuSet as NixCpuSet, sched_getaffinity, sched_getcpu, sched_setaffinity};
        use nix::unistd::Pid;
        let cpu = sched_getcpu()?;
        let old = sched_getaffinity(Pid::from_raw(0))?;
        let mut one = NixCpuSet::new();
        one.set(cpu)?;
        sched_setaffinity(Pid::from_raw(0), &one)?;
        let result = (|| -> Result<Recording, Errno> {
            let fd = event::open(&params, crate::perf::sys::gettid(), cpu)?;
            let ring = Ring::map(fd.as_fd(), data_pages, SampleLayout::default())?;
            event::enable(fd.as_fd())?;
            work();
            event::disable(fd.as_fd())?;
            Ok(Recording {
                bytes: ring.copy_out(),
            })
        })();
        let _ = sched_setaffinity(Pid::from_raw(0), &old);
        result
    }

    /// Ring contents made of one sample record per IP (header, IP), as the kernel writes them.
    pub fn from_ips(ips: &[u64]) -> Recording {
        let mut bytes = Vec::with_capacity(ips.len() * 16);
        for &ip in ips {
            let header = RECORD_SAMPLE | (MISC_USER << 32) | (16u64 << 48);
            bytes.extend_from_slice(&header.to_ne_bytes());
            bytes.extend_from_slice(&ip.to_ne_bytes());
        }
        Recording { bytes }
    }

    /// The sampled IPs, in order.
    pub fn ips(&self) -> Vec<u64> {
        let mut ips = Vec::new();
        let mut pos = 0;
        while pos + 16 <= self.bytes.len() {
            let w =
                |at: usize| u64::from_ne_bytes(self.bytes[at..at + 8].try_into().expect("8 bytes"));
            let header = w(pos);
            let size = (header >> 48) as usize;
            if size < 8 {
                break;
            }
            if header as u32 as u64 == RECORD_SAMPLE {
                ips.push(w(pos + 8));
            }
            pos += size;
        }
        ips
    }

    /// Bytes of ring contents.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

/// A profile to start on the replayed stream: `[base, base + size)` in `2^bucket_size`-byte buckets.
#[derive(Clone, Copy, Debug)]
pub struct Range {
    /// `ProfileBase`.
    pub base: u64,
    /// `ProfileSize`.
    pub size: u64,
    /// `BucketSize` (log2 of the bucket's bytes, 2..=31).
    pub bucket_size: u32,
}

/// A stream with started profiles and a ring holding a recording, drained again and again.
pub struct Replay {
    stream: ReplayStream,
    len: u64,
    profiles: Vec<Arc<Counts>>,
}

impl Replay {
    /// Start one profile per range (counting on CPU 0, the ring's CPU) on a stream whose ring holds `rec`.
    ///
    /// # Errors
    /// The status of an invalid range; `STATUS_INSUFFICIENT_RESOURCES` when the ring cannot be mapped.
    pub fn new(rec: &Recording, ranges: &[Range]) -> Result<Replay, NtStatus> {
        let page = page_size();
        let pages = rec.len().div_ceil(page).max(1).next_power_of_two();
        let mut ring = Ring::anonymous(pages, SampleLayout::default())
            .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
        ring.load(&rec.bytes);
        let cpus = CpuSet::from_cpus([0]);
        let mut profiles = Vec::with_capacity(ranges.len());
        let mut started = Vec::with_capacity(ranges.len());
        for r in ranges {
            let counters = crate::buckets::counters_needed(r.size, r.bucket_size);
            let buffer =
                u32::try_from(counters.max(1) * 4).map_err(|_| NtStatus::INVALID_PARAMETER)?;
            let layout = check_layout(r.base, r.size, r.bucket_size, buffer)?;
            let storage = CounterStorage::Owned(
                (0..counters.max(1))
                    .map(|_| std::sync::atomic::AtomicU32::new(0))
                    .collect(),
            );
            let core = Arc::new(Counts::new(layout, storage));
            started.push((core.clone(), cpus.clone()));
            profiles.push(core);
        }
        Ok(Replay {
            stream: ReplayStream::new(vec![(0, ring)], &started),
            len: rec.len() as u64,
            profiles,
        })
    }

    /// Make the recording readable again and drain it through decode → match → increment; returns the records
    /// read.
    pub fn run(&mut self) -> u64 {
        for r in self.stream.rings_mut() {
            r.rewind(self.len);
        }
        self.stream.drain()
    }

    /// The statistics of each profile so far.
    pub fn stats(&self) -> Vec<ProfileStats> {
        self.profiles.iter().map(|p| p.stats.read()).collect()
    }

    /// The counters of profile `i`.
    pub fn counts(&self, i: usize) -> Vec<u32> {
        self.profiles[i].storage.snapshot().unwrap_or_default()
    }
}
