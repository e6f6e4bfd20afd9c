//! The processor-wide filtered layout of a pass (`EventMode::CpuFiltered`): one event per processor for every task,
//! only the target's samples counted.

use super::{Opened, Pass};
use crate::affinity::CpuSet;
use crate::engine::dispatch::TaskFilter;
use crate::engine::mode::Plan;
use crate::perf::event::EventParams;
use crate::perf::sys::Tid;
use crate::status::NtStatus;
use crate::target::Target;

/// Open processor-wide filtered events of `target` on `cpus`: one event per processor for every task, its ring
/// tagged with the target's process id and the threads to leave out (`skip`: the library's own), so that the
/// consumer counts only the target's samples. No thread list is walked and no pass can be spoiled by a thread
/// created meanwhile: every task of the processors is observed from the moment the events are enabled, the
/// target's threads created later among them.
pub(super) fn open_filtered(
    params: &mut EventParams,
    target: &Target,
    cpus: &CpuSet,
    skip: &[Tid],
    plan: Plan,
) -> Result<Opened, NtStatus> {
    params.sample_tid = true;
    // A per-processor event has no task to inherit from.
    params.inherit_threads = false;
    if target.has_exited() {
        return Ok(Opened::nothing());
    }
    let filter = TaskFilter::new(target.pid(), skip);
    let mut pass = Pass::new(&mut *params, cpus, target, plan);
    pass.filter = Some(filter);
    if let Err(status) = pass.observe(Tid::ALL_TASKS) {
        return Err(pass.failed(status));
    }
    if target.has_exited() {
        return Ok(Opened::nothing());
    }
    let mut opened = pass.finish();
    // No thread has events of its own.
    opened.tids.clear();
    Ok(opened)
}
