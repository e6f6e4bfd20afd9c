//! `ntprof record/attach --every SECONDS`: the run cut into windows, each written as it closes into the folder
//! `--output DIR/` names (its JSON report and its gzipped pprof profile, named by the window's start time), the
//! oldest removed beyond `--keep N`.
//!
//! The folder is created, and checked to take files, before the run starts. A window's files are written under a
//! temporary name and renamed into place, so a program watching the folder never reads half a file. Only the files this run wrote are ever removed by `--keep`. A window that cannot be
//! written is said on stderr at once and the run goes on; ntprof then ends with status 1.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use ntprof_engine::output::pprof;
use ntprof_engine::record::WindowSink;

use crate::output::{Format, OutputArgs, check_folder, json, write_path};
use crate::progress::Progress;
use crate::report::Report;

/// The options of a run cut into windows (`record` and `attach`).
#[derive(Debug, Clone, Default, Args)]
pub struct WindowArgs {
    /// Cut the run into windows of S seconds and write one profile per window (JSON and gzipped pprof, each
    /// with its start and end time) into the folder --output DIR/ names, as each window closes; the last window
    /// ends with the run. With --push, each window is also sent as it closes.
    #[arg(long, value_name = "S", value_parser = parse_every)]
    pub every: Option<f64>,
    /// With --every: keep only the newest N windows in the folder, removing the oldest files this run wrote.
    #[arg(long, value_name = "N", requires = "every",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keep: Option<u64>,
}

/// The shortest window: a few of the recorder's reading rounds (100 ms each).
const SHORTEST: f64 = 0.5;

fn parse_every(s: &str) -> Result<f64, String> {
    let v = crate::args::seconds(s)?;
    if (SHORTEST..=86_400.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!(
            "{s} is out of range: a window is {SHORTEST} to 86400 seconds"
        ))
    }
}

/// Whether `path` names a folder: it ends with '/', or it is an existing directory.
pub fn names_folder(path: &Path) -> bool {
    path.as_os_str().as_encoded_bytes().ends_with(b"/") || path.is_dir()
}

/// The folder the windows go to, checked against the other output options; `pushing`: windows are also
/// pushed (then no folder is needed). The error says what to give instead.
pub fn folder(w: &WindowArgs, out: &OutputArgs, pushing: bool) -> Result<Option<PathBuf>, String> {
    let dir = out.output.as_deref().filter(|p| names_folder(p));
    let Some(every) = w.every else {
        if let Some(d) = dir {
            return Err(format!(
                "--output {}: a folder is for a run cut into windows: add --every SECONDS, or give a file \
                 name",
                d.display()
            ));
        }
        return Ok(None);
    };
    let whole_run = [
        ("--json", out.json.is_some()),
        ("--csv", out.csv.is_some()),
        ("--pprof", out.pprof.is_some()),
        ("--flamegraph", out.flamegraph.is_some()),
    ];
    if let Some((name, _)) = whole_run.iter().find(|(_, given)| *given) {
        return Err(format!(
            "{name} writes one file for a whole run; with --every {every} each window is written into the \
             folder --output DIR/ names (its JSON and pprof): drop {name}"
        ));
    }
    match (dir, &out.output) {
        (Some(d), _) => {
            if d.exists() && !d.is_dir() {
                return Err(format!("--output {}: not a folder", d.display()));
            }
            Ok(Some(d.to_path_buf()))
        }
        (None, Some(file)) => Err(format!(
            "--output {}: with --every the windows need a folder: end it with '/' (--output {}/)",
            file.display(),
            file.display()
        )),
        (None, None) if pushing => Ok(None),
        (None, None) => Err(format!(
            "--every {every} writes one profile per window: give the folder for them with --output DIR/ \
             (or send them with --push URL)"
        )),
    }
}

/// Takes the windows of a run: writes each into the folder (if any) and counts them.
pub struct Windows<'a> {
    dir: Option<PathBuf>,
    keep: Option<u64>,
    /// The base names written, oldest first (for `--keep`).
    written: VecDeque<PathBuf>,
    /// Windows taken, and of those not written.
    pub taken: u64,
    /// Windows that could not be written in full.
    pub failed: u64,
    /// Samples of every source, all windows together.
    pub samples: u64,
    progress: &'a Progress,
    quiet: bool,
    /// `--push`: each window is also sent as it closes; the queues are drained at the last window, whose
    /// report then notes what was dropped or refused.
    pub push: Option<crate::push::Pushers>,
}

impl<'a> Windows<'a> {
    /// A taker writing into `dir` (created if missing), keeping `keep` windows.
    pub fn new(
        dir: Option<PathBuf>,
        keep: Option<u64>,
        progress: &'a Progress,
        quiet: bool,
    ) -> Result<Windows<'a>, String> {
        if let Some(d) = &dir {
            std::fs::create_dir_all(d)
                .map_err(|e| format!("--output {}: cannot create the folder: {e}", d.display()))?;
            check_folder("--output", d)?;
        }
        Ok(Windows {
            dir,
            keep,
            written: VecDeque::new(),
            taken: 0,
            failed: 0,
            samples: 0,
            progress,
            quiet,
            push: None,
        })
    }

    /// The engine's cut for `every` seconds, with this taker.
    pub fn engine(&mut self, every: f64) -> ntprof_engine::record::Windows<'_> {
        ntprof_engine::record::Windows {
            every: Duration::from_secs_f64(every),
            sink: self,
        }
    }

    /// Write the window's files; the base name (without extension) written.
    fn write(&mut self, report: &Report, dir: &Path) -> Result<PathBuf, String> {
        let window = report
            .run
            .window
            .as_ref()
            .ok_or("a report without its window")?;
        let base = dir.join(file_stem(&window.start));
        // Each file under a temporary name, renamed when complete (`write_path`).
        for (ext, bytes) in [("json", json(report)?), ("pb.gz", pprof::render(report)?)] {
            write_path(&with_ext(&base, ext), &bytes)?;
        }
        Ok(base)
    }

    /// Remove the oldest windows this run wrote beyond `--keep`.
    fn rotate(&mut self) {
        let Some(keep) = self.keep else { return };
        while self.written.len() as u64 > keep {
            let Some(old) = self.written.pop_front() else {
                break;
            };
            for ext in ["json", "pb.gz"] {
                let path = with_ext(&old, ext);
                if let Err(e) = std::fs::remove_file(&path)
                    && e.kind() != std::io::ErrorKind::NotFound
                {
                    self.progress.println(&format!(
                        "ntprof: warning: --keep: cannot remove {}: {e}",
                        path.display()
                    ));
                }
            }
        }
    }

    /// What the run wrote, for the end of the run: `None` when nothing is to be said.
    pub fn summary(&self, every: f64) -> Option<String> {
        let dir = self.dir.as_ref()?;
        let kept = self.written.len();
        Some(format!(
            "{} windows of {every} s ({} samples) written to {}{}{}",
            self.taken - self.failed,
            self.samples,
            dir.display(),
            match self.keep {
                Some(_) => format!(", the newest {kept} kept"),
                None => String::new(),
            },
            match self.failed {
                0 => String::new(),
                n => format!("; {n} could NOT be written (see above)"),
            }
        ))
    }
}

impl WindowSink for Windows<'_> {
    fn window(&mut self, report: &Report) -> bool {
        self.taken += 1;
        let samples: u64 = report
            .sources
            .iter()
            .filter(|s| s.interval_unit != ntprof_engine::report::OFF_CPU_UNIT)
            .map(|s| s.stats.counted + s.stats.outside)
            .sum();
        self.samples += samples;
        // --push: each window is also sent here as it closes, before it is written; the last one written
        // with the notes of what the pushes lost.
        let noted = crate::push::window(&mut self.push, report, self.progress);
        let report = noted.as_ref().unwrap_or(report);
        let Some(dir) = self.dir.clone() else {
            return true;
        };
        match self.write(report, &dir) {
            Ok(base) => {
                self.written.push_back(base.clone());
                self.rotate();
                if !self.quiet {
                    let w = report.run.window.as_ref();
                    self.progress.println(&format!(
                        "ntprof: window {} ({:.1} s, {samples} samples) -> {}.{{json,pb.gz}}",
                        w.map_or(0, |w| w.index),
                        report.run.duration_s,
                        base.display()
                    ));
                }
            }
            Err(e) => {
                self.failed += 1;
                self.progress
                    .println(&format!("ntprof: error: window not written: {e}"));
            }
        }
        true
    }
}

/// A file name from a window's start (`2026-11-26T12:00:01.250000000Z` → `2026-11-26T12-00-01.250Z`): sorts
/// by time, and has no ':' (which some file systems and tools refuse).
fn file_stem(start: &str) -> String {
    let (secs, frac) = start
        .trim_end_matches('Z')
        .split_once('.')
        .unwrap_or((start.trim_end_matches('Z'), "0"));
    let millis: String = frac.chars().chain(std::iter::repeat('0')).take(3).collect();
    format!("{}.{millis}Z", secs.replace(':', "-"))
}

fn with_ext(base: &Path, ext: &str) -> PathBuf {
    let mut name = base.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    PathBuf::from(name)
}

/// The main output's format is not used for windows (each is JSON and pprof): refuse one that says otherwise.
pub fn check_format(out: &OutputArgs, dir: Option<&Path>) -> Result<(), String> {
    match (out.format, dir) {
        (Some(f), Some(_)) if f != Format::Json && f != Format::Pprof => Err(format!(
            "--format {}: each window is written as JSON and pprof; drop --format (convert a window with \
             'ntprof report WINDOW.json --format ...')",
            format!("{f:?}").to_ascii_lowercase()
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_files_are_named_by_their_start_without_colons() {
        assert_eq!(
            file_stem("2026-11-26T12:00:01.250000000Z"),
            "2026-11-26T12-00-01.250Z"
        );
        assert_eq!(
            file_stem("2026-11-26T12:00:01Z"),
            "2026-11-26T12-00-01.000Z"
        );
    }

    #[test]
    fn every_takes_seconds_in_range() {
        assert_eq!(parse_every("2"), Ok(2.0));
        assert_eq!(parse_every("1.5s"), Ok(1.5));
        assert!(parse_every("0.1").is_err());
        assert!(parse_every("x").is_err());
        assert!(parse_every("1e9").is_err());
    }

    #[test]
    fn a_folder_is_named_by_a_trailing_slash() {
        assert!(names_folder(Path::new("out/")));
        assert!(!names_folder(Path::new("definitely-not-here.json")));
    }
}
