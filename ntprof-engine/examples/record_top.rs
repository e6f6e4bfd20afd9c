//! Record a command with call stacks, print its 10 hottest functions and write a pprof profile.
//!
//! `cargo run --release -p ntprof-engine --example record_top -- CMD [ARGS...]` (writes `record_top.pb.gz` in
//! the temporary directory; `pprof -top` reads it).

use ntprof_engine::options::{CallGraph, RecordOptions};
use ntprof_engine::progress::NoProgress;
use ntprof_engine::{output, record};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv.is_empty() {
        return Err("usage: record_top CMD [ARGS...]".into());
    }
    let mut options = RecordOptions::command(argv);
    options.profile.call_graph = Some(CallGraph::Dwarf(16 * 1024));
    let outcome = record::record(&options, &NoProgress)?;

    let report = &outcome.report;
    let timer = &report.sources[0];
    println!(
        "{} samples, {} call stacks, command exit status {}",
        timer.stats.counted,
        timer.stacks.len(),
        outcome.exit
    );
    for f in timer.functions.iter().take(10) {
        println!(
            "{:7} {:6.2}%  {}  ({})",
            f.samples,
            100.0 * f.share,
            f.name,
            f.module
        );
    }
    let path = std::env::temp_dir().join("record_top.pb.gz");
    std::fs::write(&path, output::pprof::render(report)?)?;
    println!("wrote {}", path.display());
    Ok(())
}
