//! A container whose libc is not the host's: a Debian 13 ("trixie") root made with debootstrap from Debian's
//! packages (`.ci/run` builds it once into `~/.cache/ntprof-trixie/root`; `NTPROF_TRIXIE_ROOT` names another),
//! entered with `unshare --mount --pid --fork chroot ROOT /PROGRAM`. A program spending its time in libc
//! (`qsort` comparing with `memcmp`, `strlen`, `memset`) is profiled; every name ntprof gives in the root's libc
//! must be the one the root's own libc gives at that address (read here with `nm -D` on that file), the module
//! must carry that file's build-id, and none may come from the host's libc. Where the root cannot be found, the
//! test says so plainly (a failure in CI).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{build_dir, gcc, is_root, run_ok, u};

const LIMIT: Duration = Duration::from_secs(120);
const LIBC: &str = "usr/lib/x86_64-linux-gnu/libc.so.6";

fn trixie_root() -> Option<PathBuf> {
    let root = match std::env::var_os("NTPROF_TRIXIE_ROOT") {
        Some(r) => PathBuf::from(r),
        None => Path::new(&std::env::var_os("HOME")?).join(".cache/ntprof-trixie/root"),
    };
    root.join(LIBC).exists().then_some(root)
}

/// `(start, end, name)` of every defined function symbol of the ELF file `path`, from `nm -D -S`.
fn nm(path: &Path) -> Vec<(u64, u64, String)> {
    let out = Command::new("nm")
        .args(["-D", "-S", "--defined-only"])
        .arg(path)
        .output()
        .expect("run nm (binutils)");
    assert!(out.status.success(), "nm {}", path.display());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, kind, name] = f[..] else {
                return None;
            };
            if !matches!(kind, "T" | "t" | "W" | "i") {
                return None;
            }
            let start = u64::from_str_radix(addr, 16).ok()?;
            let size = u64::from_str_radix(size, 16).ok()?;
            Some((start, start + size, name.split('@').next()?.to_string()))
        })
        .collect()
}

/// `(start, end)` of every `.eh_frame` function of `path`, from `readelf --debug-dump=frames`.
fn fdes(path: &Path) -> Vec<(u64, u64)> {
    let out = Command::new("readelf")
        .args(["-W", "--debug-dump=frames"])
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" FDE "))
        .filter_map(|l| {
            let (lo, hi) = l.split("pc=").nth(1)?.split_once("..")?;
            Some((
                u64::from_str_radix(lo, 16).ok()?,
                u64::from_str_radix(hi.trim(), 16).ok()?,
            ))
        })
        .collect()
}

/// The build-id of `path`, from `readelf -n`.
fn build_id(path: &Path) -> String {
    let out = Command::new("readelf")
        .arg("-n")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: ").map(str::to_string))
        .expect("a build-id")
}

#[test]
fn a_containers_own_libc_names_its_code_never_the_hosts() {
    if !is_root() {
        assert!(
            !common::in_ci(),
            "this test enters a chroot: run it as root"
        );
        eprintln!("SKIPPED: not root (the test enters a chroot)");
        return;
    }
    let Some(root) = trixie_root() else {
        let msg = "the Debian 13 root is missing: build it with `debootstrap --variant=minbase trixie \
                   ~/.cache/ntprof-trixie/root http://deb.debian.org/debian` (.ci/run does)";
        assert!(!common::in_ci(), "{msg}");
        eprintln!("SKIPPED: {msg}");
        return;
    };
    let dir = build_dir("containers-libc");
    let src = dir.join("prog.c");
    std::fs::write(
        &src,
        "#include <stdlib.h>\n#include <string.h>\n#include <time.h>\nstatic char b[4096][16], big[1 << 16];\n\
         static int cmp(const void *x, const void *y) { return memcmp(x, y, 16); }\n\
         int main(int c, char **v) { double s = atof(v[1]); struct timespec t0, t; unsigned long n = 0;\n\
         clock_gettime(CLOCK_MONOTONIC, &t0);\n\
         for (;;) { for (int i = 0; i < 4096; i++) for (int j = 0; j < 16; j++) b[i][j] = (i * 7 + j) & 3;\n\
         qsort(b, 4096, 16, cmp); memset(big, 'a', sizeof big - 1); n += strlen(big);\n\
         clock_gettime(CLOCK_MONOTONIC, &t);\n\
         if (t.tv_sec - t0.tv_sec + (t.tv_nsec - t0.tv_nsec) / 1e9 > s) break; }\nreturn n == 1; }\n",
    )
    .unwrap();
    // Built on the host (glibc 2.36), run against the root's newer glibc.
    let name = format!("ntprof-libc-{}", std::process::id());
    let inside = root.join("tmp").join(&name);
    gcc(
        &["-O2", "-o", inside.to_str().unwrap(), src.to_str().unwrap()],
        &dir,
    );
    let prog = format!("/tmp/{name}");
    let out = run_ok(
        Command::new(env!("CARGO_BIN_EXE_ntprof"))
            .args(["record", "-q", "--format", "json", "-i", "2000", "--"])
            .args(["unshare", "--mount", "--pid", "--fork", "chroot"])
            .arg(&root)
            .args([prog.as_str(), "1.5"]),
        LIMIT,
    );
    let _ = std::fs::remove_file(&inside);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let s = &r["sources"][0];
    let libc = root.join(LIBC);
    let host = Path::new("/").join(LIBC);
    // The container's libc: the libc with the samples (the host's, which unshare and chroot ran, is another
    // module, named apart).
    let module = s["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"].as_str().unwrap().starts_with("libc.so.6"))
        .max_by_key(|m| u(&m["samples"]))
        .expect("samples in libc");
    let libc_name = module["name"].as_str().unwrap();
    assert_eq!(module["build_id"], build_id(&libc), "not the root's libc");
    assert_ne!(
        build_id(&libc),
        build_id(&host),
        "the root's libc is the host's"
    );
    let own = nm(&libc);
    let frames = fdes(&libc);
    assert!(
        !frames.is_empty(),
        "no .eh_frame read from {}",
        libc.display()
    );
    let hosts = nm(&host);
    let (mut checked, mut named) = (0u64, 0u64);
    for b in s["buckets"].as_array().unwrap() {
        if b["module"] != libc_name {
            continue;
        }
        let offset = u(&b["offset"]);
        // The real function: the last frame (none when nothing names the address).
        let function = b["frames"]
            .as_array()
            .and_then(|f| f.last())
            .and_then(|f| f["function"].as_str())
            .unwrap_or("");
        let n = u(&b["samples"]);
        checked += n;
        let truth: Vec<&str> = own
            .iter()
            .filter(|(lo, hi, _)| *lo <= offset && offset < *hi)
            .map(|(_, _, name)| name.as_str())
            .collect();
        if let Some(target) = function.strip_suffix("@plt") {
            // A PLT stub (no symbol covers it): named by the function its relocation in the root's file
            // jumps to, which that file's symbols must hold.
            assert!(
                own.iter().any(|(_, _, name)| name == target),
                "{function} at {offset:#x}: the root's libc has no {target}"
            );
            named += n;
        } else if truth.is_empty() {
            // Nothing in the root's file names it: neither may ntprof. It is `libc.so.6+0xSTART`, START the
            // start of the root's `.eh_frame` function holding it (else the address itself).
            let start = frames
                .iter()
                .find(|(lo, hi)| *lo <= offset && offset < *hi)
                .map_or(offset, |(lo, _)| *lo);
            assert!(
                function.is_empty() || function == format!("{libc_name}+{start:#x}"),
                "{function} at {offset:#x}, which the root's libc does not name (its function there \
                 starts at {start:#x})"
            );
        } else {
            named += n;
            assert!(
                truth.iter().any(|t| function.starts_with(t)),
                "{function} at {offset:#x}: the root's libc names it {truth:?}"
            );
        }
        let host_names: Vec<&str> = hosts
            .iter()
            .filter(|(lo, hi, _)| *lo <= offset && offset < *hi)
            .map(|(_, _, name)| name.as_str())
            .filter(|h| !truth.contains(h))
            .collect();
        assert!(
            !host_names.iter().any(|h| function.starts_with(h)),
            "{function} at {offset:#x} is the host's libc's name"
        );
    }
    assert!(checked >= 100, "too few samples in libc: {checked}");
    assert!(named > 0, "no sample in a function the root's libc names");
    // The program's own code, from its file in the root.
    let prog_samples: u64 = s["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == name.as_str() && (f["name"] == "main" || f["name"] == "cmp"))
        .map(|f| u(&f["samples"]))
        .sum();
    assert!(
        prog_samples > 0,
        "the program's code is not named from its file"
    );
}
