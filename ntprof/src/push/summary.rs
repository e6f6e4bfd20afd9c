//! What became of the pushed windows, per URL: the lines printed on stderr at the end of a run and the notes
//! added to the report when windows were dropped or refused.

use ntprof_push::Stats;

/// Every push URL's counts at the end of a run.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Each URL (its password hidden) and its queue's counts.
    pub targets: Vec<(String, Stats)>,
    /// Windows that could not be made into a pprof profile, with why (sent to no URL).
    pub unrendered: Vec<String>,
}

fn windows(n: u64) -> String {
    if n == 1 {
        "1 window".into()
    } else {
        format!("{n} windows")
    }
}

/// The longest backend answer shown, in characters: a longer one keeps its beginning and its end (where the
/// backends say what was wrong), the middle cut.
const ANSWER_MAX: usize = 8000;

fn shorten(e: &str) -> String {
    let n = e.chars().count();
    if n <= ANSWER_MAX {
        return e.to_string();
    }
    let head: String = e.chars().take(ANSWER_MAX / 2).collect();
    let tail: String = e.chars().skip(n - ANSWER_MAX / 2).collect();
    format!("{head} [...{} characters...] {tail}", n - ANSWER_MAX)
}

/// Whether an error says the backend was not there: not reached, or gRPC's Unavailable (which a connection
/// refused becomes) or a deadline passed.
fn unreachable(e: &str) -> bool {
    e.starts_with("backend not reached")
        || e.contains("gRPC Unavailable")
        || e.contains("gRPC DeadlineExceeded")
}

/// Why windows were lost: the backend's refusal, or that it was not reached.
fn cause(stats: &Stats) -> String {
    match &stats.last_error {
        Some(e) if unreachable(e) => {
            format!("the backend was down or slow ({})", shorten(e))
        }
        Some(e) => shorten(e),
        None => "the queue was full, or the run ended before they could be sent".into(),
    }
}

impl Summary {
    /// One line per URL for stderr: `pushed 12 windows to URL, 0 dropped`, with the retries, the windows
    /// given up and the last error where there were any.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (url, s) in &self.targets {
            let mut line = format!("pushed {} to {url}, {} dropped", windows(s.sent), s.dropped);
            if s.failed > 0 {
                line.push_str(&format!(", {} refused or given up", s.failed));
            }
            if s.retries > 0 {
                line.push_str(&format!(", {} retried", s.retries));
            }
            if let Some(e) = s.last_error.as_ref().filter(|_| s.dropped + s.failed > 0) {
                line.push_str(&format!("; last error: {}", shorten(e)));
            }
            out.push(line);
        }
        for e in &self.unrendered {
            out.push(format!("a window was not pushed: {e}"));
        }
        out
    }

    /// The report's notes: one per URL that lost windows (dropped or refused), none when every window went.
    pub fn notes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (url, s) in &self.targets {
            if s.dropped > 0 {
                out.push(format!(
                    "{} of {} pushed to {url} were dropped unsent: {}.",
                    windows(s.dropped),
                    s.submitted,
                    cause(s)
                ));
            }
            if s.failed > 0 {
                out.push(format!(
                    "{} of {} pushed to {url} were refused or given up after retries: {}.",
                    windows(s.failed),
                    s.submitted,
                    cause(s)
                ));
            }
        }
        for e in &self.unrendered {
            out.push(format!("A window was not pushed: {e}."));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_notes_count_every_window() {
        let ok = Stats {
            submitted: 12,
            sent: 12,
            ..Stats::default()
        };
        let down = Stats {
            submitted: 3,
            dropped: 3,
            retries: 2,
            last_error: Some("backend not reached: connection refused".into()),
            ..Stats::default()
        };
        let refused = Stats {
            submitted: 2,
            failed: 2,
            last_error: Some("backend refused the profile: HTTP 400: no".into()),
            ..Stats::default()
        };
        let s = Summary {
            targets: vec![
                ("parca+grpc://h:7070".into(), ok),
                ("otlp+http://h:1".into(), down),
                ("pyroscope+http://h:4040".into(), refused),
            ],
            unrendered: Vec::new(),
        };
        let lines = s.lines();
        assert_eq!(
            lines[0],
            "pushed 12 windows to parca+grpc://h:7070, 0 dropped"
        );
        assert!(lines[1].starts_with("pushed 0 windows to otlp+http://h:1, 3 dropped, 2 retried"));
        assert!(lines[1].contains("connection refused"), "{}", lines[1]);
        assert!(lines[2].contains("2 refused"), "{}", lines[2]);
        assert!(lines[2].contains("HTTP 400: no"), "{}", lines[2]);
        let notes = s.notes();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].starts_with("3 windows of 3 pushed to otlp+http://h:1 were dropped"));
        assert!(notes[0].contains("down"), "{}", notes[0]);
        assert!(notes[1].contains("HTTP 400: no"), "{}", notes[1]);
        let long = format!("HTTP 422: {} value too long", "v".repeat(9000));
        let cut = shorten(&long);
        assert!(
            cut.len() < 8100 && cut.starts_with("HTTP 422: vvv") && cut.ends_with("value too long")
        );
    }
}
