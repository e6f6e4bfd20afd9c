//! The vDSO: the small ELF image the kernel maps into every process (`[vdso]`), holding `clock_gettime`,
//! `gettimeofday`, `time` and `getcpu` so that they run without entering the kernel. It has no file, but it is
//! a complete ELF object with its own dynamic symbols (`__vdso_clock_gettime`, …) and `.eh_frame`, and the
//! kernel maps the same image into every 64-bit process. ntprof reads its own copy from its memory (the
//! `[vdso]` line of `/proc/self/maps`, read through `/proc/self/mem`) and symbolizes the profiled processes'
//! `[vdso]` with it, when their mapping has the same size (a 32-bit process has another image).

use std::io::{Read, Seek, SeekFrom};

use super::{ElfSymbolizer, read_maps};

/// The path `/proc/PID/maps` and the kernel's mmap records give the vDSO.
pub const VDSO: &str = "[vdso]";

/// The bytes of this process's vDSO.
pub fn own_image() -> Result<Vec<u8>, String> {
    let maps = read_maps("self").map_err(|e| format!("cannot read /proc/self/maps: {e}"))?;
    let m = maps
        .iter()
        .find(|m| m.path == VDSO)
        .ok_or("this process has no [vdso] mapping")?;
    let mut mem = std::fs::File::open("/proc/self/mem")
        .map_err(|e| format!("cannot open /proc/self/mem: {e}"))?;
    mem.seek(SeekFrom::Start(m.start))
        .map_err(|e| format!("cannot seek to the vdso at {:#x}: {e}", m.start))?;
    let mut image = vec![0; m.size() as usize];
    mem.read_exact(&mut image)
        .map_err(|e| format!("cannot read the vdso at {:#x}: {e}", m.start))?;
    Ok(image)
}

/// A symbolizer for a `[vdso]` mapping of `size` bytes: ntprof's own vDSO when its size is the same.
pub fn symbolizer(size: u64) -> Option<ElfSymbolizer> {
    let image = own_image().ok()?;
    if image.len() as u64 != size {
        return None;
    }
    ElfSymbolizer::from_image(VDSO, &image).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The vDSO's symbols name its code: `clock_gettime`'s code is `__vdso_clock_gettime`, as perf names it.
    #[test]
    fn own_vdso_names_clock_gettime() {
        let image = own_image().unwrap();
        assert!(image.starts_with(b"\x7fELF"), "not an ELF image");
        let elf = ElfSymbolizer::from_image(VDSO, &image).unwrap();
        let file = object::File::parse(image.as_slice()).unwrap();
        use object::{Object, ObjectSymbol};
        let sym = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("__vdso_clock_gettime"))
            .expect("the vdso exports __vdso_clock_gettime");
        let named = elf.symbol(sym.address() + 4).expect("a symbol");
        assert_eq!(named.name, "__vdso_clock_gettime");
        assert!(symbolizer(image.len() as u64).is_some());
        assert!(symbolizer(image.len() as u64 + 4096).is_none());
    }
}
