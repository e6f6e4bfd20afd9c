//! `--push URL` of `ntprof record` and `ntprof attach`: each window of the run (or, without `--every`, the whole
//! run at its end) is sent as a pprof profile to Pyroscope, Parca or an OTLP backend, one background queue per
//! URL (the `ntprof-push` crate), so that a backend that is down or slow never stalls the recorder.
//!
//! The options are checked before anything runs (a bad URL, label or token file is a usage error, exit 2); at
//! the end the queues get a short grace to drain, a summary per URL goes to stderr, and windows dropped or
//! refused are also written into the report's `run.notes`.

mod labels;
mod summary;

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use ntprof_engine::output::pprof;
use ntprof_engine::record::{Failure, Outcome};
use ntprof_engine::report::Report;
use ntprof_push::{Auth, Protocol, Pusher, QueueConfig, Target, Window};

pub use summary::Summary;

/// How long the end of a run waits for the queued windows to be pushed; what is left after it is dropped and
/// counted.
pub const GRACE: Duration = Duration::from_secs(2);
/// Time limit of one push, connecting included.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The heading of the push options in `--help`.
const HEADING: &str = "Push to a profiling backend";

/// The push options of `record` and `attach`.
#[derive(Debug, Clone, Default, Args)]
pub struct PushArgs {
    /// Send each window (--every), or the whole run at its end, to a backend; repeatable. The scheme names the
    /// protocol: pyroscope+http://HOST:4040, parca+http://HOST:7070 or parca+grpc://HOST:7070,
    /// otlp+http://HOST:4318 or otlp+grpc://HOST:4317; +https / +grpcs for TLS (the server's certificate must
    /// chain to one of the web's root certificates: no custom CA yet). USER:PASSWORD@HOST in the URL sends
    /// basic auth. A backend that is down never stalls the run: the windows wait in a queue (16 at most, the
    /// oldest dropped), failed pushes are retried, and the end of the run waits at most 2 s for the queue.
    #[arg(long = "push", value_name = "URL", help_heading = HEADING)]
    pub push: Vec<String>,
    /// The service name the profiles are filed under (Pyroscope's application, Parca's service_name,
    /// OTLP's service.name). Default: the command's program name, the attached process's command name, or
    /// 'kernel'.
    #[arg(long = "name", value_name = "NAME", help_heading = HEADING)]
    pub name: Option<String>,
    /// A label sent with every profile, besides host, pid and command_line (repeatable). KEY is a letter or
    /// '_' followed by letters, digits or '_'; a KEY of host, pid or command_line replaces that label.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = labels::parse_label, help_heading = HEADING)]
    pub labels: Vec<(String, String)>,
    /// A bearer token sent with every push (Authorization: Bearer TOKEN). A command line is visible to every
    /// user in 'ps': prefer --push-token-file.
    #[arg(long = "push-token", value_name = "TOKEN", help_heading = HEADING,
          conflicts_with_all = ["push_token_file", "push_user"])]
    pub push_token: Option<String>,
    /// Read the bearer token from FILE (its first line, surrounding white space removed).
    #[arg(long = "push-token-file", value_name = "FILE", conflicts_with = "push_user", help_heading = HEADING)]
    pub push_token_file: Option<PathBuf>,
    /// Basic auth for every push URL (the same as USER:PASSWORD@ in a URL). A command line is visible to every
    /// user in 'ps': prefer a bearer token in --push-token-file where the backend takes one.
    #[arg(long = "push-user", value_name = "USER:PASSWORD", help_heading = HEADING)]
    pub push_user: Option<String>,
}

/// One queue per push URL.
pub struct Pushers {
    targets: Vec<(String, Pusher, Protocol)>,
    service: String,
    /// host, pid, command_line, then the --label pairs (a --label of the same key replaces the default).
    labels: Vec<(String, String)>,
    /// Windows that could not even be made into a pprof profile (counted in the summary).
    unrendered: Vec<String>,
}

impl Pushers {
    /// The queues for `args`, or `None` without `--push`. `command` is the recorded command line (empty for
    /// `attach` and the kernel), `pid` the attached process. Every check is made here, before the run: a bad
    /// URL, label, name or credential is an error telling how to fix it.
    pub fn start(
        args: &PushArgs,
        command: &[String],
        pid: Option<u32>,
    ) -> Result<Option<Pushers>, String> {
        if args.push.is_empty() {
            if args.name.is_some()
                || !args.labels.is_empty()
                || args.push_token.is_some()
                || args.push_token_file.is_some()
                || args.push_user.is_some()
            {
                return Err(
                    "--name, --label and the --push-* credentials go with --push URL".into(),
                );
            }
            return Ok(None);
        }
        let auth = credentials(args)?;
        let mut parsed = Vec::new();
        for url in &args.push {
            let mut target = Target::parse(url).map_err(|e| e.to_string())?;
            if target.auth != Auth::None && auth != Auth::None {
                return Err(format!(
                    "{}: credentials in the URL and in --push-token/--push-user: give them once",
                    labels::redact(url)
                ));
            }
            if auth != Auth::None {
                target = target.with_auth(auth.clone());
            }
            parsed.push((labels::redact(url), target));
        }
        let (default_name, command_line) = labels::describe(command, pid);
        let service = args.name.clone().unwrap_or(default_name);
        let mut all = vec![
            ("host".to_string(), labels::hostname()),
            (
                "pid".to_string(),
                pid.map(|p| p.to_string()).unwrap_or_default(),
            ),
            ("command_line".to_string(), command_line),
        ];
        for (k, v) in &args.labels {
            match all.iter_mut().find(|(key, _)| key == k) {
                Some(slot) if labels::DEFAULT_KEYS.contains(&k.as_str()) => slot.1 = v.clone(),
                Some(_) => return Err(format!("--label {k}=...: the key {k} is given twice")),
                None => all.push((k.clone(), v.clone())),
            }
        }
        for (_, t) in &parsed {
            labels::check(&service, &all, t.protocol, args.name.is_some())?;
        }
        let targets = parsed
            .into_iter()
            .map(|(url, target)| {
                let protocol = target.protocol;
                let config = QueueConfig {
                    timeout: PUSH_TIMEOUT,
                    ..QueueConfig::default()
                };
                (url, Pusher::start(target, config), protocol)
            })
            .collect();
        Ok(Some(Pushers {
            targets,
            service,
            labels: all,
            unrendered: Vec::new(),
        }))
    }

    /// Queues `report` (a window, or a whole run) for every URL and returns at once: the pushes run on the
    /// queues' threads. A report without `run.window` (a whole run) is taken to have just ended.
    pub fn send(&mut self, report: &Report) {
        let bytes = match pprof::render(report) {
            Ok(b) => b,
            Err(e) => {
                self.unrendered.push(e);
                return;
            }
        };
        let (start, end) = span(report);
        let mut labels = self.labels.clone();
        if let (Some(pid), Some(slot)) = (
            report.run.pid,
            labels.iter_mut().find(|(k, v)| k == "pid" && v.is_empty()),
        ) {
            slot.1 = pid.to_string();
        }
        labels.retain(|(_, v)| !v.is_empty());
        for (_, pusher, _) in &self.targets {
            pusher.submit(Window {
                pprof: bytes.clone(),
                start,
                end,
                service: self.service.clone(),
                labels: labels.clone(),
            });
        }
    }

    /// Gives the queues [`GRACE`] to push what they hold, drops the rest, and says what became of every window.
    pub fn finish(self) -> Summary {
        // Each queue gets the grace that is left: they drain side by side.
        let until = std::time::Instant::now() + GRACE;
        let targets = self
            .targets
            .into_iter()
            .map(|(url, pusher, _)| {
                let left = until.saturating_duration_since(std::time::Instant::now());
                (url, pusher.finish(left))
            })
            .collect();
        Summary {
            targets,
            unrendered: self.unrendered,
        }
    }
}

/// The credentials of `--push-token`, `--push-token-file` and `--push-user`.
fn credentials(args: &PushArgs) -> Result<Auth, String> {
    if let Some(t) = &args.push_token {
        if t.trim().is_empty() {
            return Err("--push-token is empty".into());
        }
        return Ok(Auth::Bearer(t.trim().to_string()));
    }
    if let Some(path) = &args.push_token_file {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "--push-token-file {}: {e} (a file holding the bearer token on its first line)",
                path.display()
            )
        })?;
        let token = text.lines().next().unwrap_or("").trim();
        if token.is_empty() {
            return Err(format!(
                "--push-token-file {}: the file holds no token on its first line",
                path.display()
            ));
        }
        return Ok(Auth::Bearer(token.to_string()));
    }
    if let Some(u) = &args.push_user {
        let (user, password) = u
            .split_once(':')
            .ok_or("--push-user is USER:PASSWORD (the password after the first ':')")?;
        if user.is_empty() {
            return Err("--push-user: the user name is empty".into());
        }
        return Ok(Auth::Basic {
            user: user.to_string(),
            password: password.to_string(),
        });
    }
    Ok(Auth::None)
}

/// A report's time span: its window's, or for a whole run, its duration up to now.
fn span(report: &Report) -> (SystemTime, SystemTime) {
    match &report.run.window {
        Some(w) => (
            UNIX_EPOCH + Duration::from_nanos(w.start_unix_ns),
            UNIX_EPOCH + Duration::from_nanos(w.end_unix_ns.max(w.start_unix_ns)),
        ),
        None => {
            let end = SystemTime::now();
            let len = Duration::try_from_secs_f64(report.run.duration_s).unwrap_or_default();
            (end.checked_sub(len).unwrap_or(end), end)
        }
    }
}

/// A window of a run cut by `--every`, with `--push`: queued for every URL. At the run's last window the
/// queues are drained (at most [`GRACE`]) and the summary printed; the last window's report is then returned
/// with the notes of what the pushes lost, to be written in its place. `None`: write `report` as it is.
pub fn window(
    pushers: &mut Option<Pushers>,
    report: &Report,
    progress: &crate::progress::Progress,
) -> Option<Report> {
    pushers.as_mut()?.send(report);
    if !report.run.window.as_ref().is_some_and(|w| w.last) {
        return None;
    }
    let summary = pushers.take()?.finish();
    for line in summary.lines() {
        progress.println(&format!("ntprof: {line}"));
    }
    let notes = summary.notes();
    if notes.is_empty() {
        return None;
    }
    let mut noted = report.clone();
    noted.run.notes.extend(notes);
    Some(noted)
}

/// The end of a run with `--push`: without windows (`whole_run`), the run's report is pushed as one window;
/// then the queues drain for a short grace, the summary goes to stderr and the drops and refusals into the
/// report's notes. Nothing to do without `--push`.
pub fn end_run(pushers: Option<Pushers>, result: &mut Result<Outcome, Failure>, whole_run: bool) {
    let Some(mut pushers) = pushers else {
        return;
    };
    if let (true, Ok(outcome)) = (whole_run, result.as_ref()) {
        pushers.send(&outcome.report);
    }
    let summary = pushers.finish();
    for line in summary.lines() {
        crate::output::say(&format!("ntprof: {line}"));
    }
    if let Ok(outcome) = result.as_mut() {
        outcome.report.run.notes.extend(summary.notes());
    }
}

#[cfg(test)]
mod tests;
