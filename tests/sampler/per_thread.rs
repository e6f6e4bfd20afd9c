//! The per-thread layout (one event per thread, each with a ring of its own: what a sampler takes without the
//! privilege once (thread × processor) events would pass 1,024 on more than two processors) holds the
//! promises of the process-tree, side-band, stack and short-lived-children tests: they run again here, in a
//! child run of this test binary with `NTPROFILE_EVENTS=per-thread`, and check that the layout was taken.

use super::*;

/// The tests that sample processes (their trees, execs, `dlopen`s, stacks, and the exact accounting of 300
/// short-lived children) pass in the per-thread layout too.
#[test]
fn the_process_tree_tests_pass_in_the_per_thread_layout() {
    if std::env::var("NTPROFILE_EVENTS").is_ok() {
        return; // the child run itself
    }
    let tests = [
        "tree::a_process_tree_is_followed_through_fork_exec_and_exit",
        "tree::without_inherit_children_are_not_sampled",
        "tree::a_dlopened_library_is_mapped_before_its_first_sample",
        "stress::a_tree_of_short_lived_children_loses_nothing_silently",
        "sideband::a_side_band_sampler_wakes_the_wait_at_an_exec",
        "stacks::callchains_walk_the_frame_pointers_of_the_sampled_program",
        "stacks::user_stack_copies_hold_the_registers_and_the_frames",
    ];
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "--nocapture", "--test-threads=1"])
        .args(tests)
        .env("NTPROFILE_EVENTS", "per-thread")
        .output()
        .expect("run this test binary again");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}\n{stderr}");
    assert!(
        out.status.success(),
        "the per-thread run failed:\n{stdout}\n{stderr}"
    );
    let summary = format!("test result: ok. {} passed", tests.len());
    assert!(stdout.contains(&summary), "not every test ran:\n{stdout}");
}
