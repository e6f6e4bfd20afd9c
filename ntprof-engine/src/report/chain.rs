//! Where a call stack's walk ended: cut short (`[truncated]`), at a frame-pointer chain's end that is no
//! thread's or program's entry (`[fp chain ended]`), or at the stack's origin. Every format marks a stack the
//! same way, from this one rule.

use super::{Report, SourceReport, StackReport};

/// The frame after the outermost known one of a stack whose walk was cut short.
pub const TRUNCATED_FRAME: &str = "[truncated]";
/// The frame after the outermost one of a frame-pointer stack that ended at a function that is no thread's or
/// program's entry: code built without frame pointers (libc, most distribution binaries) cut the chain, and the
/// callers above it are unknown (`--call-graph dwarf` walks such code).
pub const FP_ENDED_FRAME: &str = "[fp chain ended]";

/// Whether `function` is where a thread's or the program's stack begins: a walk that reaches it is complete.
pub fn is_stack_origin(function: &str) -> bool {
    const ORIGINS: &[&str] = &[
        "_start",
        "__libc_start_main",
        "__libc_start_main_impl",
        "__libc_start_call_main",
        "start_thread",
        "clone",
        "clone3",
        "__clone",
        "__clone3",
        "__GI___clone3",
    ];
    // The kernel's: where a system call, an interrupt or exception, a new task or an idle CPU starts its stack.
    const KERNEL: &[&str] = &["entry_SYSCALL", "entry_INT80", "asm_", "ret_from_fork"];
    const KERNEL_IDLE: &[&str] = &[
        "secondary_startup_64",
        "common_startup_64",
        "x86_64_start_kernel",
    ];
    ORIGINS.contains(&function)
        || function.ends_with("thread_start")
        || KERNEL.iter().any(|k| function.starts_with(k))
        || KERNEL_IDLE.contains(&function)
}

impl Report {
    /// Whether the run's call stacks are frame-pointer chains (`-g`, `--call-graph fp`).
    pub fn fp_stacks(&self) -> bool {
        self.run.call_graph.as_deref() == Some("fp")
    }
}

impl SourceReport {
    /// The marker frame to put above `stack`'s outermost frame ([`TRUNCATED_FRAME`], [`FP_ENDED_FRAME`]), or
    /// `None` when its walk was whole. `fp`: the run's stacks are frame-pointer chains ([`Report::fp_stacks`]);
    /// a stack recorded with [`StackReport::fp_chain_ended`] is marked whatever `fp` says.
    pub fn chain_end(&self, stack: &StackReport, fp: bool) -> Option<&'static str> {
        // A walk that passed an entry is whole, whatever lies above it: a stripped program's `_start` has no
        // name (`prog+0x…`) above `__libc_start_main`.
        let passed_an_entry = || {
            stack.frames.iter().any(|&l| {
                self.locations
                    .get(l as usize)
                    .is_some_and(|loc| loc.frames.iter().any(|f| is_stack_origin(&f.function)))
            })
        };
        let ended = || fp && !passed_an_entry();
        if stack.truncated {
            Some(TRUNCATED_FRAME)
        } else if stack.fp_chain_ended || ended() {
            Some(FP_ENDED_FRAME)
        } else {
            None
        }
    }
}
