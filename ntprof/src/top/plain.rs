//! `ntprof top` without a terminal (stdout piped or redirected): one plain table per source at each refresh, under
//! a line with the refresh's number, start and end; no escape codes, no keys.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;

use super::Msg;
use super::tally::{Ring, Sort};
use super::view::{columns, header};

/// Print the tables of each window from `rx` until the run ends. A write that fails (the reader closed the
/// pipe) sets `quit`, which ends the run.
pub fn run(rx: Receiver<Msg>, quit: &AtomicBool, target: &str, capacity: usize, rows: usize) {
    let mut ring = Ring::new(capacity);
    let mut out = io::stdout().lock();
    let mut failed = false;
    for msg in rx {
        let w = match msg {
            Msg::Window(w) => w,
            Msg::End(words) => {
                // After the tables only: a run that failed before its first window printed none.
                if !failed && !ring.sources().is_empty() {
                    let _ = writeln!(out, "--- {words}");
                }
                continue;
            }
        };
        ring.push(*w);
        if failed {
            continue;
        }
        if let Err(e) = write_tables(&mut out, &ring, target, rows) {
            if e.kind() != io::ErrorKind::BrokenPipe {
                crate::output::say(&format!("ntprof: error: cannot write the table: {e}"));
            }
            failed = true;
            // Only the flag is published: nothing else is read after it, so Relaxed suffices.
            quit.store(true, Ordering::Relaxed);
        }
    }
}

/// The tables of every source over the windows of `ring`.
fn write_tables(out: &mut impl Write, ring: &Ring, target: &str, rows: usize) -> io::Result<()> {
    let names = ring.sources();
    let mut text = String::new();
    for (at, (name, _)) in names.iter().enumerate() {
        let Some(t) = ring.table(name, Sort::Share) else {
            continue;
        };
        if at == 0 {
            text.push_str(&format!(
                "--- refresh {}: {} .. {}\n",
                t.index, t.span.0, t.span.1
            ));
        }
        text.push_str(&header(target, &t, (at, names.len()), Sort::Share, false));
        text.push('\n');
        for line in columns(&t, usize::MAX, rows) {
            text.push_str(&line);
            text.push('\n');
        }
        text.push('\n');
    }
    out.write_all(text.as_bytes())?;
    out.flush()
}
