//! A new window of a run cut into windows: the counts start again from zero, and everything the model
//! learned stays (processes, mappings, stacks, unwinders, JIT dumps), so the next window costs only its own
//! samples. The maps keep their capacity: a steady program's windows allocate nothing new.

use super::Tracker;

impl Tracker {
    /// Start a new window: every count back to zero.
    pub fn start_window(&mut self) {
        for s in &mut self.sources {
            s.counts.clear();
            s.outside.clear();
            s.samples = 0;
            s.lost = 0;
            s.throttled = 0;
        }
        if let Some(w) = &mut self.waits {
            w.start_window();
        }
        self.unwinding.truncated = 0;
        self.unwinding.walks = 0;
        self.jit.start_window();
    }
}
