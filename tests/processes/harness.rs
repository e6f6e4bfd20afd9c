//! Calling the exports as a C program does: constants, the serial lock with the interval, process handles,
//! profiles over caller-owned counter buffers.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// Constants and small helpers.
// ---------------------------------------------------------------------------------------------------------

/// `HANDLE`.
pub(crate) type Handle = *mut c_void;

pub(crate) use crate::common::current_process;

/// `ProfileTime`.
pub(crate) const PROFILE_TIME: u32 = 0;
/// `PROCESS_QUERY_INFORMATION`.
pub(crate) const PROCESS_QUERY_INFORMATION: u32 = 0x0400;
/// ProfileTime's default interval (1 ms), restored after every test.
pub(crate) const DEFAULT_INTERVAL: u32 = 10_000;
/// The interval the sampling tests use: 100 µs.
pub(crate) const TEST_INTERVAL: u32 = 1_000;
/// The text segment address `spin` is linked at.
pub(crate) const SPIN_TEXT: u64 = 0x2d5a_0000;
/// The kernel half of the x86-64 address space, as a profile range.
pub(crate) const KERNEL_BASE: u64 = 0xFFFF_8000_0000_0000;
pub(crate) const KERNEL_SIZE: u64 = (1u64 << 47) - 1;
/// The environment variable naming a helper mode of this binary.
pub(crate) const HELPER_ENV: &str = "NTPROFILE_PROCESSES_HELPER";

pub(crate) fn status(raw: i32) -> NtStatus {
    NtStatus(raw)
}

/// Print a measured figure (visible with `--nocapture`).
pub(crate) fn note(text: impl AsRef<str>) {
    println!("[processes] {}", text.as_ref());
}

// ---------------------------------------------------------------------------------------------------------
// Serialization and the interval.
// ---------------------------------------------------------------------------------------------------------

/// The serial lock plus ProfileTime's interval for the test; dropping it restores the default interval first,
/// then releases the lock.
pub(crate) struct Serial {
    pub(crate) _lock: MutexGuard<'static, ()>,
}

impl Serial {
    pub(crate) fn with_interval(interval: u32) -> Serial {
        // Every test holds it: they sample, change the process-wide interval or fork.
        let lock = crate::common::serial();
        assert_eq!(
            status(NtSetIntervalProfile(interval, PROFILE_TIME)),
            NtStatus::SUCCESS
        );
        Serial { _lock: lock }
    }

    /// The effective sample period in nanoseconds (the interval after the run-time clamp).
    pub(crate) fn period_ns(&self) -> f64 {
        let mut interval = 0u32;
        assert_eq!(
            status(NtQueryIntervalProfile(PROFILE_TIME, &mut interval)),
            NtStatus::SUCCESS
        );
        assert!(interval > 0, "ProfileTime must be supported here");
        f64::from(interval) * 100.0
    }
}

impl Drop for Serial {
    fn drop(&mut self) {
        NtSetIntervalProfile(DEFAULT_INTERVAL, PROFILE_TIME);
    }
}

// ---------------------------------------------------------------------------------------------------------
// Profiles and process handles through the exports.
// ---------------------------------------------------------------------------------------------------------

/// `CLIENT_ID`.
#[repr(C)]
pub(crate) struct ClientId {
    pub(crate) unique_process: usize,
    pub(crate) unique_thread: usize,
}

/// `GROUP_AFFINITY`.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct GroupAffinity {
    pub(crate) mask: usize,
    pub(crate) group: u16,
    pub(crate) reserved: [u16; 3],
}

impl GroupAffinity {
    pub(crate) fn new(mask: usize, group: u16) -> GroupAffinity {
        GroupAffinity {
            mask,
            group,
            reserved: [0; 3],
        }
    }

    pub(crate) fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[0..8].copy_from_slice(&(self.mask as u64).to_ne_bytes());
        b[8..10].copy_from_slice(&self.group.to_ne_bytes());
        for (i, r) in self.reserved.iter().enumerate() {
            b[10 + 2 * i..12 + 2 * i].copy_from_slice(&r.to_ne_bytes());
        }
        b
    }
}

/// A process handle from `NtOpenProcess`; closed on drop.
pub(crate) struct ProcessHandle {
    pub(crate) handle: Handle,
    pub(crate) open: bool,
}

impl ProcessHandle {
    pub(crate) fn open(pid: u32) -> Result<ProcessHandle, NtStatus> {
        let mut handle: Handle = std::ptr::null_mut();
        let mut cid = ClientId {
            unique_process: pid as usize,
            unique_thread: 0,
        };
        let s = status(NtOpenProcess(
            &mut handle,
            PROCESS_QUERY_INFORMATION,
            std::ptr::null_mut(),
            (&raw mut cid).cast(),
        ));
        if s != NtStatus::SUCCESS {
            return Err(s);
        }
        assert!(
            !handle.is_null(),
            "NtOpenProcess succeeded with a NULL handle"
        );
        Ok(ProcessHandle { handle, open: true })
    }

    pub(crate) fn close(&mut self) -> NtStatus {
        assert!(self.open, "closed twice");
        self.open = false;
        status(NtClose(self.handle))
    }
}

impl Drop for ProcessHandle {
    fn drop(&mut self) {
        if self.open {
            NtClose(self.handle);
        }
    }
}

/// A profile created through the exports, with the caller-owned counter buffer it writes into. Dropping it
/// closes the handle (which stops the profile) before the buffer is freed.
pub(crate) struct CProfile {
    pub(crate) handle: Handle,
    pub(crate) open: bool,
    pub(crate) base: u64,
    pub(crate) bucket_size: u32,
    pub(crate) counters: Box<[AtomicU32]>,
}

impl CProfile {
    pub(crate) fn buffer(count: usize) -> Box<[AtomicU32]> {
        (0..count).map(|_| AtomicU32::new(0)).collect()
    }

    /// `NtCreateProfile` over `[base, base + size)` with `(KAFFINITY)-1` (every processor).
    pub(crate) fn create(
        process: Handle,
        base: u64,
        size: u64,
        bucket_size: u32,
    ) -> Result<CProfile, NtStatus> {
        let count = size.div_ceil(1u64 << bucket_size).max(1) as usize;
        let counters = CProfile::buffer(count);
        let mut handle: Handle = std::ptr::null_mut();
        let s = status(NtCreateProfile(
            &mut handle,
            process,
            base as usize as *mut c_void,
            size as usize,
            bucket_size,
            counters.as_ptr() as *mut u32,
            (count * 4) as u32,
            PROFILE_TIME,
            usize::MAX,
        ));
        CProfile::made(s, handle, base, bucket_size, counters)
    }

    /// `NtCreateProfileEx` over `[base, base + size)` with `groups.len()` records at `groups` (any address).
    pub(crate) fn create_ex(
        process: Handle,
        base: u64,
        size: u64,
        bucket_size: u32,
        group_count: u16,
        groups: *const c_void,
    ) -> Result<CProfile, NtStatus> {
        let count = size.div_ceil(1u64 << bucket_size).max(1) as usize;
        let counters = CProfile::buffer(count);
        let mut handle: Handle = std::ptr::null_mut();
        let s = status(NtCreateProfileEx(
            &mut handle,
            process,
            base as usize as *mut c_void,
            size as usize,
            bucket_size,
            counters.as_ptr() as *mut u32,
            (count * 4) as u32,
            PROFILE_TIME,
            group_count,
            groups as *mut c_void,
        ));
        CProfile::made(s, handle, base, bucket_size, counters)
    }

    pub(crate) fn made(
        s: NtStatus,
        handle: Handle,
        base: u64,
        bucket_size: u32,
        counters: Box<[AtomicU32]>,
    ) -> Result<CProfile, NtStatus> {
        if s != NtStatus::SUCCESS {
            return Err(s);
        }
        Ok(CProfile {
            handle,
            open: true,
            base,
            bucket_size,
            counters,
        })
    }

    pub(crate) fn start(&self) -> NtStatus {
        status(NtStartProfile(self.handle))
    }

    pub(crate) fn stop(&self) -> NtStatus {
        status(NtStopProfile(self.handle))
    }

    pub(crate) fn close(&mut self) -> NtStatus {
        assert!(self.open, "closed twice");
        self.open = false;
        status(NtClose(self.handle))
    }

    /// `NtprofileQueryStatistics` (while started it first drains the rings, so the counters are current too).
    pub(crate) fn stats(&self) -> ProfileStats {
        let mut stats = ProfileStats::default();
        assert_eq!(
            status(NtprofileQueryStatistics(self.handle, &mut stats)),
            NtStatus::SUCCESS
        );
        stats
    }

    pub(crate) fn counts(&self) -> Vec<u32> {
        self.counters
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }

    /// The sum of the buckets that start inside `[start, stop)`.
    pub(crate) fn count_in(&self, (start, stop): (u64, u64)) -> u64 {
        self.counts()
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let bucket = self.base + ((*i as u64) << self.bucket_size);
                start <= bucket && bucket < stop
            })
            .map(|(_, c)| u64::from(*c))
            .sum()
    }

    pub(crate) fn total(&self) -> u64 {
        self.counts().iter().map(|c| u64::from(*c)).sum()
    }
}

impl Drop for CProfile {
    fn drop(&mut self) {
        if self.open {
            NtClose(self.handle);
        }
    }
}
