//! `ntprof top`: a live view of the hottest functions of a command, running processes or the kernel, over a
//! sliding window.
//!
//! The engine cuts the run into windows every `--refresh` seconds; the [`Sink`] (on the recorder's thread)
//! turns each window's report into its tallies and sends them to the display thread, which keeps the last
//! `--window` seconds of them in a ring and draws their sum: on a terminal in place, with keys
//! ([`screen`]); otherwise as one plain table per refresh ([`plain`]). The recorder never waits for the
//! display: it only sends, and reads the quit flag the keys (or a closed pipe) set.

mod args;
mod plain;
mod screen;
mod tally;
mod view;

use std::io::IsTerminal;
use std::panic::AssertUnwindSafe;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::time::{Duration, Instant};

use nix::sys::signal::{SigSet, Signal};
use ntprof_engine::progress::NoProgress;
use ntprof_engine::record::{self, Failure, Outcome, WindowSink, Windows};
use ntprof_engine::report::Report;

pub use args::{TOP_AFTER_HELP, Target, TopArgs};
use tally::WindowTally;

/// From the recorder to the display thread.
pub enum Msg {
    /// A window closed.
    Window(Box<WindowTally>),
    /// The run ended: the footer's last words.
    End(String),
}

/// The windows' taker on the recorder's thread.
struct Sink {
    tx: Sender<Msg>,
    /// Set by a key (q, Ctrl-C) or a closed pipe.
    quit: Arc<AtomicBool>,
    /// `--duration`'s end.
    deadline: Option<Instant>,
    /// The run was ended by `--duration`.
    timed_out: bool,
    /// The display thread is gone (it failed): the run is ended.
    display_gone: bool,
    /// Making a window's tallies panicked (with this message): the run is ended.
    panicked: Option<String>,
}

impl WindowSink for Sink {
    fn window(&mut self, report: &Report) -> bool {
        // A panic here would unwind through the engine and leave a command running: the run is ended instead
        // (the panic hook has restored the terminal and printed the message).
        let w = match std::panic::catch_unwind(AssertUnwindSafe(|| WindowTally::of(report))) {
            Ok(w) => w,
            Err(payload) => {
                let text = payload
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned());
                self.panicked = Some(text.unwrap_or_else(|| "a panic".to_string()));
                return false;
            }
        };
        if self.tx.send(Msg::Window(Box::new(w))).is_err() {
            self.display_gone = true;
        }
        !self.display_gone
    }

    fn stop_requested(&mut self) -> bool {
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            self.timed_out = true;
        }
        // The flag is the whole message (no data is read after it): Relaxed suffices.
        self.timed_out || self.quit.load(Ordering::Relaxed)
    }
}

/// How the target is named in the header.
fn target_label(a: &TopArgs, target: &Target) -> String {
    match target {
        Target::Command(c) => c.join(" "),
        Target::Pids(p) => {
            let list: Vec<String> = p.iter().map(u32::to_string).collect();
            let tree = if a.profile.no_inherit {
                ""
            } else {
                " and descendants"
            };
            format!("pid {}{tree}", list.join(","))
        }
        Target::Kernel => "kernel (system-wide)".to_string(),
        Target::Cgroup(c) => format!("cgroup {c}"),
    }
}

/// The footer's last words and ntprof's exit status: 0 when `top` ended the run (q, --duration), the
/// command's exit status when it ended by itself.
fn ending(result: &Result<Outcome, Failure>, sink: &Sink, target: &Target) -> (String, u8) {
    match result {
        Err(_) => ("ended: the run failed (the error is below)".to_string(), 1),
        Ok(_) if sink.display_gone => ("ended: the display failed".to_string(), 1),
        Ok(_) if sink.panicked.is_some() => {
            ("ended: ntprof failed (the error is below)".to_string(), 1)
        }
        Ok(_) if sink.quit.load(Ordering::Relaxed) => ("ended: quit".to_string(), 0),
        Ok(_) if sink.timed_out => ("ended: --duration reached".to_string(), 0),
        Ok(o) if o.report.run.ended_by == "hangup" && !matches!(target, Target::Command(_)) => {
            ("ended: the terminal hung up (SIGHUP)".to_string(), o.exit)
        }
        Ok(o) => match target {
            Target::Command(c) => {
                let how = o.report.run.exit_status.map_or("ended".to_string(), |s| {
                    if s > 128 {
                        format!("was killed by signal {}", s - 128)
                    } else {
                        format!("exited with status {s}")
                    }
                });
                (format!("ended: {} {how}", c[0]), o.exit)
            }
            Target::Pids(_) => ("ended: the processes exited".to_string(), o.exit),
            Target::Kernel | Target::Cgroup(_) => ("ended".to_string(), o.exit),
        },
    }
}

/// Block SIGINT, SIGTERM and SIGHUP before any thread starts, so that every thread inherits the mask: the
/// engine reads them from a signalfd (forwards them to the command, or ends the run), and a thread that did not
/// block them would be killed by them, leaving the terminal in raw mode. A terminal that hangs up thus ends the
/// run cleanly (its command is told, as the terminal would have told it), the writes to it failing quietly.
fn block_signals() -> Result<(), String> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGINT);
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGHUP);
    set.thread_block()
        .map_err(|e| format!("cannot block SIGINT, SIGTERM and SIGHUP: {e}"))
}

/// `ntprof top`.
pub fn run(a: &TopArgs) -> ExitCode {
    let target = match a.target() {
        Ok(t) => t,
        Err(e) => e.exit(),
    };
    if let Err(msg) = block_signals() {
        crate::output::say(&format!("ntprof: error: {msg}"));
        return ExitCode::FAILURE;
    }
    let label = target_label(a, &target);
    let tty = std::io::stdout().is_terminal();
    let quit = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let guard = if tty {
        match screen::RawTerminal::enter() {
            Ok(g) => Some(g),
            Err(e) => {
                crate::output::say(&format!(
                    "ntprof: error: cannot put the terminal in raw mode: {e}"
                ));
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let (capacity, rows) = (a.windows(), a.rows as usize);
    let display = {
        let (quit, label) = (Arc::clone(&quit), label.clone());
        std::thread::Builder::new()
            .name("ntprof-top".into())
            .spawn(move || {
                if tty {
                    screen::run(rx, &quit, &label, capacity)
                } else {
                    plain::run(rx, &quit, &label, capacity, rows);
                    Ok(())
                }
            })
    };
    let display = match display {
        Ok(d) => d,
        Err(e) => {
            drop(guard);
            crate::output::say(&format!(
                "ntprof: error: cannot start the display thread: {e}"
            ));
            return ExitCode::FAILURE;
        }
    };
    let mut sink = Sink {
        tx,
        quit,
        deadline: a
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        timed_out: false,
        display_gone: false,
        panicked: None,
    };
    let result = record::record_windows(
        &a.options(),
        Windows {
            every: a.every(),
            sink: &mut sink,
        },
        &NoProgress,
    );
    let (words, mut code) = ending(&result, &sink, &target);
    let _ = sink.tx.send(Msg::End(words));
    let panicked = sink.panicked.take();
    drop(sink);
    let shown = display.join();
    drop(guard);
    match shown {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            crate::output::say(&format!("ntprof: error: the display failed: {e}"));
            code = code.max(1);
        }
        Err(_) => {
            crate::output::say("ntprof: error: the display thread panicked");
            code = code.max(1);
        }
    }
    if let Some(p) = panicked {
        // On its own line: the panic hook restored the terminal before the last frame was drawn.
        crate::output::say(&format!(
            "\nntprof: error: making a window's table failed: {p}"
        ));
        code = code.max(1);
    }
    match result {
        Ok(o) => {
            if let Some(w) = o.warning {
                crate::output::say(&format!("ntprof: error: {w}"));
                return ExitCode::from(2);
            }
            ExitCode::from(code)
        }
        Err(f) => {
            crate::output::say(&format!("ntprof: error: {}", f.message));
            ExitCode::from(f.code)
        }
    }
}
