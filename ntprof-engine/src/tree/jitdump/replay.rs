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

/// Non-overlapping ranges, start → (end, placement); a new range replaces what it overlaps. Each placement
/// keeps the starts of its pieces (some stale: pieces other ranges since covered), so that removing it visits
/// its own pieces only, not every range inside its bounds: a replay costs O(n log n) in its changes whatever
/// their shape.
#[derive(Debug, Default)]
struct Ranges {
    map: BTreeMap<u64, (u64, u32)>,
    /// Per placement: the starts its pieces had when made.
    pieces: Vec<Vec<u64>>,
    /// Entries of the map visited (the cost of the replay, for its tests).
    visited: u64,
}

impl Ranges {
    fn piece(&mut self, id: u32, start: u64) {
        let i = id as usize;
        if self.pieces.len() <= i {
            self.pieces.resize_with(i + 1, Vec::new);
        }
        self.pieces[i].push(start);
    }

    /// Put `[start, end)` under `id`; whether it covered code already there.
    fn insert(&mut self, start: u64, end: u64, id: u32) -> bool {
        let mut covered = false;
        if let Some((&s, &(e, n))) = self.map.range(..start).next_back()
            && e > start
        {
            self.visited += 1;
            covered = true;
            self.map.insert(s, (start, n));
            if e > end {
                self.map.insert(end, (e, n));
                self.piece(n, end);
            }
        }
        // Each range visited here is removed (or cut to after `end`, at most once): paid for by its insertion.
        while let Some((&s, &(e, n))) = self.map.range(start..end).next() {
            self.visited += 1;
            covered = true;
            self.map.remove(&s);
            if e > end {
                self.map.insert(end, (e, n));
                self.piece(n, end);
            }
        }
        self.map.insert(start, (end, id));
        self.piece(id, start);
        covered
    }

    /// Remove the pieces still held by `id`.
    fn remove(&mut self, id: u32) {
        let Some(starts) = self.pieces.get_mut(id as usize).map(std::mem::take) else {
            return;
        };
        for s in starts {
            self.visited += 1;
            if self.map.get(&s).is_some_and(|v| v.1 == id) {
                self.map.remove(&s);
            }
        }
    }

    fn get(&self, addr: u64) -> Option<(u64, u32)> {
        let (&start, &(end, id)) = self.map.range(..=addr).next_back()?;
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
                    self.ranges.remove(from);
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

    /// Entries of the interval map visited so far (the replay's cost).
    #[cfg(test)]
    pub fn visited(&self) -> u64 {
        self.ranges.visited
    }

    /// The placement holding `addr` now.
    pub fn lookup(&self, addr: u64) -> Option<u32> {
        self.ranges.get(addr).map(|(_, id)| id)
    }
}
