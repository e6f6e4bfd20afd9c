//! Profile sources end to end (spec `nt-profile-api.md` sections 6 and 7, `linux-mapping.md` section 2):
//!
//! 1. hardware sources, honestly: each test decides at run time whether the machine has a PMU and checks the
//!    answers of that branch (no PMU: `STATUS_NOT_SUPPORTED` at create, interval 0, ignored sets; PMU: the hot
//!    function gets the samples, default 65536, minimum 4096);
//! 2. the count-interval path without a PMU: page faults and minor faults, one sample every N events;
//! 3. `NtSetIntervalProfile` on a running ProfileTime profile takes effect within 50 ms, for threads created
//!    before and after the start, and `NtQueryIntervalProfile` reports the clamped values;
//! 4. aliasing of a fixed sampling period with a workload of the same period, and the jitter that cures it
//!    (the workload runs pinned and, where permitted, under SCHED_FIFO; rates are per second of the thread's
//!    CPU time, which is what the cpu-clock timer counts);
//! 5. the source listing (`list_sources`, `NtprofileQuerySources`) agrees with what creates and queries do,
//!    registered raw events included.
//!
//! Every test here samples this process or changes a process-wide per-source setting (interval, jitter), and
//! every profile of the process sees every thread of it: all tests hold `common::serial()` and restore what they change.
//! Each sampled function lives alone in a linker section of its own, so its address range is exact and no two
//! ranges overlap (see [`section!`]). Run with `--nocapture` to see the figures each test measured.

#[path = "../common/mod.rs"]
mod common;

use std::ffi::c_void;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;

use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtQueryIntervalProfile, NtSetIntervalProfile, NtprofileQuerySources,
    NtprofileRegisterSource, NtprofileSetSourceJitter,
};
use ntprofile::source::{
    COUNT_MAX_INTERVAL, PMC_DEFAULT_INTERVAL, PMC_MIN_INTERVAL, REGISTERED_BASE,
    TIME_DEFAULT_INTERVAL, TIME_KERNEL_FLOOR, TIME_MAX_INTERVAL,
};
use ntprofile::{
    IntervalUnit, NtStatus, Profile, ProfileSource, ProfileStats, Support, list_sources,
    query_interval, set_interval, set_jitter,
};

#[macro_use]
mod hot;

mod faults;
mod hardware;
mod harness;
mod interval;
mod jitter;
mod listing;

use harness::*;
use hot::*;
