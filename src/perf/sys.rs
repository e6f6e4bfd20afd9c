//! epoll, eventfd and thread ids for the consumer thread.
//!
//! # Safety
//! Each call passes descriptors this module owns (or borrows for the call) and buffers that outlive the call.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use super::event::last_errno;

/// The calling thread's kernel thread id.
pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// An eventfd used to wake the consumer.
pub struct Waker {
    fd: OwnedFd,
}

impl Waker {
    /// A new non-blocking eventfd.
    pub fn new() -> Result<Waker, i32> {
        // SAFETY: eventfd has no memory preconditions; a valid result is a fresh descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: `fd` is a fresh descriptor owned by nobody else.
        Ok(Waker {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
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
    pub fn new() -> Result<Epoll, i32> {
        // SAFETY: no memory preconditions; a valid result is a fresh descriptor we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(last_errno());
        }
        // SAFETY: `fd` is fresh and owned by nobody else.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Watch `fd` for input; `token` comes back with its events.
    pub fn add(&self, fd: RawFd, token: u64) -> Result<(), i32> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: `ev` is a live epoll_event for the call; `fd` is open (owned by the caller's stream).
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) };
        if rc < 0 { Err(last_errno()) } else { Ok(()) }
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
) -> Result<(), i32> {
    // SAFETY: the three handlers are plain `extern "C" fn()` items that live for the whole program.
    let rc = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    if rc != 0 { Err(rc) } else { Ok(()) }
}

/// `pidfd_open(2)`: a descriptor that names process `pid` for as long as it is open (no pid reuse).
pub fn pidfd_open(pid: i32) -> Result<OwnedFd, i32> {
    // SAFETY: a plain system call with integer arguments; a valid result is a fresh descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(last_errno());
    }
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}
