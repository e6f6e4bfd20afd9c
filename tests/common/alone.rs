//! Measurements in a process of their own: a test that bounds the memory some work takes runs that work in a
//! child, this test binary run again for the one test with an environment variable naming it, which does only
//! that work and reports the growth of its own peak resident size. In the test binary's own process the peak
//! may already have been raised by another test running beside it, and the growth would read as nothing.
//!
//! Shared by the test crates of the workspace (`#[path]`-included, as `skip.rs` is).

#![allow(dead_code)] // Each test crate uses what it needs of it.

/// The variable that names the test a child run is for.
const ALONE: &str = "NTPROFILE_TEST_ALONE";
/// The line the child prints its measure on.
const PREFIX: &str = "ALONE-PEAK-GROWTH-KIB ";

/// The peak resident size of this process, in KiB (`getrusage`'s `ru_maxrss`).
fn peak_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .expect("getrusage")
        .max_rss()
}

/// How much `work` raised the peak resident size (KiB), measured in a child run of this test binary that runs
/// only the test `test` (its full path, `module::test_name`), which must call this with the same `work`. In
/// the parent, returns the child's figure (panics if the child failed); in the child, measures, prints and
/// returns the figure too.
pub fn peak_growth_kib(test: &str, work: impl FnOnce()) -> i64 {
    if std::env::var(ALONE).as_deref() == Ok(test) {
        let before = peak_kib();
        work();
        let grew = peak_kib() - before;
        println!("{PREFIX}{grew}");
        return grew;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env(ALONE, test)
        .output()
        .expect("run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the measuring run of {test} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The harness prints `test NAME ... ` before the test's own output, on the same line.
    stdout
        .lines()
        .find_map(|l| {
            let rest = l.split_once(PREFIX)?.1;
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '-'))
                .unwrap_or(rest.len());
            rest[..end].parse().ok()
        })
        .unwrap_or_else(|| panic!("no measure from the run of {test} (no such test?):\n{stdout}"))
}
