//! A smoke run of the benchmark suite's harness (`benches/suite/`): the workload builds with gcc, every
//! sampler runs on it once, the figures come out sane and `BENCHMARKS.md`'s text renders, in a few seconds, so
//! that `cargo bench --bench suite` keeps working. Measures nothing worth keeping (one short round).

#[allow(dead_code)]
#[path = "../benches/suite/harness/mod.rs"]
mod harness;

use std::path::PathBuf;

use harness::{Config, Group, Key, Sampler};

/// The `deps/` directory this test runs from holds the `libntprofile.so` cargo built for it.
fn lib_dir() -> PathBuf {
    harness::built_lib_dir().expect("libntprofile.so next to the test binary")
}

/// The `ntprof` binary of the same build, when the workspace built it (`cargo test` at the root does).
fn ntprof() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("ntprof");
    bin.is_file().then_some(bin)
}

#[test]
fn the_suite_runs_every_sampler_and_renders() {
    let ntprof = ntprof();
    let cfg = Config {
        rounds: 1,
        iters: 40_000_000,
        groups: vec![
            Group {
                threads: 1,
                rates: vec![10_000],
            },
            Group {
                threads: 2,
                rates: vec![10_000],
            },
        ],
        samplers: vec![
            Sampler::NtprofRecord,
            Sampler::Ntprofile,
            Sampler::NtprofileTask,
            Sampler::Perf,
            Sampler::Timer,
            Sampler::Profil,
            Sampler::Sprofil,
        ],
        lib_dir: lib_dir(),
        repo: PathBuf::from(env!("CARGO_MANIFEST_DIR")),
        ntprof: ntprof.clone(),
        label: "smoke".into(),
    };
    let res = harness::run(&cfg, false).expect("the suite runs");
    for t in [1, 2] {
        let k = Key {
            threads: t,
            rate: 10_000,
            sampler: Sampler::Ntprofile,
        };
        let runs = &res.runs[&k];
        assert_eq!(runs.len(), 1);
        let m = &runs[0];
        // 40 M iterations are tens of milliseconds of CPU: at 10 kHz, hundreds of samples, nearly all in the
        // four hot functions, none lost, and their shares near the truth.
        let rate = m.rate();
        assert!(
            (5_000.0..=11_000.0).contains(&rate),
            "{t} thread(s): ntprofile's rate {rate:.0} Hz for 10 kHz requested"
        );
        assert_eq!(m.run.lost, Some(0.0));
        let hot: f64 = m.run.hot.iter().sum();
        assert!(
            hot >= 0.95 * m.run.sample_count(),
            "{hot} of {:?}",
            m.run.samples
        );
        let (pp, _, n) = res.pooled_error(&k).expect("error");
        assert!(
            n > 100.0 && pp < 15.0,
            "{t} thread(s): error {pp:.1} pp over {n} samples"
        );
        if ntprof.is_some() {
            let k = Key {
                sampler: Sampler::NtprofRecord,
                ..k
            };
            let m = &res.runs[&k][0];
            assert!(
                m.rate() > 5_000.0,
                "ntprof record's rate {:.0} Hz",
                m.rate()
            );
            let (pp, _, _) = res.pooled_error(&k).expect("error");
            assert!(pp < 15.0, "ntprof record: error {pp:.1} pp");
        }
        assert!(res.failures.is_empty(), "{:?}", res.failures);
        // Every configuration ran and reported the truth.
        for (k, runs) in &res.runs {
            assert!(runs[0].run.truth.iter().all(|&x| x > 0.0), "{k:?}");
        }
    }
    let text = harness::document(&cfg, &res, "- machine: smoke\n", "-\n", "-\n", "-\n");
    for needle in [
        "## Targets",
        "ntprofile (cpu-clock)",
        "ntprofile (task-clock)",
        "glibc sprofil()",
        "SIGPROF CPU timer",
    ] {
        assert!(
            text.contains(needle),
            "BENCHMARKS.md lacks {needle}:\n{text}"
        );
    }
}

#[test]
fn the_replay_counts_every_sample_once_per_covering_profile() {
    use ntprofile::engine::replay::{Recording, Replay};
    let ips: Vec<u64> = (0..1000u64).map(|i| 0x40_0000 + (i * 4) % 400).collect();
    let rec = Recording::from_ips(&ips);
    for (n, overlapping) in harness::REPLAY_CASES {
        let mut r =
            Replay::new(&rec, &harness::replay_ranges(&ips, n, overlapping)).expect("replay");
        assert_eq!(r.run(), 1000);
        assert_eq!(r.run(), 1000, "the recording replays again");
        let stats = r.stats();
        let counted: u64 = stats.iter().map(|s| s.counted).sum();
        let expected = if overlapping { 2000 * n as u64 } else { 2000 };
        assert_eq!(counted, expected, "{n} profiles, overlapping {overlapping}");
        assert!(stats.iter().all(|s| s.counted + s.outside == 2000));
        let counts: u64 = (0..n)
            .map(|i| r.counts(i).iter().map(|&c| u64::from(c)).sum::<u64>())
            .sum();
        assert_eq!(counts, expected);
    }
}

#[test]
fn rewriting_benchmarks_md_keeps_the_recorders_section() {
    let new = "# Benchmarks\n\nregenerated\n".to_string();
    // No markers, or only one: the new text as it is.
    assert_eq!(harness::keep_recorder_section("", new.clone()), new);
    assert_eq!(
        harness::keep_recorder_section("old\n<!-- recorder:begin -->\nno end\n", new.clone()),
        new
    );
    assert_eq!(
        harness::keep_recorder_section(
            "<!-- recorder:end -->\n<!-- recorder:begin -->\n",
            new.clone()
        ),
        new,
        "an end before the begin is no section"
    );
    // Both: the section, markers included, after the regenerated text; what lies around it in the old file
    // (the previous suite's output) is not kept.
    let old = "# Benchmarks\n\nold figures\n\n<!-- recorder:begin -->\n## ntprof record\n\n| a | b |\n\
               <!-- recorder:end -->\n\nold trailer\n";
    let kept = harness::keep_recorder_section(old, new.clone());
    assert_eq!(
        kept,
        "# Benchmarks\n\nregenerated\n\n<!-- recorder:begin -->\n## ntprof record\n\n| a | b |\n\
         <!-- recorder:end -->\n"
    );
    // Regenerating again keeps it again, once.
    assert_eq!(harness::keep_recorder_section(&kept, new.clone()), kept);
    // The call stacks' section is kept too, after the recorder's.
    let old = "x\n<!-- stacks:begin -->\n## stacks\n<!-- stacks:end -->\n<!-- recorder:begin -->\nr\n\
               <!-- recorder:end -->\n";
    assert_eq!(
        harness::keep_recorder_section(old, new),
        "# Benchmarks\n\nregenerated\n\n<!-- recorder:begin -->\nr\n<!-- recorder:end -->\n\n\
         <!-- stacks:begin -->\n## stacks\n<!-- stacks:end -->\n"
    );
}
