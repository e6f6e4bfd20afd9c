//! Tests of what a hostile or broken object can do to the symbolizer: DWARF nested tens of thousands of levels
//! deep, a library truncated while its names are read, thousands of symbol table headers spanning the file,
//! a debug file of another user.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use object::{Object, ObjectSymbol};

use super::ElfSymbolizer;
use super::dwarf::MAX_DEPTH;

/// A fresh directory of its own for a test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ntprof-sym-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Run a build tool; panic with its output when it fails.
pub fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// An object whose DWARF has one function with `depth` inlined calls nested in each other, all covering
/// `[0, 0x40)`.
fn nested_inlines(dir: &Path, depth: usize) -> PathBuf {
    let mut s = String::from(
        ".section .text\n.fill 64,1,0x90\n\
         .section .debug_abbrev,\"\",@progbits\n\
         .uleb128 1\n.uleb128 0x11\n.byte 1\n.uleb128 0x11\n.uleb128 0x01\n.uleb128 0x12\n.uleb128 0x06\n\
         .uleb128 0x03\n.uleb128 0x08\n.byte 0,0\n\
         .uleb128 2\n.uleb128 0x2e\n.byte 1\n.uleb128 0x11\n.uleb128 0x01\n.uleb128 0x12\n.uleb128 0x06\n\
         .uleb128 0x03\n.uleb128 0x08\n.byte 0,0\n\
         .uleb128 3\n.uleb128 0x1d\n.byte 1\n.uleb128 0x11\n.uleb128 0x01\n.uleb128 0x12\n.uleb128 0x06\n\
         .uleb128 0x03\n.uleb128 0x08\n.byte 0,0\n.byte 0\n\
         .section .debug_info,\"\",@progbits\n.long 2f-1f\n1:\n.value 4\n.long 0\n.byte 8\n\
         .uleb128 1\n.quad 0\n.long 0x40\n.string \"deep.c\"\n\
         .uleb128 2\n.quad 0\n.long 0x40\n.string \"outer\"\n",
    );
    for _ in 0..depth {
        s.push_str(".uleb128 3\n.quad 0\n.long 0x40\n.string \"inner\"\n");
    }
    let _ = writeln!(s, ".fill {},1,0\n2:", depth + 2);
    let src = dir.join(format!("deep{depth}.s"));
    std::fs::write(&src, s).unwrap();
    let obj = dir.join(format!("deep{depth}.o"));
    run(
        "gcc",
        &["-c", src.to_str().unwrap(), "-o", obj.to_str().unwrap()],
    );
    obj
}

#[test]
fn dwarf_nested_too_deep_is_refused_not_a_stack_overflow() {
    let dir = scratch("deep");
    // A modest nesting is read: every level is a frame.
    let ok = ElfSymbolizer::open(&nested_inlines(&dir, 100)).unwrap();
    assert_eq!(ok.resolve(0x10).frames.len(), 101);
    assert!(ok.problems().is_empty(), "{:?}", ok.problems());
    // 30,000 levels: addr2line would recurse once per level. Resolved on a thread with the main thread's
    // stack, as a report is.
    let deep = nested_inlines(&dir, 30_000);
    let (frames, problems) = std::thread::Builder::new()
        .stack_size(8 << 20)
        .spawn(move || {
            let elf = ElfSymbolizer::open(&deep).unwrap();
            (elf.resolve(0x10).frames.len(), elf.problems())
        })
        .unwrap()
        .join()
        .unwrap();
    assert_eq!(frames, 0);
    assert!(
        problems
            .iter()
            .any(|p| p.contains(&format!("nest more than {MAX_DEPTH} levels"))),
        "{problems:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A program with two functions and line information; their addresses.
fn two_functions(dir: &Path) -> (PathBuf, u64, u64) {
    let src = dir.join("two.c");
    std::fs::write(
        &src,
        "int first(int x) { return x * 3 + 1; }\nint second(int x) { return first(x) - 2; }\n\
         int main(int c, char **v) { (void)v; return second(c); }\n",
    )
    .unwrap();
    let exe = dir.join("two");
    run(
        "gcc",
        &[
            "-g",
            "-O0",
            "-o",
            exe.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
    );
    let data = std::fs::read(&exe).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let at = |name: &str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .unwrap()
    };
    (exe.clone(), at("first"), at("second"))
}

#[test]
fn a_library_truncated_while_it_is_read_costs_no_crash() {
    let dir = scratch("truncated");
    let (exe, first, second) = two_functions(&dir);
    let elf = ElfSymbolizer::open(&exe).unwrap();
    let r = elf.resolve(first + 1);
    assert!(r.frames.iter().any(|f| f.line.is_some()), "{r:?}");
    // A build rewrites the file while the report is being built.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&exe)
        .unwrap()
        .set_len(0)
        .unwrap();
    let r = elf.resolve(second + 1);
    let last = r
        .frames
        .last()
        .expect("the DWARF read before the truncation still answers");
    assert_eq!(last.function, "second");
    assert!(
        last.file.as_deref().unwrap_or("").ends_with("two.c"),
        "{r:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An ELF file of `body` zero bytes followed by `headers` section headers, each a symbol table over most of
/// the file, each from its own offset.
fn many_symbol_tables(path: &Path, body: u64, headers: u64) {
    let mut f = vec![0u8; body as usize];
    f[..4].copy_from_slice(b"\x7fELF");
    f[4..8].copy_from_slice(&[2, 1, 1, 0]);
    let put = |f: &mut Vec<u8>, at: usize, v: &[u8]| f[at..at + v.len()].copy_from_slice(v);
    put(&mut f, 16, &3u16.to_le_bytes()); // ET_DYN
    put(&mut f, 18, &62u16.to_le_bytes()); // EM_X86_64
    put(&mut f, 20, &1u32.to_le_bytes());
    put(&mut f, 40, &body.to_le_bytes()); // e_shoff
    put(&mut f, 52, &64u16.to_le_bytes()); // e_ehsize
    put(&mut f, 54, &56u16.to_le_bytes());
    put(&mut f, 58, &64u16.to_le_bytes()); // e_shentsize
    put(&mut f, 60, &((headers + 2) as u16).to_le_bytes());
    put(&mut f, 62, &((headers + 1) as u16).to_le_bytes()); // e_shstrndx: the last one
    f.extend_from_slice(&[0u8; 64]);
    for i in 1..=headers {
        let mut h = [0u8; 64];
        let offset = 64 + 8 * i;
        let size = (body - offset) / 24 * 24;
        h[4..8].copy_from_slice(&2u32.to_le_bytes()); // SHT_SYMTAB
        h[24..32].copy_from_slice(&offset.to_le_bytes());
        h[32..40].copy_from_slice(&size.to_le_bytes());
        h[40..44].copy_from_slice(&((headers + 1) as u32).to_le_bytes()); // the names
        h[48..56].copy_from_slice(&8u64.to_le_bytes());
        h[56..64].copy_from_slice(&24u64.to_le_bytes());
        f.extend_from_slice(&h);
    }
    // The section names: 8 zero bytes.
    let mut h = [0u8; 64];
    h[4..8].copy_from_slice(&3u32.to_le_bytes()); // SHT_STRTAB
    h[24..32].copy_from_slice(&64u64.to_le_bytes());
    h[32..40].copy_from_slice(&8u64.to_le_bytes());
    f.extend_from_slice(&h);
    std::fs::write(path, f).unwrap();
}

/// Counted skips (a failure in CI), shared with the workspace's other test crates.
#[path = "../../../tests/common/skip.rs"]
pub(crate) mod skip;

/// Measurements in a process of their own, shared with the workspace's other test crates.
#[path = "../../../tests/common/alone.rs"]
pub(crate) mod alone;

/// Opening a file of 2,000 symbol tables, each over most of its 0.5 MiB, costs about one table: measured in a
/// process of its own, the peak grows by less than 128 MiB (reading every table apart, 2,000 × 0.5 MiB, would
/// be 1 GiB).
#[test]
fn thousands_of_symbol_tables_cost_one() {
    let dir = scratch("symtabs");
    let path = dir.join("many.so");
    many_symbol_tables(&path, 512 << 10, 2000);
    let test = "symbols::hostile::thousands_of_symbol_tables_cost_one";
    let grew_mib = alone::peak_growth_kib(test, || {
        let elf = ElfSymbolizer::open(&path);
        assert!(elf.is_ok(), "{elf:?}");
    }) / 1024;
    assert!(
        grew_mib < 128,
        "opening a 0.5 MiB file took {grew_mib} MiB more"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_debug_file_of_another_user_is_not_used() {
    if !nix::unistd::geteuid().is_root() {
        skip::skip("needs root: giving a file to another user");
        return;
    }
    let dir = scratch("debuglink");
    let (exe, first, _) = two_functions(&dir);
    let (e, d) = (exe.to_str().unwrap(), dir.join("two.debug"));
    let d = d.to_str().unwrap();
    run("objcopy", &["--only-keep-debug", e, d]);
    run(
        "objcopy",
        &["--strip-debug", &format!("--add-gnu-debuglink={d}"), e],
    );
    let lines = |elf: &ElfSymbolizer| {
        elf.resolve(first + 1)
            .frames
            .iter()
            .any(|f| f.line.is_some())
    };
    let trusted = ElfSymbolizer::open(&exe).unwrap();
    assert!(
        lines(&trusted) && trusted.problems().is_empty(),
        "{:?}",
        trusted.problems()
    );
    std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    let planted = ElfSymbolizer::open(&exe).unwrap();
    assert!(!lines(&planted));
    let problems = planted.problems();
    assert!(
        problems
            .iter()
            .any(|p| p.contains("two.debug") && p.contains("belongs to uid 65534")),
        "{problems:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
