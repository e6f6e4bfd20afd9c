//! Call chains (frame pointers, from the kernel) and user-stack copies (registers and stack, for DWARF
//! unwinding), on `chain.c`: main -> outer -> middle -> inner, built with frame pointers and without PIE so that
//! its symbols' addresses are its run-time addresses.

use super::*;

/// The `[stack]` mapping of process `pid` now (from `/proc/<pid>/maps`).
fn stack_mapping(pid: u32) -> (u64, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("read maps");
    let line = maps
        .lines()
        .find(|l| l.ends_with("[stack]"))
        .expect("a [stack] line");
    let range = line.split_whitespace().next().unwrap();
    let (a, b) = range.split_once('-').unwrap();
    (
        u64::from_str_radix(a, 16).unwrap(),
        u64::from_str_radix(b, 16).unwrap(),
    )
}

fn chain_program(programs: &Programs) -> (PathBuf, BTreeMap<String, (u64, u64)>) {
    let chain = programs.build("chain", &["-fno-omit-frame-pointer", "-no-pie"]);
    let syms = symbols(&chain);
    for f in ["main", "outer", "middle", "inner"] {
        assert!(syms.contains_key(f), "{f} missing from chain's symbols");
    }
    (chain, syms)
}

/// The function of `syms` containing `addr`.
fn function_at(syms: &BTreeMap<String, (u64, u64)>, addr: u64) -> Option<&str> {
    syms.iter()
        .find(|(_, (a, b))| addr >= *a && addr < *b)
        .map(|(n, _)| n.as_str())
}

/// With callchain(): the samples in inner() carry the user frames inner, middle, outer, main, in that order.
#[test]
fn callchains_walk_the_frame_pointers_of_the_sampled_program() {
    let _serial = common::serial();
    let programs = Programs::new("callchain");
    let (chain, syms) = chain_program(&programs);
    let program = Waiting::spawn(&chain, &["300"]);
    let pid = program.pid();
    let mut sampler = Sampler::builder()
        .pid(pid)
        .callchain(32)
        .build()
        .expect("build");
    let (recs, _) = record_until_exit(&mut sampler, program, Duration::from_secs(60));
    note("callchain", &recs, sampler.stats());
    let (mut in_inner, mut full) = (0, 0);
    let mut example = None;
    for r in &recs {
        let Rec::Sample {
            pid: p,
            ip,
            user_frames,
            kernel,
            ..
        } = r
        else {
            continue;
        };
        assert!(!kernel, "a kernel sample without kernel(true)");
        if *p != pid || function_at(&syms, *ip) != Some("inner") {
            continue;
        }
        in_inner += 1;
        let names: Vec<&str> = user_frames
            .iter()
            .map(|&a| function_at(&syms, a).unwrap_or("?"))
            .collect();
        if names.len() >= 4 && names[..4] == ["inner", "middle", "outer", "main"] {
            full += 1;
        } else if example.is_none() {
            example = Some(names.join(" <- "));
        }
    }
    println!(
        "callchain: {full} of {in_inner} samples in inner have inner <- middle <- outer <- main"
    );
    assert!(in_inner >= 100, "{in_inner} samples in inner");
    assert!(
        full * 10 >= in_inner * 9,
        "{full} of {in_inner} full chains; e.g. {example:?}"
    );
}

/// With user_stack(): user samples carry ip, sp and bp (ip the sample's, sp inside the thread's stack mapping)
/// and the stack copy from sp; in inner(), the return address into middle() sits at bp + 8 of the copy.
#[test]
fn user_stack_copies_hold_the_registers_and_the_frames() {
    let _serial = common::serial();
    let programs = Programs::new("userstack");
    let (chain, syms) = chain_program(&programs);
    let program = Waiting::spawn(&chain, &["300"]);
    let pid = program.pid();
    // The main thread's stack mapping, while the program waits for its line.
    std::thread::sleep(Duration::from_millis(50));
    let (lo, hi) = stack_mapping(pid);
    let mut sampler = Sampler::builder()
        .pid(pid)
        .user_stack(8192)
        .build()
        .expect("build");
    let (recs, _) = record_until_exit(&mut sampler, program, Duration::from_secs(60));
    note("user stack", &recs, sampler.stats());
    let (mut user, mut in_inner, mut found) = (0, 0, 0);
    for r in &recs {
        let Rec::Sample {
            pid: p,
            ip,
            regs,
            stack,
            kernel: false,
            ..
        } = r
        else {
            continue;
        };
        if *p != pid {
            continue;
        }
        user += 1;
        let regs = regs.unwrap_or_else(|| panic!("a user sample without registers at {ip:#x}"));
        assert_eq!(regs.ip, *ip, "the registers' ip is the sample's");
        assert!(
            regs.sp >= lo && regs.sp < hi,
            "sp {:#x} outside the stack mapping {lo:#x}-{hi:#x}",
            regs.sp
        );
        assert!(
            !stack.is_empty() && stack.len() <= 8192,
            "stack copy of {} bytes",
            stack.len()
        );
        assert!(
            regs.sp + stack.len() as u64 <= hi,
            "the copy runs past the stack's top"
        );
        if function_at(&syms, *ip) == Some("inner") {
            in_inner += 1;
            let at = regs.bp.wrapping_sub(regs.sp).wrapping_add(8) as usize;
            if let Some(bytes) = stack.get(at..at + 8) {
                let ret = u64::from_ne_bytes(bytes.try_into().unwrap());
                if function_at(&syms, ret) == Some("middle") {
                    found += 1;
                }
            }
        }
    }
    println!(
        "user stack: {user} user samples; {found} of {in_inner} in inner have middle's return address at bp + 8"
    );
    assert!(in_inner >= 100, "{in_inner} samples in inner");
    assert!(found * 10 >= in_inner * 9, "{found} of {in_inner}");
}
