//! The system calls the layers above need besides perf events: thread ids, epoll and eventfd for the consumer
//! thread, signal masks, fork handlers, pidfds, the descriptor limit, and reads and writes of this process's
//! own memory that fail with EFAULT instead of faulting.
//!
//! # Safety
//! Each call passes descriptors this module owns (or borrows for the call) and buffers that outlive the call.
//! The two direct memory copies (`write_own_memory_direct`, `read_own_memory_direct`) are `unsafe fn`s whose
//! callers promise that `/proc/self/maps` showed the range mapped with the needed access.
#![allow(unsafe_code)]

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::uio::{RemoteIoVec, process_vm_readv, process_vm_writev};
use nix::unistd::Pid;

/// A kernel thread id (`gettid(2)`; the pid of a single-threaded process).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tid(pub i32);

impl Tid {
    /// `pid = -1` of `perf_event_open(2)`: every task on the event's CPU (a per-CPU event).
    pub const ALL_TASKS: Tid = Tid(-1);
}

impl std::fmt::Display for Tid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

/// The calling thread's kernel thread id.
pub fn gettid() -> Tid {
    Tid(nix::unistd::gettid().as_raw())
}

/// An eventfd used to wake the consumer.
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new non-blocking eventfd.
    pub fn new() -> Result<Waker, Errno> {
        // SAFETY: eventfd has no memory preconditions; a valid result is a fresh descriptor we own.
        let fd =
            Errno::result(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) })?;
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Waker { fd })
    }

    /// Wake the waiter (adds 1 to the counter).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our descriptor. A full counter (EAGAIN) is already a wake-up.
        unsafe {
            libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8);
        }
    }

    /// Reset the counter after a wake-up.
    pub fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64; EAGAIN (nothing pending) is fine.
        unsafe {
            libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8);
        }
    }

    /// The raw descriptor, for registration with epoll.
    pub fn fd_raw(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An epoll instance.
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> Result<Epoll, Errno> {
        // SAFETY: no memory preconditions; a valid result is a fresh descriptor we own.
        let fd = Errno::result(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: `fd` is fresh and owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll { fd })
    }

    /// The epoll descriptor itself (readable while an event is pending: a set of sets can poll it).
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Watch `fd` for input; `token` comes back with its events.
    pub fn add(&self, fd: RawFd, token: u64) -> Result<(), Errno> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a live epoll_event for the call; `fd` is open (owned by the caller's stream).
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        Errno::result(rc).map(drop)
    }

    /// Watch `fd` for input, edge-triggered: each wake-up of `fd` (a perf ring at its watermark, the hang-up of an
    /// event whose task exited) comes back once with `token`, and a hang-up is not reported again at every wait.
    pub fn add_edge(&self, fd: RawFd, token: u64) -> Result<(), Errno> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLET) as u32,
            u64: token,
        };
        // SAFETY: as `add`.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        Errno::result(rc).map(drop)
    }

    /// Stop watching `fd`.
    pub fn remove(&self, fd: RawFd) {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: as `add`; ENOENT/EBADF for an fd already gone is harmless.
        unsafe {
            libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev);
        }
    }

    /// Wait up to `timeout_ms` for events; fills `events`, returns how many (0 on timeout or EINTR).
    pub fn wait(&self, events: &mut [libc::epoll_event], timeout_ms: i32) -> usize {
        // SAFETY: `events` is a live, writable array of `events.len()` epoll_event.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout_ms,
            )
        };
        if n < 0 { 0 } else { n as usize }
    }
}

/// `EPOLLHUP` as the u32 epoll reports.
pub const EPOLLHUP: u32 = libc::EPOLLHUP as u32;

/// An empty epoll event (for event arrays).
pub const EMPTY_EVENT: libc::epoll_event = libc::epoll_event { events: 0, u64: 0 };

/// Register fork handlers (`pthread_atfork(3)`): `prepare` runs before `fork()` in the forking thread,
/// `parent` after it in the parent, `child` in the child.
pub fn register_atfork(
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) -> Result<(), Errno> {
    // SAFETY: the three handlers are plain `extern "C" fn()` items that live for the whole program.
    let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    if rc != 0 {
        Err(Errno::from_raw(rc))
    } else {
        Ok(())
    }
}

/// How many times this process's ancestry forked since the library started watching (`watch_forks`): a child
/// made by `fork()` sees a larger value than its parent saw. Rings compare it with the value of the process
/// that mapped them, so that a `fork()`ed child never touches a mapping it does not have.
static FORK_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn bump_fork_generation() {
    // Relaxed: the child runs only the forking thread, which reads the value after this handler returned.
    FORK_GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Start counting forks (once per process; every later `fork()` through libc bumps [`fork_generation`]).
pub fn watch_forks() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: a plain `extern "C" fn()` item that lives for the whole program; no prepare/parent handler.
        unsafe { libc::pthread_atfork(None, None, Some(bump_fork_generation)) };
    });
}

/// The fork generation of the calling process (see [`watch_forks`]).
pub fn fork_generation() -> u64 {
    // Relaxed: a value of this process, written only in a fork's child handler before any other code runs.
    FORK_GENERATION.load(std::sync::atomic::Ordering::Relaxed)
}

/// Read a perf event opened with `read_format = PERF_FORMAT_LOST` (and no other read_format bit): the event's
/// count and the records the kernel could not write into its ring (`lost_samples`).
///
/// # Errors
/// The errno of `read(2)`, or EIO for a short read.
pub fn read_count_and_lost(fd: RawFd) -> Result<(u64, u64), Errno> {
    match read_event(fd)? {
        (values, 16) => Ok((values[0], values[1])),
        _ => Err(Errno::EIO),
    }
}

/// Read a perf event's count: the first word of whatever its `read_format` gives (the count, for an event opened
/// with no read_format bit or with `PERF_FORMAT_LOST` alone).
///
/// # Errors
/// The errno of `read(2)`, or EIO for a short read.
pub fn read_count(fd: RawFd) -> Result<u64, Errno> {
    match read_event(fd)? {
        (values, 8 | 16) => Ok(values[0]),
        _ => Err(Errno::EIO),
    }
}

/// `read(2)` of a perf event into two words: the words and the bytes read.
fn read_event(fd: RawFd) -> Result<([u64; 2], isize), Errno> {
    let mut values = [0u64; 2];
    // SAFETY: reads at most 16 bytes into a live, writable array of two u64; `fd` is open (the caller owns it).
    let n = unsafe {
        libc::read(
            fd,
            values.as_mut_ptr().cast(),
            std::mem::size_of_val(&values),
        )
    };
    if n < 0 {
        return Err(Errno::last());
    }
    Ok((values, n))
}

/// Block every signal in the calling thread (a thread of the library: process-directed signals are for the
/// program's threads).
pub fn block_all_signals() {
    let _ = nix::sys::signal::pthread_sigmask(
        nix::sys::signal::SigmaskHow::SIG_BLOCK,
        Some(&nix::sys::signal::SigSet::all()),
        None,
    );
}

/// `pidfd_open(2)`: a descriptor that names process `pid` for as long as it is open (no pid reuse).
pub fn pidfd_open(pid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: a plain system call with integer arguments; a valid result is a fresh descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let fd = Errno::result(fd)?;
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// True once the process behind `pidfd` has exited (the pidfd polls readable: every thread has exited), waiting
/// up to `ms` milliseconds for it (0: not at all).
pub fn pidfd_exited_within(pidfd: BorrowedFd<'_>, ms: u16) -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    let mut fds = [PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::from(ms)), Ok(n) if n > 0)
}

/// Raise the soft `RLIMIT_NOFILE` to the hard limit (what `perf` and Go's runtime do): every descriptor the
/// process may have becomes usable. True if it went up.
pub fn raise_nofile_limit() -> bool {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return false;
    };
    if soft >= hard {
        return false;
    }
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).is_ok()
}

/// The soft and hard `RLIMIT_NOFILE` (`u64::MAX` for unlimited; `(1024, 1024)` when unreadable).
pub fn nofile_limits() -> (u64, u64) {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_NOFILE).unwrap_or((1024, 1024))
}

/// The soft `RLIMIT_MEMLOCK` in bytes (`u64::MAX` for unlimited; 0 when unreadable).
pub fn memlock_limit() -> u64 {
    use nix::sys::resource::{Resource, getrlimit};
    getrlimit(Resource::RLIMIT_MEMLOCK).map_or(0, |(soft, _)| soft)
}

/// The CPU the calling thread runs on now (`sched_getcpu(3)`).
pub fn current_cpu() -> Result<usize, Errno> {
    nix::sched::sched_getcpu()
}

/// Write `bytes` at `addr` in this process with `process_vm_writev(2)`: returns the bytes written, or the
/// errno (EFAULT for memory that is not writable, EPERM/ENOSYS where the call is filtered out).
pub fn write_own_memory(addr: usize, bytes: &[u8]) -> Result<usize, Errno> {
    let local = [IoSlice::new(bytes)];
    let remote = [RemoteIoVec {
        base: addr,
        len: bytes.len(),
    }];
    process_vm_writev(Pid::this(), &local, &remote)
}

/// Read `out.len()` bytes at `addr` in this process with `process_vm_readv(2)`: returns the bytes read, or the
/// errno (EFAULT for memory that is not readable).
pub fn read_own_memory(addr: usize, out: &mut [u8]) -> Result<usize, Errno> {
    let remote = [RemoteIoVec {
        base: addr,
        len: out.len(),
    }];
    let mut local = [IoSliceMut::new(out)];
    process_vm_readv(Pid::this(), &mut local, &remote)
}

/// Copy `bytes` to `addr` directly (the fallback where `process_vm_writev` is filtered out).
///
/// # Safety
/// `[addr, addr + bytes.len())` must be mapped writable in this process (the caller checked
/// `/proc/self/maps`) and must not overlap `bytes`.
pub unsafe fn write_own_memory_direct(addr: usize, bytes: &[u8]) {
    // SAFETY: the caller's promise: the destination is mapped writable; a byte-wise copy has no alignment
    // requirement.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

/// Copy `out.len()` bytes from `addr` directly (the fallback where `process_vm_readv` is filtered out).
///
/// # Safety
/// `[addr, addr + out.len())` must be mapped readable in this process (the caller checked
/// `/proc/self/maps`) and must not overlap `out`.
pub unsafe fn read_own_memory_direct(addr: usize, out: &mut [u8]) {
    // SAFETY: the caller's promise: the source is mapped readable; a byte-wise copy has no alignment
    // requirement.
    unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, out.as_mut_ptr(), out.len()) };
}

/// One mapping of this process's memory as `PROCMAP_QUERY` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vma {
    /// First address of the mapping.
    pub start: usize,
    /// One past its last address.
    pub end: usize,
    /// Mapped with read permission.
    pub readable: bool,
    /// Mapped with write permission.
    pub writable: bool,
}

/// The mapping that covers `addr` in the process whose `/proc/PID/maps` file is `maps`, asked with the
/// `PROCMAP_QUERY` ioctl (Linux 6.11): one lookup in the kernel's tree instead of the whole map as text.
/// `Ok(None)`: nothing is mapped at `addr`.
///
/// # Errors
/// ENOTTY (or EINVAL) on a kernel without the ioctl; the caller then reads the map as text.
pub fn query_vma(maps: BorrowedFd<'_>, addr: usize) -> Result<Option<Vma>, Errno> {
    /// `struct procmap_query` of `<linux/fs.h>`.
    #[repr(C)]
    #[derive(Default)]
    struct ProcmapQuery {
        size: u64,
        query_flags: u64,
        query_addr: u64,
        vma_start: u64,
        vma_end: u64,
        vma_flags: u64,
        vma_page_size: u64,
        vma_offset: u64,
        inode: u64,
        dev_major: u32,
        dev_minor: u32,
        vma_name_size: u32,
        build_id_size: u32,
        vma_name_addr: u64,
        build_id_addr: u64,
    }
    /// `_IOWR('f', 17, struct procmap_query)`.
    const PROCMAP_QUERY: libc::c_ulong = 0xC068_6611;
    const VMA_READABLE: u64 = 0x01;
    const VMA_WRITABLE: u64 = 0x02;
    const _: () = assert!(std::mem::size_of::<ProcmapQuery>() == 104);
    let mut query = ProcmapQuery {
        size: std::mem::size_of::<ProcmapQuery>() as u64,
        // No flag: only the mapping that covers the address, with whatever permissions it has; no name or
        // build id is asked for (their sizes stay 0).
        query_flags: 0,
        query_addr: addr as u64,
        ..ProcmapQuery::default()
    };
    // SAFETY: the ioctl reads and writes one `ProcmapQuery`, which lives for the call; `maps` is an open
    // descriptor borrowed for the call. With no name or build id buffer it writes nothing else.
    let rc = unsafe {
        libc::ioctl(
            maps.as_raw_fd(),
            PROCMAP_QUERY as _,
            &mut query as *mut ProcmapQuery,
        )
    };
    if rc != 0 {
        return match Errno::last() {
            Errno::ENOENT => Ok(None),
            errno => Err(errno),
        };
    }
    Ok(Some(Vma {
        start: query.vma_start as usize,
        end: query.vma_end as usize,
        readable: query.vma_flags & VMA_READABLE != 0,
        writable: query.vma_flags & VMA_WRITABLE != 0,
    }))
}

/// The effective capability set of the calling thread, from `capget(2)` (no descriptor needed, unlike
/// `/proc/self/status`: a process short of descriptors keeps its privileges).
///
/// # Errors
/// The errno of `capget(2)`.
pub fn effective_capabilities() -> Result<u64, Errno> {
    /// `struct __user_cap_header_struct`.
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    /// `struct __user_cap_data_struct`.
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    /// `_LINUX_CAPABILITY_VERSION_3`: 64-bit sets, two `Data` records.
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget reads the header and writes two `Data` records, both live for the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(Errno::last());
    }
    Ok(u64::from(data[0].effective) | (u64::from(data[1].effective) << 32))
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (the clock the sampler's events are opened with).
pub fn monotonic_ns() -> u64 {
    let now = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .unwrap_or(nix::sys::time::TimeSpec::new(0, 0));
    (now.tv_sec() as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec() as u64)
}
