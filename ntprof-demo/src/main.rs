//! `ntprof-demo`: the program the README's quick start profiles with `ntprof record -- target/release/ntprof-demo`.
//!
//! Its CPU time is split 50 % / 30 % / 20 % by construction between `demo_exe_hot` (in this executable),
//! `demo_lib_hot` (in `libntprof_demo_lib.so`, a shared library the dynamic loader maps at startup) and
//! `demo_plugin_hot` (in `libntprof_demo_plugin.so`, loaded with `dlopen` when the work starts). The C parts are
//! built by `build.rs`. Usage: `ntprof-demo [SECONDS]` (CPU seconds of work, default 2).

use std::ffi::{CString, c_char, c_double, c_int};
use std::process::ExitCode;

unsafe extern "C" {
    /// The work loop (csrc/demo_main.c).
    fn ntprof_demo_run(seconds: c_double, plugin_path: *const c_char) -> c_int;
}

/// Where build.rs put the plugin.
const PLUGIN: &str = env!("NTPROF_DEMO_PLUGIN");

fn main() -> ExitCode {
    let seconds = match std::env::args().nth(1).map(|s| s.parse::<f64>()) {
        None => 2.0,
        Some(Ok(s)) if s.is_finite() && s > 0.0 && s <= 3600.0 => s,
        Some(_) => {
            eprintln!("usage: ntprof-demo [SECONDS]   (0 < SECONDS <= 3600, default 2)");
            return ExitCode::from(2);
        }
    };
    let plugin = CString::new(PLUGIN).expect("the plugin path has no NUL byte");
    // SAFETY: the C function takes a finite number and a NUL-terminated path that outlives the call.
    let rc = unsafe { ntprof_demo_run(seconds, plugin.as_ptr()) };
    ExitCode::from(rc.clamp(0, 255) as u8)
}
