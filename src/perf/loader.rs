//! This process's loaded objects from the dynamic loader (`dl_iterate_phdr(3)`): each object's name, load bias
//! and program headers, as Windows code gets them from `EnumProcessModules`.
//!
//! # Safety
//! `dl_iterate_phdr` is called with a callback that only reads the `dl_phdr_info` the loader passes, for the
//! duration of the call, and copies what it needs into owned values; the callback does not unwind (it copies
//! integers and bytes and pushes to a `Vec`, whose allocation failure aborts). `getauxval` reads the auxiliary
//! vector. Each block says why it is sound.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_int, c_void};

/// One executable `PT_LOAD` segment of a loaded object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LoadedSegment {
    /// The object's name as the loader has it: empty for the main program, the path it was loaded from for a
    /// library, `linux-vdso.so.1` for the vDSO.
    pub(crate) name: Vec<u8>,
    /// The load bias (`dlpi_addr`): runtime address minus ELF virtual address.
    pub(crate) bias: u64,
    /// `p_vaddr` of the segment.
    pub(crate) vaddr: u64,
    /// `p_memsz` of the segment.
    pub(crate) memsz: u64,
    /// `p_offset` of the segment.
    pub(crate) offset: u64,
    /// The object's index in the loader's list (0: the main program).
    pub(crate) object: usize,
}

struct Walk {
    segments: Vec<LoadedSegment>,
    object: usize,
}

extern "C" fn visit(info: *mut libc::dl_phdr_info, _size: usize, data: *mut c_void) -> c_int {
    // SAFETY: `data` is the `&mut Walk` that `loaded_segments` passed to `dl_iterate_phdr`: alive for the whole
    // walk and reached only through this pointer while it runs.
    let walk = unsafe { &mut *(data as *mut Walk) };
    // SAFETY: the loader passes a valid record for one object, valid for the duration of this callback.
    let info = unsafe { &*info };
    let name = if info.dlpi_name.is_null() {
        Vec::new()
    } else {
        // SAFETY: a non-null `dlpi_name` is a NUL-terminated string owned by the loader, unchanged while it holds
        // its lock for the walk.
        unsafe { CStr::from_ptr(info.dlpi_name) }
            .to_bytes()
            .to_vec()
    };
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: a non-null `dlpi_phdr` points to the object's `dlpi_phnum` program headers, mapped and unchanged
        // during the walk.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    for ph in phdrs {
        if ph.p_type == libc::PT_LOAD && ph.p_flags & libc::PF_X != 0 && ph.p_memsz > 0 {
            walk.segments.push(LoadedSegment {
                name: name.clone(),
                bias: info.dlpi_addr,
                vaddr: ph.p_vaddr,
                memsz: ph.p_memsz,
                offset: ph.p_offset,
                object: walk.object,
            });
        }
    }
    walk.object += 1;
    0
}

/// Every executable `PT_LOAD` segment of every object loaded in this process, in the loader's order (the main
/// program first).
pub(crate) fn loaded_segments() -> Vec<LoadedSegment> {
    let mut walk = Walk {
        segments: Vec::new(),
        object: 0,
    };
    // SAFETY: `visit` matches the callback type `dl_iterate_phdr` expects and only reads what the loader passes;
    // `walk` outlives the call and is reached only through the `data` pointer while the call runs.
    unsafe {
        libc::dl_iterate_phdr(Some(visit), &mut walk as *mut Walk as *mut c_void);
    }
    walk.segments
}

/// The address of the vDSO's ELF header in this process (`AT_SYSINFO_EHDR`), 0 when there is none.
pub(crate) fn vdso_base() -> u64 {
    // SAFETY: `getauxval` reads the process's auxiliary vector; any key is allowed (0 when absent).
    unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) }
}
