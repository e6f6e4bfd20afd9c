//! The sampler extension (`ntprofile::Sampler`): process trees followed through fork and exec, `dlopen`ed
//! libraries, frame-pointer call chains, user-stack copies, accounting, errors, leaks and `fork()`.
//!
//! The sampled programs are the C files of this folder, built here with gcc into a scratch directory: `tree.c`
//! forks two workers and a child that execs `leaf.c`; `dl.c` loads `libspin.c` with `dlopen`; `chain.c` calls
//! main -> outer -> middle -> inner (built with frame pointers). Each waits for a line on its stdin, so that the
//! sampler is enabled before anything happens, and spins for a given CPU time.
//!
//! There is no hardware PMU here: the samplers use ProfileSource::Time (cpu-clock) at its default 1 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ntprofile::{NtStatus, Process, ProfileSource, SampleRecord, Sampler, SamplerStats};

#[path = "../common/cbuild.rs"]
mod cbuild;
#[path = "../common/mod.rs"]
mod common;

mod blocked;
mod errors;
mod per_thread;
mod promises;
mod sideband;
mod stacks;
mod stress;
mod switches;
mod tree;

/// The programs of this folder, built once per test into `scratch`.
struct Programs {
    scratch: cbuild::Scratch,
}

impl Programs {
    fn new(tag: &str) -> Programs {
        Programs {
            scratch: cbuild::Scratch::new(tag),
        }
    }

    /// Build `name.c` of this folder with `flags`; the program's path.
    fn build(&self, name: &str, flags: &[&str]) -> PathBuf {
        let src = cbuild::repo()
            .join("tests/sampler")
            .join(format!("{name}.c"));
        let out = self.scratch.path(name);
        cbuild::run_tool(
            Command::new("gcc")
                .args(["-O1", "-g", "-Wall"])
                .args(flags)
                .arg("-o")
                .arg(&out)
                .arg(&src),
        );
        out
    }

    /// Build `name.c` as a shared library `name.so`.
    fn build_lib(&self, name: &str) -> PathBuf {
        let src = cbuild::repo()
            .join("tests/sampler")
            .join(format!("{name}.c"));
        let out = self.scratch.path(&format!("{name}.so"));
        cbuild::run_tool(
            Command::new("gcc")
                .args(["-O1", "-g", "-shared", "-fPIC", "-o"])
                .arg(&out)
                .arg(&src),
        );
        out
    }
}

/// A started program waiting for its "go" line.
struct Waiting {
    child: Child,
}

impl Waiting {
    /// Start `program`, and return once it is blocked reading its standard input: its start-up (the loader's
    /// page faults, its first calls) is over before any event of the test is enabled. (Returning at once let a
    /// loaded machine run the start-up between two events' enables: a page-fault sampler took one fault more
    /// than the counter enabled after it.)
    fn spawn(program: &Path, args: &[&str]) -> Waiting {
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", program.display()));
        common::wait_blocked_in_read(child.id(), &program.display().to_string());
        Waiting { child }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn go(&mut self) {
        let mut stdin = self.child.stdin.take().expect("stdin");
        stdin.write_all(b"go\n").expect("write go");
    }

    /// Wait for the program's end; panics unless it succeeded.
    fn finish(mut self) {
        let status = self.child.wait().expect("wait");
        assert!(status.success(), "the sampled program failed: {status}");
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A record with its borrowed parts copied, for checks after the reading.
#[derive(Clone, Debug)]
#[allow(dead_code)] // every field is printed in failure messages; not all are checked
enum Rec {
    Sample {
        pid: u32,
        tid: u32,
        time: u64,
        ip: u64,
        kernel: bool,
        user_frames: Vec<u64>,
        regs: Option<ntprofile::UserRegs>,
        stack: Vec<u8>,
    },
    Mmap {
        pid: u32,
        time: u64,
        addr: u64,
        len: u64,
        prot: u32,
        filename: String,
    },
    Comm {
        pid: u32,
        tid: u32,
        time: u64,
        comm: String,
        exec: bool,
    },
    Fork {
        pid: u32,
        ppid: u32,
        tid: u32,
        time: u64,
    },
    Exit {
        pid: u32,
        tid: u32,
        time: u64,
    },
    Lost {
        lost: u64,
    },
    Throttle,
    Switch {
        time: u64,
    },
}

impl Rec {
    fn of(record: &SampleRecord<'_>) -> Rec {
        match record {
            SampleRecord::Sample(s) => Rec::Sample {
                pid: s.pid,
                tid: s.tid,
                time: s.time,
                ip: s.ip,
                kernel: s.kernel,
                user_frames: s
                    .frames()
                    .filter(|(c, _)| *c == ntprofile::CallchainContext::User)
                    .map(|(_, a)| a)
                    .collect(),
                regs: s.regs,
                stack: s.stack.to_vec(),
            },
            SampleRecord::Mmap(m) => Rec::Mmap {
                pid: m.pid,
                time: m.time,
                addr: m.addr,
                len: m.len,
                prot: m.prot,
                filename: String::from_utf8_lossy(m.filename).into_owned(),
            },
            SampleRecord::Comm {
                pid,
                tid,
                time,
                comm,
                exec,
            } => Rec::Comm {
                pid: *pid,
                tid: *tid,
                time: *time,
                comm: String::from_utf8_lossy(comm).into_owned(),
                exec: *exec,
            },
            SampleRecord::Fork {
                pid,
                ppid,
                tid,
                time,
                ..
            } => Rec::Fork {
                pid: *pid,
                ppid: *ppid,
                tid: *tid,
                time: *time,
            },
            SampleRecord::Exit { pid, tid, time, .. } => Rec::Exit {
                pid: *pid,
                tid: *tid,
                time: *time,
            },
            SampleRecord::Lost { lost, .. } => Rec::Lost { lost: *lost },
            SampleRecord::Throttle { .. } => Rec::Throttle,
            SampleRecord::Switch { time, .. } => Rec::Switch { time: *time },
        }
    }

    fn time(&self) -> u64 {
        match self {
            Rec::Sample { time, .. }
            | Rec::Mmap { time, .. }
            | Rec::Comm { time, .. }
            | Rec::Fork { time, .. }
            | Rec::Exit { time, .. }
            | Rec::Switch { time } => *time,
            Rec::Lost { .. } | Rec::Throttle => 0,
        }
    }
}

/// Enable `sampler`, let `program` go, and read until every target exited (at most `limit`); the records in time
/// order, and how many records `read` said it delivered.
fn record_until_exit(
    sampler: &mut Sampler,
    program: Waiting,
    limit: Duration,
) -> (Vec<Rec>, usize) {
    let mut program = program;
    check_forced_layout(sampler);
    sampler.enable().expect("enable");
    program.go();
    let mut recs = Vec::new();
    let mut delivered = 0;
    let start = Instant::now();
    while !sampler.targets_exited() {
        assert!(
            start.elapsed() < limit,
            "the targets did not all exit within {limit:?} (targets_exited() stayed false)"
        );
        sampler.wait(Duration::from_millis(50)).expect("wait");
        delivered += sampler.read(|r| recs.push(Rec::of(r))).expect("read");
    }
    delivered += sampler.read(|r| recs.push(Rec::of(r))).expect("read");
    program.finish();
    // A sort by time keeps the ring order of equal times (stable), and Lost/Throttle (time 0 here) first.
    recs.sort_by_key(Rec::time);
    (recs, delivered)
}

/// The layout `NTPROFILE_EVENTS` forces, when a test runs again with it (`per_thread`): the sampler took it.
fn check_forced_layout(sampler: &Sampler) {
    if let Ok(forced) = std::env::var("NTPROFILE_EVENTS") {
        assert_eq!(sampler.event_usage().mode.name(), forced);
    }
}

/// The test runs again in the per-thread layout (`per_thread`): a task created later is observed from the read
/// that finds its fork record, and what it ran before is reported lost.
fn per_thread_layout() -> bool {
    std::env::var("NTPROFILE_EVENTS").is_ok_and(|m| m == "per-thread")
}

/// Samples per pid.
fn samples_per_pid(recs: &[Rec]) -> BTreeMap<u32, usize> {
    let mut per = BTreeMap::new();
    for r in recs {
        if let Rec::Sample { pid, .. } = r {
            *per.entry(*pid).or_default() += 1;
        }
    }
    per
}

/// Print a summary of what a test saw (visible with --nocapture).
fn note(what: &str, recs: &[Rec], stats: SamplerStats) {
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    for r in recs {
        let k = match r {
            Rec::Sample { .. } => "sample",
            Rec::Mmap { .. } => "mmap",
            Rec::Comm { .. } => "comm",
            Rec::Fork { .. } => "fork",
            Rec::Exit { .. } => "exit",
            Rec::Lost { .. } => "lost",
            Rec::Throttle => "throttle",
            Rec::Switch { .. } => "switch",
        };
        *kinds.entry(k).or_default() += 1;
    }
    println!(
        "{what}: {kinds:?}; samples per pid {:?}; {stats:?}",
        samples_per_pid(recs)
    );
}

/// The symbols of an ELF file with their sizes (`nm -S`): name -> [start, end).
fn symbols(program: &Path) -> BTreeMap<String, (u64, u64)> {
    let out = cbuild::run_tool(
        Command::new("nm")
            .args(["-S", "--defined-only"])
            .arg(program),
    );
    let mut map = BTreeMap::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() == 4 {
            let addr = u64::from_str_radix(f[0], 16).unwrap();
            let size = u64::from_str_radix(f[1], 16).unwrap();
            map.insert(f[3].to_string(), (addr, addr + size));
        }
    }
    map
}
