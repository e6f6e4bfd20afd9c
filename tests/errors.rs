//! The Rust API's errors say what is wrong: each failure carries the NTSTATUS the C API returns for it and a
//! sentence naming the argument or the check, and `Display` shows both.

use std::process::Command;

use ntprofile::{Error, NtStatus, Profile, ProfileSource, set_jitter};

#[inline(never)]
fn work() -> u64 {
    std::hint::black_box((0..1000u64).fold(0, |a, b| a ^ b.wrapping_mul(31)))
}

fn base() -> usize {
    work as *const () as usize
}

/// Assert an error's status and that its detail and its `Display` contain every fragment.
fn expect(err: Error, status: NtStatus, fragments: &[&str]) {
    let shown = err.to_string();
    println!("{shown}");
    assert_eq!(err.status(), status, "{shown}");
    assert!(!err.detail().is_empty(), "no detail: {shown}");
    for fragment in fragments {
        assert!(
            err.detail().contains(fragment),
            "{fragment:?} missing from {shown:?}"
        );
        assert!(
            shown.contains(fragment),
            "{fragment:?} missing from Display {shown:?}"
        );
    }
    assert!(
        shown.contains(status.name().expect("a named status")),
        "Display does not name the status: {shown}"
    );
}

#[test]
fn build_names_the_bad_argument() {
    let err = Profile::builder()
        .range(base(), 4096)
        .bucket_size(1)
        .build()
        .unwrap_err();
    expect(
        err,
        NtStatus::INVALID_PARAMETER,
        &["BucketSize 1 is outside 2..=31"],
    );

    let err = Profile::builder()
        .range(base(), 4096)
        .bucket_size(32)
        .build()
        .unwrap_err();
    expect(err, NtStatus::INVALID_PARAMETER, &["BucketSize 32"]);

    let top = usize::MAX - 0xFFF;
    let err = Profile::builder()
        .range(top, 0x2000)
        .bucket_size(12)
        .build()
        .unwrap_err();
    expect(
        err,
        NtStatus::BUFFER_OVERFLOW,
        &[
            "ProfileSize 0x2000",
            &format!("base {top:#x}"),
            "wraps past the top of the address space",
        ],
    );

    let err = Profile::builder()
        .range(0, usize::MAX)
        .bucket_size(2)
        .build()
        .unwrap_err();
    expect(
        err,
        NtStatus::INSUFFICIENT_RESOURCES,
        &[
            "more than a ULONG BufferSize can describe",
            "larger BucketSize",
        ],
    );

    let err = Profile::builder()
        .range(base(), 4096)
        .affinity_mask(0)
        .build()
        .unwrap_err();
    expect(
        err,
        NtStatus::INVALID_PARAMETER,
        &[
            "Affinity 0x0 names no online processor of group",
            "online CPUs: ",
        ],
    );

    let err = Profile::builder()
        .range(base(), 4096)
        .cpus([9999])
        .build()
        .unwrap_err();
    expect(
        err,
        NtStatus::INVALID_PARAMETER,
        &["CPU 9999 is not online"],
    );

    let err = Profile::builder()
        .range(base(), 4096)
        .cpus([])
        .build()
        .unwrap_err();
    expect(err, NtStatus::INVALID_PARAMETER, &["the CPU set is empty"]);
}

#[test]
fn an_unsupported_source_says_why() {
    let source = ProfileSource::TotalCycles;
    let built = Profile::builder()
        .range(base(), 4096)
        .source(source)
        .build();
    if source.support().is_supported() {
        // A machine with a PMU: the source works, and nothing else is asserted here.
        built.expect("TotalCycles is supported here");
        return;
    }
    let reason = source.support().reason();
    expect(
        built.unwrap_err(),
        NtStatus::NOT_SUPPORTED,
        &["source TotalCycles (0x13) is not supported here: ", &reason],
    );
    expect(
        set_jitter(source, 10).unwrap_err(),
        NtStatus::NOT_SUPPORTED,
        &["source TotalCycles (0x13) is not supported here"],
    );
}

#[test]
fn start_stop_and_jitter_name_the_state_or_the_value() {
    let profile = Profile::builder().range(base(), 4096).build().unwrap();
    expect(
        profile.stop().unwrap_err(),
        NtStatus::PROFILING_NOT_STARTED,
        &["the profile is not started"],
    );
    profile.start().unwrap();
    expect(
        profile.start().unwrap_err(),
        NtStatus::PROFILING_NOT_STOPPED,
        &["the profile is already started"],
    );
    profile.stop().unwrap();
    expect(
        set_jitter(ProfileSource::Time, 91).unwrap_err(),
        NtStatus::INVALID_PARAMETER,
        &["jitter 91 % is above the maximum of 90 %"],
    );
}

/// Set in the child process of [`running_out_of_descriptors_names_the_limit`].
const CHILD: &str = "NTPROFILE_ERRORS_TEST_CHILD";

/// A start that runs out of descriptors names RLIMIT_NOFILE. In a child process (this test binary run again),
/// since lowering the hard limit cannot be undone; the (thread × processor) layout forced (see below).
#[test]
fn running_out_of_descriptors_names_the_limit() {
    if std::env::var_os(CHILD).is_some() {
        use nix::sys::resource::{Resource, setrlimit};
        // 200 threads that live until the profile's start has failed.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads: Vec<_> = (0..200)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                })
            })
            .collect();
        setrlimit(Resource::RLIMIT_NOFILE, 64, 64).expect("setrlimit RLIMIT_NOFILE 64");
        let profile = Profile::builder().range(base(), 4096).build().unwrap();
        let err = profile.start().unwrap_err();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        expect(
            err,
            NtStatus::INSUFFICIENT_RESOURCES,
            &["ran out of file descriptors", "RLIMIT_NOFILE 64/64"],
        );
        return;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "running_out_of_descriptors_names_the_limit",
            "--nocapture",
        ])
        .env(CHILD, "1")
        // As root, 64 descriptors hold the processor-wide filtered layout (one per processor): the
        // (thread × processor) layout is the one that runs out.
        .env("NTPROFILE_EVENTS", "thread-cpu")
        .output()
        .expect("run the child");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "the child failed:\n{text}");
    assert!(text.contains("RLIMIT_NOFILE 64/64"), "{text}");
}
