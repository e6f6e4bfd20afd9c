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
    pub fn build(ranges: &[(u64, u64)]) -> RangeIndex {
        let mut bounds: Vec<u64> = ranges
            .iter()
            .filter(|(b, e)| b < e)
            .flat_map(|&(b, e)| [b, e])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        let mut starts = Vec::with_capacity(bounds.len());
        let mut members = Vec::new();
        for (i, &lo) in bounds.iter().enumerate() {
            starts.push(members.len() as u32);
            if i + 1 == bounds.len() {
                break;
            }
            for (slot, &(b, e)) in ranges.iter().enumerate() {
                if b <= lo && lo < e {
                    members.push(slot as u32);
                }
            }
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
        assert_eq!(idx.lookup(16), &[0, 1]);
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
            assert_eq!(idx.lookup(pc), &want[..], "pc {pc}");
        }
    }
}
