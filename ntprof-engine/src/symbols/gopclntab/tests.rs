//! The Go table read from programs built by Go toolchains of each layout (1.15, 1.16, 1.19 and this machine's),
//! stripped and not, executables and PIE: names, files and lines equal `go tool addr2line`'s on the unstripped
//! twin for every sampled address, function names equal `.symtab`'s, inlined frames equal the DWARF's; and
//! hostile tables give no name rather than a crash or a wrong one.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use object::{Object, ObjectSection, ObjectSymbol};

use super::{GoTable, Version};

/// A program with a function the compiler inlines (`mix`, into `hot`) and one it must not (`hot`).
pub const PROGRAM: &str = r#"package main

import (
	"fmt"
	"os"
	"strings"
)

//go:noinline
func hot(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += mix(i)
	}
	return s
}

func mix(i int) int { return i*i ^ (i >> 3) }

func main() {
	t := 0
	for r := 0; r < 3; r++ {
		t += hot(1000)
	}
	fmt.Fprintln(os.Stderr, strings.Repeat("x", t%7))
}
"#;

/// The toolchains, one per layout: (toolchain, layout).
pub const TOOLCHAINS: [(&str, Version); 4] = [
    ("go1.15.15", Version::V12),
    ("go1.16.15", Version::V116),
    ("go1.19.13", Version::V118),
    ("local", Version::V120),
];

/// Whether this is a CI run, where a missing Go is a failure.
fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The workspace's `target/tools/go`, where toolchains, caches and the built programs are kept.
fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/go")
}

/// [`PROGRAM`] built by `toolchain` with `flags`, kept under `target/tools/go/programs` and reused; `None` (a
/// skip, said) without Go outside CI, a failure in CI.
pub fn go_program(toolchain: &str, flags: &[&str]) -> Option<PathBuf> {
    if Command::new("go").arg("version").output().is_err() {
        assert!(
            !in_ci(),
            "Go is not installed (apt-get install golang-go, or Go from go.dev); CI needs it"
        );
        eprintln!(
            "SKIPPED: Go is not installed (apt-get install golang-go); with CI=true this fails"
        );
        return None;
    }
    let dir = tools().join("programs");
    std::fs::create_dir_all(&dir).unwrap();
    let tag: String = flags
        .concat()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect();
    let hash = PROGRAM
        .bytes()
        .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let out = dir.join(format!("hot-{toolchain}-{tag}-{hash:08x}"));
    if out.exists() {
        return Some(out);
    }
    // Tests run in parallel and may build the same program at once: each build has its own source and output
    // names (rename is atomic, so the last complete build is the one kept, and every caller finds one).
    static BUILDS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    // Relaxed: the counter only makes names unique within this process; nothing is ordered by it.
    let n = BUILDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let unique = format!("{}-{n}", std::process::id());
    // One source path for every build (it is written into the binary: the stripped and unstripped twins must
    // name the same file), put in place whole by a rename of this build's own copy.
    let src = dir.join(format!("hot-{hash:08x}.go"));
    let copy = dir.join(format!("hot-{hash:08x}-{unique}.go"));
    std::fs::write(&copy, PROGRAM).unwrap();
    std::fs::rename(&copy, &src).unwrap();
    let tmp = out.with_extension(format!("part-{unique}"));
    let t = tools();
    let status = Command::new("go")
        .arg("build")
        .args(flags)
        .arg("-o")
        .arg(&tmp)
        .arg(&src)
        .env("GOENV", "off")
        .env("GOFLAGS", "")
        .env("GOTOOLCHAIN", toolchain)
        .env("GOPATH", t.join("path"))
        .env("GOMODCACHE", t.join("mod"))
        .env("GOCACHE", t.join("cache"))
        .status()
        .expect("go runs");
    assert!(
        status.success(),
        "GOTOOLCHAIN={toolchain} go build {flags:?} failed (the Go module proxy serves the toolchain)"
    );
    std::fs::rename(&tmp, &out).unwrap();
    Some(out)
}

/// The table of the program at `path`.
fn table(path: &Path) -> GoTable {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let handle = std::fs::File::open(path).unwrap();
    GoTable::find(&file, handle, data.len() as u64)
        .expect("a Go binary has .gopclntab")
        .unwrap()
}

/// The sampled addresses of a program: each function's entry and a few of its addresses, every byte of `main.*`.
fn sample_addresses(unstripped: &[u8]) -> Vec<u64> {
    let file = object::File::parse(unstripped).unwrap();
    let mut out = Vec::new();
    for s in file.symbols() {
        if s.kind() != object::SymbolKind::Text || s.size() == 0 {
            continue;
        }
        let name = s.name().unwrap_or("");
        let step = if name.starts_with("main.") {
            1
        } else {
            (s.size() / 3).max(1)
        };
        out.extend((s.address()..s.address() + s.size()).step_by(step as usize));
    }
    out
}

/// `go tool addr2line`'s (function, file:line) for `addrs` in `binary`.
fn addr2line(binary: &Path, addrs: &[u64]) -> Vec<(String, String)> {
    let mut child = Command::new("go")
        .args(["tool", "addr2line"])
        .arg(binary)
        .env("GOENV", "off")
        .env("GOTOOLCHAIN", "local")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = addrs.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        2 * addrs.len(),
        "addr2line answered every address"
    );
    // A marker without a line table (`go:textfipsstart`) is `:-1`: no file, no line.
    lines
        .chunks(2)
        .map(|p| {
            let place = if p[1] == ":-1" { "?:0" } else { p[1] };
            (p[0].to_string(), place.to_string())
        })
        .collect()
}

/// The address and size of a program's `.text`.
fn text_range(path: &Path) -> (u64, u64) {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    (text.address(), text.size())
}

/// Every layout, stripped and not, executable and PIE: ntprof's function and innermost file:line at each
/// sampled address equal `go tool addr2line`'s on the unstripped twin.
#[test]
fn names_and_lines_equal_go_addr2line_in_every_layout() {
    for (toolchain, version) in TOOLCHAINS {
        for pie in [false, true] {
            let mode: &[&str] = if pie { &["-buildmode=pie"] } else { &[] };
            let Some(full) = go_program(toolchain, mode) else {
                return;
            };
            let stripped_flags = [mode, &["-ldflags=-s -w"]].concat();
            let stripped = go_program(toolchain, &stripped_flags).unwrap();
            let what = format!("{toolchain} pie={pie}");
            // Stripping moves data (references to it differ), not code: the functions are at the same
            // addresses, which the comparison below checks address by address.
            assert_eq!(
                text_range(&full),
                text_range(&stripped),
                "{what}: the stripped twin's code lies where the unstripped one's does"
            );
            let data = std::fs::read(&full).unwrap();
            let addrs = sample_addresses(&data);
            assert!(addrs.len() > 1000, "{what}: {} addresses", addrs.len());
            let expected = addr2line(&full, &addrs);
            for path in [&full, &stripped] {
                let t = table(path);
                assert_eq!(t.version(), version, "{what}: {}", path.display());
                let mut wrong = Vec::new();
                for (&a, (name, place)) in addrs.iter().zip(&expected) {
                    let got = t.lookup(a);
                    let (g_name, g_place) = match &got {
                        Some(f) => {
                            let inner = &f.frames[0];
                            let file = inner.file.clone().unwrap_or_else(|| "?".into());
                            (
                                f.name.clone(),
                                format!("{file}:{}", inner.line.unwrap_or(0)),
                            )
                        }
                        None => ("?".to_string(), "?:0".to_string()),
                    };
                    if (&g_name, &g_place) != (name, place) {
                        wrong.push(format!("{a:#x}: {g_name} {g_place} != {name} {place}"));
                    }
                }
                assert!(
                    wrong.is_empty(),
                    "{what} {}: {} of {} addresses differ: {:?}",
                    path.display(),
                    wrong.len(),
                    addrs.len(),
                    &wrong[..wrong.len().min(10)]
                );
            }
        }
    }
}

/// Where the unstripped programs have DWARF, the table's frames (inlined calls, innermost first, with their
/// files and lines, the function itself last) equal the DWARF's at every address of `main.*`.
#[test]
fn inlined_frames_equal_the_dwarfs() {
    for (toolchain, _) in TOOLCHAINS {
        let Some(full) = go_program(toolchain, &[]) else {
            return;
        };
        let elf = crate::symbols::ElfSymbolizer::open(&full).unwrap();
        let t = table(&full);
        let data = std::fs::read(&full).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let mut wrong = Vec::new();
        let mut inlined = 0;
        for s in file.symbols() {
            if s.kind() != object::SymbolKind::Text
                || !s.name().unwrap_or("").starts_with("main.")
                || s.size() == 0
            {
                continue;
            }
            for a in s.address()..s.address() + s.size() {
                let key = |f: &crate::report::Frame| (f.function.clone(), f.file.clone(), f.line);
                let dwarf: Vec<_> = elf.resolve(a).frames.iter().map(key).collect();
                let go: Vec<_> = t.lookup(a).unwrap().frames.iter().map(key).collect();
                inlined += usize::from(go.len() > 1);
                if dwarf != go {
                    wrong.push(format!("{a:#x}: {go:?} != DWARF {dwarf:?}"));
                }
            }
        }
        assert!(inlined > 0, "{toolchain}: no inlined frame in main.*");
        assert!(
            wrong.is_empty(),
            "{toolchain}: {} differ: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(5)]
        );
    }
}

/// The table of a copy of `path` changed by `edit` (given the file and the table's file offset).
fn edited_table(path: &Path, edit: impl FnOnce(&mut Vec<u8>, usize)) -> Result<GoTable, String> {
    let mut data = std::fs::read(path).unwrap();
    let base = {
        let file = object::File::parse(&*data).unwrap();
        file.section_by_name(".gopclntab")
            .unwrap()
            .file_range()
            .unwrap()
            .0 as usize
    };
    let copy =
        std::env::temp_dir().join(format!("ntprof-gopclntab-{}-{}", std::process::id(), base));
    let original = data.clone();
    edit(&mut data, base);
    std::fs::write(&copy, &data).unwrap();
    // The section headers are the original's: a table whose own header lies about its size.
    let file = object::File::parse(&*original).unwrap();
    let handle = std::fs::File::open(&copy).unwrap();
    let len = data.len() as u64;
    let t = GoTable::find(&file, handle, len).unwrap();
    std::fs::remove_file(&copy).unwrap();
    t
}

/// Hostile tables: a wrong magic, a function count past the table, a file cut short and bytes changed all over
/// the table give errors or no names, never a panic, and cost bounded time.
#[test]
fn hostile_tables_give_no_name_rather_than_a_crash() {
    let Some(path) = go_program("local", &["-ldflags=-s -w"]) else {
        return;
    };
    let good = table(&path);
    let hot = (0..u64::MAX)
        .map(|i| 0x401000 + i * 16)
        .take(1 << 16)
        .find(|&a| good.lookup(a).is_some_and(|f| f.name == "main.hot"))
        .expect("main.hot is in the table");
    let e = edited_table(&path, |d, b| d[b] ^= 0x55).unwrap_err();
    assert!(e.contains("unknown layout"), "{e}");
    let e = edited_table(&path, |d, b| {
        d[b + 8..b + 16].copy_from_slice(&u64::MAX.to_le_bytes())
    })
    .unwrap_err();
    assert!(e.contains("do not fit"), "{e}");
    let e = edited_table(&path, |d, b| d.truncate(b + 100)).unwrap_err();
    assert!(e.contains("past the end"), "{e}");
    // Bytes changed all over the table (xorshift positions): every lookup ends, and the table's own check
    // (each record names the entry it belongs to) keeps most addresses named right or unnamed.
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let t = edited_table(&path, |d, b| {
        let size = 0x9_0000;
        for _ in 0..2000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = b + (state % size) as usize;
            d[at] = (state >> 32) as u8;
        }
    })
    .unwrap();
    let start = std::time::Instant::now();
    let mut named = 0;
    for a in (0x401000..0x49e000).step_by(61) {
        named += usize::from(t.lookup(a).is_some());
    }
    let _ = t.lookup(hot);
    assert!(named > 0, "the changed table still names some code");
    // A physical bound, not a timing test: 10,000 lookups of a few chunk reads each take milliseconds; a
    // lookup that looped would take forever.
    assert!(start.elapsed().as_secs() < 60, "{:?}", start.elapsed());
}
