//! `STATUS_PROFILING_AT_LIMIT`: at most 8192 × online processors started profiles (`docs/api.md` section 5), reached
//! through the C exports the way a Windows-origin client would, and the cost of getting there stays linear.

use std::ffi::c_void;
use std::time::Instant;

use ntprofile::NtStatus;
use ntprofile::ffi::exports::{NtClose, NtCreateProfile, NtStartProfile, NtStopProfile};

const CURRENT_PROCESS: *mut c_void = usize::MAX as *mut c_void;

#[inline(never)]
fn target() -> u64 {
    std::hint::black_box((0..1000u64).sum())
}

fn create(buffer: &mut [u32; 16], base: usize) -> *mut c_void {
    let mut h: *mut c_void = std::ptr::null_mut();
    let st = NtCreateProfile(
        &mut h,
        CURRENT_PROCESS,
        base as *mut c_void,
        64,
        2,
        buffer.as_mut_ptr(),
        64,
        0,
        usize::MAX,
    );
    assert_eq!(NtStatus(st), NtStatus::SUCCESS);
    h
}

#[test]
fn started_profiles_are_limited_to_8192_per_processor() {
    let limit = ntprofile::engine::started_limit();
    let online = ntprofile::affinity::online_cpus().len();
    assert_eq!(limit, 8192 * online);
    let base = target as *const () as usize;
    let mut buffers: Vec<[u32; 16]> = vec![[0; 16]; limit + 1];
    let t0 = Instant::now();
    let mut handles = Vec::with_capacity(limit);
    for (i, buf) in buffers.iter_mut().take(limit).enumerate() {
        // Ranges at 7 different offsets: overlapping, so the range index has real work.
        let h = create(buf, base + (i % 7) * 4);
        assert_eq!(NtStatus(NtStartProfile(h)), NtStatus::SUCCESS, "start #{i}");
        handles.push(h);
    }
    let started_in = t0.elapsed();
    assert_eq!(ntprofile::engine::started_count(), limit);
    let extra = create(&mut buffers[limit], base);
    assert_eq!(
        NtStatus(NtStartProfile(extra)),
        NtStatus::PROFILING_AT_LIMIT,
        "start #{limit} is one too many"
    );
    // Samples still count in every started profile while at the limit.
    for _ in 0..20_000 {
        target();
    }
    // Freeing one slot lets the extra profile start.
    assert_eq!(NtStatus(NtStopProfile(handles[0])), NtStatus::SUCCESS);
    assert_eq!(NtStatus(NtStartProfile(extra)), NtStatus::SUCCESS);
    assert_eq!(
        NtStatus(NtClose(extra)),
        NtStatus::SUCCESS,
        "close stops it"
    );
    let t1 = Instant::now();
    for &h in &handles {
        assert_eq!(NtStatus(NtClose(h)), NtStatus::SUCCESS);
    }
    let closed_in = t1.elapsed();
    assert_eq!(ntprofile::engine::started_count(), 0);
    eprintln!("{limit} profiles started in {started_in:?}, closed in {closed_in:?}");
}
