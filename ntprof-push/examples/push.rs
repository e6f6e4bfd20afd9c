//! Pushes one pprof file to a backend: `cargo run --release -p ntprof-push --example push -- URL FILE SERVICE
//! [KEY=VALUE ...]`. The window is the file's modification time minus the profile's duration, to that time.
//! `NTPROF_PUSH_TOKEN` sends a bearer token.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use ntprof_push::{Auth, Client, Target, Window, pprof};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 3 {
        eprintln!("usage: push URL FILE.pb.gz SERVICE [KEY=VALUE ...]");
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("push: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), String> {
    let mut target = Target::parse(&args[0]).map_err(|e| e.to_string())?;
    if let Ok(token) = std::env::var("NTPROF_PUSH_TOKEN") {
        target = target.with_auth(Auth::Bearer(token));
    }
    let bytes = std::fs::read(&args[1]).map_err(|e| format!("{}: {e}", args[1]))?;
    let duration = Duration::from_nanos(
        pprof::decode(&bytes)
            .map_err(|e| e.to_string())?
            .duration_nanos
            .max(0) as u64,
    );
    let end = std::fs::metadata(&args[1])
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| SystemTime::now());
    let mut labels = Vec::new();
    for kv in &args[3..] {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("{kv:?} is not KEY=VALUE"))?;
        labels.push((k.to_string(), v.to_string()));
    }
    let window = Window {
        pprof: bytes,
        start: end - duration,
        end,
        service: args[2].clone(),
        labels,
    };
    Client::new(target, Duration::from_secs(10))
        .push(&window)
        .map_err(|e| e.to_string())?;
    println!(
        "pushed {} ({} bytes) to {}",
        args[1],
        window.pprof.len(),
        args[0]
    );
    Ok(())
}
