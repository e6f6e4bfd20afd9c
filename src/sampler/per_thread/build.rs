//! Building a `per-thread` sampler: its wait set (the targets' pidfds; the rings are added as threads are
//! opened), its events, and the followed processes.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use super::PerThread;
use crate::affinity::{CpuSet, online_cpus};
use crate::api::Process;
use crate::engine::ThreadsPin;
use crate::engine::mode::EventMode;
use crate::error::Error;
use crate::perf::ring::{Ring, page_size};
use crate::perf::sampler_event::{self, SamplerEventParams};
use crate::perf::sys::Tid;
use crate::sampler::follow::Follow;
use crate::sampler::open::{Target, shortage, watermark_for};
use crate::sampler::wait::WaitSet;
use crate::sampler::{Sampler, SamplerWaker};
use crate::source::ProfileSource;

/// What a sampler keeps of its build beside its events.
pub(in crate::sampler) struct Built {
    pub(in crate::sampler) interval: u32,
    pub(in crate::sampler) source: ProfileSource,
    pub(in crate::sampler) me: u32,
    pub(in crate::sampler) pin: Option<ThreadsPin>,
    pub(in crate::sampler) cpus: CpuSet,
    pub(in crate::sampler) inherit: bool,
    pub(in crate::sampler) sideband: bool,
    pub(in crate::sampler) wakeup: Option<usize>,
}

/// A `per-thread` sampler: per thread of the targets one event with a ring of `pages` data pages, the tree
/// followed from the fork records (see `per_thread`).
pub(in crate::sampler) fn build(
    b: Built,
    params: SamplerEventParams,
    pages: usize,
    targets: Vec<Target>,
    own: &[Tid],
) -> Result<Sampler, Error> {
    let params = SamplerEventParams {
        wakeup_watermark: b
            .wakeup
            .map_or_else(|| watermark_for(pages), |w| w.min(pages * page_size())),
        ..params
    };
    let processes: Vec<Process> = targets
        .iter()
        .filter_map(|t| match t {
            Target::Process(p) => Some(p.clone()),
            Target::Current => None,
        })
        .collect();
    let exits: Vec<RawFd> = processes.iter().map(|p| p.pidfd().as_raw_fd()).collect();
    let waits = WaitSet::new(Vec::new(), false, &exits)
        .map_err(|e| shortage(e, "the epoll set of the sampler's events"))?
        .with_cap(super::FOLLOW_WAIT);
    let online = online_cpus();
    let filter = (b.cpus != online).then_some(b.cpus);
    let (pt, rings) = PerThread::open(params, pages, filter, &targets, b.me, own, &waits)?;
    let format = sampler_event::format_of(&params);
    let current = targets.iter().any(|t| matches!(t, Target::Current));
    let own: Vec<u32> = own.iter().map(|t| t.0 as u32).collect();
    let follow = Follow::new(
        &processes,
        current.then_some(b.me),
        &own,
        b.inherit,
        b.sideband,
        format,
    );
    Ok(Sampler {
        fds: Vec::new(),
        rings,
        waits: SamplerWaker(Arc::new(waits)),
        pages,
        mode: EventMode::PerThread,
        follow: Some(follow),
        events_count_lost: pt.read_lost(),
        no_loss_free: crate::sampler::lost::no_loss_free_bytes(&params),
        per_thread: Some(pt),
        scratch: vec![0u64; Ring::MAX_RECORD_WORDS].into_boxed_slice(),
        format,
        watermark: params.wakeup_watermark as u64,
        stats: Default::default(),
        interval: b.interval,
        source: b.source,
        owner: b.me,
        _processes: processes,
        pin: b.pin,
    })
}
