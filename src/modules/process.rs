//! The modules of a process: this process's from the dynamic loader (`dl_iterate_phdr(3)`), another one's from
//! `/proc/PID/maps` with each module's load bias from its ELF program headers; one module by name.

use std::collections::HashMap;
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use elf::ElfStream;
use elf::abi::{PF_X, PT_LOAD};
use elf::endian::AnyEndian;

use super::{Module, file_name, module_matches, names_of, whose};
use crate::error::Error;
use crate::status::NtStatus;

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
}
