//! Profiles of other processes and of the whole system, through the C exports (`NtOpenProcess`,
//! `NtCreateProfile`, `NtCreateProfileEx`, `NtStartProfile`, `NtStopProfile`, `NtClose`,
//! `NtprofileQueryStatistics`), as a C program would call them.
//!
//! The profiled programs are `ffi/targets/spin.c`, built here with gcc into a temporary directory. It is linked
//! without PIE and with its text at an unusual address (0x2d5a0000), so every process running it has the same
//! addresses (needed by the global profile) and no other non-PIE program on the machine runs code there; each of
//! its hot functions sits alone in a section of its own and the program prints every section's bounds, so counts
//! are attributed per function without guessing sizes.
//!
//! Checks that must run in another process re-execute this test binary with [`HELPER_ENV`] naming a mode (see
//! [`helper_process`]): the unprivileged caller (under `setpriv`, as `nobody`, every capability dropped) and the
//! descriptor-starved caller (`RLIMIT_NOFILE` = 64), so this process is never crippled.
//!
//! The ProfileTime interval is process-wide: every test holds `common::serial()` (through [`Serial`]), sets the interval
//! it needs and restores the default 10000 when done, also on a panic.

use std::collections::HashMap;
use std::ffi::c_void;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::MutexGuard;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtCreateProfileEx, NtOpenProcess, NtQueryIntervalProfile,
    NtSetIntervalProfile, NtStartProfile, NtStopProfile, NtprofileQueryStatistics,
};
use ntprofile::{NtStatus, ProfileStats};

#[path = "../common/mod.rs"]
mod common;

mod exited;
mod fork;
mod global;
mod harness;
mod helpers;
mod hot;
mod other_process;
mod processors;
mod spin;
mod threads;
mod unprivileged;

use harness::*;
use helpers::*;
use hot::*;
use spin::*;

/// The entry point of the helper processes: does nothing unless [`HELPER_ENV`] names a mode.
#[test]
#[ignore = "entry point of the helper processes the other tests of this file start"]
fn helper_process() {
    match std::env::var(HELPER_ENV).as_deref() {
        Ok("unprivileged") => helper_unprivileged(),
        Ok("nofile") => helper_nofile(),
        Ok(other) => panic!("unknown helper mode {other:?}"),
        Err(_) => {}
    }
}
