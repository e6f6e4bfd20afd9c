//! The source listing printed by `examples/sources.rs` matches what creates and queries do, source by source
//! (issue: "the source listing printed by an example matches what creates and queries do"). The example is run
//! as a separate program (cargo builds examples for `cargo test`), with a raw perf event registered so the
//! registered range is listed too; each printed line is checked here through the C exports.

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::process::Command;

use ntprofile::NtStatus;
use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtQueryIntervalProfile, NtSetIntervalProfile, NtprofileRegisterSource,
};

#[inline(never)]
fn target() -> u64 {
    std::hint::black_box((0..100u64).sum())
}

fn example_path() -> std::path::PathBuf {
    // .../target/<profile>/deps/source_listing-HASH → .../target/<profile>/examples/sources
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    profile_dir.join("examples").join("sources")
}

fn create(source: u32) -> NtStatus {
    let mut buf = [0u32; 16];
    let mut h: *mut c_void = std::ptr::null_mut();
    let st = NtStatus(NtCreateProfile(
        &mut h,
        usize::MAX as *mut c_void,
        target as *const () as *mut c_void,
        64,
        2,
        buf.as_mut_ptr(),
        64,
        source,
        usize::MAX,
    ));
    if st.is_success() {
        assert_eq!(NtStatus(NtClose(h)), NtStatus::SUCCESS);
    }
    st
}

fn query(source: u32) -> u32 {
    let mut v = u32::MAX;
    assert_eq!(
        NtStatus(NtQueryIntervalProfile(source, &mut v)),
        NtStatus::SUCCESS
    );
    v
}

#[test]
fn printed_listing_matches_creates_and_queries() {
    let path = example_path();
    assert!(
        path.exists(),
        "{} not built (cargo test builds the examples)",
        path.display()
    );
    // Register in this process the same raw event the example registers in its own: software page-faults.
    let mut registered = 0u32;
    assert_eq!(
        NtStatus(NtprofileRegisterSource(1, 2, 0, 0, &mut registered)),
        NtStatus::SUCCESS
    );
    let out = Command::new(&path)
        .args(["--register", "1", "2"])
        .output()
        .expect("run the example");
    assert!(out.status.success(), "example failed: {:?}", out);
    let text = String::from_utf8(out.stdout).expect("utf-8");
    let mut seen = 0;
    for line in text.lines() {
        let (fields, reason) = line.split_once(" -- ").unwrap_or_else(|| {
            panic!(
                "{} printed a line of another format (a stale build? `cargo test` rebuilds the examples): {line}",
                path.display()
            )
        });
        let mut words = fields.split_whitespace();
        let id = u32::from_str_radix(words.next().unwrap().trim_start_matches("0x"), 16).unwrap();
        let kv: BTreeMap<&str, &str> = words.filter_map(|w| w.split_once('=')).collect();
        let num = |k: &str| kv[k].parse::<u32>().unwrap();
        let supported = kv["supported"] == "yes";

        // Supported exactly when a create with that source succeeds; NOT_SUPPORTED otherwise.
        let st = create(id);
        assert_eq!(
            st.is_success(),
            supported,
            "{line}: create gave {st}, listing says supported={}",
            kv["supported"]
        );
        if !supported {
            assert_eq!(st, NtStatus::NOT_SUPPORTED, "{line}");
            assert!(!reason.trim().is_empty(), "{line}: a reason");
        }
        // The printed interval is what a query returns (0 when not supported).
        assert_eq!(query(id), num("interval"), "{line}");
        if supported {
            // The printed limits are what clamping does; then restore the printed interval.
            assert_eq!(NtStatus(NtSetIntervalProfile(0, id)), NtStatus::SUCCESS);
            assert_eq!(query(id), num("min"), "{line}: below the minimum");
            assert_eq!(
                NtStatus(NtSetIntervalProfile(u32::MAX, id)),
                NtStatus::SUCCESS
            );
            assert_eq!(query(id), num("max"), "{line}: above the maximum");
            NtSetIntervalProfile(num("interval"), id);
            assert_eq!(query(id), num("interval"), "{line}: restored");
        } else {
            // A value for an unsupported source is ignored.
            assert_eq!(NtStatus(NtSetIntervalProfile(5000, id)), NtStatus::SUCCESS);
            assert_eq!(query(id), 0, "{line}");
        }
        seen += 1;
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with(&format!("{registered:#07x} "))),
        "the registered source {registered:#x} is listed:\n{text}"
    );
    assert!(
        seen > ntprofile::ProfileSource::ALL.len(),
        "every source listed"
    );
    println!("{seen} sources checked");
}
