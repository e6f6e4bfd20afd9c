//! Processor sets: `KAFFINITY` and `GROUP_AFFINITY` ↔ Linux CPU numbers.
//!
//! Active processors are the online CPUs (`/sys/devices/system/cpu/online`); processor group `g` is CPUs
//! `64·g … 64·g+63` (`docs/linux-mapping.md`, "What stands for what").

use crate::status::NtStatus;

/// Processors in one group, as on 64-bit Windows.
///
/// ```
/// assert_eq!(ntprofile::affinity::GROUP_SIZE, 64);
/// ```
pub const GROUP_SIZE: usize = 64;

/// A set of CPU numbers (a bitmap of 64-bit words, one word per processor group).
///
/// Equality and hashing are those of the set: trailing zero words (left by an intersection, say) do not matter.
///
/// ```
/// use ntprofile::CpuSet;
///
/// let mut set = CpuSet::from_cpus([0, 2]);
/// set.insert(65); // group 1
/// assert!(set.contains(2) && !set.contains(1));
/// assert_eq!(set.len(), 3);
/// assert_eq!(set.group_mask(0), 0b101);
/// assert_eq!(set.group_mask(1), 0b10);
/// assert_eq!(set.iter().collect::<Vec<_>>(), [0, 2, 65]);
/// assert!(CpuSet::from_cpus([2]).is_subset(&set));
/// assert_eq!(set.intersection(&CpuSet::from_cpus([2, 3])), CpuSet::from_cpus([2]));
/// assert_eq!(CpuSet::new().union(&set), set);
/// assert!(CpuSet::new().is_empty());
/// ```
#[derive(Clone, Debug, Default)]
pub struct CpuSet {
    words: Vec<u64>,
}

impl CpuSet {
    /// The words up to the last non-zero one: the canonical form equality and hashing use.
    fn significant(&self) -> &[u64] {
        let n = self
            .words
            .iter()
            .rposition(|w| *w != 0)
            .map_or(0, |i| i + 1);
        &self.words[..n]
    }
}

impl PartialEq for CpuSet {
    fn eq(&self, other: &CpuSet) -> bool {
        self.significant() == other.significant()
    }
}

impl Eq for CpuSet {}

impl std::hash::Hash for CpuSet {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.significant().hash(state);
    }
}

impl CpuSet {
    /// The empty set.
    pub fn new() -> CpuSet {
        CpuSet { words: Vec::new() }
    }

    /// A set from CPU numbers.
    pub fn from_cpus(cpus: impl IntoIterator<Item = usize>) -> CpuSet {
        let mut set = CpuSet::new();
        for c in cpus {
            set.insert(c);
        }
        set
    }

    /// Add CPU `cpu`.
    pub fn insert(&mut self, cpu: usize) {
        let w = cpu / 64;
        if self.words.len() <= w {
            self.words.resize(w + 1, 0);
        }
        self.words[w] |= 1u64 << (cpu % 64);
    }

    /// True if `cpu` is in the set.
    #[inline]
    pub fn contains(&self, cpu: usize) -> bool {
        self.words
            .get(cpu / 64)
            .is_some_and(|w| w & (1u64 << (cpu % 64)) != 0)
    }

    /// True if no CPU is in the set.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The group's 64-bit mask (`KAFFINITY`) of the set.
    pub fn group_mask(&self, group: usize) -> u64 {
        self.words.get(group).copied().unwrap_or(0)
    }

    /// The CPUs, in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(w, bits)| {
            (0..64)
                .filter(move |b| bits & (1u64 << b) != 0)
                .map(move |b| w * 64 + b)
        })
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The intersection with `other`.
    pub fn intersection(&self, other: &CpuSet) -> CpuSet {
        let words = self
            .words
            .iter()
            .zip(other.words.iter())
            .map(|(a, b)| a & b)
            .collect();
        CpuSet { words }
    }

    /// The union with `other`.
    pub fn union(&self, other: &CpuSet) -> CpuSet {
        let n = self.words.len().max(other.words.len());
        let words = (0..n)
            .map(|i| {
                self.words.get(i).copied().unwrap_or(0) | other.words.get(i).copied().unwrap_or(0)
            })
            .collect();
        CpuSet { words }
    }

    /// True if every CPU of `self` is in `other`.
    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.words
            .iter()
            .enumerate()
            .all(|(i, w)| w & !other.words.get(i).copied().unwrap_or(0) == 0)
    }
}

/// Parse a kernel CPU list such as `0-3,8,10-11`.
///
/// ```
/// use ntprofile::CpuSet;
/// use ntprofile::affinity::parse_cpu_list;
///
/// assert_eq!(parse_cpu_list("0-2,5"), Some(CpuSet::from_cpus([0, 1, 2, 5])));
/// assert_eq!(parse_cpu_list("3-1"), None);
/// ```
pub fn parse_cpu_list(text: &str) -> Option<CpuSet> {
    let mut set = CpuSet::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                (a..=b).for_each(|c| set.insert(c));
            }
            None => set.insert(part.parse().ok()?),
        }
    }
    Some(set)
}

/// The online CPUs now (read at each call: CPUs can go on- and offline).
///
/// ```
/// let online = ntprofile::affinity::online_cpus();
/// assert!(!online.is_empty());
/// ```
pub fn online_cpus() -> CpuSet {
    crate::perf::proc::online_cpu_list()
        .and_then(|t| parse_cpu_list(&t))
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let n = std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1);
            CpuSet::from_cpus(0..n)
        })
}

/// The processor group of the calling thread (the group of the CPU it runs on now).
///
/// ```
/// let group = ntprofile::affinity::current_group();
/// assert!(ntprofile::affinity::online_cpus().group_mask(group) != 0);
/// ```
pub fn current_group() -> usize {
    crate::perf::sys::current_cpu()
        .map(|c| c / GROUP_SIZE)
        .unwrap_or(0)
}

/// What a profile asked for: every active processor (resolved at each start), or an explicit set.
///
/// ```
/// use ntprofile::{Affinity, CpuSet};
///
/// let online = CpuSet::from_cpus([0, 1, 2, 3]);
/// let affinity = Affinity::from_kaffinity(0b0110, 0, &online)?;
/// assert_eq!(affinity.effective(&online), CpuSet::from_cpus([1, 2]));
/// assert_eq!(Affinity::AllActive.effective(&online), online);
/// # Ok::<(), ntprofile::NtStatus>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Affinity {
    /// `GroupCount == 0` for `NtCreateProfileEx`: every online CPU, resolved at each start.
    AllActive,
    /// An explicit set of CPUs, each online when the profile was created.
    Cpus(CpuSet),
}

impl Affinity {
    /// The `KAFFINITY` of `NtCreateProfile`, taken for the caller's current group: `(KAFFINITY)-1` means every
    /// online CPU of that group; `0`, or a bit for a CPU that is not online, is `STATUS_INVALID_PARAMETER`.
    ///
    /// # Errors
    /// `STATUS_INVALID_PARAMETER` as above.
    ///
    /// ```
    /// use ntprofile::{Affinity, CpuSet, NtStatus};
    ///
    /// let online = CpuSet::from_cpus([0, 1]);
    /// assert_eq!(Affinity::from_kaffinity(u64::MAX, 0, &online)?, Affinity::Cpus(online.clone()));
    /// assert_eq!(Affinity::from_kaffinity(0, 0, &online), Err(NtStatus::INVALID_PARAMETER));
    /// # Ok::<(), NtStatus>(())
    /// ```
    pub fn from_kaffinity(mask: u64, group: usize, online: &CpuSet) -> Result<Affinity, NtStatus> {
        let online_mask = online.group_mask(group);
        let mask = if mask == u64::MAX { online_mask } else { mask };
        if mask == 0 || mask & !online_mask != 0 {
            return Err(NtStatus::INVALID_PARAMETER);
        }
        let mut set = CpuSet::new();
        (0..64)
            .filter(|b| mask & (1u64 << b) != 0)
            .for_each(|b| set.insert(group * GROUP_SIZE + b));
        Ok(Affinity::Cpus(set))
    }

    /// `GROUP_AFFINITY` records of `NtCreateProfileEx`: `(Mask, Group, Reserved)`. An empty slice means every
    /// active processor. Each record must name an existing group, have a non-empty mask of online CPUs and zero
    /// Reserved words; masks of the same group are OR-ed.
    ///
    /// # Errors
    /// `STATUS_INVALID_PARAMETER` for any bad record.
    ///
    /// ```
    /// use ntprofile::{Affinity, CpuSet, NtStatus};
    ///
    /// let online = CpuSet::from_cpus([0, 1]);
    /// // Two records of group 0 are OR-ed.
    /// let both = Affinity::from_groups(&[(0b01, 0, [0; 3]), (0b10, 0, [0; 3])], &online)?;
    /// assert_eq!(both.effective(&online), online);
    /// // Non-zero Reserved words, or a group that does not exist, are invalid.
    /// assert_eq!(Affinity::from_groups(&[(1, 0, [1, 0, 0])], &online), Err(NtStatus::INVALID_PARAMETER));
    /// assert_eq!(Affinity::from_groups(&[(1, 7, [0; 3])], &online), Err(NtStatus::INVALID_PARAMETER));
    /// # Ok::<(), NtStatus>(())
    /// ```
    pub fn from_groups(
        records: &[(u64, u16, [u16; 3])],
        online: &CpuSet,
    ) -> Result<Affinity, NtStatus> {
        if records.is_empty() {
            return Ok(Affinity::AllActive);
        }
        let mut set = CpuSet::new();
        for &(mask, group, reserved) in records {
            let group = usize::from(group);
            let online_mask = online.group_mask(group);
            if online_mask == 0 || mask == 0 || mask & !online_mask != 0 || reserved != [0; 3] {
                return Err(NtStatus::INVALID_PARAMETER);
            }
            (0..64)
                .filter(|b| mask & (1u64 << b) != 0)
                .for_each(|b| set.insert(group * GROUP_SIZE + b));
        }
        Ok(Affinity::Cpus(set))
    }

    /// The CPUs a start uses: affinity ∩ online, and every online CPU if that is empty (`docs/api.md` section 5).
    ///
    /// ```
    /// use ntprofile::{Affinity, CpuSet};
    ///
    /// let affinity = Affinity::Cpus(CpuSet::from_cpus([3]));
    /// // CPU 3 went offline: the start uses every online CPU.
    /// assert_eq!(affinity.effective(&CpuSet::from_cpus([0, 1])), CpuSet::from_cpus([0, 1]));
    /// ```
    pub fn effective(&self, online: &CpuSet) -> CpuSet {
        match self {
            Affinity::AllActive => online.clone(),
            Affinity::Cpus(set) => {
                let eff = set.intersection(online);
                if eff.is_empty() { online.clone() } else { eff }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::hash::{BuildHasher, RandomState};

    fn cpus() -> impl Strategy<Value = Vec<usize>> {
        proptest::collection::vec(0usize..300, 0..12)
    }

    proptest! {
        /// Sets with the same CPUs compare and hash equal however they were built (an intersection keeps
        /// trailing zero words, a fresh set has none); sets with different CPUs compare unequal.
        #[test]
        fn equal_sets_compare_and_hash_equal(a in cpus(), b in cpus(), c in cpus()) {
            let hasher = RandomState::new();
            let direct = CpuSet::from_cpus(a.iter().copied().filter(|x| b.contains(x)));
            let through_intersection = CpuSet::from_cpus(a.clone()).intersection(&CpuSet::from_cpus(b.clone()));
            let wide = CpuSet::from_cpus(c.iter().map(|x| x + 320)).intersection(&CpuSet::new());
            let widened = CpuSet::from_cpus(a.iter().copied().filter(|x| b.contains(x)))
                .union(&wide);
            for other in [&through_intersection, &widened] {
                prop_assert_eq!(&direct, other);
                prop_assert_eq!(hasher.hash_one(&direct), hasher.hash_one(other));
            }
            let extra = CpuSet::from_cpus(c.clone());
            let same = c.iter().all(|x| a.contains(x) && b.contains(x))
                && a.iter().filter(|x| b.contains(x)).all(|x| c.contains(x));
            prop_assert_eq!(direct == extra, same);
        }
    }

    #[test]
    fn trailing_zero_words_do_not_matter() {
        let wide = CpuSet::from_cpus([1, 200]).intersection(&CpuSet::from_cpus([1]));
        assert_eq!(wide.words.len(), 1, "intersection keeps the shorter length");
        let wide =
            CpuSet::from_cpus([1]).union(&CpuSet::from_cpus([200]).intersection(&CpuSet::new()));
        let mut grown = CpuSet::from_cpus([1]);
        grown.insert(200);
        grown.words[3] = 0;
        assert_eq!(grown.words.len(), 4);
        assert_eq!(grown, CpuSet::from_cpus([1]));
        assert_eq!(wide, CpuSet::from_cpus([1]));
        let h = RandomState::new();
        assert_eq!(h.hash_one(&grown), h.hash_one(CpuSet::from_cpus([1])));
    }

    #[test]
    fn cpu_lists() {
        let s = parse_cpu_list("0-3,8,10-11\n").unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3, 8, 10, 11]);
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("x").is_none());
    }

    #[test]
    fn kaffinity_rules() {
        let online = CpuSet::from_cpus(0..2);
        assert_eq!(
            Affinity::from_kaffinity(0, 0, &online),
            Err(NtStatus::INVALID_PARAMETER)
        );
        assert_eq!(
            Affinity::from_kaffinity(0b100, 0, &online),
            Err(NtStatus::INVALID_PARAMETER)
        );
        assert_eq!(
            Affinity::from_kaffinity(u64::MAX, 0, &online),
            Ok(Affinity::Cpus(online.clone()))
        );
        assert_eq!(
            Affinity::from_kaffinity(0b10, 0, &online),
            Ok(Affinity::Cpus(CpuSet::from_cpus([1])))
        );
    }

    #[test]
    fn group_rules() {
        let online = CpuSet::from_cpus(0..2);
        assert_eq!(Affinity::from_groups(&[], &online), Ok(Affinity::AllActive));
        assert!(
            Affinity::from_groups(&[(1, 1, [0; 3])], &online).is_err(),
            "group out of range"
        );
        assert!(
            Affinity::from_groups(&[(0, 0, [0; 3])], &online).is_err(),
            "empty mask"
        );
        assert!(
            Affinity::from_groups(&[(4, 0, [0; 3])], &online).is_err(),
            "offline CPU"
        );
        assert!(
            Affinity::from_groups(&[(1, 0, [0, 1, 0])], &online).is_err(),
            "reserved"
        );
        let a = Affinity::from_groups(&[(1, 0, [0; 3]), (2, 0, [0; 3])], &online).unwrap();
        assert_eq!(
            a,
            Affinity::Cpus(online.clone()),
            "masks of a group are OR-ed"
        );
    }
}
