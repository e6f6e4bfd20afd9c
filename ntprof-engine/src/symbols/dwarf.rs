//! An object's DWARF, read into memory and checked before it is used: the inlined frames, files and lines of
//! an address.
//!
//! The debug sections are read with `pread` (through object's read cache) and copied into memory that ntprof
//! owns, never mapped: a library rewritten or truncated while the report is built (a build during a profile)
//! costs its lines, not a `SIGBUS`. Before the sections are handed to addr2line, every unit's entries are walked
//! once, without recursion, and DWARF whose entries nest deeper than [`MAX_DEPTH`] is refused: addr2line
//! parses inlined functions recursively, one stack frame per level, and a file with tens of thousands of
//! nested levels would overflow ntprof's stack. The walk costs one pass over `.debug_info`.
//!
//! A supplementary file (`.gnu_debugaltlink`, the common part that `dwz` moves out of distribution debug
//! files) is read the same way, with the same rules as the file that names it.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use addr2line::gimli::{self, EndianArcSlice, RunTimeEndian, SectionId};
use object::{Object, ObjectSection, ReadCache, ReadRef};

use crate::files::{self, Owners, Root};

/// The deepest nesting of debugging entries accepted (real programs stay under a few dozen levels; each
/// level costs addr2line a stack frame).
pub const MAX_DEPTH: isize = 1024;

/// The reader addr2line is given: sections held in memory by reference count.
pub type Reader = EndianArcSlice<RunTimeEndian>;

/// An object's DWARF, ready for lookups.
pub type Context = addr2line::Context<Reader>;

/// Whether addr2line may be asked about `addr`: a lookup computes the address after it, which overflows for
/// the last address (no code ends there, so nothing is lost by not asking).
pub fn can_look_up(addr: u64) -> bool {
    addr < u64::MAX
}

/// Read the DWARF of the object at `path` (a regular file owned as `owners` allow, at most
/// [`files::OBJECT_CAP`] bytes) and check it; why not when it cannot be used. `path` and its supplementary
/// file are resolved in `root` (a container's paths in the container).
pub fn load_in(root: &Root, path: &Path, owners: &Owners) -> Result<Context, String> {
    let (mut dwarf, alt) = sections(root, path, owners)?;
    if let Some(name) = alt
        && let Ok((sup, _)) = sections(root, &sup_path(path, &name), owners)
    {
        dwarf.set_sup(sup);
    }
    context(dwarf)
}

/// The checked DWARF of sections already read.
pub fn context(dwarf: gimli::Dwarf<Reader>) -> Result<Context, String> {
    check_depth(&dwarf)?;
    Context::from_dwarf(dwarf).map_err(|e| format!("its DWARF cannot be read: {e}"))
}

/// The debug sections of the file at `path`, and the file name its `.gnu_debugaltlink` gives.
fn sections(
    root: &Root,
    path: &Path,
    owners: &Owners,
) -> Result<(gimli::Dwarf<Reader>, Option<Vec<u8>>), String> {
    let (file, len) = files::open_in(root, path, owners)?;
    if len > files::OBJECT_CAP {
        return Err(format!(
            "not read: it has {len} bytes, more than the {} GiB ntprof reads",
            files::OBJECT_CAP >> 30
        ));
    }
    let cache = ReadCache::new(files::Budgeted::new(file, len));
    let object = object::File::parse(&cache).map_err(|e| format!("cannot parse it: {e}"))?;
    Ok(of_object(&object))
}

/// The debug sections of a parsed object, copied into memory, and its `.gnu_debugaltlink` file name.
pub fn of_object<'d, R: ReadRef<'d>>(
    object: &object::File<'d, R>,
) -> (gimli::Dwarf<Reader>, Option<Vec<u8>>) {
    let endian = if object.is_little_endian() {
        RunTimeEndian::Little
    } else {
        RunTimeEndian::Big
    };
    let load = |id: SectionId| -> Result<Reader, std::convert::Infallible> {
        // Where variables live and the macros are never read for names, files and lines: those sections (often
        // the largest, compressed in distribution debug files) are not read or inflated.
        if matches!(
            id,
            SectionId::DebugLoc
                | SectionId::DebugLocLists
                | SectionId::DebugMacinfo
                | SectionId::DebugMacro
                | SectionId::DebugPubNames
                | SectionId::DebugPubTypes
        ) {
            return Ok(EndianArcSlice::new(Arc::from(&[][..]), endian));
        }
        let data: Cow<'_, [u8]> = object
            .section_by_name(id.name())
            .and_then(|s| {
                // A compressed section may claim any size: beyond what its bytes can plausibly hold
                // (DWARF compresses far less than 256 to 1) it is not inflated.
                let c = s.compressed_data().ok()?;
                let plausible = (c.data.len() as u64)
                    .saturating_mul(256)
                    .saturating_add(1 << 20)
                    .min(files::OBJECT_CAP);
                (c.uncompressed_size <= plausible).then(|| c.decompress().ok())?
            })
            .unwrap_or(Cow::Borrowed(&[]));
        Ok(EndianArcSlice::new(Arc::from(&*data), endian))
    };
    let Ok(dwarf) = gimli::Dwarf::load(load);
    let alt = object
        .gnu_debugaltlink()
        .ok()
        .flatten()
        .map(|(name, _): (&[u8], &[u8])| name.to_vec());
    (dwarf, alt)
}

/// Where a `.gnu_debugaltlink` name points: itself when absolute, else beside the file that names it.
fn sup_path(path: &Path, name: &[u8]) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    let name = Path::new(std::ffi::OsStr::from_bytes(name));
    if name.is_absolute() {
        name.to_path_buf()
    } else {
        path.parent().unwrap_or(Path::new("/")).join(name)
    }
}

/// Walk every unit's entries (one pass, no recursion) and refuse DWARF that nests deeper than [`MAX_DEPTH`].
/// A unit that cannot be read stops the walk of that unit only: addr2line stops at the same place.
pub fn check_depth(dwarf: &gimli::Dwarf<Reader>) -> Result<(), String> {
    let mut units = dwarf.units();
    while let Ok(Some(header)) = units.next() {
        let Ok(abbrevs) = header.abbreviations(&dwarf.debug_abbrev) else {
            continue;
        };
        let Ok(mut entries) = header.entries_raw(&abbrevs, None) else {
            continue;
        };
        while !entries.is_empty() {
            let depth = entries.next_depth();
            if depth > MAX_DEPTH {
                let at = header.offset().0;
                return Err(format!(
                    "its DWARF is not used: the entries of the unit at .debug_info offset {at:#x} nest more \
                     than {MAX_DEPTH} levels deep"
                ));
            }
            let Ok(abbrev) = entries.read_abbreviation() else {
                break;
            };
            if let Some(abbrev) = abbrev
                && entries.skip_attributes(abbrev.attributes()).is_err()
            {
                break;
            }
        }
    }
    Ok(())
}
