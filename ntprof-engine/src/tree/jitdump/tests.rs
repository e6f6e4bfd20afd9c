//! Tests of the jitdump reader, of naming by time, and of a run's samples moved to the code of their moment.

use std::os::unix::fs::MetadataExt;

use super::format::{Change, FLAG_ARCH_TIMESTAMP, JitDump, MAGIC, is_dump_path};
use super::replay::Resolver;
use crate::tree::order::Event;
use crate::tree::space::{ModuleKind, ProcMap};
use crate::tree::{Filter, Tracker};

/// Writes a jitdump file in either byte order.
pub(super) struct Writer {
    big: bool,
    pub(super) out: Vec<u8>,
    index: u64,
}

impl Writer {
    pub(super) fn new(big: bool, flags: u64) -> Writer {
        let mut w = Writer {
            big,
            out: Vec::new(),
            index: 0,
        };
        w.u32(MAGIC);
        w.u32(1); // version
        w.u32(40); // header size
        w.u32(62); // EM_X86_64
        w.u32(0);
        w.u32(4242); // pid
        w.u64(123); // timestamp
        w.u64(flags);
        w
    }

    pub(super) fn u32(&mut self, v: u32) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }

    pub(super) fn u64(&mut self, v: u64) {
        let b = if self.big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        };
        self.out.extend_from_slice(&b);
    }

    /// A record: its prefix, then `body` written by the closure, the size patched in after.
    pub(super) fn record(&mut self, id: u32, time: u64, body: impl FnOnce(&mut Writer)) {
        let at = self.out.len();
        self.u32(id);
        self.u32(0);
        self.u64(time);
        body(self);
        while self.out.len() % 8 != 0 {
            self.out.push(0);
        }
        let size = (self.out.len() - at) as u32;
        let b = if self.big {
            size.to_be_bytes()
        } else {
            size.to_le_bytes()
        };
        self.out[at + 4..at + 8].copy_from_slice(&b);
    }

    pub(super) fn load(&mut self, time: u64, addr: u64, size: u64, name: &str) -> u64 {
        let index = self.index;
        self.index += 1;
        self.record(0, time, |w| {
            w.u32(4242);
            w.u32(4243);
            w.u64(addr); // vma
            w.u64(addr);
            w.u64(size);
            w.u64(index);
            w.out.extend_from_slice(name.as_bytes());
            w.out.push(0);
            w.out.extend(std::iter::repeat_n(0xcc, size as usize));
        });
        index
    }

    pub(super) fn move_code(&mut self, time: u64, index: u64, old: u64, new: u64, size: u64) {
        self.record(1, time, |w| {
            w.u32(4242);
            w.u32(4243);
            w.u64(new);
            w.u64(old);
            w.u64(new);
            w.u64(size);
            w.u64(index);
        });
    }

    /// Line entries (address, line, file; `None`: the previous file, as 0xFF 0x00).
    fn debug(&mut self, time: u64, code_addr: u64, entries: &[(u64, u32, Option<&str>)]) {
        self.record(2, time, |w| {
            w.u64(code_addr);
            w.u64(entries.len() as u64);
            for &(addr, line, file) in entries {
                w.u64(addr);
                w.u32(line);
                w.u32(0);
                match file {
                    Some(f) => {
                        w.out.extend_from_slice(f.as_bytes());
                        w.out.push(0);
                    }
                    None => w.out.extend_from_slice(&[0xff, 0]),
                }
            }
        });
    }
}

/// The name of the code at `addr` at `time`.
fn name_at<'a>(dump: &'a JitDump, r: &mut Resolver<'_>, time: u64, addr: u64) -> Option<&'a str> {
    r.advance(time);
    let p = r.placements[r.lookup(addr)? as usize];
    Some(dump.names[p.name as usize].as_str())
}

#[test]
fn both_byte_orders_parse_to_the_same_changes() {
    let mut dumps = Vec::new();
    for big in [false, true] {
        let mut w = Writer::new(big, 0);
        w.load(100, 0x1000, 0x40, "A");
        w.record(4, 105, |w| w.u64(7)); // unwinding info: skipped
        w.record(99, 106, |w| w.u64(7)); // an id this reader does not know: skipped
        w.move_code(110, 0, 0x1000, 0x3000, 0x40);
        w.record(3, 120, |_| {}); // close: nothing after it is read
        w.load(130, 0x5000, 0x10, "after close");
        dumps.push(JitDump::parse(&w.out).unwrap());
    }
    for d in &dumps {
        assert_eq!((d.loads, d.moves, d.cut_at), (1, 1, None));
        assert!(!d.arch_timestamps);
        assert_eq!(d.names, ["A"]);
    }
    assert_eq!(dumps[0].changes, dumps[1].changes);
    assert_eq!(
        dumps[0].changes[1],
        (
            110,
            Change::Move {
                old: 0x1000,
                new: 0x3000,
                size: 0x40,
                index: 0
            }
        )
    );
}

#[test]
fn bad_files_are_refused_and_cut_ones_are_read_up_to_the_cut() {
    assert!(JitDump::parse(b"").unwrap_err().contains("too short"));
    assert!(
        JitDump::parse(b"ELF\x7fxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")
            .unwrap_err()
            .contains("not a jitdump file")
    );
    let w = Writer::new(false, 0);
    assert!(
        JitDump::parse(&w.out[..20])
            .unwrap_err()
            .contains("cut short")
    );
    let mut bad = w.out.clone();
    bad[8..12].copy_from_slice(&4096u32.to_le_bytes());
    assert!(JitDump::parse(&bad).unwrap_err().contains("4096"));

    let mut w = Writer::new(false, FLAG_ARCH_TIMESTAMP);
    w.load(10, 0x1000, 0x20, "whole");
    let whole = w.out.len();
    w.load(20, 0x2000, 0x20, "cut");
    let d = JitDump::parse(&w.out[..w.out.len() - 3]).unwrap();
    assert!(d.arch_timestamps);
    assert_eq!((d.loads, d.cut_at), (1, Some(whole)));
    // A record whose size is smaller than its prefix cannot be stepped over.
    let mut broken = w.out.clone();
    broken[whole + 4..whole + 8].copy_from_slice(&8u32.to_le_bytes());
    let d = JitDump::parse(&broken).unwrap();
    assert_eq!((d.cut_at, d.lost_at), (None, Some((whole, 8))));
}

#[test]
fn an_address_is_named_by_the_code_there_at_the_time() {
    let mut w = Writer::new(false, 0);
    // A at [0x1000, 0x1100) from t=100; B reuses its first half from t=200; C is loaded at t=300 and moved at
    // t=400 from 0x4000 to 0x1080, over what is left of A; D's load is written late but is older (t=150).
    w.load(100, 0x1000, 0x100, "A");
    w.load(200, 0x1000, 0x80, "B");
    let c = w.load(300, 0x4000, 0x40, "C");
    w.move_code(400, c, 0x4000, 0x1080, 0x40);
    w.load(150, 0x8000, 0x10, "D");
    let dump = JitDump::parse(&w.out).unwrap();
    let mut r = Resolver::new(&dump);
    assert_eq!(name_at(&dump, &mut r, 99, 0x1000), None);
    assert_eq!(name_at(&dump, &mut r, 100, 0x1000), Some("A"));
    assert_eq!(name_at(&dump, &mut r, 150, 0x10f0), Some("A"));
    assert_eq!(name_at(&dump, &mut r, 160, 0x8000), Some("D"));
    assert_eq!(name_at(&dump, &mut r, 199, 0x1010), Some("A"));
    assert_eq!(name_at(&dump, &mut r, 200, 0x1010), Some("B"));
    assert_eq!(name_at(&dump, &mut r, 250, 0x1090), Some("A"));
    assert_eq!(name_at(&dump, &mut r, 350, 0x4010), Some("C"));
    assert_eq!(name_at(&dump, &mut r, 350, 0x1090), Some("A"));
    assert_eq!(name_at(&dump, &mut r, 400, 0x4010), None);
    assert_eq!(name_at(&dump, &mut r, 400, 0x1090), Some("C"));
    assert_eq!(name_at(&dump, &mut r, 400, 0x10c0), Some("A"));
    assert_eq!(name_at(&dump, &mut r, 400, 0x1010), Some("B"));
    r.advance(u64::MAX);
    // B over A, and C's move over A.
    assert_eq!(r.reused, 2);
}

#[test]
fn lines_follow_their_code_and_v8s_shift_is_recognized() {
    // V8's convention: line addresses 64 bytes past the code they describe.
    let mut w = Writer::new(false, 0);
    w.debug(
        99,
        0x1000,
        &[
            (0x1040, 3, Some("/app/a.js")),
            (0x1050, 4, None),
            (0x1060, 9, Some("/app/b.js")),
        ],
    );
    let a = w.load(100, 0x1000, 0x40, "JS:*a /app/a.js:3:1");
    w.move_code(200, a, 0x1000, 0x7000, 0x40);
    let dump = JitDump::parse(&w.out).unwrap();
    assert_eq!(dump.line_shift, 0x40);
    let Change::Load {
        lines: Some(lines), ..
    } = dump.changes[0].1
    else {
        panic!("the load has no lines: {:?}", dump.changes);
    };
    assert_eq!(dump.line(lines, 0x1000, 0), Some(("/app/a.js", 3)));
    assert_eq!(dump.line(lines, 0x1000, 0x14), Some(("/app/a.js", 4)));
    assert_eq!(dump.line(lines, 0x1000, 0x30), Some(("/app/b.js", 9)));

    // Another writer's own addresses: an entry at the code's start.
    let mut w = Writer::new(false, 0);
    w.debug(
        99,
        0x1000,
        &[(0x1000, 10, Some("A.java")), (0x1020, 11, None)],
    );
    w.load(100, 0x1000, 0x40, "A.run");
    // A file name that is not text (bytes of a V8 string object) gives no line.
    w.debug(
        109,
        0x2000,
        &[
            (0x2000, 2, Some("\u{1}K\u{2}")),
            (0x2010, 5, Some("B.java")),
        ],
    );
    w.load(110, 0x2000, 0x40, "B.run");
    let dump = JitDump::parse(&w.out).unwrap();
    assert_eq!(dump.line_shift, 0);
    assert_eq!(dump.line(0, 0x1000, 0x25), Some(("A.java", 11)));
    assert_eq!(dump.line(1, 0x2000, 0x8), None);
    assert_eq!(dump.line(1, 0x2000, 0x18), Some(("B.java", 5)));
}

#[test]
fn dump_files_are_told_by_name() {
    assert!(is_dump_path("/home/u/app/jit-1234.dump"));
    assert!(is_dump_path("jit-1.dump"));
    assert!(!is_dump_path("/tmp/jit-.dump"));
    assert!(!is_dump_path("/tmp/jit-12a.dump"));
    assert!(!is_dump_path("/tmp/perf-1234.map"));
    assert!(!is_dump_path("/tmp/jit-1234.dump.bak"));
}

/// A mapping record: the event, with its name put in `names`.
fn mmap(names: &mut Vec<u8>, pid: u32, addr: u64, len: u64, path: &str) -> Event {
    let a = names.len() as u32;
    names.extend_from_slice(path.as_bytes());
    Event::Mmap {
        pid,
        addr,
        len,
        pgoff: 0,
        // The file's own identity, as the kernel records it (a path that is no file: any).
        ino: std::fs::metadata(path).map_or(u64::from(!path.is_empty()), |m| m.ino()),
        dev: std::fs::metadata(path).map_or(0, |m| m.dev()),
        name: (a, names.len() as u32),
    }
}

fn sample(pid: u32, ip: u64) -> Event {
    Event::Sample {
        source: 0,
        pid,
        tid: pid,
        ip,
        kernel: false,
        chain: (0, 0),
        regs: None,
        stack: (0, 0),
    }
}

#[test]
fn a_runs_samples_are_named_by_the_code_of_their_moment() {
    let dir = std::env::temp_dir().join(format!("ntprof-jitdump-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let pid = 4242;
    let path = dir.join(format!("jit-{pid}.dump"));
    let path = path.to_str().unwrap();
    // A is hot at [0x10000, 0x10100) until t=2000; then B is loaded at the same address and is hot.
    let mut w = Writer::new(false, 0);
    w.load(1000, 0x10000, 0x100, "JS:*A");
    w.load(2000, 0x10000, 0x100, "JS:*B");
    std::fs::write(path, &w.out).unwrap();

    let mut t = Tracker::new(1, true, false, 0, Filter::default());
    t.call_graph = Some(crate::options::CallGraph::Fp);
    t.add_process(
        pid,
        1,
        "node",
        &[ProcMap {
            start: 0x400000,
            end: 0x500000,
            pgoff: 0,
            inode: 7,
            dev: 0,
            path: "/usr/bin/node".into(),
        }],
        0,
    );
    let mut names = Vec::new();
    let anon = mmap(&mut names, pid, 0x10000, 0x10000, "//anon");
    t.apply(900, &anon, &names);
    let dump = mmap(&mut names, pid, 0x7000_0000, 0x1000, path);
    t.apply(950, &dump, &names);
    for i in 0..30u64 {
        t.apply(1000 + i * 10, &sample(pid, 0x10010), &names); // A's time
    }
    for i in 0..10u64 {
        t.apply(2000 + i * 10, &sample(pid, 0x10010), &names); // B's time, the same address
    }
    t.apply(2500, &sample(pid, 0x450000), &names); // in node itself: not logged
    // Node's code called from JIT code (a return address in A's, then B's range), with frame pointers.
    for time in [1500, 2600] {
        let chain = names.len() as u32;
        names.extend_from_slice(&0x450000u64.to_le_bytes());
        names.extend_from_slice(&0x10081u64.to_le_bytes());
        let mut called = sample(pid, 0x450000);
        if let Event::Sample { chain: c, .. } = &mut called {
            *c = (chain, names.len() as u32);
        }
        t.apply(time, &called, &names);
    }
    t.resolve_jit();
    std::fs::remove_dir_all(&dir).ok();

    let name = |loc: crate::tree::Loc| match &t.modules.list[loc.module as usize].kind {
        ModuleKind::JitDump { dump, .. } => t.jit.locate(*dump, loc.offset).unwrap().name,
        _ => t.modules.list[loc.module as usize].name.as_str(),
    };
    let mut by_stack = std::collections::BTreeMap::new();
    for (&(_, stack), &n) in &t.sources[0].counts {
        let frames: Vec<&str> = t.stacks.frames(stack).iter().map(|&l| name(l)).collect();
        *by_stack.entry(frames.join(" <- ")).or_insert(0u64) += n;
    }
    assert_eq!(
        by_stack.into_iter().collect::<Vec<_>>(),
        [
            ("JS:*A".to_string(), 30),
            ("JS:*B".to_string(), 10),
            ("node".to_string(), 1),
            ("node <- JS:*A".to_string(), 1),
            ("node <- JS:*B".to_string(), 1)
        ]
    );
    assert_eq!(t.sources[0].samples, 43);
    let r = &t.jit.reports;
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!((r[0].kind.as_str(), r[0].path.as_str()), ("jitdump", path));
    assert_eq!(
        (r[0].records, r[0].reused, r[0].samples, r[0].named_by_time),
        (2, 1, 40, 40)
    );
    let f = t.jit.locate(0, (1 << 32) | 0x10).unwrap();
    assert_eq!(
        (f.name, f.address, f.start, f.size),
        ("JS:*B", 0x10010, 0x10000, 0x100)
    );
}
