//! The process-wide handle table. Handle values look like NT handles: non-zero multiples of 4, never a
//! pseudo-handle (`-1`, `-2`). Each carries the generation of its slot, so a closed handle's value is recognised
//! as stale rather than silently reaching a newer object. Values are looked up, never dereferenced.

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
    generation: u32,
    object: Option<Object>,
}

/// The table. Profile operations hold its lock for their whole duration, so that a close cannot race a start
/// of the same handle (lock order: this table, then the engine).
pub(crate) struct Table {
    slots: Vec<Slot>,
    free: Vec<usize>,
}

/// Slots addressable by a handle value (index in bits 2..32).
const MAX_SLOTS: usize = 1 << 29;

static TABLE: Mutex<Table> = Mutex::new(Table {
    slots: Vec::new(),
    free: Vec::new(),
});

/// Lock the table.
pub(crate) fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(PoisonError::into_inner)
}

fn encode(index: usize, generation: u32) -> usize {
    (((generation & 0x7FFF_FFFF) as usize) << 32) | ((index + 1) << 2)
}

fn decode(handle: usize) -> Option<(usize, u32)> {
    if handle & 3 != 0 {
        return None;
    }
    let low = (handle & 0xFFFF_FFFF) >> 2;
    let generation = (handle >> 32) as u32;
    if low == 0 || generation & 0x8000_0000 != 0 {
        return None;
    }
    Some((low - 1, generation))
}

impl Table {
    /// Invalidate every handle (a forked child: nothing of the parent's is usable there).
    pub(crate) fn invalidate_all(&mut self) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.object.take().is_some() {
                slot.generation = (slot.generation.wrapping_add(1) & 0x7FFF_FFFF).max(1);
                self.free.push(index);
            }
        }
    }

    /// Store `object` and return its new handle value. Callers install the fork handlers first
    /// (`crate::fork::install`), so that a forked child finds every inherited handle invalid, whatever its kind.
    pub(crate) fn insert(&mut self, object: Object) -> Result<usize, NtStatus> {
        let index = match self.free.pop() {
            Some(i) => i,
            None => {
                if self.slots.len() >= MAX_SLOTS {
                    return Err(NtStatus::INSUFFICIENT_RESOURCES);
                }
                self.slots
                    .try_reserve(1)
                    .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
                self.slots.push(Slot {
                    generation: 1,
                    object: None,
                });
                self.slots.len() - 1
            }
        };
        let slot = &mut self.slots[index];
        slot.object = Some(object);
        Ok(encode(index, slot.generation))
    }

    /// The object a handle names.
    ///
    /// # Errors
    /// `STATUS_INVALID_HANDLE` for a value that is not a live handle.
    pub(crate) fn get(&self, handle: usize) -> Result<&Object, NtStatus> {
        let (index, generation) = decode(handle).ok_or(NtStatus::INVALID_HANDLE)?;
        let slot = self.slots.get(index).ok_or(NtStatus::INVALID_HANDLE)?;
        if slot.generation & 0x7FFF_FFFF != generation {
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
        slot.generation = (slot.generation.wrapping_add(1) & 0x7FFF_FFFF).max(1);
        self.free.push(index);
        Ok(object)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding() {
        let h = encode(0, 1);
        assert_eq!(h % 4, 0);
        assert_ne!(h, 0);
        assert_eq!(decode(h), Some((0, 1)));
        assert_eq!(
            decode(usize::MAX),
            None,
            "NtCurrentProcess() is never a handle"
        );
        assert_eq!(decode(usize::MAX - 1), None);
        assert_eq!(decode(0), None);
        assert_eq!(decode(h + 1), None);
    }
}
