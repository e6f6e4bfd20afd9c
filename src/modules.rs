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

use std::collections::HashMap;
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use elf::ElfStream;
use elf::abi::{PF_X, PT_LOAD, SHN_UNDEF, SHT_GNU_VERSYM, STT_FUNC, STT_GNU_IFUNC};
use elf::endian::AnyEndian;

use crate::error::Error;
use crate::status::NtStatus;

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// The symbol's name as the symbol table has it (mangled for Rust and C++).
    pub name: String,
    /// The function's first address in the process (`st_value` + the module's load bias).
    pub address: u64,
    /// The function's size in bytes (`st_size`; 0 for hand-written assembly without a `.size` directive).
    pub size: u64,
    /// The name of the module defining it (as [`Module::name`]).
    pub module: String,
    /// The path of that module's file (empty for the kernel).
    pub module_path: PathBuf,
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

/// The modules of this process (`pid` `None`) or of process `pid`: one entry per executable mapping of each
/// loaded file, in the loader's order (the program first) for this process and in address order for another.
/// The vDSO is listed as `[vdso]`; anonymous executable memory (JIT code) is not a module.
///
/// For this process the list comes from the dynamic loader (`dl_iterate_phdr`): each executable `PT_LOAD`
/// segment exactly (`base` = load bias + `p_vaddr`, `size` = `p_memsz`). For another process it comes from
/// `/proc/PID/maps`: each executable mapping, page-aligned, with its load bias from the file's program headers.
///
/// # Errors
/// `STATUS_INVALID_CID` when no process `pid` exists, `STATUS_ACCESS_DENIED` when the caller may not read its
/// mappings (another user's process: the same ptrace check as profiling it).
///
/// ```
/// let mine = ntprofile::modules(None)?;
/// let exe = std::env::current_exe().unwrap();
/// assert_eq!(mine[0].path, exe.canonicalize().unwrap(), "the program comes first");
/// assert!(mine.iter().any(|m| m.name.starts_with("libc.so")));
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn modules(pid: Option<u32>) -> Result<Vec<Module>, Error> {
    match pid {
        None => Ok(own_modules()),
        Some(pid) => process_modules(pid),
    }
}

/// This process's modules from the loader.
fn own_modules() -> Vec<Module> {
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let vdso = crate::perf::loader::vdso_base();
    crate::perf::loader::loaded_segments()
        .into_iter()
        .map(|seg| {
            let base = seg.bias.wrapping_add(seg.vaddr);
            let is_vdso = vdso != 0 && (base..base.saturating_add(seg.memsz)).contains(&vdso);
            let (name, path) = if is_vdso {
                ("[vdso]".to_string(), PathBuf::new())
            } else if seg.object == 0 && seg.name.is_empty() {
                (file_name(&exe), exe.clone())
            } else {
                // The loader keeps the path it opened (`/lib/...` through a symlink); the kernel's maps show
                // the file's canonical path: give that one, so both lists name a file alike.
                let given = PathBuf::from(String::from_utf8_lossy(&seg.name).into_owned());
                let path = std::fs::canonicalize(&given).unwrap_or(given);
                (file_name(&path), path)
            };
            Module {
                name,
                path,
                base,
                size: seg.memsz,
                file_offset: seg.offset,
                load_bias: Some(seg.bias),
            }
        })
        .collect()
}

/// One line of `/proc/PID/maps`.
struct MapsLine<'a> {
    start: u64,
    end: u64,
    exec: bool,
    offset: u64,
    inode: u64,
    path: &'a str,
}

fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        let trimmed = rest.trim_start();
        let end = trimmed.find(' ').unwrap_or(trimmed.len());
        let (f, r) = trimmed.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let _dev = field();
    let inode = field();
    let (lo, hi) = range.split_once('-')?;
    Some(MapsLine {
        start: u64::from_str_radix(lo, 16).ok()?,
        end: u64::from_str_radix(hi, 16).ok()?,
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        path: rest.trim_start(),
    })
}

/// Read a `/proc/PID/...` file of another process, with the NT status of each failure.
fn read_proc(pid: u32, what: &str) -> Result<String, Error> {
    if pid == 0 || i32::try_from(pid).is_err() {
        return Err(Error::new(
            NtStatus::INVALID_CID,
            format!("no process {pid}"),
        ));
    }
    let path = format!("/proc/{pid}/{what}");
    std::fs::read_to_string(&path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => Error::new(NtStatus::INVALID_CID, format!("no process {pid}")),
        ErrorKind::PermissionDenied => Error::new(
            NtStatus::ACCESS_DENIED,
            format!(
                "this caller may not read {path} (another user's process: it needs ptrace access, or \
                 CAP_SYS_PTRACE)"
            ),
        ),
        _ => Error::new(
            NtStatus::from_errno(e.raw_os_error().unwrap_or(libc::EIO)),
            format!("cannot read {path}: {e}"),
        ),
    })
}

/// `(p_offset, p_vaddr, size)` of each executable `PT_LOAD` segment of an ELF file.
type LoadSegments = Vec<(u64, u64, u64)>;

/// The executable loadable segments of an ELF file. (Only those: a read-only segment often ends in the file
/// page where the text segment begins, so both would contain the offset of the text mapping.)
fn load_segments(file: File) -> Option<LoadSegments> {
    let elf = ElfStream::<AnyEndian, _>::open_stream(file).ok()?;
    Some(
        elf.segments()
            .iter()
            .filter(|ph| ph.p_type == PT_LOAD && ph.p_flags & PF_X != 0)
            .map(|ph| (ph.p_offset, ph.p_vaddr, ph.p_filesz.max(ph.p_memsz)))
            .collect(),
    )
}

/// Open the file behind a mapping of process `pid`: its path when that is still the mapped file (same inode),
/// else `/proc/PID/map_files/START-END` (needs the privilege to read another process's mappings).
fn open_mapped(pid: u32, line: &MapsLine<'_>, path: &str) -> Option<File> {
    use std::os::unix::fs::MetadataExt;
    if let Ok(file) = File::open(path)
        && file.metadata().is_ok_and(|m| m.ino() == line.inode)
    {
        return Some(file);
    }
    File::open(format!(
        "/proc/{pid}/map_files/{:x}-{:x}",
        line.start, line.end
    ))
    .ok()
}

/// The load bias of a mapping whose file offset is `offset` at address `start`: the segment containing that
/// offset maps file offset `o` to ELF address `p_vaddr - p_offset + o`.
fn bias_of(segments: &[(u64, u64, u64)], start: u64, offset: u64) -> Option<u64> {
    segments
        .iter()
        .find(|&&(p_offset, _, size)| {
            let page_start = p_offset & !0xFFF;
            offset >= page_start && offset < p_offset.saturating_add(size.max(1))
        })
        .map(|&(p_offset, p_vaddr, _)| {
            start.wrapping_sub(p_vaddr.wrapping_sub(p_offset).wrapping_add(offset))
        })
}

fn process_modules(pid: u32) -> Result<Vec<Module>, Error> {
    let maps = read_proc(pid, "maps")?;
    let mut segments_by_path: HashMap<String, Option<LoadSegments>> = HashMap::new();
    let mut out = Vec::new();
    for line in maps.lines().filter_map(parse_maps_line) {
        if !line.exec || line.path.is_empty() {
            continue;
        }
        if line.path == "[vdso]" {
            out.push(Module {
                name: "[vdso]".to_string(),
                path: PathBuf::new(),
                base: line.start,
                size: line.end - line.start,
                file_offset: line.offset,
                load_bias: None,
            });
            continue;
        }
        if line.path.starts_with('[') {
            // [vsyscall] and other kernel-provided pages: not a module of the process.
            continue;
        }
        let path = line.path.strip_suffix(" (deleted)").unwrap_or(line.path);
        let segments = segments_by_path
            .entry(path.to_string())
            .or_insert_with(|| open_mapped(pid, &line, path).and_then(load_segments));
        let load_bias = segments
            .as_deref()
            .and_then(|s| bias_of(s, line.start, line.offset));
        out.push(Module {
            name: file_name(Path::new(path)),
            path: PathBuf::from(path),
            base: line.start,
            size: line.end - line.start,
            file_offset: line.offset,
            load_bias,
        });
    }
    Ok(out)
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

/// The first executable mapping of the module named `name` in this process (`pid` `None`) or in process `pid`:
/// an exact file name (`"libm.so.6"`) or path wins, else a file name up to a dot (`"libm"`, `"libm.so"`).
///
/// # Errors
/// `STATUS_NOT_FOUND` when no module has that name (the detail lists the modules there are), and the errors
/// of [`modules`].
///
/// ```
/// use ntprofile::{NtStatus, find_module};
///
/// let libc = find_module(None, "libc.so.6")?;
/// assert!(libc.size > 0 && libc.load_bias.is_some());
/// assert_eq!(find_module(None, "libc")?, libc);
/// assert_eq!(find_module(None, "libnothing.so").unwrap_err().status(), NtStatus::NOT_FOUND);
/// # Ok::<(), ntprofile::Error>(())
/// ```
pub fn find_module(pid: Option<u32>, name: &str) -> Result<Module, Error> {
    let all = modules(pid)?;
    let exact = all
        .iter()
        .find(|m| m.name == name || (!m.path.as_os_str().is_empty() && m.path == Path::new(name)));
    if let Some(m) = exact.or_else(|| all.iter().find(|m| module_matches(m, name))) {
        return Ok(m.clone());
    }
    Err(Error::new(
        NtStatus::NOT_FOUND,
        format!(
            "no module {name:?} in {} (its modules: {})",
            whose(pid),
            names_of(&all)
        ),
    ))
}

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
    let chosen: Vec<&Module> = match module {
        None => all.iter().collect(),
        Some(wanted) => {
            let exact: Vec<&Module> = all
                .iter()
                .filter(|m| {
                    m.name == wanted
                        || (!m.path.as_os_str().is_empty() && m.path == Path::new(wanted))
                })
                .collect();
            if exact.is_empty() {
                all.iter().filter(|m| module_matches(m, wanted)).collect()
            } else {
                exact
            }
        }
    };
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
    Err(Error::new(NtStatus::NOT_FOUND, detail))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let l = parse_maps_line(
            "7f12a000-7f12c000 r-xp 00026000 fd:01 1234   /usr/lib/x86_64-linux-gnu/libm.so.6",
        )
        .unwrap();
        assert_eq!(
            (l.start, l.end, l.exec, l.offset, l.inode),
            (0x7f12a000, 0x7f12c000, true, 0x26000, 1234)
        );
        assert_eq!(l.path, "/usr/lib/x86_64-linux-gnu/libm.so.6");
        let anon = parse_maps_line("7f12a000-7f12c000 rw-p 00000000 00:00 0 ").unwrap();
        assert_eq!((anon.exec, anon.path), (false, ""));
        let spaced = parse_maps_line("1000-2000 r-xp 00000000 fd:01 7 /tmp/a b (deleted)").unwrap();
        assert_eq!(spaced.path, "/tmp/a b (deleted)");
    }

    #[test]
    fn bias_from_segments() {
        // A non-PIE program: text at 0x401000 from offset 0x1000, loaded where linked: bias 0.
        let segs = [(0x1000, 0x401000, 0x2000)];
        assert_eq!(bias_of(&segs, 0x401000, 0x1000), Some(0));
        // A library whose text segment (offset 0x26000, vaddr 0x26000) is mapped at 0x7f0000026000.
        let lib = [(0x26000, 0x26000, 0x70000)];
        // Text that starts mid-page, one page above its file offset (lld's layout).
        let pie = [(0x3b090, 0x3c090, 0xb0000)];
        assert_eq!(bias_of(&pie, 0x5_0003_c000, 0x3b000), Some(0x5_0000_0000));
        assert_eq!(
            bias_of(&lib, 0x7f00_0002_6000, 0x26000),
            Some(0x7f00_0000_0000)
        );
        assert_eq!(bias_of(&lib, 0x1000, 0x200000), None);
    }

    #[test]
    fn names() {
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
}
