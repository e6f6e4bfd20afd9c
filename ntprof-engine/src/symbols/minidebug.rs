//! MiniDebugInfo: the `.gnu_debugdata` section that Fedora, RHEL and their derivatives add to the binaries and
//! libraries they ship stripped. It holds an xz-compressed ELF file whose `.symtab` has the function symbols
//! `.dynsym` lacks (the static functions, the executable's own functions), so that a stack through them has
//! names without a debug package.
//!
//! Decompression is bounded: the compressed section is read only up to [`PACKED_CAP`], and the decompressed
//! file may not grow past [`UNPACKED_CAP`] (the writer refuses the bytes past it, which ends the decoding; the
//! decoder's window grows only with what it wrote), so a hostile section costs at most that much memory and a
//! note, never a crash.

use std::io::Write;

use object::{Object, ObjectSection, ReadRef};

use super::symtab::text_symbols;
use super::table::Candidate;

/// The largest `.gnu_debugdata` read (distributions' are tens to hundreds of kilobytes).
pub const PACKED_CAP: u64 = 64 << 20;
/// The largest decompressed symbol file accepted.
pub const UNPACKED_CAP: usize = 256 << 20;

/// A writer into memory that refuses bytes past a cap.
struct Capped {
    out: Vec<u8>,
    cap: usize,
    /// Bytes past the cap were refused.
    over: bool,
}

impl Write for Capped {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.out.len() + buf.len() > self.cap {
            self.over = true;
            return Err(std::io::Error::other("too large"));
        }
        self.out.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The xz-compressed `packed` decompressed, at most `cap` bytes.
pub fn unpack(packed: &[u8], cap: usize) -> Result<Vec<u8>, String> {
    let mut out = Capped {
        out: Vec::new(),
        cap,
        over: false,
    };
    match lzma_rs::xz_decompress(&mut std::io::BufReader::new(packed), &mut out) {
        Ok(()) => Ok(out.out),
        Err(_) if out.over => Err(format!(
            "its .gnu_debugdata decompresses to more than the {} KiB ntprof reads",
            cap >> 10
        )),
        Err(e) => Err(format!("its .gnu_debugdata is not valid xz data: {e}")),
    }
}

/// The function symbols of `file`'s MiniDebugInfo, added to `out`: `Ok(None)` when it has none, `Ok(Some(n))`
/// with the number added, or why the section could not be used.
pub fn symbols<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
    out: &mut Vec<Candidate>,
) -> Result<Option<usize>, String> {
    let Some(section) = file.section_by_name(".gnu_debugdata") else {
        return Ok(None);
    };
    if section.size() > PACKED_CAP {
        return Err(format!(
            "its .gnu_debugdata has {} bytes, more than the {} MiB ntprof reads",
            section.size(),
            PACKED_CAP >> 20
        ));
    }
    let packed = section
        .data()
        .map_err(|e| format!("cannot read its .gnu_debugdata: {e}"))?;
    let unpacked = unpack(packed, UNPACKED_CAP)?;
    let inner = object::File::parse(&*unpacked)
        .map_err(|e| format!("its .gnu_debugdata does not hold an ELF file: {e}"))?;
    let before = out.len();
    text_symbols(&inner, out);
    Ok(Some(out.len() - before))
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::process::Command;

    use object::ObjectSymbol;

    use super::*;
    use crate::symbols::ElfSymbolizer;

    const PROGRAM: &str = r#"
#include <stdio.h>
__attribute__((noinline)) static long secret_static(long n) {
    long s = 0;
    for (long i = 0; i < n; i++) s += i * i ^ (i >> 3);
    return s;
}
__attribute__((noinline)) long exported_function(long n) { return secret_static(n) + 1; }
int main(int argc, char **argv) { printf("%ld\n", exported_function(argc * 1000)); return 0; }
"#;

    fn run(cmd: &mut Command) {
        let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
        assert!(
            out.status.success(),
            "{cmd:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn sh(script: &str, dir: &Path) {
        run(Command::new("sh").args(["-ec", script]).current_dir(dir));
    }

    /// A program made as Fedora makes its packages' binaries: built, its function symbols that `.dynsym`
    /// lacks kept in a symbol-only copy, that copy compressed with xz into `.gnu_debugdata` of the stripped
    /// program. Returns (unstripped, stripped without, stripped with MiniDebugInfo).
    fn fedora_style(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        std::fs::write(dir.join("prog.c"), PROGRAM).unwrap();
        sh(
            "gcc -O2 -g -rdynamic -o prog prog.c
             nm -D prog --format=posix --defined-only | awk '{ print $1 }' | sort > dynsyms
             nm prog --format=posix --defined-only | awk '{ if ($2 == \"T\" || $2 == \"t\") print $1 }' \
                 | sort > funcsyms
             comm -13 dynsyms funcsyms > keep_symbols
             objcopy --only-keep-debug prog prog.debug
             objcopy -S --remove-section .gdb_index --remove-section .comment \
                 --keep-symbols=keep_symbols prog.debug mini_debuginfo
             cp prog stripped
             strip --strip-all -R .comment -R .gnu_debuglink stripped
             cp stripped mini
             xz -f mini_debuginfo
             objcopy --add-section .gnu_debugdata=mini_debuginfo.xz mini",
            dir,
        );
        (dir.join("prog"), dir.join("stripped"), dir.join("mini"))
    }

    fn address_of(path: &Path, name: &str) -> u64 {
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} in {}", path.display()))
            .address()
    }

    #[test]
    fn minidebuginfo_names_what_dynsym_lacks() {
        for tool in ["gcc", "objcopy", "nm", "strip", "xz"] {
            if Command::new(tool).arg("--version").output().is_err() {
                let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
                assert!(
                    !ci,
                    "{tool} is missing (apt-get install binutils xz-utils gcc)"
                );
                eprintln!("SKIPPED: {tool} is not installed; with CI=true this fails");
                return;
            }
        }
        let dir = std::env::temp_dir().join(format!("ntprof-minidebug-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (full, stripped, mini) = fedora_style(&dir);
        let secret = address_of(&full, "secret_static");
        let exported = address_of(&full, "exported_function");
        // Before: the stripped program has no name for its static function (only .dynsym's exports).
        let before = ElfSymbolizer::open(&stripped).unwrap();
        assert_eq!(before.symbol(secret + 4), None);
        assert_eq!(
            before.symbol(exported + 4).unwrap().name,
            "exported_function"
        );
        // After: MiniDebugInfo names it.
        let after = ElfSymbolizer::open(&mini).unwrap();
        let s = after.symbol(secret + 4).expect("named from .gnu_debugdata");
        assert_eq!((s.name.as_str(), s.address), ("secret_static", secret));
        assert_eq!(
            after.symbol(exported + 4).unwrap().name,
            "exported_function"
        );
        assert!(after.problems().is_empty(), "{:?}", after.problems());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn decompression_is_bounded_and_garbage_is_refused() {
        let Ok(out) = Command::new("sh")
            .args(["-c", "head -c 8388608 /dev/zero | xz -1"])
            .output()
        else {
            return;
        };
        assert!(out.status.success() && out.stdout.len() < 8 << 20);
        // 8 MiB of zeros against a 1 MiB cap: refused once the cap is reached, not decoded whole.
        let e = unpack(&out.stdout, 1 << 20).unwrap_err();
        assert!(e.contains("more than the 1024 KiB"), "{e}");
        assert_eq!(unpack(&out.stdout, 9 << 20).unwrap().len(), 8 << 20);
        let e = unpack(b"\xfd7zXZ\0garbage that is not xz", 1 << 20).unwrap_err();
        assert!(e.contains("not valid xz data"), "{e}");
    }
}
