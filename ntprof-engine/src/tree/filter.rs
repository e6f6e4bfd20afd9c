//! Which modules a run profiles: `--module` names and `--range`.

use std::collections::{BTreeSet, HashSet};

/// Which modules the run profiles (`--module`, `--range`).
#[derive(Default)]
pub struct Filter {
    /// `--module` names (file names or paths); empty: every module.
    pub modules: Vec<String>,
    /// `--range` was given (without `--module`, only the ranges are profiled).
    pub ranges_only: bool,
    /// Every module name seen (for the message about an unknown `--module`).
    pub seen: BTreeSet<String>,
    /// The `--module` names that matched.
    pub matched: HashSet<String>,
}

impl Filter {
    pub(super) fn wanted(&mut self, name: &str, path: &str) -> bool {
        self.seen.insert(name.to_string());
        if self.modules.is_empty() {
            return !self.ranges_only;
        }
        match self.modules.iter().find(|m| *m == name || *m == path) {
            Some(m) => {
                self.matched.insert(m.clone());
                true
            }
            None => false,
        }
    }

    /// The `--module` names that never matched.
    pub fn unmatched(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .modules
            .iter()
            .filter(|m| !self.matched.contains(*m))
            .cloned()
            .collect();
        v.dedup();
        v
    }
}
