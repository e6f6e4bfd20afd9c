//! A fast hasher for the recorder's per-sample maps (pid → process, location → stack, (image, stack) →
//! count): their keys are small integers chosen by the kernel and by ntprof, not by an adversary, so the
//! standard library's DoS-resistant SipHash buys nothing and costs a good part of a sample's budget.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A multiply-and-rotate hasher over 64-bit words (the Fx hash of the Rust compiler, written out).
#[derive(Default, Clone, Copy)]
pub struct FastHasher {
    hash: u64,
}

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl FastHasher {
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for FastHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    fn finish(&self) -> u64 {
        self.hash
    }
}

/// A HashMap with [`FastHasher`].
pub type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// A HashSet with [`FastHasher`].
pub type FastSet<K> = HashSet<K, BuildHasherDefault<FastHasher>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_small_keys_spread() {
        let mut seen = std::collections::HashSet::new();
        for pid in 0u32..1000 {
            let mut h = FastHasher::default();
            h.write_u32(pid);
            seen.insert(h.finish() & 1023); // the low 10 bits: the slot in a table of 1024
        }
        assert!(seen.len() > 900, "{}", seen.len());
        let mut m: FastMap<(u32, u32), u64> = FastMap::default();
        *m.entry((1, 2)).or_insert(0) += 3;
        assert_eq!(m[&(1, 2)], 3);
    }
}
