//! The labels of a pushed profile: the service name, host, pid and command line ntprof sets, the user's
//! `--label KEY=VALUE`, and the checks every backend's rules need, made before the run starts.

use ntprof_push::Protocol;

/// The labels ntprof sets itself (a `--label` of the same key replaces them).
pub const DEFAULT_KEYS: [&str; 3] = ["host", "pid", "command_line"];

/// The longest `command_line` label sent, in characters (what a label value can reasonably hold in every
/// backend's index); a longer command line is cut and ends with `...`.
pub const COMMAND_LINE_MAX: usize = 200;

/// Characters a Pyroscope name or label value cannot hold (they delimit `APP{k=v,...}`).
const PYROSCOPE_DELIMITERS: [char; 4] = [',', '{', '}', '='];

/// `--label KEY=VALUE`.
pub fn parse_label(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("'{s}' is not KEY=VALUE (e.g. team=storage)"))?;
    let k = k.trim();
    let mut chars = k.chars();
    let first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    if !first || !chars.all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "label key '{k}': a letter or '_' followed by letters, digits or '_' (what every backend takes)"
        ));
    }
    if k == "__name__" || k == "service_name" {
        return Err(format!(
            "label key '{k}' is set by the push itself (give the service name with --name)"
        ));
    }
    if v.is_empty() {
        return Err(format!("label '{k}' has an empty value"));
    }
    Ok((k.to_string(), v.to_string()))
}

/// A URL as shown in messages: the password of `USER:PASSWORD@` replaced by `***`.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{scheme}://{user}:***@{host}{}", &rest[authority_end..])
        }
        None => url.to_string(),
    }
}

/// The default service name and the `command_line` label: from the recorded command, else from the
/// attached process (`/proc/PID/comm` and `cmdline`), else `kernel` and an empty command line.
pub fn describe(command: &[String], pid: Option<u32>) -> (String, String) {
    let words: Vec<String> = if !command.is_empty() {
        command.to_vec()
    } else if let Some(pid) = pid {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .map(|b| {
                b.split(|&c| c == 0)
                    .filter(|w| !w.is_empty())
                    .map(|w| String::from_utf8_lossy(w).into_owned())
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let name = if let (true, Some(pid)) = (command.is_empty(), pid) {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_default()
    } else {
        words
            .first()
            .map(|w| w.rsplit('/').next().unwrap_or(w).to_string())
            .unwrap_or_default()
    };
    let name = clean(&name);
    let name = if name.is_empty() {
        if pid.is_some() || !command.is_empty() {
            "unknown".to_string()
        } else {
            "kernel".to_string()
        }
    } else {
        name
    };
    (name, command_line(&words))
}

/// The command line as one label value: its words joined by spaces, each character a backend could read as a
/// delimiter (`,` `{` `}` `=` `"` `\`) or a control character replaced by `_`, cut at [`COMMAND_LINE_MAX`].
pub fn command_line(words: &[String]) -> String {
    let joined = clean(&words.join(" "));
    if joined.chars().count() <= COMMAND_LINE_MAX {
        return joined;
    }
    let mut cut: String = joined.chars().take(COMMAND_LINE_MAX - 3).collect();
    cut.push_str("...");
    cut
}

fn clean(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| {
            if c.is_control() || PYROSCOPE_DELIMITERS.contains(&c) || c == '"' || c == '\\' {
                '_'
            } else {
                c
            }
        })
        .collect::<String>()
        .trim()
        .to_string()
}

/// This machine's host name.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| clean(&s))
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// What `protocol` cannot take in the service name and labels, as an error telling the fix. `named`: the
/// service name came from `--name` (otherwise it was made from the command, already cleaned).
pub fn check(
    service: &str,
    labels: &[(String, String)],
    protocol: Protocol,
    named: bool,
) -> Result<(), String> {
    if service.trim().is_empty() {
        return Err("--name is empty: give the service name the profiles are filed under".into());
    }
    if protocol == Protocol::Pyroscope {
        if service.contains(PYROSCOPE_DELIMITERS) {
            let what = if named { "--name" } else { "the service name" };
            return Err(format!(
                "{what} {service:?}: Pyroscope names cannot hold ',', '{{', '}}' or '=': choose another with --name"
            ));
        }
        for (k, v) in labels {
            if v.contains(PYROSCOPE_DELIMITERS) {
                return Err(format!(
                    "--label {k}={v}: Pyroscope label values cannot hold ',', '{{', '}}' or '='"
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_parse_and_refuse_what_backends_cannot_take() {
        assert_eq!(
            parse_label("team=x=y").unwrap(),
            ("team".to_string(), "x=y".to_string())
        );
        for (bad, why) in [
            ("team", "KEY=VALUE"),
            ("1team=x", "a letter"),
            ("te-am=x", "a letter"),
            ("service_name=x", "--name"),
            ("__name__=x", "set by the push"),
            ("team=", "empty value"),
        ] {
            let e = parse_label(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        let labels = vec![("team".to_string(), "a,b".to_string())];
        assert!(check("svc", &labels, Protocol::Pyroscope, true).is_err());
        assert!(check("svc", &labels, Protocol::ParcaGrpc, true).is_ok());
        assert!(check("s{x}", &[], Protocol::Pyroscope, true).is_err());
        assert!(check(" ", &[], Protocol::OtlpHttp, true).is_err());
    }

    #[test]
    fn command_lines_are_cleaned_and_cut() {
        let words: Vec<String> = ["/usr/bin/prog", "--x=1", "{a,b}", "\"q\"\n"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(command_line(&words), "/usr/bin/prog --x_1 _a_b_ _q_");
        let long = vec!["a".repeat(500)];
        let cut = command_line(&long);
        assert_eq!(cut.chars().count(), COMMAND_LINE_MAX);
        assert!(cut.ends_with("..."));
        let (name, line) = describe(&words, None);
        assert_eq!(name, "prog");
        assert!(line.starts_with("/usr/bin/prog"));
        assert_eq!(describe(&[], None), ("kernel".to_string(), String::new()));
        let (name, line) = describe(&[], Some(std::process::id()));
        assert!(!name.is_empty() && name != "kernel", "{name}");
        assert!(!line.is_empty());
    }

    #[test]
    fn urls_hide_passwords() {
        assert_eq!(
            redact("parca+grpc://u:secret@h:7070/p"),
            "parca+grpc://u:***@h:7070/p"
        );
        assert_eq!(redact("otlp+http://h:4318"), "otlp+http://h:4318");
    }
}
