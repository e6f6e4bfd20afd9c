//! ntprof's jitdump reader and replay fed arbitrary files: reading must end (each record read once, a load's
//! code stepped over), a file that is shorter than its size said (a writer truncating it) must read as cut, and
//! the replay must name each address only by a placement that covers it. A run that is slow on some input is a
//! finding too (libFuzzer's timeout): the replay must stay O(n log n) whatever the loads and moves.
#![no_main]

use libfuzzer_sys::fuzz_target;

// ntprof's own sources, compiled into the target (the profiler is a binary crate).
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/files.rs"]
mod files;
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/tree/jitdump/format.rs"]
mod format;
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/tree/jitdump/reader.rs"]
mod reader;
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/tree/jitdump/replay.rs"]
mod replay;

use format::{Change, JitDump};
use replay::Resolver;

fuzz_target!(|input: (u16, &[u8])| {
    let (missing, bytes) = input;
    // The size the file had when it was opened: the bytes, or more than are left to read.
    let len = bytes.len() as u64 + u64::from(missing % 4 == 0) * u64::from(missing);
    let Ok(dump) = JitDump::read(&mut &*bytes, len) else {
        return;
    };
    let _ = dump.problem();
    assert!(dump.changes.len() as u64 <= dump.loads + dump.moves);
    assert!(dump.changes.windows(2).all(|w| w[0].0 <= w[1].0), "changes sorted by time");
    let mut r = Resolver::new(&dump);
    for &(time, ref change) in dump.changes.iter().take(2000) {
        r.advance(time);
        let addr = match *change {
            Change::Load { addr, .. } => addr,
            Change::Move { new, .. } => new,
        };
        for probe in [addr, addr.wrapping_add(1), addr.wrapping_sub(1)] {
            if let Some(id) = r.lookup(probe) {
                let p = r.placements[id as usize];
                assert!(p.start <= probe, "{probe:#x} named by code starting at {:#x}", p.start);
                assert!(probe - p.start < p.size, "{probe:#x} past the end of its code");
                assert!((p.name as usize) < dump.names.len());
            }
        }
    }
    r.advance(u64::MAX);
});
