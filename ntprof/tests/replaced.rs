//! A program whose file is replaced on disk while it runs (its path renamed over by another build, as a package
//! upgrade does) is never named with the new file's functions: the kernel's mapping gives the device and inode
//! of the file mapped, and ntprof names an object only from the file with that identity. As root it opens the
//! mapping itself (`/proc/PID/map_files`) and names the program from the very file it runs; without the
//! privilege only the path is left, which now holds another file, so the code stays `prog+0x…` and the note
//! says the file found is not the one mapped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{build_dir, function_samples, gcc, is_root, ntprof_command, run_ok, u};

const LIMIT: Duration = Duration::from_secs(120);

/// The program at `dir/prog` (its function `original_spin`) and its other build at `dir/prog.new`
/// (`replacement_only`).
fn programs(tag: &str) -> (PathBuf, PathBuf) {
    let dir = build_dir(tag);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/replaced/spin.c");
    let (prog, new) = (dir.join("prog"), dir.join("prog.new"));
    for (out, name) in [(&prog, "original_spin"), (&new, "replacement_only")] {
        gcc(
            &[
                "-O1",
                &format!("-DNAME={name}"),
                "-o",
                out.to_str().unwrap(),
                src.to_str().unwrap(),
            ],
            &dir,
        );
    }
    (prog, new)
}

#[test]
fn a_program_replaced_on_disk_is_named_only_from_the_file_it_mapped() {
    if !is_root() {
        common::skip("needs root: it runs ntprof as root and as nobody");
        return;
    }
    for unprivileged in [false, true] {
        let (prog, new) = programs(if unprivileged {
            "replaced-nobody"
        } else {
            "replaced-root"
        });
        // Run by the user ntprof runs as (an unprivileged attach reaches only its own processes).
        let mut cmd = if unprivileged {
            let mut c = Command::new("setpriv");
            c.args(["--reuid", "65534", "--regid", "65534", "--clear-groups"]);
            c.arg(&prog);
            c
        } else {
            Command::new(&prog)
        };
        let mut child = cmd.arg("6").stdout(Stdio::null()).spawn().unwrap();
        // setpriv runs the program in its own process: the pid is the program's once it has started.
        let pid = child.id();
        let started = (0..250).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|e| e.ends_with("prog"))
        });
        assert!(started, "{} did not start", prog.display());
        // The path now holds the other build: a new inode; the process still runs the old one.
        std::fs::rename(&new, &prog).unwrap();
        let mut a = ntprof_command(unprivileged);
        a.args([
            "attach", "-q", "--format", "json", "-i", "2000", "-d", "1.5", "-p",
        ])
        .arg(pid.to_string());
        let out = run_ok(&mut a, LIMIT);
        let _ = child.kill();
        let _ = child.wait();
        let r: Value = serde_json::from_slice(&out.stdout).unwrap();
        let s = &r["sources"][0];
        let who = if unprivileged { "nobody" } else { "root" };
        assert_eq!(
            function_samples(s, "replacement_only"),
            0,
            "{who}: named with the replacement's functions: {}",
            s["functions"]
        );
        let module = s["modules"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == "prog")
            .unwrap_or_else(|| panic!("{who}: no module prog: {}", s["modules"]))
            .clone();
        let in_prog = u(&module["samples"]);
        // The program spins in one function: nearly every sample of the attach is in it (1.5 s at 2 ms).
        assert!(in_prog >= 100, "{who}: {in_prog} samples in prog");
        let named = function_samples(s, "original_spin");
        let notes = r["run"]["notes"].to_string();
        if unprivileged {
            // Only the path was left to open, and it holds another file.
            assert_eq!(named, 0, "{who}: {}", s["functions"]);
            assert!(
                notes.contains("is not the one that was mapped"),
                "{who}: no note of the replaced file: {notes}"
            );
        } else {
            // The mapping itself: the very file the process runs.
            assert!(
                named * 10 >= in_prog * 9,
                "{who}: original_spin {named} of the {in_prog} samples in prog: {}",
                s["functions"]
            );
        }
    }
}
