//! Modules of the old profile matched with renamed modules of the new one, so that a rebuilt program's functions
//! compare by name: the main executable with the main executable (`./prog` rebuilt as `./prog2`), a library
//! with the one of the same name up to its version (`libfoo.so.1.2` rebuilt as `libfoo.so.1.3`).
//!
//! A module present under the same name on both sides is already matched (modules are keyed by file name, so
//! a library rebuilt elsewhere under the same name compares as is). A rename is taken only where it is the only
//! way to pair the two: the old name is absent from the new profile and the new name from the old one, and for
//! libraries exactly one module on each side has the shared stem.

use std::collections::{BTreeMap, BTreeSet};

use super::Side;

/// Why two differently named modules were compared as one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Each is its profile's main executable.
    MainExecutable,
    /// The same library name up to the version after `.so`.
    LibraryVersion,
}

impl Reason {
    /// How the diff's header says it.
    pub fn describe(self) -> &'static str {
        match self {
            Reason::MainExecutable => "main executable",
            Reason::LibraryVersion => "the same library, another version",
        }
    }
}

/// A module of the old profile compared with a module of another name in the new profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Matched {
    /// Its name in the old profile.
    pub old: String,
    /// Its name in the new profile.
    pub new: String,
    /// Why they are one.
    pub reason: Reason,
}

/// The module names of a side (those with samples).
fn modules(side: &Side) -> BTreeSet<&str> {
    side.functions
        .keys()
        .map(|(m, _)| m.as_str())
        .filter(|m| !m.is_empty())
        .collect()
}

/// A library's name without its version: `libfoo.so.1.2` → `libfoo.so`; `None` for a name that is no versioned
/// shared object.
fn library_stem(name: &str) -> Option<&str> {
    let at = name.find(".so.")?;
    let version = &name[at + 4..];
    let numeric = !version.is_empty()
        && version
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    numeric.then(|| &name[..at + 3])
}

/// The renamed modules of `old` that `new` holds under another name.
pub fn module_matches(old: &Side, new: &Side) -> Vec<Matched> {
    let (in_old, in_new) = (modules(old), modules(new));
    let mut out = Vec::new();
    if let (Some(o), Some(n)) = (old.main.as_deref(), new.main.as_deref())
        && o != n
        && !in_new.contains(o)
        && !in_old.contains(n)
    {
        out.push(Matched {
            old: o.to_string(),
            new: n.to_string(),
            reason: Reason::MainExecutable,
        });
    }
    // The unpaired names of each side, by stem (`libfoo.so` or the name itself when it has no version).
    let stems = |these: &BTreeSet<&str>, other: &BTreeSet<&str>| {
        let mut by: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for &m in these.iter().filter(|m| !other.contains(*m)) {
            if out.iter().any(|x: &Matched| x.old == m || x.new == m) {
                continue;
            }
            let stem = library_stem(m).unwrap_or(m);
            if stem.contains(".so") {
                by.entry(stem.to_string()).or_default().push(m.to_string());
            }
        }
        by
    };
    let (old_stems, new_stems) = (stems(&in_old, &in_new), stems(&in_new, &in_old));
    for (stem, olds) in &old_stems {
        if let (Some(news), [o]) = (new_stems.get(stem), olds.as_slice())
            && let [n] = news.as_slice()
        {
            out.push(Matched {
                old: o.clone(),
                new: n.clone(),
                reason: Reason::LibraryVersion,
            });
        }
    }
    out
}

/// `old` with its matched modules renamed to their new names: its functions, and its folded stacks' frames that
/// name a module (a command frame, a module frame, an unnamed address `module+0x…`).
pub fn renamed(old: &Side, matches: &[Matched]) -> Side {
    if matches.is_empty() {
        return old.clone();
    }
    let to_new = |m: &str| matches.iter().find(|x| x.old == m).map(|x| x.new.as_str());
    let mut side = old.clone();
    side.functions.clear();
    for ((m, f), &n) in &old.functions {
        let module = to_new(m).unwrap_or(m).to_string();
        *side.functions.entry((module, f.clone())).or_insert(0) += n;
    }
    let frame = |f: &str| -> String {
        if let Some(n) = to_new(f) {
            return n.to_string();
        }
        if let Some((m, rest)) = f.split_once("+0x")
            && let Some(n) = to_new(m)
        {
            return format!("{n}+0x{rest}");
        }
        f.to_string()
    };
    side.folded = old
        .folded
        .iter()
        .map(|line| match line.rsplit_once(' ') {
            Some((stack, count)) => {
                let frames: Vec<String> = stack.split(';').map(frame).collect();
                format!("{} {count}", frames.join(";"))
            }
            None => line.clone(),
        })
        .collect();
    side
}
