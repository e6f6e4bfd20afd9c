//! ntprof's perf map reader fed arbitrary files: lines of any length are cut, never kept whole; a later line
//! wins where lines overlap; every name found covers the address asked for; where lines overlap is said.
#![no_main]

use libfuzzer_sys::fuzz_target;

// ntprof's own sources, compiled into the target (the profiler is a binary crate).
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/files.rs"]
mod files;
#[allow(dead_code)]
#[path = "../../ntprof-engine/src/tree/jit.rs"]
mod jit;

fuzz_target!(|input: (u8, &[u8])| {
    let (max, bytes) = input;
    // Line by line as a run reads the file, each line cut to a small maximum.
    let max = usize::from(max) + 1;
    let mut longest = 0;
    let mut text = String::new();
    files::for_each_line(&mut &*bytes, max, |line| {
        longest = longest.max(line.len());
        text.push_str(&String::from_utf8_lossy(line));
        text.push('\n');
    })
    .expect("reading from memory does not fail");
    assert!(longest <= max, "a line of {longest} bytes kept, the maximum is {max}");
    let map = jit::PerfMap::parse(&text);
    assert!(map.reused <= map.lines());
    for line in text.lines().take(200) {
        let Some(start) = line
            .split_whitespace()
            .next()
            .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        else {
            continue;
        };
        for probe in [start, start.wrapping_add(1)] {
            if let Some((_, from)) = map.lookup(probe) {
                assert!(from <= probe);
            }
            let _ = map.mixed(probe);
        }
    }
});
