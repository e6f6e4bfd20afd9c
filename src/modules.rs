//! What to profile: the modules of a process and the address ranges of functions, as Windows code gets them
//! from the loader (`EnumProcessModules` + `GetModuleInformation`) and the symbol tables.
//!
//! - [`modules`]: every executable mapping of this process (from the dynamic loader, `dl_iterate_phdr(3)`) or of
//!   another one (from `/proc/PID/maps`), with the module's name, path, base, size, file offset and load bias;
//! - [`find_module`]: one module by file name (`"libm.so.6"`, or `"libm"` up to a dot) or by path;
//! - [`find_function`]: a function's exact range `[address, address + size)` from the ELF `.symtab` and
//!   `.dynsym` tables (`st_value` + the module's load bias, `st_size`);
//! - [`kernel_modules`] and [`kernel_symbols`]: the kernel's text and its loaded modules (`/proc/kallsyms`,
//!   `/proc/modules`), for a global profile of the kernel.
//!
//! ```no_run
//! use ntprofile::{Profile, find_function};
//!
//! #[unsafe(no_mangle)]
//! pub extern "C" fn my_hot_function(n: u64) -> u64 { (0..n).fold(0, |a, b| a ^ b.wrapping_mul(31)) }
//!
//! let hot = find_function(None, None, "my_hot_function")?;
//! let profile = Profile::builder().function(&hot).bucket_size(2).build()?;
//! profile.start()?;
//! std::hint::black_box(my_hot_function(std::hint::black_box(50_000_000)));
//! profile.stop()?;
//! println!("{} samples in {} ({} bytes)", profile.stats().counted, hot.name, hot.size);
//! # Ok::<(), ntprofile::Error>(())
//! ```
//!
//! Where each part lives: this file holds the two types and the name matching they share; `process` lists the
//! modules of this process (the loader) and of another one (`/proc/PID/maps`) and finds one by name; `symbols`
//! finds a function in the ELF symbol tables; `kernel` reads the kernel's text, modules and symbols
//! (`/proc/kallsyms`, `/proc/modules`).

mod kernel;
mod process;
mod symbols;

use std::path::{Path, PathBuf};

pub use kernel::{find_kernel_function, kernel_modules, kernel_symbols};
pub use process::{find_module, modules};
pub use symbols::find_function;

/// One executable mapping of a module: the range to pass to
/// [`ProfileBuilder::module`](crate::ProfileBuilder::module) (or as `ProfileBase`/`ProfileSize`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Module {
    /// The file name (`libm.so.6`, the program's name), or a pseudo-name: `[vdso]`, `[kernel]` (the kernel's
    /// text), or a kernel module's name (`ext4`).
    pub name: String,
    /// The file the module was loaded from (empty for the vDSO and kernel modules).
    pub path: PathBuf,
    /// The first address of the mapping.
    pub base: u64,
    /// The size of the mapping in bytes.
    pub size: u64,
    /// The file offset `base` was loaded from (0 for the kernel).
    pub file_offset: u64,
    /// Runtime address minus ELF address (`st_value`, `p_vaddr`) for this module: add it to a symbol's value to
    /// get its address in the process. `None` when the file could not be read (replaced, deleted or not
    /// readable by the caller) and for the kernel.
    pub load_bias: Option<u64>,
}

impl Module {
    /// One past the last address of the mapping.
    pub fn end(&self) -> u64 {
        self.base.saturating_add(self.size)
    }

    /// True when `address` lies in the mapping.
    ///
    /// ```
    /// let here = ntprofile::modules(None)?
    ///     .into_iter()
    ///     .find(|m| m.contains(ntprofile::modules as *const () as u64))
    ///     .expect("this code is in a module");
    /// assert!(here.base < here.end());
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn contains(&self, address: u64) -> bool {
        (self.base..self.end()).contains(&address)
    }
}

/// A function found by name: its exact range in the process, from the symbol table.
///
/// ```
/// let s = ntprofile::find_function(None, Some("libc.so.6"), "getenv")?;
/// assert_eq!((s.name.as_str(), s.demangled.as_str()), ("getenv", "getenv"));
/// # Ok::<(), ntprofile::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// The symbol's name as the symbol table has it (mangled for Rust and C++).
    pub name: String,
    /// The name as people read it: a Rust symbol demangled to its path without the hash
    /// (`_ZN5myapp4work17h…E` is `myapp::work`, the name `find_function` takes), legacy and v0 manglings alike;
    /// any other name as [`Symbol::name`] has it (C++ names stay mangled: demangling them would need a C++
    /// demangler in the library, which the profiling calls do not need; ntprof's reports demangle them).
    pub demangled: String,
    /// The function's first address in the process (`st_value` + the module's load bias).
    pub address: u64,
    /// The function's size in bytes (`st_size`; 0 for hand-written assembly without a `.size` directive).
    pub size: u64,
    /// The name of the module defining it (as [`Module::name`]).
    pub module: String,
    /// The path of that module's file (empty for the kernel).
    pub module_path: PathBuf,
}

/// `raw` as people read it: a Rust symbol's path without its hash, any other name unchanged.
pub(crate) fn demangle(raw: &str) -> String {
    match rustc_demangle::try_demangle(raw) {
        Ok(d) => format!("{d:#}"),
        Err(_) => raw.to_string(),
    }
}

impl Symbol {
    /// One past the function's last byte.
    pub fn end(&self) -> u64 {
        self.address.saturating_add(self.size)
    }

    /// True when `address` lies in the function.
    ///
    /// ```
    /// let getenv = ntprofile::find_function(None, Some("libc.so.6"), "getenv")?;
    /// assert!(getenv.contains(getenv.address) && !getenv.contains(getenv.end()));
    /// # Ok::<(), ntprofile::Error>(())
    /// ```
    pub fn contains(&self, address: u64) -> bool {
        (self.address..self.end()).contains(&address)
    }
}

/// Who, in error details.
fn whose(pid: Option<u32>) -> String {
    match pid {
        None => "this process".to_string(),
        Some(pid) => format!("process {pid}"),
    }
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string_lossy().into_owned())
}
/// Does `module` answer to `wanted`: its file name, its path, or its file name up to a dot (`libm` and
/// `libm.so` name `libm.so.6`)?
fn module_matches(module: &Module, wanted: &str) -> bool {
    module.name == wanted
        || (!module.path.as_os_str().is_empty() && module.path == Path::new(wanted))
        || module
            .name
            .strip_prefix(wanted)
            .is_some_and(|rest| rest.starts_with('.'))
}

fn names_of(modules: &[Module]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for m in modules {
        if !names.contains(&m.name.as_str()) {
            names.push(&m.name);
        }
    }
    let more = names.len().saturating_sub(24);
    names.truncate(24);
    let mut text = names.join(", ");
    if more > 0 {
        text.push_str(&format!(" and {more} more"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names() {
        let m = Module {
            name: "libm.so.6".into(),
            path: "/usr/lib/libm.so.6".into(),
            base: 0,
            size: 1,
            file_offset: 0,
            load_bias: None,
        };
        assert!(module_matches(&m, "libm"));
        assert!(module_matches(&m, "libm.so"));
        assert!(module_matches(&m, "/usr/lib/libm.so.6"));
        assert!(!module_matches(&m, "libmvec"));
        assert!(!module_matches(&m, "lib"));
    }

    #[test]
    fn rust_names_are_demangled_without_their_hash() {
        assert_eq!(
            demangle("_ZN5myapp4work17h0123456789abcdefE"),
            "myapp::work"
        );
        assert_eq!(demangle("_RNvCs1234_5myapp4work"), "myapp::work");
        // C names, C++ names and versioned names are left as the table has them.
        for raw in ["getenv", "_Z4worki", "memcpy@@GLIBC_2.14", ""] {
            assert_eq!(demangle(raw), raw);
        }
    }
}
