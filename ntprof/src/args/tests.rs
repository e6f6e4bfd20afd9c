//! The command line's parsing: options, usage errors, sources and intervals.

use super::*;
use clap::CommandFactory;

fn p(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("ntprof").chain(args.iter().copied()))
}

#[test]
fn cli_is_consistent() {
    Cli::command().debug_assert();
}

#[test]
fn record_options() {
    let cli = p(&[
        "record",
        "--source",
        "Timer,page-faults",
        "-i",
        "2000",
        "--bucket",
        "2",
        "--cpus",
        "0-1",
        "--module",
        "prog",
        "--range",
        "0x1000-0x2000",
        "--top",
        "5",
        "--",
        "./prog",
        "-x",
    ])
    .unwrap();
    let Command::Record(r) = cli.command else {
        panic!("not record")
    };
    assert_eq!(
        r.profile.sources,
        vec![ProfileSource::Time, ProfileSource::PageFaults]
    );
    assert_eq!(
        (
            r.profile.options().interval_for(ProfileSource::Time),
            r.profile.bucket
        ),
        (Some(2000), Some(2))
    );
    assert_eq!(r.profile.cpus, Some(CpuList(vec![0, 1])));
    assert_eq!(
        r.profile.ranges,
        vec![AddrRange {
            start: 0x1000,
            end: 0x2000
        }]
    );
    assert_eq!(r.output.top, 5);
    assert_eq!(r.command, vec!["./prog", "-x"]);
    let cli = p(&["record", "-s", "Timer", "-s", "page-faults", "--", "x"]).unwrap();
    let Command::Record(r) = cli.command else {
        panic!("not record")
    };
    assert_eq!(r.profile.sources.len(), 2);
}

#[test]
fn bad_options_are_usage_errors() {
    for bad in [
        &["record", "--bucket", "32", "--", "x"][..],
        &["record", "--range", "0x2000-0x1000", "--", "x"],
        &["record", "--range", "zz-0x10", "--", "x"],
        &["record", "--cpus", "3-1", "--", "x"],
        &["record", "--source", "nonsense", "--", "x"],
        &["record", "--jitter", "91", "--", "x"],
        &["attach", "--pid", "0"],
        &["attach"],
        &["bogus"],
    ] {
        let err = p(bad).expect_err(&format!("{bad:?} accepted"));
        assert_eq!(err.exit_code(), 2, "{bad:?}");
    }
}

#[test]
fn sources_by_name_or_value() {
    assert_eq!(parse_source("Timer"), Some(ProfileSource::Time));
    assert_eq!(parse_source("ProfileTime"), Some(ProfileSource::Time));
    assert_eq!(parse_source("task-clock"), Some(ProfileSource::TaskClock));
    assert_eq!(parse_source("0x13"), Some(ProfileSource::TotalCycles));
    assert_eq!(parse_source("0x18"), None);
    assert_eq!(parse_source("nonsense"), None);
}

fn record(args: &[&str]) -> RecordArgs {
    let mut all = vec!["record"];
    all.extend_from_slice(args);
    match p(&all).unwrap().command {
        Command::Record(r) => r,
        _ => panic!("not record"),
    }
}

#[test]
fn intervals_for_every_source_or_one() {
    let r = record(&[
        "--source",
        "Timer,page-faults",
        "--interval",
        "2000",
        "--interval",
        "page-faults=16",
        "--",
        "prog",
    ]);
    assert_eq!(
        r.profile.options().interval_for(ProfileSource::Time),
        Some(2000)
    );
    assert_eq!(
        r.profile.options().interval_for(ProfileSource::PageFaults),
        Some(16)
    );
    assert_eq!(r.profile.options().interval_for_unused_source(), None);
    let r = record(&["--interval", "TotalIssues:5", "--", "prog"]);
    assert_eq!(r.profile.options().interval_for(ProfileSource::Time), None);
    assert_eq!(
        r.profile.options().interval_for_unused_source(),
        Some(ProfileSource::TotalIssues)
    );
    assert!(parse_interval_arg("nosuch=5").is_err());
    assert!(parse_interval_arg("Timer=-1").is_err());
    assert!(parse_interval_arg("x").is_err());
}

/// `ntprof --help` describes `report` with the syntax `report` takes: a positional FILE.json, not `--json FILE`
/// (which, given to `report`, names a JSON output to write).
#[test]
fn help_describes_report_as_it_is_called() {
    let mut cmd = Cli::command();
    let help = cmd.render_long_help().to_string();
    let line = help
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("report"))
        .take_while(|l| !l.trim_start().starts_with("help"))
        .flat_map(str::split_whitespace)
        .collect::<Vec<_>>()
        .join(" ");
    assert!(line.contains("(ntprof report FILE.json)"), "{help}");
    assert!(!line.contains("--json"), "{help}");
    let report = cmd.find_subcommand_mut("report").unwrap();
    let usage = report.render_usage().to_string();
    assert!(usage.contains("report [OPTIONS] <FILE.json>"), "{usage}");
    let long = report.render_long_help().to_string();
    assert!(long.contains("ntprof report prof.json"), "{long}");
    // The syntax the help shows is the one that parses.
    let Command::Report(r) = p(&["report", "prof.json"]).unwrap().command else {
        panic!("not report")
    };
    assert_eq!(r.file, std::path::Path::new("prof.json"));
}

#[test]
fn perf_event_names_are_aliases_of_the_sources() {
    // perf's spellings: the event a source samples ('ntprof sources' lists it), and perf's short names.
    assert_eq!(parse_source("cpu-clock"), Some(ProfileSource::Time));
    assert_eq!(parse_source("cycles"), Some(ProfileSource::TotalCycles));
    assert_eq!(parse_source("cpu-cycles"), Some(ProfileSource::TotalCycles));
    assert_eq!(
        parse_source("instructions"),
        Some(ProfileSource::TotalIssues)
    );
    assert_eq!(parse_source("faults"), Some(ProfileSource::PageFaults));
    assert_eq!(parse_source("cs"), Some(ProfileSource::ContextSwitches));
    // A listed name wins over another source's event of that name.
    assert_eq!(
        parse_source("alignment-faults"),
        Some(ProfileSource::AlignmentFaults)
    );
    // -e and --event as perf spells them, on record, attach and top.
    let r = record(&["-e", "cpu-clock", "-e", "page-faults", "--", "true"]);
    assert_eq!(
        r.profile.sources,
        vec![ProfileSource::Time, ProfileSource::PageFaults]
    );
    assert_eq!(r.command, vec!["true"]);
    let r = record(&["--event", "cycles", "--", "true"]);
    assert_eq!(r.profile.sources, vec![ProfileSource::TotalCycles]);
    let all = p(&["top", "-e", "faults", "--", "true"]).unwrap();
    assert!(
        matches!(all.command, Command::Top(t) if t.profile.sources == vec![ProfileSource::PageFaults])
    );
}

#[test]
fn top_help_wraps_whole_paragraphs() {
    // clap wraps the text after the options at the terminal's width: a line broken by hand inside a paragraph
    // then ends mid-sentence. Every line is a table row that fits 80 columns, or a paragraph of its own.
    let text = crate::top::TOP_AFTER_HELP;
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let alone =
            (i == 0 || lines[i - 1].is_empty()) && lines.get(i + 1).is_none_or(|l| l.is_empty());
        assert!(
            line.chars().count() <= 80 || alone,
            "broken mid-sentence at line {i}: {line:?}"
        );
    }
    assert!(text.contains("drawn over by the next refresh"), "{text}");
}
