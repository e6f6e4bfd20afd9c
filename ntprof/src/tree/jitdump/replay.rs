//! Replaying a jitdump: its loads and moves applied in time order to an interval map, so that an address asked
//! about at time T resolves to the code that occupied it at T: the latest load at or before T that covers it
//! and has not been moved away.

use std::collections::{BTreeMap, HashMap};

use super::format::{Change, JitDump};

/// Where one piece of code was, from its load (or move) on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Its first address.
    pub start: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Into [`JitDump::names`].
    pub name: u32,
    /// Into [`JitDump::lines`].
    pub lines: Option<u32>,
    /// The address its line table was written for (where it was loaded).
    pub loaded_at: u64,
}

/// Non-overlapping ranges, start → (end, placement); a new range replaces what it overlaps.
#[derive(Debug, Default)]
struct Ranges(BTreeMap<u64, (u64, u32)>);

impl Ranges {
    /// Put `[start, end)` under `id`; whether it covered code already there.
    fn insert(&mut self, start: u64, end: u64, id: u32) -> bool {
        let mut covered = false;
        if let Some((&s, &(e, n))) = self.0.range(..start).next_back()
            && e > start
        {
            covered = true;
            self.0.insert(s, (start, n));
            if e > end {
                self.0.insert(end, (e, n));
            }
        }
        let inside: Vec<u64> = self.0.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            covered = true;
            if let Some((e, n)) = self.0.remove(&s)
                && e > end
            {
                self.0.insert(end, (e, n));
            }
        }
        self.0.insert(start, (end, id));
        covered
    }

    /// Remove the parts of `[start, end)` still held by `id`.
    fn remove(&mut self, start: u64, end: u64, id: u32) {
        let from = match self.0.range(..start).next_back() {
            Some((&s, &(e, _))) if e > start => s,
            _ => start,
        };
        let held: Vec<u64> = self
            .0
            .range(from..end)
            .filter(|(_, v)| v.1 == id)
            .map(|(&s, _)| s)
            .collect();
        for s in held {
            self.0.remove(&s);
        }
    }

    fn get(&self, addr: u64) -> Option<(u64, u32)> {
        let (&start, &(end, id)) = self.0.range(..=addr).next_back()?;
        (addr < end).then_some((start, id))
    }
}

/// Replays a dump's changes in time order and resolves addresses at a time.
pub struct Resolver<'a> {
    dump: &'a JitDump,
    next: usize,
    ranges: Ranges,
    /// The current placement of each code index.
    by_index: HashMap<u64, u32>,
    /// Every placement made so far.
    pub placements: Vec<Placement>,
    /// Loads and moves that covered code still there (the JIT reused memory).
    pub reused: u64,
}

impl<'a> Resolver<'a> {
    /// A replay of `dump` from its start.
    pub fn new(dump: &'a JitDump) -> Self {
        Resolver {
            dump,
            next: 0,
            ranges: Ranges::default(),
            by_index: HashMap::new(),
            placements: Vec::new(),
            reused: 0,
        }
    }

    /// Apply the changes made at or before `time` (times must not go backwards).
    pub fn advance(&mut self, time: u64) {
        while let Some((t, change)) = self.dump.changes.get(self.next) {
            if *t > time {
                break;
            }
            self.next += 1;
            match *change {
                Change::Load {
                    addr,
                    size,
                    index,
                    name,
                    lines,
                } => {
                    self.place(
                        index,
                        Placement {
                            start: addr,
                            size,
                            name,
                            lines,
                            loaded_at: addr,
                        },
                    );
                }
                Change::Move {
                    old,
                    new,
                    size,
                    index,
                } => {
                    // The code the index names, else whatever was at the old address.
                    let from = self
                        .by_index
                        .get(&index)
                        .copied()
                        .or_else(|| self.ranges.get(old).map(|(_, id)| id));
                    let Some(from) = from else { continue };
                    let p = self.placements[from as usize];
                    self.ranges
                        .remove(p.start, p.start.saturating_add(p.size), from);
                    let size = if size > 0 { size } else { p.size };
                    self.place(
                        index,
                        Placement {
                            start: new,
                            size,
                            ..p
                        },
                    );
                }
            }
        }
    }

    fn place(&mut self, index: u64, p: Placement) {
        let id = self.placements.len() as u32;
        self.placements.push(p);
        self.by_index.insert(index, id);
        if self
            .ranges
            .insert(p.start, p.start.saturating_add(p.size), id)
        {
            self.reused += 1;
        }
    }

    /// The placement holding `addr` now.
    pub fn lookup(&self, addr: u64) -> Option<u32> {
        self.ranges.get(addr).map(|(_, id)| id)
    }
}
