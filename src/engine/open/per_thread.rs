//! The per-thread layout of a pass: for each thread, a `dummy` event that owns a small ring, and the sampling
//! event (`inherit`, any processor) redirected into it. Threads created later inherit the sampling event, and
//! their copies write into the ring of the event they inherited from (the kernel sends an inherited event's
//! records to its parent's ring), so they are observed exactly once, as in the (thread × processor) layout.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;

use super::{CpuRing, Pass, map_ring, watermark_for};
use crate::perf::event;
use crate::perf::ring::Ring;
use crate::perf::sys::Tid;
use crate::status::NtStatus;

impl Pass<'_> {
    /// Open thread `tid`'s ring owner and sampling event, map the ring and redirect the event into it. A thread
    /// that exits meanwhile is skipped (nothing of it is kept).
    pub(super) fn observe_per_thread(&mut self, tid: Tid) -> Result<(), NtStatus> {
        let Some((ring, owner)) = self.map_thread_ring(tid)? else {
            return Ok(());
        };
        let Some(fd) = self.open_event(tid, None)? else {
            return Ok(());
        };
        match event::set_output(fd.as_fd(), owner.as_fd()) {
            Ok(()) => {}
            // The thread exited between the two opens: its events are dead.
            Err(Errno::ESRCH | Errno::ENOENT) => return Ok(()),
            Err(errno) => return Err(NtStatus::from(errno)),
        }
        self.ring_bytes += ring.map_len();
        let lost_fds = self.lost_fds(&fd);
        self.rings
            .push(CpuRing::new(None, ring, owner.as_raw_fd(), lost_fds));
        self.fds.push(owner);
        self.fds.push(fd);
        self.tids.push(tid);
        Ok(())
    }

    /// The thread's ring owner and its ring of the plan's size, or smaller when locked memory is short (the
    /// owner is then opened again with a watermark of a quarter of the ring that could be mapped: the kernel
    /// caps a watermark at the ring's size, and a ring that wakes the consumer only when full loses samples).
    /// `None`: the thread exited meanwhile.
    fn map_thread_ring(&mut self, tid: Tid) -> Result<Option<(Ring, OwnedFd)>, NtStatus> {
        let mut pages = self.plan.pages.max(1);
        loop {
            let owner = match open_owner(tid, watermark_for(pages), &mut self.raised_nofile) {
                Ok(Some(fd)) => fd,
                Ok(None) => return Ok(None),
                Err(Errno::EACCES | Errno::EPERM) if self.other_process => {
                    return Err(NtStatus::ACCESS_DENIED);
                }
                Err(errno) if self.target.has_exited() && errno != Errno::EMFILE => {
                    return Ok(None);
                }
                Err(errno) => return Err(NtStatus::from(errno)),
            };
            let (ring, got) = map_ring(&owner, self.layout, pages)?;
            if got == pages {
                return Ok(Some((ring, owner)));
            }
            pages = got;
        }
    }
}

/// Open a ring owner, trying again on EINTR and once more after raising the soft descriptor limit on EMFILE;
/// `None` when the thread is gone (ESRCH).
fn open_owner(tid: Tid, watermark: usize, raised: &mut bool) -> Result<Option<OwnedFd>, Errno> {
    let mut interrupted = 0;
    loop {
        match event::open_ring_owner(tid, watermark) {
            Ok(fd) => return Ok(Some(fd)),
            Err(Errno::ESRCH) => return Ok(None),
            Err(Errno::EINTR) if interrupted < 3 => interrupted += 1,
            Err(Errno::EMFILE) if !*raised && crate::perf::sys::raise_nofile_limit() => {
                *raised = true;
            }
            Err(errno) => return Err(errno),
        }
    }
}
