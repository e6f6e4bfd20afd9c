//! An interval index over the ranges of a stream's started profiles: one binary search finds every profile
//! whose range holds a PC, however many profiles there are.

/// Elementary segments between sorted range boundaries, each with the profiles that cover it.
#[derive(Debug, Default)]
pub struct RangeIndex {
    /// Sorted, distinct boundaries (every base and end).
    bounds: Vec<u64>,
    /// `starts[i]..starts[i+1]` indexes `members` for segment `[bounds[i], bounds[i+1])`.
    starts: Vec<u32>,
    /// Profile slots, grouped by segment.
    members: Vec<u32>,
}

impl RangeIndex {
    /// Build the index of `ranges` (`(base, end)` pairs, end exclusive); slot `i` is `ranges[i]`.
    ///
    /// A sweep over the sorted boundaries: O(n log n) plus the size of the output (the sum over segments of
    /// the ranges covering each).
    pub fn build(ranges: &[(u64, u64)]) -> RangeIndex {
        // (position, is a start, slot); at a position, ends are applied before starts.
        let mut events: Vec<(u64, bool, u32)> = Vec::with_capacity(ranges.len() * 2);
        for (slot, &(b, e)) in ranges.iter().enumerate() {
            if b < e {
                events.push((b, true, slot as u32));
                events.push((e, false, slot as u32));
            }
        }
        events.sort_unstable();
        let mut bounds: Vec<u64> = events.iter().map(|ev| ev.0).collect();
        bounds.dedup();
        let mut starts = Vec::with_capacity(bounds.len() + 1);
        let mut members = Vec::new();
        // The ranges covering the current segment, with each slot's place in it for O(1) removal.
        let mut active: Vec<u32> = Vec::new();
        let mut place: Vec<usize> = vec![usize::MAX; ranges.len()];
        let mut ev = events.iter().peekable();
        for &at in &bounds {
            while let Some(&&(pos, is_start, slot)) = ev.peek() {
                if pos != at {
                    break;
                }
                ev.next();
                if is_start {
                    place[slot as usize] = active.len();
                    active.push(slot);
                } else {
                    let i = place[slot as usize];
                    active.swap_remove(i);
                    if let Some(&moved) = active.get(i) {
                        place[moved as usize] = i;
                    }
                }
            }
            starts.push(members.len() as u32);
            members.extend_from_slice(&active);
        }
        starts.push(members.len() as u32);
        RangeIndex {
            bounds,
            starts,
            members,
        }
    }

    /// The slots whose range may hold `pc` (each slot still applies its own exact range test).
    #[inline]
    pub fn lookup(&self, pc: u64) -> &[u32] {
        let i = self.bounds.partition_point(|&b| b <= pc);
        if i == 0 || i >= self.bounds.len() {
            return &[];
        }
        let seg = i - 1;
        &self.members[self.starts[seg] as usize..self.starts[seg + 1] as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_ranges() {
        let idx = RangeIndex::build(&[(10, 20), (15, 30), (40, 41), (5, 5)]);
        assert_eq!(idx.lookup(9), &[] as &[u32]);
        assert_eq!(idx.lookup(10), &[0]);
        let mut both = idx.lookup(16).to_vec();
        both.sort_unstable();
        assert_eq!(both, [0, 1]);
        assert_eq!(idx.lookup(20), &[1]);
        assert_eq!(idx.lookup(30), &[] as &[u32]);
        assert_eq!(idx.lookup(40), &[2]);
        assert_eq!(idx.lookup(41), &[] as &[u32]);
        assert_eq!(idx.lookup(5), &[] as &[u32], "an empty range never matches");
    }

    #[test]
    fn top_of_address_space() {
        let idx = RangeIndex::build(&[(u64::MAX - 8, u64::MAX)]);
        assert_eq!(idx.lookup(u64::MAX - 1), &[0]);
        assert_eq!(idx.lookup(u64::MAX), &[] as &[u32]);
    }

    #[test]
    fn matches_a_linear_scan() {
        let mut seed = 0x1234_5678_u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let ranges: Vec<(u64, u64)> = (0..50)
            .map(|_| {
                let b = rnd() % 1000;
                (b, b + rnd() % 200)
            })
            .collect();
        let idx = RangeIndex::build(&ranges);
        for pc in 0..1300 {
            let want: Vec<u32> = (0..ranges.len() as u32)
                .filter(|&s| ranges[s as usize].0 <= pc && pc < ranges[s as usize].1)
                .collect();
            let mut got = idx.lookup(pc).to_vec();
            got.sort_unstable();
            assert_eq!(got, want, "pc {pc}");
        }
    }
}
