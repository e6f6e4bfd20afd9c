//! The kernel's text, its loaded modules and its functions, for a global profile of the kernel
//! (`/proc/kallsyms`, `/proc/modules`).

use std::path::PathBuf;

use super::{Module, Symbol};
use crate::error::Error;
use crate::status::NtStatus;

/// One text symbol of `/proc/kallsyms`: address, name, module (`None`: the kernel image).
struct KernelSymbol<'a> {
    address: u64,
    name: &'a str,
    module: Option<&'a str>,
}

fn text_symbols(kallsyms: &str) -> impl Iterator<Item = KernelSymbol<'_>> {
    kallsyms.lines().filter_map(|line| {
        let mut fields = line.split_whitespace();
        let address = u64::from_str_radix(fields.next()?, 16).ok()?;
        let kind = fields.next()?;
        if !matches!(kind, "t" | "T") {
            return None;
        }
        let name = fields.next()?;
        let module = fields
            .next()
            .and_then(|m| m.strip_prefix('[')?.strip_suffix(']'));
        Some(KernelSymbol {
            address,
            name,
            module,
        })
    })
}

const HIDDEN: &str = "kernel addresses are hidden from this caller (/proc/kallsyms shows them as 0): reading \
                      them needs CAP_SYSLOG with kernel.kptr_restrict <= 1, or kernel.kptr_restrict = 0 with \
                      kernel.perf_event_paranoid <= 1";

fn read_kallsyms() -> Result<String, Error> {
    std::fs::read_to_string("/proc/kallsyms").map_err(|e| {
        Error::new(
            NtStatus::ACCESS_DENIED,
            format!("cannot read /proc/kallsyms: {e}"),
        )
    })
}

/// The kernel's text and its loaded modules, as a kernel profiler (kernrate) lists them: first `[kernel]`, the
/// kernel image's text `[_stext, _etext)` from `/proc/kallsyms`, then each loaded module from `/proc/modules`
/// (its whole core image: `/proc/modules` does not separate text from data). Profile them with a global
/// profile ([`ProfileBuilder::global`](crate::ProfileBuilder::global)), which needs the privilege too.
///
/// # Errors
/// `STATUS_PRIVILEGE_NOT_HELD` when the kernel hides its addresses from this caller (`/proc/kallsyms` then
/// shows every address as 0; reading them needs `CAP_SYSLOG` with `kernel.kptr_restrict` <= 1, or
/// `kernel.kptr_restrict` = 0 with `kernel.perf_event_paranoid` <= 1);
/// `STATUS_ACCESS_DENIED` when `/proc/kallsyms` cannot be read; `STATUS_NOT_FOUND` when it has no
/// `_stext`/`_etext`.
///
/// ```no_run
/// let kernel = ntprofile::kernel_modules()?;
/// assert_eq!(kernel[0].name, "[kernel]");
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn kernel_modules() -> Result<Vec<Module>, Error> {
    let kallsyms = read_kallsyms()?;
    let mut stext = None;
    let mut etext = None;
    for line in kallsyms.lines() {
        let mut fields = line.split_whitespace();
        let (Some(address), Some(_), Some(name)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let slot = match name {
            "_stext" => &mut stext,
            "_etext" => &mut etext,
            _ => continue,
        };
        *slot = u64::from_str_radix(address, 16).ok();
        if stext.is_some() && etext.is_some() {
            break;
        }
    }
    let (Some(stext), Some(etext)) = (stext, etext) else {
        return Err(Error::new(
            NtStatus::NOT_FOUND,
            "/proc/kallsyms has no _stext or _etext symbol",
        ));
    };
    if stext == 0 || etext == 0 {
        return Err(Error::new(NtStatus::PRIVILEGE_NOT_HELD, HIDDEN));
    }
    let mut out = vec![Module {
        name: "[kernel]".to_string(),
        path: PathBuf::new(),
        base: stext,
        size: etext.saturating_sub(stext),
        file_offset: 0,
        load_bias: None,
    }];
    out.extend(loaded_kernel_modules());
    Ok(out)
}

/// `/proc/modules`: `name size refcount deps state address`, live modules with a known address only.
fn loaded_kernel_modules() -> Vec<Module> {
    let text = std::fs::read_to_string("/proc/modules").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (name, size, address) = (fields.first()?, fields.get(1)?, fields.get(5)?);
            let base = u64::from_str_radix(address.trim_start_matches("0x"), 16).ok()?;
            let size: u64 = size.parse().ok()?;
            (base != 0 && size > 0).then(|| Module {
                name: name.to_string(),
                path: PathBuf::new(),
                base,
                size,
                file_offset: 0,
                load_bias: None,
            })
        })
        .collect()
}

/// Every text symbol of the kernel and its modules from `/proc/kallsyms`, sorted by address. `/proc/kallsyms`
/// gives no sizes: each function is taken to end where the next one starts (the last one of the kernel image at
/// `_etext`, of a module at the module's end). `module` is `[kernel]` or the module's name.
///
/// # Errors
/// As [`kernel_modules`].
///
/// ```no_run
/// let symbols = ntprofile::kernel_symbols()?;
/// let at = |address: u64| symbols.iter().find(|s| s.contains(address));
/// # let _ = at(0);
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn kernel_symbols() -> Result<Vec<Symbol>, Error> {
    let modules = kernel_modules()?;
    let kallsyms = read_kallsyms()?;
    let mut symbols: Vec<KernelSymbol<'_>> =
        text_symbols(&kallsyms).filter(|s| s.address != 0).collect();
    symbols.sort_by_key(|s| s.address);
    let end_of = |s: &KernelSymbol<'_>| -> u64 {
        let name = s.module.unwrap_or("[kernel]");
        modules
            .iter()
            .find(|m| m.name == name && m.contains(s.address))
            .map_or(s.address, Module::end)
    };
    let mut out = Vec::with_capacity(symbols.len());
    for (i, s) in symbols.iter().enumerate() {
        let limit = end_of(s);
        let next = symbols[i + 1..]
            .iter()
            .map(|n| n.address)
            .find(|&a| a > s.address)
            .unwrap_or(limit);
        out.push(Symbol {
            name: s.name.to_string(),
            demangled: s.name.to_string(),
            address: s.address,
            size: next.min(limit.max(s.address)).saturating_sub(s.address),
            module: s.module.unwrap_or("[kernel]").to_string(),
            module_path: PathBuf::new(),
        });
    }
    Ok(out)
}

/// A kernel function by name (`module`: `None` for any, `"[kernel]"` for the image, or a module's name).
///
/// # Errors
/// As [`kernel_symbols`], and `STATUS_NOT_FOUND` when no text symbol has that name.
///
/// ```no_run
/// use ntprofile::{Profile, find_kernel_function};
///
/// // Every process's time in the kernel's scheduler (needs the privilege of a global profile).
/// let schedule = find_kernel_function(Some("[kernel]"), "schedule")?;
/// let profile = Profile::builder().global().function(&schedule).build()?;
/// profile.start()?;
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn find_kernel_function(module: Option<&str>, name: &str) -> Result<Symbol, Error> {
    kernel_symbols()?
        .into_iter()
        .find(|s| s.name == name && module.is_none_or(|m| s.module == m))
        .ok_or_else(|| {
            Error::new(
                NtStatus::NOT_FOUND,
                format!(
                    "no kernel function {name:?}{} in /proc/kallsyms",
                    module.map(|m| format!(" in {m}")).unwrap_or_default()
                ),
            )
        })
}
