//! Naming a Go service's sampled addresses: the same binary unstripped (`.symtab` names, DWARF lines), without
//! DWARF (`.symtab` names, lines from `.gopclntab`: `-ldflags=-w`) and stripped (`.gopclntab` alone:
//! `-ldflags='-s -w'`), each opened and asked for the same 2,000 addresses, in alternation, five rounds; the
//! median of each and the ratios are printed, and the names compared.
//!
//! `cargo bench -p ntprof-engine --bench go_names -- BINARY` (an unstripped Go binary: the OpenTelemetry
//! Collector `.ci/backends` builds from the Go module proxy is used when no path is given).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ntprof_engine::symbols::ElfSymbolizer;
use object::{Object, ObjectSymbol};

fn default_binary() -> Option<PathBuf> {
    let home = std::env::var_os("HOME")?;
    let dir = Path::new(&home).join(".cache/ntprof-backends");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("otelcol"))
        .find(|p| p.is_file())
}

/// One round: open `path` and name every address; the time and the names.
fn name_all(path: &Path, addrs: &[u64]) -> (Duration, Vec<String>) {
    let start = Instant::now();
    let elf = ElfSymbolizer::open(path).expect("open");
    let names = addrs
        .iter()
        .map(|&a| {
            let r = elf.resolve(a);
            let line = r.frames.first().and_then(|f| f.line).unwrap_or(0);
            format!("{} {line}", r.symbol.map(|s| s.name).unwrap_or_default())
        })
        .collect();
    (start.elapsed(), names)
}

fn main() {
    let arg = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let Some(full) = arg.map(PathBuf::from).or_else(default_binary) else {
        eprintln!("usage: go_names BINARY (an unstripped Go binary)");
        std::process::exit(2);
    };
    let dir = std::env::temp_dir().join(format!("ntprof-go-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let no_dwarf = dir.join("no-dwarf");
    let stripped = dir.join("stripped");
    for (flag, out) in [("--strip-debug", &no_dwarf), ("--strip-all", &stripped)] {
        let ok = Command::new("strip")
            .arg(flag)
            .arg("-o")
            .arg(out)
            .arg(&full)
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "strip {flag} {}", full.display());
    }
    let data = std::fs::read(&full).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let mut funcs: Vec<(u64, u64)> = file
        .symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .map(|s| (s.address(), s.size()))
        .collect();
    funcs.sort_unstable();
    let step = (funcs.len() / 2000).max(1);
    let addrs: Vec<u64> = funcs
        .iter()
        .step_by(step)
        .map(|&(a, size)| a + size / 2)
        .collect();
    println!(
        "{}: {} MB, {} functions, {} addresses",
        full.display(),
        data.len() >> 20,
        funcs.len(),
        addrs.len()
    );
    let variants = [
        ("unstripped (.symtab + DWARF)", full.clone()),
        ("-w (.symtab, lines from .gopclntab)", no_dwarf),
        ("-s -w (.gopclntab alone)", stripped),
    ];
    let mut times = vec![Vec::new(); variants.len()];
    let mut names = vec![Vec::new(); variants.len()];
    for _ in 0..5 {
        for (i, (_, path)) in variants.iter().enumerate() {
            let (t, n) = name_all(path, &addrs);
            times[i].push(t);
            names[i] = n;
        }
    }
    let medians: Vec<Duration> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            t[t.len() / 2]
        })
        .collect();
    for (i, (label, _)) in variants.iter().enumerate() {
        let same = names[i]
            .iter()
            .zip(&names[0])
            .filter(|(a, b)| a.split(' ').next() == b.split(' ').next())
            .count();
        for (a, b) in names[i]
            .iter()
            .zip(&names[0])
            .filter(|(a, b)| a.split(' ').next() != b.split(' ').next())
            .take(20)
        {
            println!("    differs: {a:?} where the unstripped has {b:?}");
        }
        println!(
            "{label:40} median {:8.1} ms  ({:.2}x the unstripped)  names equal to the unstripped: {same}/{}",
            medians[i].as_secs_f64() * 1e3,
            medians[i].as_secs_f64() / medians[0].as_secs_f64(),
            addrs.len()
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
