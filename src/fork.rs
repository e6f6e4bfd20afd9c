//! `fork()` of a profiling process. The child has no consumer thread and no ring mappings (perf maps are
//! `VM_DONTCOPY`) but inherits the descriptors: it must treat every profile as dead and never touch the rings.
//!
//! At the top of the layers: it knows both the handle table (`handles`) and the engine. Before a fork, the
//! forking thread takes the handle table's lock and the engine's lock (in the usual order), so that no other
//! thread is half-way through an API call when the address space is copied. The parent then releases them. The
//! child, holding both, invalidates every handle, closes its copies of the event descriptors, forgets the
//! parent's consumer and jitter threads, and releases them.

use std::cell::RefCell;
use std::sync::{MutexGuard, Once};

use crate::engine::{self, Engine};
use crate::handles::{Table, table};

thread_local! {
    static HELD: RefCell<Option<(MutexGuard<'static, Table>, MutexGuard<'static, Engine>)>> =
        const { RefCell::new(None) };
}

extern "C" fn prepare() {
    let t = table();
    let e = engine::lock();
    HELD.with(|h| *h.borrow_mut() = Some((t, e)));
}

extern "C" fn parent() {
    HELD.with(|h| drop(h.borrow_mut().take()));
}

extern "C" fn child() {
    HELD.with(|h| {
        if let Some((mut t, mut e)) = h.borrow_mut().take() {
            t.invalidate_all();
            e.forget_after_fork();
        }
    });
}

/// Install the fork handlers (once per process; called by both APIs at every profile creation, before the
/// first start can create a thread).
pub(crate) fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = crate::perf::sys::register_atfork(prepare, parent, child);
    });
}
