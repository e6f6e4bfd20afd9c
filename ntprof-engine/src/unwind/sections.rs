//! The unwind information of one ELF file, read once and shared (by `Arc`) by every process that maps it.
//!
//! Kept: `.eh_frame_hdr` (the binary-search table), `.eh_frame` and, when the file has no `.eh_frame`, the
//! `.debug_frame` of the file or of its separate debug file (found as the symbolizer finds it), with the
//! addresses of `.text`, `.got`, `.eh_frame` and `.eh_frame_hdr` that pointer encodings in the CFI refer to,
//! and the `PT_LOAD` segments that give a mapping's load bias. The code itself is not read: x86-64 CFI is
//! exact at every instruction, prologues and epilogues included.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use object::{Object, ObjectSection, ObjectSegment, ReadCache, ReadRef};

use crate::symbols::elf::debug_file_candidates;

/// Section bytes, shared.
pub type Bytes = Arc<[u8]>;

/// One section: its address in the file's own address space and its bytes.
#[derive(Clone, Debug)]
pub struct Section {
    /// Stated virtual address range.
    pub svma: Range<u64>,
    /// Contents.
    pub data: Bytes,
}

/// x86-64 `rt_sigreturn` trampoline (glibc's `__restore_rt`): `mov $15, %rax; syscall`. A handler returns into it;
/// the interrupted context is the `ucontext` at the stack pointer then.
const SIGRETURN: [u8; 9] = [0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05];

/// The unwind information of one ELF file.
#[derive(Debug, Default)]
pub struct UnwindSections {
    /// The file.
    pub path: PathBuf,
    /// `(p_offset, p_vaddr)` of each `PT_LOAD` segment.
    pub segments: Vec<(u64, u64)>,
    /// `(p_offset, p_vaddr, p_filesz)` of each `PT_LOAD` segment.
    pub loads: Vec<(u64, u64, u64)>,
    /// Addresses already checked for the signal-return trampoline.
    sigreturn: Mutex<HashMap<u64, bool>>,
    /// `.text` range (no bytes).
    pub text: Option<Range<u64>>,
    /// `.got` range (no bytes).
    pub got: Option<Range<u64>>,
    /// `.eh_frame`.
    pub eh_frame: Option<Section>,
    /// `.eh_frame_hdr`.
    pub eh_frame_hdr: Option<Section>,
    /// `.debug_frame` (only read when there is no `.eh_frame`).
    pub debug_frame: Option<Bytes>,
}

fn section<'data, R: ReadRef<'data>>(file: &object::File<'data, R>, name: &str) -> Option<Section> {
    let s = file.section_by_name(name)?;
    let data = s.data().ok()?;
    (!data.is_empty()).then(|| Section {
        svma: s.address()..s.address() + s.size(),
        data: Arc::from(data),
    })
}

fn range<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
    name: &str,
) -> Option<Range<u64>> {
    let s = file.section_by_name(name)?;
    Some(s.address()..s.address() + s.size())
}

impl UnwindSections {
    /// Read the unwind sections of the ELF file at `path`.
    pub fn read(path: &Path) -> Result<UnwindSections, String> {
        let (handle, len) = crate::files::open(path, &crate::files::Owners::Any)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        let cache = ReadCache::new(crate::files::Budgeted::new(handle, len));
        let file = object::File::parse(&cache)
            .map_err(|e| format!("cannot parse {}: {e}", path.display()))?;
        let mut out = UnwindSections {
            path: path.to_path_buf(),
            loads: file
                .segments()
                .map(|s| (s.file_range().0, s.address(), s.file_range().1))
                .collect(),
            sigreturn: Mutex::default(),
            segments: file
                .segments()
                .map(|s| (s.file_range().0, s.address()))
                .collect(),
            text: range(&file, ".text"),
            got: range(&file, ".got"),
            eh_frame: section(&file, ".eh_frame"),
            eh_frame_hdr: section(&file, ".eh_frame_hdr"),
            debug_frame: None,
        };
        if out.eh_frame.is_none() {
            out.debug_frame = section(&file, ".debug_frame").map(|s| s.data);
            if out.debug_frame.is_none() {
                let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
                let link = file.gnu_debuglink().ok().flatten().map(|(n, _)| n.to_vec());
                for candidate in debug_file_candidates(path, build_id.as_deref(), link.as_deref()) {
                    let Ok((handle, dlen)) =
                        crate::files::open(&candidate, &crate::files::Owners::Any)
                    else {
                        continue;
                    };
                    let dcache = ReadCache::new(crate::files::Budgeted::new(handle, dlen));
                    let Ok(dfile) = object::File::parse(&dcache) else {
                        continue;
                    };
                    if let (Some(a), Ok(Some(b))) = (&build_id, dfile.build_id()) {
                        if a.as_slice() != b {
                            continue;
                        }
                    }
                    if let Some(s) = section(&dfile, ".debug_frame") {
                        out.debug_frame = Some(s.data);
                        break;
                    }
                }
            }
        }
        Ok(out)
    }

    /// True when the code at file virtual address `svma` is the signal-return trampoline (read from the file
    /// once per address).
    pub fn is_sigreturn(&self, svma: u64) -> bool {
        let mut seen = self
            .sigreturn
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *seen.entry(svma).or_insert_with(|| {
            let Some(&(offset, vaddr, size)) = self
                .loads
                .iter()
                .find(|&&(_, v, n)| v <= svma && svma + SIGRETURN.len() as u64 <= v + n)
            else {
                return false;
            };
            let mut code = [0u8; SIGRETURN.len()];
            std::fs::File::open(&self.path)
                .and_then(|mut f| {
                    f.seek(SeekFrom::Start(offset + (svma - vaddr)))?;
                    f.read_exact(&mut code)
                })
                .is_ok()
                && size > 0
                && code == SIGRETURN
        })
    }

    /// True when there is any CFI to unwind with.
    pub fn has_cfi(&self) -> bool {
        self.eh_frame.is_some() || self.debug_frame.is_some()
    }
}
