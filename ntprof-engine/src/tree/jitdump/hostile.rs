//! Tests of what a hostile or broken profiled program can do to the JIT readers: dumps and perf maps that are
//! FIFOs or devices, huge sparse dumps, files of another user, corrupt records, replays built to be quadratic.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use super::format::JitDump;
use super::replay::Resolver;
use super::state::read_dump;
use super::tests::Writer;
use crate::files::Owners;
use crate::tree::jit::{PerfMap, map_path};

/// `f`'s result if it returns within `secs` (a blocked call fails the test instead of hanging it).
pub fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs)).ok()
}

/// A fresh directory of its own for a test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ntprof-hostile-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::S_IRWXU).unwrap();
}

/// A pid no process can have (above the largest `pid_max`), with a perf map path of its own.
fn fake_pid(n: u32) -> u32 {
    (1 << 22) + 1000 * n + std::process::id() % 1000
}

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

use crate::symbols::hostile::{alone, skip};

#[test]
fn a_corrupt_record_in_the_middle_costs_itself_only() {
    let mut w = Writer::new(false, 0);
    w.load(10, 0x1000, 0x20, "before");
    let bad = w.out.len();
    // A load whose name has no end within the record (and a move too short for its fields), sizes intact.
    w.record(0, 15, |w| {
        w.out.extend_from_slice(&[0; 40]);
        w.out.extend_from_slice(b"abcdefgh");
    });
    w.record(1, 16, |w| w.u64(7));
    w.load(20, 0x2000, 0x20, "after");
    let d = JitDump::parse(&w.out).unwrap();
    assert_eq!(d.names, ["before", "after"]);
    assert_eq!((d.loads, d.skipped, d.first_skipped), (2, 2, Some(bad)));
    assert_eq!((d.cut_at, d.lost_at), (None, None));
    let problem = d.problem().unwrap();
    assert!(
        problem.contains(&format!("2 corrupt records (the first at byte {bad})")),
        "{problem}"
    );
    assert!(!problem.contains("finished writing"), "{problem}");
}

#[test]
fn a_replay_visits_each_range_a_bounded_number_of_times() {
    // Code loaded over the same large range again and again, small code loaded into it, then each large one
    // moved away: removing a moved placement must not walk every range inside its old bounds.
    const BIG: u64 = 1 << 40;
    let n = 3000u64;
    let mut w = Writer::new(false, 0);
    let mut t = 1;
    for i in 0..n {
        // A load that leaves its code bytes out (the reader takes what follows its fields as its name).
        w.record(0, t, |w| {
            for v in [0, 0x10_0000, 0x10_0000, 0x100_0000, BIG + i] {
                w.u64(v);
            }
            w.out.extend_from_slice(b"big\0");
        });
        t += 1;
    }
    for i in 0..n {
        w.load(t, 0x10_0000 + i * 0x100, 0x100, "small");
        t += 1;
    }
    for i in 0..n {
        w.move_code(t, BIG + i, 0x10_0000, 0x4000_0000 + i * 0x1000, 0x10);
        t += 1;
    }
    let dump = JitDump::parse(&w.out).unwrap();
    assert_eq!((dump.loads, dump.moves), (2 * n, n));
    let mut r = Resolver::new(&dump);
    r.advance(u64::MAX);
    let changes = dump.changes.len() as u64;
    assert!(
        r.visited() <= 4 * changes,
        "{} map entries visited for {changes} changes",
        r.visited()
    );
    // The replay is still right: small code where it was loaded, the moved code where it went.
    let at = |a| {
        r.lookup(a)
            .map(|id| dump.names[r.placements[id as usize].name as usize].as_str())
    };
    assert_eq!(at(0x10_0000 + 5 * 0x100), Some("small"));
    assert_eq!(at(0x4000_0000 + 7 * 0x1000), Some("big"));
}

#[test]
fn a_dump_or_perf_map_that_is_a_fifo_is_refused_at_once() {
    let dir = scratch("fifo");
    let fifo = dir.join("jit-1.dump");
    mkfifo(&fifo);
    let path = fifo.to_str().unwrap().to_string();
    let e = within(20, move || read_dump(&path, &Owners::Any).unwrap_err())
        .expect("reading a FIFO jitdump returns at once");
    assert!(e.contains("FIFO"), "{e}");
    let pid = fake_pid(1);
    let map = PathBuf::from(map_path(pid));
    let _ = std::fs::remove_file(&map);
    mkfifo(&map);
    let got = within(20, move || {
        PerfMap::load(pid, &Default::default()).map(|r| r.err())
    });
    let _ = std::fs::remove_file(&map);
    let e = got.expect("reading a FIFO perf map returns at once");
    assert!(e.unwrap().unwrap().contains("FIFO"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_dump_or_perf_map_linked_to_a_device_or_sparse_costs_no_memory() {
    let dir = scratch("zero");
    let zero = dir.join("jit-2.dump");
    symlink("/dev/zero", &zero).unwrap();
    let path = zero.to_str().unwrap().to_string();
    let e = within(20, move || read_dump(&path, &Owners::Any).unwrap_err())
        .expect("reading /dev/zero returns at once");
    assert!(e.contains("character device"), "{e}");
    let pid = fake_pid(2);
    let map = PathBuf::from(map_path(pid));
    let _ = std::fs::remove_file(&map);
    symlink("/dev/zero", &map).unwrap();
    let got = within(20, move || {
        PerfMap::load(pid, &Default::default()).map(|r| r.err())
    });
    let _ = std::fs::remove_file(&map);
    assert!(
        got.expect("returns at once")
            .unwrap()
            .unwrap()
            .contains("character device")
    );

    // A valid dump made 8 GiB long by a hole: read record by record, its memory is its names.
    let mut w = Writer::new(false, 0);
    w.load(10, 0x1000, 0x20, "real");
    let end = w.out.len();
    let sparse = dir.join("jit-3.dump");
    std::fs::write(&sparse, &w.out).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&sparse)
        .unwrap()
        .set_len(8 << 30)
        .unwrap();
    // Measured in a process of its own: reading it whole would be 8 GiB.
    let path = sparse.to_str().unwrap().to_string();
    let test =
        "tree::jitdump::hostile::a_dump_or_perf_map_linked_to_a_device_or_sparse_costs_no_memory";
    let grew_mib = alone::peak_growth_kib(test, || {
        let d = within(60, move || read_dump(&path, &Owners::Any).unwrap())
            .expect("a sparse dump is read quickly");
        assert_eq!(
            (d.names.as_slice(), d.lost_at),
            (&["real".to_string()][..], Some((end, 0)))
        );
    }) / 1024;
    assert!(grew_mib < 256, "reading it took {grew_mib} MiB more");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_of_another_user_are_not_trusted() {
    if !is_root() {
        skip::skip("needs root: giving a file to another user");
        return;
    }
    let dir = scratch("owner");
    let mut w = Writer::new(false, 0);
    w.load(10, 0x1000, 0x20, "planted");
    let dump = dir.join("jit-4.dump");
    std::fs::write(&dump, &w.out).unwrap();
    std::os::unix::fs::chown(&dump, Some(65534), Some(65534)).unwrap();
    let path = dump.to_str().unwrap();
    let e = read_dump(path, &Owners::Of(vec![1000])).unwrap_err();
    assert!(e.contains("belongs to uid 65534"), "{e}");
    assert_eq!(
        read_dump(path, &Owners::Of(vec![65534])).unwrap().names,
        ["planted"]
    );

    // A perf map of a process that is not running, another user's: refused, as perf refuses it.
    let pid = fake_pid(3);
    let map = PathBuf::from(map_path(pid));
    std::fs::write(&map, "1000 20 planted\n").unwrap();
    std::os::unix::fs::chown(&map, Some(65534), Some(65534)).unwrap();
    let got = PerfMap::load(pid, &Default::default()).unwrap().err();
    let _ = std::fs::remove_file(&map);
    assert!(
        got.as_deref()
            .unwrap_or("")
            .contains("belongs to uid 65534"),
        "{got:?}"
    );

    // The perf map of a process that runs as that user is that user's file: read.
    let mut child = std::process::Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "sleep",
            "60",
        ])
        .spawn()
        .unwrap();
    let pid = child.id();
    // Wait for setpriv to have changed its user (it then becomes sleep, same pid).
    while Owners::of_process(pid) != Owners::Of(vec![65534, 65534]) {
        assert!(child.try_wait().unwrap().is_none(), "setpriv ended");
        std::thread::yield_now();
    }
    let map = PathBuf::from(map_path(pid));
    std::fs::write(&map, "1000 20 its own\n").unwrap();
    std::os::unix::fs::chown(&map, Some(65534), Some(65534)).unwrap();
    let got = PerfMap::load(pid, &Default::default()).unwrap();
    let _ = std::fs::remove_file(&map);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(got.unwrap().lookup(0x1008).map(|(n, _)| n), Some("its own"));
    std::fs::remove_dir_all(&dir).unwrap();
}
