//! The process-wide handle table. Handle values look like NT handles and fit in 32 bits: a non-zero multiple of
//! 4 below 2^31, so that truncating one to 32 bits and sign- or zero-extending it back gives the same value, and
//! never a pseudo-handle (those are all negative). Each carries the generation of its slot, so a closed handle's
//! value is recognised as stale rather than silently reaching a newer object. Values are looked up, never
//! dereferenced; only their low 32 bits are read (docs/api.md, "Handle values").

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::profile::ProfileCore;
use crate::status::NtStatus;

/// What a handle names.
#[derive(Clone)]
pub(crate) enum Object {
    /// A profile object.
    Profile(Arc<ProfileCore>),
    /// A process object from `NtOpenProcess`.
    Process(Arc<crate::target::ProcessRef>),
    /// A sampler from `NtprofileCreateSampler` (the sampler extension sits above this table: the C API's
    /// sampler object is held type-erased and named by `ffi::sampler`, which alone creates and reads it).
    Sampler(Arc<dyn std::any::Any + Send + Sync>),
}

struct Slot {
    /// 1..=MAX_GENERATION: the generation field of the slot's current (or next) handle value.
    generation: u32,
    object: Option<Object>,
}

/// Bits of a value that hold the slot index (bits 2..22).
const INDEX_BITS: u32 = 20;
/// Bits of a value that hold the generation (bits 22..31; bit 31 stays clear).
const GENERATION_BITS: u32 = 9;
/// Where the generation field starts.
const GENERATION_SHIFT: u32 = 2 + INDEX_BITS;
/// Handles open at once: one per slot (2^20 = 1,048,576).
pub(crate) const MAX_SLOTS: usize = 1 << INDEX_BITS;
/// The largest generation; generation 0 is never used, so no value below 2^22 is ever a handle.
const MAX_GENERATION: u32 = (1 << GENERATION_BITS) - 1;
/// A closed slot is given out again only once more than this many slots are free (or every slot exists): the
/// free slots are reused oldest first, so a closed handle's slot waits for at least this many other closes.
pub(crate) const REUSE_DELAY: usize = 4096;

/// The table. Profile operations hold its lock for their whole duration, so that a close cannot race a start
/// of the same handle (lock order: this table, then the engine).
pub(crate) struct Table {
    slots: Vec<Slot>,
    /// Free slots, oldest close first.
    free: VecDeque<u32>,
}

static TABLE: Mutex<Table> = Mutex::new(Table::new());

/// Lock the table.
pub(crate) fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The value a caller's `HANDLE` stands for. Only its low 32 bits are significant (as on 64-bit Windows): they
/// are read as a signed 32-bit number and sign-extended, so a handle truncated to 32 bits and sign- or
/// zero-extended back, or carrying anything in its upper half, is the same handle, and `NtCurrentProcess()`
/// (-1) and `NtCurrentThread()` (-2) keep their full-width values.
pub(crate) fn significant(raw: usize) -> usize {
    raw as u32 as i32 as isize as usize
}

fn encode(index: usize, generation: u32) -> usize {
    ((generation as usize) << GENERATION_SHIFT) | (index << 2)
}

/// `(index, generation)` of a value that can be a handle (any upper half: see [`significant`]).
fn decode(handle: usize) -> Option<(usize, u32)> {
    let low = handle as u32;
    if low & 3 != 0 || low & 0x8000_0000 != 0 {
        return None;
    }
    let generation = low >> GENERATION_SHIFT;
    if generation == 0 {
        return None;
    }
    Some(((low >> 2) as usize & (MAX_SLOTS - 1), generation))
}

/// The generation after `g`: 1, 2, ... MAX_GENERATION, then 1 again.
fn next_generation(g: u32) -> u32 {
    if g >= MAX_GENERATION { 1 } else { g + 1 }
}

impl Table {
    const fn new() -> Table {
        Table {
            slots: Vec::new(),
            free: VecDeque::new(),
        }
    }

    /// Invalidate every handle (a forked child: nothing of the parent's is usable there).
    pub(crate) fn invalidate_all(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.object.take().is_some() {
                slot.generation = next_generation(slot.generation);
                self.free.push_back(index as u32);
            }
        }
    }

    /// A slot for a new handle: the oldest free one once more than `REUSE_DELAY` are free or the table is
    /// full, else a new one.
    fn take_slot(&mut self) -> Result<usize, NtStatus> {
        if self.free.len() > REUSE_DELAY || self.slots.len() >= MAX_SLOTS {
            return self
                .free
                .pop_front()
                .map(|i| i as usize)
                .ok_or(NtStatus::INSUFFICIENT_RESOURCES);
        }
        // The queue can hold every slot at once, so that `remove` never allocates.
        let queue_room = self.slots.len() + 1 - self.free.len();
        if self.slots.try_reserve(1).is_err() || self.free.try_reserve(queue_room).is_err() {
            // No memory for a new slot: an old one will do.
            return self
                .free
                .pop_front()
                .map(|i| i as usize)
                .ok_or(NtStatus::INSUFFICIENT_RESOURCES);
        }
        self.slots.push(Slot {
            generation: 1,
            object: None,
        });
        Ok(self.slots.len() - 1)
    }

    /// Store `object` and return its new handle value. Callers install the fork handlers first
    /// (`crate::fork::install`), so that a forked child finds every inherited handle invalid, whatever its kind.
    ///
    /// # Errors
    /// `STATUS_INSUFFICIENT_RESOURCES` when `MAX_SLOTS` handles are open (or no memory is left for a slot).
    pub(crate) fn insert(&mut self, object: Object) -> Result<usize, NtStatus> {
        let index = self.take_slot()?;
        let slot = &mut self.slots[index];
        slot.object = Some(object);
        Ok(encode(index, slot.generation))
    }

    /// The object a handle names (only the value's low 32 bits count).
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` for a value that is not a live handle.
    pub(crate) fn get(&self, handle: usize) -> Result<&Object, NtStatus> {
        let (index, generation) = decode(handle).ok_or(NtStatus::INVALID_HANDLE)?;
        let slot = self.slots.get(index).ok_or(NtStatus::INVALID_HANDLE)?;
        if slot.generation != generation {
            return Err(NtStatus::INVALID_HANDLE);
        }
        slot.object.as_ref().ok_or(NtStatus::INVALID_HANDLE)
    }

    /// Remove a handle; its slot's generation moves on, so the old value stays invalid.
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` for a value that is not a live handle.
    pub(crate) fn remove(&mut self, handle: usize) -> Result<Object, NtStatus> {
        self.get(handle)?;
        let (index, _) = decode(handle).ok_or(NtStatus::INVALID_HANDLE)?;
        let slot = &mut self.slots[index];
        let object = slot.object.take().ok_or(NtStatus::INVALID_HANDLE)?;
        slot.generation = next_generation(slot.generation);
        // Room was reserved when the slot was made: every slot fits in the queue at once.
        self.free.push_back(index as u32);
        Ok(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object() -> Object {
        Object::Sampler(Arc::new(()))
    }

    fn same(a: &Object, b: &Object) -> bool {
        match (a, b) {
            (Object::Sampler(x), Object::Sampler(y)) => Arc::ptr_eq(x, y),
            _ => false,
        }
    }

    /// The forms a caller may pass back: as given, truncated to 32 bits and sign-extended, zero-extended, and
    /// with garbage in the upper half.
    fn forms(h: usize) -> [usize; 4] {
        [
            h,
            h as u32 as i32 as isize as usize,
            h as u32 as usize,
            (h as u32 as usize) | 0xDEAD_BEEF_0000_0000,
        ]
    }

    #[test]
    fn encoding() {
        let h = encode(0, 1);
        assert_eq!(h, 0x0040_0000);
        assert_eq!(decode(h), Some((0, 1)));
        let top = encode(MAX_SLOTS - 1, MAX_GENERATION);
        assert_eq!(top, 0x7FFF_FFFC, "the largest value stays below 2^31");
        assert_eq!(decode(top), Some((MAX_SLOTS - 1, MAX_GENERATION)));
        // Pseudo-handles and every other small negative value are never handles.
        for k in 1..=64usize {
            assert_eq!(decode(k.wrapping_neg()), None, "-{k}");
        }
        // Nothing below 2^22 (generation 0) is a handle: 0, 4, 0x1234, ...
        for v in [0usize, 4, 8, 0x1234, 0x3F_FFFC] {
            assert_eq!(decode(v), None, "{v:#x}");
        }
        assert_eq!(decode(h + 1), None);
        assert_eq!(decode(h + 2), None);
        assert_eq!(significant(usize::MAX), usize::MAX);
        assert_eq!(significant(0xFFFF_FFFF), usize::MAX, "(HANDLE)(ULONG)-1");
        assert_eq!(significant(0xFFFF_FFFE), usize::MAX - 1);
        assert_eq!(significant(0x1234_0040_0000), 0x40_0000);
    }

    #[test]
    fn values_survive_truncation_and_extension() {
        let mut t = Table::new();
        let mut live = Vec::new();
        for _ in 0..10_000 {
            let o = object();
            let h = t.insert(o.clone()).unwrap();
            assert!(h != 0 && h % 4 == 0, "{h:#x}");
            assert_eq!(
                h, h as u32 as i32 as isize as usize,
                "{h:#x} is its own sign extension"
            );
            assert!(h < 1 << 31, "{h:#x}");
            live.push((h, o));
        }
        for (h, o) in &live {
            for form in forms(*h) {
                assert!(same(t.get(form).unwrap(), o), "{form:#x}");
            }
        }
        // Close through a truncated value: every form of it is then stale.
        let (h, _) = live[17].clone();
        t.remove(h as u32 as i32 as isize as usize).unwrap();
        for form in forms(h) {
            assert_eq!(
                t.get(form).err(),
                Some(NtStatus::INVALID_HANDLE),
                "{form:#x}"
            );
        }
    }

    #[test]
    fn stale_value_after_reuse_of_its_slot() {
        let mut t = Table::new();
        let first = t.insert(object()).unwrap();
        t.remove(first).unwrap();
        // Create and close until the first slot is given out again.
        let (index, _) = decode(first).unwrap();
        let reused = loop {
            let o = object();
            let h = t.insert(o.clone()).unwrap();
            if decode(h).unwrap().0 == index {
                break (h, o);
            }
            t.remove(h).unwrap();
        };
        assert_ne!(reused.0, first);
        for form in forms(first) {
            assert_eq!(
                t.get(form).err(),
                Some(NtStatus::INVALID_HANDLE),
                "{form:#x}"
            );
            assert_eq!(
                t.remove(form).err(),
                Some(NtStatus::INVALID_HANDLE),
                "{form:#x}"
            );
        }
        assert!(same(t.get(reused.0).unwrap(), &reused.1));
        // It took REUSE_DELAY + 1 new slots before the first one came back.
        assert_eq!(t.slots.len(), REUSE_DELAY + 1);
    }

    /// Create-close cycles: a value repeats only after its slot went round every generation, and a slot comes
    /// back only after the queue of REUSE_DELAY + 1 free slots went round.
    #[test]
    fn a_value_repeats_only_after_every_generation() {
        let mut t = Table::new();
        let first = t.insert(object()).unwrap();
        t.remove(first).unwrap();
        let mut n = 1usize;
        loop {
            let h = t.insert(object()).unwrap();
            t.remove(h).unwrap();
            if h == first {
                break;
            }
            n += 1;
        }
        assert_eq!(n, (REUSE_DELAY + 1) * MAX_GENERATION as usize);
    }

    #[test]
    fn table_limit() {
        let mut t = Table::new();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..MAX_SLOTS {
            let h = t.insert(object()).unwrap();
            assert!(seen.insert(h), "{h:#x} given twice");
        }
        assert_eq!(seen.len(), 1 << 20);
        assert_eq!(
            t.insert(object()).err(),
            Some(NtStatus::INSUFFICIENT_RESOURCES)
        );
        // A close makes room at once (the table is full: no reuse delay), under a new value.
        let gone = encode(12_345, 1);
        t.remove(gone).unwrap();
        let again = t.insert(object()).unwrap();
        assert_eq!(decode(again), Some((12_345, 2)));
        assert_eq!(t.get(gone).err(), Some(NtStatus::INVALID_HANDLE));
        assert_eq!(
            t.insert(object()).err(),
            Some(NtStatus::INSUFFICIENT_RESOURCES)
        );
    }

    #[test]
    fn fork_child_invalidates_every_value() {
        let mut t = Table::new();
        let h = t.insert(object()).unwrap();
        t.invalidate_all();
        for form in forms(h) {
            assert_eq!(t.get(form).err(), Some(NtStatus::INVALID_HANDLE));
        }
    }
}
