//! The unwinder on real stacks: a C program built without frame pointers copies its registers and stack at two
//! known points (as the kernel does for a sample), and the walks must name the known callers, through libc's
//! `qsort` too, end complete at the process's first frame, and stop (truncated) rather than guess when the copy
//! is cut short.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::symbols::{ElfSymbolizer, Mapping, read_maps_text};

struct Captured {
    maps: Vec<Mapping>,
    regs: UserRegs,
    stack: Vec<u8>,
}

/// Build the capture program into a directory of this test (`tag`) and run it.
fn build_and_run(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ntprof-unwind-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ntprof/tests/stacks/capture.c");
    let exe = dir.join("capture");
    let out = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run gcc");
    assert!(
        out.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let prefix = dir.join("cap");
    let run = Command::new(&exe).arg(&prefix).output().unwrap();
    assert!(run.status.success(), "capture: {run:?}");
    prefix
}

fn load(prefix: &Path, which: &str) -> Captured {
    let maps = read_maps_text(&std::fs::read_to_string(prefix.with_extension("maps")).unwrap());
    let bytes = std::fs::read(prefix.with_extension(which)).unwrap();
    let word = |i: usize| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap());
    Captured {
        maps,
        regs: UserRegs {
            ip: word(0),
            sp: word(1),
            bp: word(2),
        },
        stack: bytes[24..].to_vec(),
    }
}

fn unwinder(maps: &[Mapping], files: &mut UnwindFiles) -> ProcessUnwinder {
    let mut u = ProcessUnwinder::new();
    for m in maps.iter().filter(|m| m.is_executable()) {
        u.add_mapping(files, m.start, m.end, m.offset, &m.path);
    }
    u
}

/// The function names of a walk (return addresses looked up at address − 1).
fn names(maps: &[Mapping], frames: &[u64]) -> Vec<String> {
    frames
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let addr = if i == 0 { a } else { a - 1 };
            let Some(m) = maps
                .iter()
                .find(|m| m.is_executable() && m.start <= addr && addr < m.end)
            else {
                return format!("?{addr:#x}");
            };
            let elf = ElfSymbolizer::open(Path::new(&m.path)).unwrap();
            let bias = elf.bias(m).unwrap();
            elf.symbol(addr - bias)
                .map_or_else(|| format!("{}+?", m.path), |s| s.name)
        })
        .collect()
}

/// `wanted` appear in `names` in this order (other frames may come between).
fn in_order(names: &[String], wanted: &[&str]) -> bool {
    let mut it = names.iter();
    wanted.iter().all(|w| it.any(|n| n == w))
}

#[test]
fn walks_without_frame_pointers_through_libc() {
    let prefix = build_and_run("walks");
    let mut files = UnwindFiles::default();
    for (which, wanted) in [
        ("chain", &["capture_chain", "middle", "outer", "main"][..]),
        (
            "qsort",
            &["capture_qsort", "compare_keys", "sort_caller", "main"][..],
        ),
    ] {
        let c = load(&prefix, which);
        let mut u = unwinder(&c.maps, &mut files);
        let mut frames = Vec::new();
        let truncated = u.unwind(c.regs, &c.stack, &mut frames);
        let n = names(&c.maps, &frames);
        assert!(in_order(&n, wanted), "{which}: {n:?}");
        assert!(
            !truncated,
            "{which}: the walk reaches the first frame: {n:?}"
        );
        assert_eq!(
            n.last().map(String::as_str),
            Some("_start"),
            "{which}: {n:?}"
        );
        if which == "qsort" {
            // Between the comparator and its caller: libc's sorting code, walked by its .eh_frame.
            let i = n.iter().position(|x| x == "compare_keys").unwrap();
            let j = n.iter().position(|x| x == "sort_caller").unwrap();
            assert!(
                j > i + 1,
                "libc frames between the comparator and sort_caller: {n:?}"
            );
            let libc = c.maps.iter().find(|m| m.path.contains("libc.so")).unwrap();
            assert!(
                frames[i + 1..j].iter().all(|&a| c
                    .maps
                    .iter()
                    .any(|m| m.path == libc.path && m.start <= a && a < m.end)),
                "{n:?}"
            );
        }
        // The walk again on a warm rule cache gives the same frames.
        let mut again = Vec::new();
        assert_eq!(u.unwind(c.regs, &c.stack, &mut again), truncated);
        assert_eq!(again, frames);
    }
}

#[test]
fn a_short_copy_is_truncated_never_invented() {
    let prefix = build_and_run("short");
    let mut files = UnwindFiles::default();
    let c = load(&prefix, "qsort");
    let mut u = unwinder(&c.maps, &mut files);
    let mut full = Vec::new();
    assert!(!u.unwind(c.regs, &c.stack, &mut full));
    for cut in [0usize, 8, 64, 200, 1000] {
        let mut frames = Vec::new();
        let truncated = u.unwind(c.regs, &c.stack[..cut.min(c.stack.len())], &mut frames);
        assert!(truncated, "cut at {cut}: {frames:x?}");
        assert!(
            full.starts_with(&frames),
            "cut at {cut}: a prefix of the full walk, {frames:x?} vs {full:x?}"
        );
        assert!(!frames.is_empty() && frames.len() < full.len());
    }
    // An unknown process (no mapping): the sampled ip only, then the walk stops.
    let mut none = ProcessUnwinder::new();
    let mut frames = Vec::new();
    let truncated = none.unwind(c.regs, &c.stack, &mut frames);
    assert!(truncated || frames.len() == 1, "{frames:x?}");
    // A return address in no mapping: the stack is cut there.
    let mut partial = ProcessUnwinder::new();
    let exe = c
        .maps
        .iter()
        .find(|m| m.is_executable() && m.path.ends_with("/capture"))
        .unwrap();
    partial.add_mapping(&mut files, exe.start, exe.end, exe.offset, &exe.path);
    let mut frames = Vec::new();
    assert!(partial.unwind(c.regs, &c.stack, &mut frames));
    assert!(
        frames.iter().all(|&a| exe.start <= a && a <= exe.end),
        "{frames:x?}"
    );
    assert_eq!(
        frames.len(),
        2,
        "capture_qsort, compare_keys, then libc (unknown): {frames:x?}"
    );
}
