//! A function by name: its exact range from the ELF symbol tables (`.symtab`, then `.dynsym`) of a module of
//! this process or of another one.

use std::fs::File;
use std::path::Path;

use elf::ElfStream;
use elf::abi::{SHN_UNDEF, SHT_GNU_VERSYM, STT_FUNC, STT_GNU_IFUNC};
use elf::endian::AnyEndian;

use super::process::modules;
use super::{Module, Symbol, module_matches, names_of, whose};
use crate::error::Error;
use crate::status::NtStatus;

/// Does the symbol-table name `raw` name the function `wanted`? The name itself, the name before the default
/// symbol version (`memcpy@@GLIBC_2.14`; not a compatibility version, `memcpy@GLIBC_2.2.5`, which programs
/// linked today do not call), or a Rust path without its hash (`my_crate::module::function`).
fn symbol_matches(raw: &str, wanted: &str) -> bool {
    if raw == wanted {
        return true;
    }
    if let Some((base, _)) = raw.split_once("@@")
        && base == wanted
    {
        return true;
    }
    let last = wanted.rsplit("::").next().unwrap_or(wanted);
    if wanted.contains("::")
        && (raw.starts_with("_ZN") || raw.starts_with("_R"))
        && raw.contains(last)
        && let Ok(demangled) = rustc_demangle::try_demangle(raw)
    {
        return format!("{demangled:#}") == wanted;
    }
    false
}

/// What a search of one file found.
enum Lookup {
    /// A function: `(name, st_value, st_size)`.
    Found(String, u64, u64),
    /// Only an indirect function (`STT_GNU_IFUNC`): its symbol is the resolver, not the code that runs.
    IndirectOnly,
    /// Nothing of that name.
    Missing,
}

/// Search `.symtab`, then `.dynsym` of an ELF file for the defined function `wanted`; a symbol with a size wins
/// over one without.
fn lookup(file: File, wanted: &str) -> Result<Lookup, elf::ParseError> {
    let mut elf = ElfStream::<AnyEndian, _>::open_stream(file)?;
    // `.gnu.version`: one entry per `.dynsym` symbol; bit 15 marks a hidden (non-default) version, such as
    // libm's `exp@GLIBC_2.2.5` beside the `exp@@GLIBC_2.29` that programs call.
    let versym_header = elf
        .section_headers()
        .iter()
        .find(|h| h.sh_type == SHT_GNU_VERSYM)
        .copied();
    let little = matches!(elf.ehdr.endianness, AnyEndian::Little);
    let versym: Vec<u16> = match versym_header {
        Some(h) => elf
            .section_data(&h)?
            .0
            .chunks_exact(2)
            .map(|b| {
                let b = [b[0], b[1]];
                if little {
                    u16::from_le_bytes(b)
                } else {
                    u16::from_be_bytes(b)
                }
            })
            .collect(),
        None => Vec::new(),
    };
    let mut sized_none: Option<(String, u64)> = None;
    let mut indirect = false;
    for dynamic in [false, true] {
        let tables = if dynamic {
            elf.dynamic_symbol_table()?
        } else {
            elf.symbol_table()?
        };
        let Some((symbols, strings)) = tables else {
            continue;
        };
        for (index, sym) in symbols.iter().enumerate() {
            if sym.st_shndx == SHN_UNDEF {
                continue;
            }
            if dynamic && versym.get(index).is_some_and(|v| v & 0x8000 != 0) {
                continue;
            }
            let kind = sym.st_symtype();
            if kind != STT_FUNC && kind != STT_GNU_IFUNC {
                continue;
            }
            let Ok(raw) = strings.get(sym.st_name as usize) else {
                continue;
            };
            if !symbol_matches(raw, wanted) {
                continue;
            }
            if kind == STT_GNU_IFUNC {
                indirect = true;
            } else if sym.st_size > 0 {
                return Ok(Lookup::Found(raw.to_string(), sym.st_value, sym.st_size));
            } else if sized_none.is_none() {
                sized_none = Some((raw.to_string(), sym.st_value));
            }
        }
    }
    Ok(match sized_none {
        Some((name, value)) => Lookup::Found(name, value, 0),
        None if indirect => Lookup::IndirectOnly,
        None => Lookup::Missing,
    })
}

/// The exact range of function `name` in this process (`pid` `None`) or in process `pid`, from the ELF symbol
/// tables (`.symtab`, then `.dynsym`) of the module named `module`, or of every module in order (the program
/// first for this process) when `module` is `None`. Its address is the symbol's `st_value` plus the module's
/// load bias; its size is `st_size`.
///
/// `name` is the symbol's name (`"cos"`, a C function, a `#[no_mangle]` Rust function, a mangled C++ name), or
/// a Rust function's path without its hash (`"my_crate::module::function"`). A local (`static`) function is
/// found by its name too, the first one wins when several files' functions share it.
///
/// # Errors
/// - `STATUS_NOT_FOUND` when no module has that name, or no searched module defines a function of that name
///   (the detail says which, and when the name is only an indirect function, `STT_GNU_IFUNC`, whose symbol is
///   the resolver and not the code that runs: profile the module then);
/// - the errors of [`modules`] for another process.
///
/// ```
/// use ntprofile::{NtStatus, find_function};
///
/// let qsort = find_function(None, Some("libc.so.6"), "qsort")?;
/// assert!(qsort.size > 0 && qsort.module == "libc.so.6");
/// let missing = find_function(None, None, "no_such_function_anywhere").unwrap_err();
/// assert_eq!(missing.status(), NtStatus::NOT_FOUND);
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn find_function(pid: Option<u32>, module: Option<&str>, name: &str) -> Result<Symbol, Error> {
    let all = modules(pid)?;
    let chosen = chosen_modules(&all, module);
    if chosen.is_empty() {
        return Err(Error::new(
            NtStatus::NOT_FOUND,
            format!(
                "no module {:?} in {} (its modules: {})",
                module.unwrap_or_default(),
                whose(pid),
                names_of(&all)
            ),
        ));
    }
    let mut unreadable: Vec<String> = Vec::new();
    let mut indirect: Option<String> = None;
    let mut searched: Vec<&Path> = Vec::new();
    for m in &chosen {
        if m.path.as_os_str().is_empty() || searched.contains(&m.path.as_path()) {
            continue;
        }
        searched.push(&m.path);
        let Some(bias) = m.load_bias else {
            unreadable.push(m.name.clone());
            continue;
        };
        let file = match pid {
            Some(pid) => File::open(&m.path).or_else(|_| {
                File::open(format!("/proc/{pid}/map_files/{:x}-{:x}", m.base, m.end()))
            }),
            None => File::open(&m.path),
        };
        let Ok(file) = file else {
            unreadable.push(m.name.clone());
            continue;
        };
        match lookup(file, name) {
            Ok(Lookup::Found(raw, value, size)) => {
                let address = value.wrapping_add(bias);
                // Name the executable mapping holding it (a module may have several).
                let holder = all
                    .iter()
                    .find(|x| x.path == m.path && x.contains(address))
                    .unwrap_or(m);
                return Ok(Symbol {
                    demangled: super::demangle(&raw),
                    name: raw,
                    address,
                    size,
                    module: holder.name.clone(),
                    module_path: holder.path.clone(),
                });
            }
            Ok(Lookup::IndirectOnly) => {
                indirect.get_or_insert_with(|| m.name.clone());
            }
            Ok(Lookup::Missing) => {}
            Err(_) => unreadable.push(m.name.clone()),
        }
    }
    Err(Error::new(
        NtStatus::NOT_FOUND,
        not_found_detail(pid, module, name, indirect, &unreadable),
    ))
}

/// The modules `find_function` searches: every one when `module` is `None`, else those named exactly (file name
/// or path), else those whose file name matches up to a dot.
fn chosen_modules<'a>(all: &'a [Module], module: Option<&str>) -> Vec<&'a Module> {
    let Some(wanted) = module else {
        return all.iter().collect();
    };
    let exact: Vec<&Module> = all
        .iter()
        .filter(|m| {
            m.name == wanted || (!m.path.as_os_str().is_empty() && m.path == Path::new(wanted))
        })
        .collect();
    if exact.is_empty() {
        all.iter().filter(|m| module_matches(m, wanted)).collect()
    } else {
        exact
    }
}

/// Why `find_function` found nothing: where it searched, an indirect function it saw instead (`indirect`: the
/// module that has one), and the files it could not read.
fn not_found_detail(
    pid: Option<u32>,
    module: Option<&str>,
    name: &str,
    indirect: Option<String>,
    unreadable: &[String],
) -> String {
    let place = match module {
        Some(module) => format!("module {module:?} of {}", whose(pid)),
        None => format!("any module of {}", whose(pid)),
    };
    let mut detail = format!("no function {name:?} in {place} (.symtab and .dynsym searched)");
    if let Some(m) = indirect {
        detail.push_str(&format!(
            "; {m} has {name:?} only as an indirect function (STT_GNU_IFUNC), whose symbol is the resolver and \
             not the code that runs: profile the module instead"
        ));
    }
    if !unreadable.is_empty() {
        detail.push_str(&format!(
            "; these files could not be read: {}",
            unreadable.join(", ")
        ));
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbol_names() {
        assert!(symbol_matches("memcpy@@GLIBC_2.14", "memcpy"));
        assert!(
            !symbol_matches("memcpy@GLIBC_2.2.5", "memcpy"),
            "a compatibility version"
        );
        assert!(symbol_matches("memcpy@GLIBC_2.2.5", "memcpy@GLIBC_2.2.5"));
        assert!(symbol_matches("cos", "cos"));
        assert!(!symbol_matches("cosf", "cos"));
        assert!(symbol_matches(
            "_ZN13find_function3hot17h0123456789abcdefE",
            "find_function::hot"
        ));
        assert!(!symbol_matches(
            "_ZN13find_function4cold17h0123456789abcdefE",
            "find_function::hot"
        ));
    }
}
