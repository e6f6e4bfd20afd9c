//! ntprof's DWARF and `.eh_frame` readers fed arbitrary objects: a broken object costs its names, never the
//! run. The DWARF is checked (nesting depth, walked without recursion) before addr2line sees it, so no input
//! may overflow the stack; lookups of addresses the input chooses must end.
#![no_main]

use libfuzzer_sys::fuzz_target;

// ntprof's own sources, compiled into the target (the profiler is a binary crate).
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/files.rs"]
mod files;
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/symbols/dwarf.rs"]
mod dwarf;
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/symbols/fde.rs"]
mod fde;

use fde::FdeIndex;

fuzz_target!(|input: (u64, u64, &[u8])| {
    let (a, b, bytes) = input;
    let Ok(file) = object::File::parse(bytes) else {
        return;
    };
    let fdes = FdeIndex::of_file(&file);
    let (sections, _alt) = dwarf::of_object(&file);
    let ctx = dwarf::context(sections).ok();
    for addr in [a, b, a.wrapping_add(b) / 2] {
        if let Some((start, end)) = fdes.lookup(addr) {
            assert!(start <= addr && addr < end, "{addr:#x} outside its FDE [{start:#x}, {end:#x})");
        }
        let Some(ctx) = ctx.as_ref().filter(|_| dwarf::can_look_up(addr)) else {
            continue;
        };
        if let Ok(mut frames) = ctx.find_frames(addr).skip_all_loads() {
            let mut n = 0;
            while let Ok(Some(frame)) = frames.next() {
                n += 1;
                assert!(n <= 2 * dwarf::MAX_DEPTH as usize, "more frames than nesting allows");
                if let Some(f) = &frame.function {
                    let _ = f.demangle();
                }
            }
        }
        let _ = ctx.find_location(addr);
    }
});
