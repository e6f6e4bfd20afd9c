//! Running the workload under each peer (in-process samplers, `perf record` + `perf report`, `ntprof record`)
//! and parsing what each reports: the workload's own line, `perf report`'s table, `ntprof`'s report.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Config, NFUNC, RunOut, Sampler};

pub(super) fn parse_workload(text: &str) -> Result<RunOut, String> {
    let mut kv = BTreeMap::new();
    for f in text.split_whitespace() {
        if let Some((k, v)) = f.split_once('=') {
            kv.insert(
                k.to_string(),
                v.parse::<f64>().map_err(|e| format!("{f}: {e}"))?,
            );
        }
    }
    let get = |k: &str| {
        kv.get(k)
            .copied()
            .ok_or_else(|| format!("workload output lacks {k}: {text}"))
    };
    let opt = |k: &str| get(k).map(|v| if v < 0.0 { None } else { Some(v) });
    let mut out = RunOut {
        work_ns: get("work_ns")?,
        proc_ns: get("proc_ns")?,
        start_ns: get("start_ns")?,
        stop_ns: get("stop_ns")?,
        start2_ns: get("start2_ns")?,
        stop2_ns: get("stop2_ns")?,
        cons_ns: get("cons_ns")?,
        cons_switches: get("cons_switches")?,
        samples: opt("samples")?,
        lost: opt("lost")?,
        throttled: opt("throttled")?,
        ..RunOut::default()
    };
    for i in 0..NFUNC {
        out.hot[i] = get(&format!("hot{i}"))?;
        out.truth[i] = get(&format!("truth{i}"))?;
    }
    Ok(out)
}

/// CPU time (user + system, ns) of every waited-for child so far.
pub(super) fn children_cpu_ns() -> f64 {
    // SAFETY: getrusage writes one `rusage` into the zeroed value we own.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `r` is a valid, writable rusage.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut r) };
    let tv = |t: libc::timeval| t.tv_sec as f64 * 1e9 + t.tv_usec as f64 * 1e3;
    tv(r.ru_utime) + tv(r.ru_stime)
}

pub(super) fn output(cmd: &mut Command) -> Result<std::process::Output, String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{:?} {:?} failed ({}): {}{}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// Build the workload into `dir`.
pub fn build_workload(cfg: &Config, dir: &Path) -> Result<PathBuf, String> {
    let exe = dir.join("workload");
    // The library's SONAME is `libntprofile.so.<major>`, which the program records; cargo writes only
    // `libntprofile.so`: the scratch directory gets the SONAME as a symlink and is the program's rpath.
    let soname = dir.join(format!(
        "libntprofile.so.{}",
        env!("CARGO_PKG_VERSION_MAJOR")
    ));
    if std::fs::symlink_metadata(&soname).is_err() {
        std::os::unix::fs::symlink(cfg.lib_dir.join("libntprofile.so"), &soname)
            .map_err(|e| format!("{soname:?}: {e}"))?;
    }
    let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
    rpath.push(dir);
    output(
        Command::new("gcc")
            // Warnings are shown, not fatal: a newer gcc's new warning must not stop the suite or its smoke test.
            .args(["-O2", "-g", "-Wall", "-Wextra", "-I"])
            .arg(cfg.repo.join("include"))
            .arg(cfg.repo.join("benches/suite/workload.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&cfg.lib_dir)
            .arg("-lntprofile")
            .arg(rpath)
            .arg("-lpthread"),
    )?;
    Ok(exe)
}

/// Whether `perf record` works here.
pub fn perf_available(dir: &Path) -> bool {
    Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(dir.join("probe.data"))
        .args(["--", "true"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Parse `perf report --stdio -n --sort sym`: (samples per hot function, every sample, lost).
pub(super) fn parse_perf_report(text: &str) -> Result<([f64; NFUNC], f64, f64), String> {
    let mut hot = [0.0; NFUNC];
    let mut total = 0.0;
    let mut lost = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# Total Lost Samples:") {
            lost = rest.trim().parse::<f64>().ok();
            continue;
        }
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 3 || !f[0].ends_with('%') {
            continue;
        }
        let n: f64 = f[1]
            .parse()
            .map_err(|_| format!("perf report line: {line}"))?;
        total += n;
        let sym = f[f.len() - 1];
        if let Some(i) = sym
            .strip_prefix("hot")
            .and_then(|d| d.parse::<usize>().ok())
            && i < NFUNC
        {
            hot[i] += n;
        }
    }
    Ok((hot, total, lost.unwrap_or(0.0)))
}

/// Parse `ntprof record`'s text report: (samples per hot function, every sample, lost). It reads
/// `samples N = counted C + outside O + lost L` and the function table's rows (`samples share% function module`).
pub(super) fn parse_ntprof(text: &str) -> Result<([f64; NFUNC], f64, f64), String> {
    let mut hot = [0.0; NFUNC];
    let mut totals = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = f.iter().position(|w| *w == "samples")
            && f.get(i + 2) == Some(&"=")
            && totals.is_none()
        {
            let num = |k: &str| {
                f.iter()
                    .position(|w| *w == k)
                    .and_then(|j| f.get(j + 1))
                    .and_then(|v| v.trim_end_matches([';', ',']).parse::<f64>().ok())
            };
            if let (Some(c), Some(o), Some(l)) = (num("counted"), num("outside"), num("lost")) {
                totals = Some((c + o, l));
            }
        }
        if f.len() >= 4
            && f[1].ends_with('%')
            && let Some(i) = f[2]
                .strip_prefix("hot")
                .and_then(|d| d.parse::<usize>().ok())
            && i < NFUNC
            && let Ok(n) = f[0].parse::<f64>()
        {
            hot[i] += n;
        }
    }
    let (total, lost) = totals.ok_or_else(|| {
        format!(
            "no `samples N = counted …` line in ntprof's report: {}",
            text.lines().take(5).collect::<Vec<_>>().join(" / ")
        )
    })?;
    Ok((hot, total, lost))
}

/// Everything needed to run configurations.
pub(super) struct Runner<'a> {
    pub(super) cfg: &'a Config,
    pub(super) exe: PathBuf,
    pub(super) dir: PathBuf,
    pub(super) seed: u64,
}

impl Runner<'_> {
    pub(super) fn workload_args(&self, mode: &str, rate: u64, threads: u32) -> Vec<String> {
        vec![
            mode.to_string(),
            rate.to_string(),
            threads.to_string(),
            self.cfg.iters.to_string(),
            self.seed.to_string(),
        ]
    }

    pub(super) fn run(
        &self,
        sampler: Option<Sampler>,
        rate: u64,
        threads: u32,
    ) -> Result<RunOut, String> {
        let mode = sampler.map_or("plain", Sampler::mode);
        let args = self.workload_args(mode, rate, threads);
        match sampler {
            Some(Sampler::Perf) => {
                let data = self.dir.join("perf.data");
                let before = children_cpu_ns();
                let out = output(
                    Command::new("perf")
                        .args(["record", "-q", "-e", "cpu-clock", "-c"])
                        .arg((1_000_000_000 / rate).to_string())
                        .arg("-o")
                        .arg(&data)
                        .arg("--")
                        .arg(&self.exe)
                        .args(&args),
                )?;
                let mid = children_cpu_ns();
                let rep = output(
                    Command::new("perf")
                        .args(["report", "--stdio", "-n", "--sort", "sym", "-i"])
                        .arg(&data),
                )?;
                let after = children_cpu_ns();
                let mut r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
                let (hot, total, lost) = parse_perf_report(&String::from_utf8_lossy(&rep.stdout))?;
                r.hot = hot;
                r.samples = Some(total);
                r.lost = Some(lost);
                r.job_ns = after - before;
                r.report_ns = after - mid;
                let _ = std::fs::remove_file(&data);
                Ok(r)
            }
            Some(Sampler::NtprofRecord) => {
                let ntprof = self.cfg.ntprof.as_ref().ok_or("no ntprof binary")?;
                let before = children_cpu_ns();
                // The program's output is on stdout; the report, written to no terminal, on stderr. ProfileTime's
                // interval is in 100 ns units.
                let out = output(
                    Command::new(ntprof)
                        .args(["record", "-q", "-i"])
                        .arg((10_000_000 / rate).max(1).to_string())
                        .arg("--")
                        .arg(&self.exe)
                        .args(&args),
                )?;
                let after = children_cpu_ns();
                let text = String::from_utf8_lossy(&out.stdout);
                let line = text
                    .lines()
                    .find(|l| l.starts_with("work_ns="))
                    .ok_or("no workload line in ntprof's output")?;
                let mut r = parse_workload(line)?;
                let (hot, total, lost) = parse_ntprof(&String::from_utf8_lossy(&out.stderr))?;
                r.hot = hot;
                r.samples = Some(total);
                r.lost = Some(lost);
                r.job_ns = after - before;
                Ok(r)
            }
            _ => {
                let before = children_cpu_ns();
                let out = output(Command::new(&self.exe).args(&args))?;
                let after = children_cpu_ns();
                let mut r = parse_workload(&String::from_utf8_lossy(&out.stdout))?;
                r.job_ns = after - before;
                Ok(r)
            }
        }
    }
}
