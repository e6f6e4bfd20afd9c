//! Profile sources on the command line: by value, by listed or NT name, or by perf's event names (`-e cycles`).

use ntprofile::ProfileSource;

use super::parse_u64;

/// perf's short names of its generic events (`perf list`), with the event name `ntprof sources` shows.
const PERF_ALIASES: &[(&str, &str)] = &[
    ("cycles", "cpu-cycles"),
    ("branches", "branch-instructions"),
    ("faults", "page-faults"),
    ("cs", "context-switches"),
    ("migrations", "cpu-migrations"),
    ("idle-cycles-frontend", "stalled-cycles-frontend"),
    ("idle-cycles-backend", "stalled-cycles-backend"),
];

/// A source by value (`0x13`, `19`), by its listed name (`Timer`, `task-clock`, case-insensitive), by its
/// NT name with or without the `Profile` prefix (`ProfileTime`, `TotalCycles`), or by the perf event it samples
/// as perf spells it (`cpu-clock`, `cycles`, `faults`): the first source listed with that event (a listed name
/// wins over an event name, so `alignment-faults` stays the extension source).
pub fn parse_source(s: &str) -> Option<ProfileSource> {
    if let Some(v) = parse_u64(s) {
        return u32::try_from(v).ok().and_then(ProfileSource::from_raw);
    }
    let wanted = s.trim().to_ascii_lowercase();
    let bare = wanted.strip_prefix("profile").unwrap_or(&wanted);
    if bare == "time" {
        return Some(ProfileSource::Time);
    }
    let by_name = ProfileSource::ALL.iter().copied().find(|src| {
        let name = src.name().to_ascii_lowercase();
        let debug = format!("{src:?}").to_ascii_lowercase();
        name == wanted || name == bare || debug == bare
    });
    if by_name.is_some() {
        return by_name;
    }
    let event = PERF_ALIASES
        .iter()
        .find(|(alias, _)| *alias == wanted)
        .map_or(wanted.as_str(), |(_, event)| event);
    ProfileSource::ALL
        .iter()
        .copied()
        .find(|src| src.perf_event().is_some_and(|e| e.name == event))
}

/// [`parse_source`] for clap: the error names where the list is.
pub fn parse_source_arg(s: &str) -> Result<ProfileSource, String> {
    parse_source(s)
        .ok_or_else(|| format!("unknown source '{s}' (see 'ntprof sources' for the list)"))
}
