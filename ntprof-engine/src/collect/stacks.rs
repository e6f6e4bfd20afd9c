//! The call stacks of one source: every (process image, stack) with samples becomes a [`StackReport`] whose
//! frames index the source's [`LocationReport`]s. Each distinct location is symbolized once for the whole run
//! (the sampled locations are already; callers on first use), with its inlined frames expanded.

use std::collections::HashMap;

use super::symbolize::{Located, Symbolizers};
use crate::report::{Frame, LocationReport, StackReport};
use crate::tree::{Loc, SourceCounts, Tracker};

/// Symbolized caller locations, shared by the sources of a run.
pub struct Callers<'a> {
    tracker: &'a Tracker,
    symbols: &'a Symbolizers<'a>,
    /// The sampled location of each stack id, symbolized (`None` for stacks without samples).
    leaves: &'a [Option<Located>],
    located: HashMap<Loc, LocationReport>,
}

/// The C runtime's functions that start a process's main thread (below `main`): a stack that reaches one is
/// complete, whether or not the walk went on to `_start`.
fn starts_process(function: &str) -> bool {
    matches!(
        function,
        "_start" | "__libc_start_main" | "__libc_start_main_impl" | "__libc_start_call_main"
    )
}

fn location(symbols: &Symbolizers<'_>, loc: Loc, l: &Located) -> LocationReport {
    let mut frames = l.frames.clone();
    if frames.is_empty() {
        frames.push(Frame {
            function: l.function.clone(),
            file: None,
            line: None,
            inlined: false,
        });
    }
    LocationReport {
        module: symbols.placed[loc.module as usize].name.clone(),
        address: l.address,
        offset: l.offset,
        function: l.function.clone(),
        frames,
    }
}

impl<'a> Callers<'a> {
    /// For the stacks of `tracker`, whose sampled locations are `leaves`.
    pub fn new(
        tracker: &'a Tracker,
        symbols: &'a Symbolizers<'a>,
        leaves: &'a [Option<Located>],
    ) -> Self {
        Callers {
            tracker,
            symbols,
            leaves,
            located: HashMap::new(),
        }
    }

    fn locate(&mut self, loc: Loc, leaf_of: Option<u32>) -> &LocationReport {
        let symbols = self.symbols;
        let leaves = self.leaves;
        self.located.entry(loc).or_insert_with(|| {
            match leaf_of
                .and_then(|s| leaves.get(s as usize))
                .and_then(Option::as_ref)
            {
                Some(l) => location(symbols, loc, l),
                None => location(symbols, loc, &symbols.locate(loc.module, loc.offset)),
            }
        })
    }

    /// The stacks and locations of one source, hottest stack first.
    pub fn tables(&mut self, counts: &SourceCounts) -> (Vec<StackReport>, Vec<LocationReport>) {
        let t = self.tracker;
        let mut locations: Vec<LocationReport> = Vec::new();
        let mut index: HashMap<Loc, u32> = HashMap::new();
        let mut stacks = Vec::with_capacity(counts.counts.len());
        for (&(image, stack), &samples) in &counts.counts {
            let img = &t.processes.images[image as usize];
            let mut frames = Vec::new();
            for (i, &loc) in t.stacks.frames(stack).iter().enumerate() {
                let id = match index.get(&loc) {
                    Some(&id) => id,
                    None => {
                        let id = locations.len() as u32;
                        let leaf = (i == 0).then_some(stack);
                        locations.push(self.locate(loc, leaf).clone());
                        index.insert(loc, id);
                        id
                    }
                };
                frames.push(id);
            }
            stacks.push(StackReport {
                process: img.process,
                pid: t.processes.list[img.process as usize].pid,
                command: img.comm.clone(),
                samples,
                // A walk cut short right above the process's first frames lost nothing.
                truncated: t.stacks.truncated(stack)
                    && !frames
                        .last()
                        .and_then(|&l| locations.get(l as usize))
                        .is_some_and(|l: &LocationReport| starts_process(&l.function)),
                fp_chain_ended: false, // set once the source's locations are all known
                frames,
            });
        }
        stacks.sort_by(|a, b| {
            b.samples
                .cmp(&a.samples)
                .then_with(|| (a.process, &a.frames).cmp(&(b.process, &b.frames)))
        });
        (stacks, locations)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_stack_that_reaches_the_c_runtime_start_is_complete() {
        for f in ["_start", "__libc_start_main", "__libc_start_call_main"] {
            assert!(super::starts_process(f), "{f}");
        }
        for f in ["main", "start_thread", "clone3", "wc+0x33d0"] {
            assert!(!super::starts_process(f), "{f}");
        }
    }
}
