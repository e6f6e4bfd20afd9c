//! `ntprof top` on a terminal: raw mode held by a guard that restores the terminal on every way out (its drop,
//! and a panic hook for a panic on any thread), and the display thread, which reads the keys and redraws the
//! screen in place (cursor home, each line cleared to its end, the rest of the screen cleared: plain ANSI that
//! works over ssh, no alternate screen) when a window arrives, a key changes the view or the terminal is resized.
//!
//! The recorder's thread never waits for this one: it sends each window's tallies over a channel and reads the
//! quit flag.

use std::io::{self, Write};
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Duration;

use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use crossterm::terminal;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use super::Msg;
use super::tally::Ring;
use super::view::{FOOTER, HELP, View, fit};

/// Whether the terminal is in raw mode now (set by [`RawTerminal::enter`], cleared by [`restore`]). Its
/// atomic swap is all the synchronization there is: whichever thread restores first does it, once; no other
/// data is published through it, so Relaxed suffices.
static RAW: AtomicBool = AtomicBool::new(false);

/// The terminal in raw mode, restored when dropped.
pub struct RawTerminal(());

impl RawTerminal {
    /// Raw mode (no echo, keys one at a time, no signal from Ctrl-C: it is read as a key), the cursor hidden,
    /// the screen cleared; a panic hook that restores the terminal before the panic's message is printed.
    pub fn enter() -> io::Result<RawTerminal> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        terminal::enable_raw_mode()?;
        RAW.store(true, Ordering::Relaxed);
        let mut out = io::stdout().lock();
        out.write_all(b"\x1b[?25l\x1b[2J\x1b[H")?;
        out.flush()?;
        Ok(RawTerminal(()))
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        restore();
    }
}

/// Leave raw mode and show the cursor again, on a new line below what was drawn (once).
pub fn restore() {
    if RAW.swap(false, Ordering::Relaxed) {
        let mut out = io::stdout();
        let _ = out.write_all(b"\x1b[?25h\r\n");
        let _ = out.flush();
        let _ = terminal::disable_raw_mode();
    }
}

/// What the display shows and how to redraw it.
struct Screen<'a> {
    target: &'a str,
    ring: Ring,
    view: View,
    /// The footer's message in place of the keys (quitting, the end of the run).
    status: Option<String>,
    /// The command the run started, while it runs.
    command: Option<u32>,
    size: (u16, u16),
}

impl Screen<'_> {
    /// Draw the view from the top left corner, the footer right under the table: at most the terminal's
    /// rows, or two fewer for the last frame, so that what the shell prints next does not scroll it away.
    fn draw(&self, out: &mut impl Write, last: bool) -> io::Result<()> {
        let (cols, rows) = (
            usize::from(self.size.0.max(20)),
            usize::from(self.size.1.max(6)),
        );
        let height = if last { rows - 2 } else { rows };
        let mut lines: Vec<String> = if self.view.help {
            HELP.iter().map(|l| fit(l, cols)).collect()
        } else {
            self.view
                .lines(&self.ring, self.target, cols, height - 3)
                .unwrap_or_else(|| {
                    vec![fit(
                        &format!(
                            "ntprof top  {}  waiting for the first refresh...",
                            self.target
                        ),
                        cols,
                    )]
                })
        };
        lines.truncate(height - 1);
        lines.push(fit(self.status.as_deref().unwrap_or(FOOTER), cols));
        let mut frame = String::from("\x1b[H");
        frame.push_str(&lines.join("\x1b[K\r\n"));
        frame.push_str("\x1b[K\x1b[J");
        out.write_all(frame.as_bytes())?;
        out.flush()
    }

    /// A key: true when it asks to quit.
    fn key(&mut self, code: KeyCode, modifiers: KeyModifiers) -> bool {
        if self.view.help {
            self.view.help = false;
            return false;
        }
        match code {
            KeyCode::Char('q') | KeyCode::Char('Q') => return true,
            KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => return true,
            KeyCode::Char('s') => self.view.sort = self.view.sort.next(),
            KeyCode::Char('e') | KeyCode::Tab => self.view.next_source(&self.ring),
            KeyCode::Char('f') | KeyCode::Char(' ') => self.view.toggle_freeze(&self.ring),
            KeyCode::Char('?') | KeyCode::Char('h') => self.view.help = true,
            _ => {}
        }
        false
    }
}

/// The display thread: windows from `rx`, keys from the terminal, until the run's end message (or the
/// recorder's side of the channel is gone). `quit` is set when a key asks to quit.
pub fn run(rx: Receiver<Msg>, quit: &AtomicBool, target: &str, capacity: usize) -> io::Result<()> {
    let mut s = Screen {
        target,
        ring: Ring::new(capacity),
        view: View::new(),
        status: None,
        command: None,
        size: terminal::size().unwrap_or((80, 24)),
    };
    let mut out = io::stdout();
    let mut dirty = true;
    loop {
        let mut ended = false;
        loop {
            match rx.try_recv() {
                Ok(Msg::Window(w)) => {
                    s.command = w.command_pid;
                    s.ring.push(*w);
                    dirty = true;
                }
                Ok(Msg::End(text)) => {
                    s.status = Some(text);
                    ended = true;
                }
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    ended = true;
                    break;
                }
            }
        }
        if ended {
            // The last table stays on the screen: the run's own, not a frozen one.
            s.view.frozen = None;
            s.view.help = false;
            return s.draw(&mut out, true);
        }
        let size = terminal::size().unwrap_or(s.size);
        if size != s.size {
            s.size = size;
            dirty = true;
        }
        if dirty {
            s.draw(&mut out, false)?;
            dirty = false;
        }
        if !event::poll(Duration::from_millis(100))? {
            continue;
        }
        match event::read()? {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let quits = s.key(k.code, k.modifiers);
                if quits && quit.load(Ordering::Relaxed) {
                    // Quit again: the command ignores SIGTERM. It is our child, not yet waited for while the
                    // run goes on, so its pid is still its own.
                    if let Some(pid) = s.command.and_then(|p| i32::try_from(p).ok()) {
                        let _ = signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
                        s.status = Some(format!("quitting: command {pid} sent SIGKILL"));
                    }
                } else if quits {
                    // Read by the recorder after its next round (see `Sink::stop_requested`).
                    quit.store(true, Ordering::Relaxed);
                    s.status = Some(match s.command {
                        Some(pid) => format!(
                            "quitting: command {pid} sent SIGTERM, waiting for its exit (q again: SIGKILL)"
                        ),
                        None => "quitting: ending the run...".to_string(),
                    });
                }
                dirty = true;
            }
            Event::Resize(..) => dirty = true,
            _ => {}
        }
    }
}
