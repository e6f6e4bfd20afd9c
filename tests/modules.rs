//! The modules and symbols API: `modules`, `find_module`, `find_function`, `kernel_modules`, `kernel_symbols`.
//!
//! The function ranges are checked against ground truth that does not come from the symbol tables: each hot
//! function here sits alone in a linker section, and the linker's `__start_`/`__stop_` symbols give its exact
//! extent.

use ntprofile::{NtStatus, find_function, find_module, kernel_modules, kernel_symbols, modules};

mod common;

// A hot function alone in its section, found by its Rust path (`modules::section_hot`).
hot_in_section!(
    section_hot,
    section_hot_range,
    "ntp_modules_hot",
    0x1234_5678
);

/// A C-named function alone in its section, found by its symbol name.
#[unsafe(no_mangle)]
#[inline(never)]
#[unsafe(link_section = "ntp_modules_named")]
pub extern "C" fn ntprofile_modules_named_hot(mut x: u64, n: u64) -> u64 {
    let mut i = 0;
    while i < n {
        x = x.rotate_left(7) ^ 0x9E37_79B9_7F4A_7C15;
        i += 1;
    }
    x
}
section_range!(named_range, "ntp_modules_named");

#[test]
fn the_program_comes_first_and_the_loader_agrees_with_the_maps() {
    let loader = modules(None).expect("modules(None)");
    let maps = modules(Some(std::process::id())).expect("modules(Some(own pid))");
    let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
    assert_eq!(loader[0].path, exe, "{loader:#?}");
    assert!(loader.iter().any(|m| m.name == "libc.so.6"), "{loader:#?}");
    assert!(loader.iter().any(|m| m.name == "[vdso]"), "{loader:#?}");
    // Every executable segment the loader reports lies in an executable mapping of the same file with the same
    // load bias (the maps' bias comes from the file's program headers: an independent computation).
    for m in &loader {
        let covering = maps
            .iter()
            .find(|x| x.name == m.name && x.base <= m.base && m.end() <= x.end())
            .unwrap_or_else(|| {
                panic!("{m:?} is in no executable mapping of /proc/self/maps: {maps:#?}")
            });
        if !m.path.as_os_str().is_empty() {
            assert_eq!(covering.path, m.path);
            assert_eq!(covering.load_bias, m.load_bias, "{m:?} vs {covering:?}");
        }
    }
    // The code of this very test is in the program's module.
    let here = the_program_comes_first_and_the_loader_agrees_with_the_maps as *const () as u64;
    assert!(loader[0].contains(here) || loader.iter().any(|m| m.path == exe && m.contains(here)));
}

#[test]
fn find_function_gives_the_exact_range_of_the_symbol() {
    // Called with opaque arguments, so that the compiler keeps them (a pure call with constant arguments is
    // folded away, and the section with it).
    let b = std::hint::black_box;
    b(section_hot(b(1), b(1)));
    b(ntprofile_modules_named_hot(b(1), b(1)));
    // By Rust path.
    let (base, size) = section_hot_range();
    let hot = find_function(None, None, "modules::section_hot").expect("by Rust path");
    assert_eq!(
        (hot.address, hot.size),
        (base as u64, size as u64),
        "{hot:?}"
    );
    assert!(
        hot.name.starts_with("_ZN") || hot.name.starts_with("_R"),
        "{hot:?}"
    );
    let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
    assert_eq!(hot.module_path, exe);
    // By symbol name, in the program named by its file name, and by its path.
    let (base, size) = named_range();
    for module in [None, Some(hot.module.as_str()), exe.to_str()] {
        let named = find_function(None, module, "ntprofile_modules_named_hot").expect("by name");
        assert_eq!((named.address, named.size), (base as u64, size as u64));
        assert_eq!(named.name, "ntprofile_modules_named_hot");
    }
    // The same function in this process found through /proc/self/maps (the other-process path).
    let via_maps = find_function(
        Some(std::process::id()),
        None,
        "ntprofile_modules_named_hot",
    )
    .expect("via maps");
    assert_eq!(
        (via_maps.address, via_maps.size),
        (base as u64, size as u64)
    );
}

#[test]
fn shared_libraries_and_their_functions() {
    let libc = find_module(None, "libc.so.6").expect("libc");
    assert_eq!(find_module(None, "libc").unwrap(), libc);
    assert_eq!(
        find_module(None, libc.path.to_str().unwrap()).unwrap(),
        libc
    );
    // A libc function found in the symbol table is where the loader resolved it.
    let getenv = find_function(None, Some("libc.so.6"), "getenv").expect("getenv");
    assert_eq!(
        getenv.address,
        libc::getenv as *const () as u64,
        "{getenv:?}"
    );
    assert!(getenv.size > 16, "{getenv:?}");
    assert!(
        modules(None)
            .unwrap()
            .iter()
            .any(|m| m.name == "libc.so.6" && m.contains(getenv.address))
    );
    // Two versions of one name: the default one (realpath@@GLIBC_2.3), which programs call, not the
    // compatibility one (realpath@GLIBC_2.2.5); in libm, exp@@GLIBC_2.29 comes after exp@GLIBC_2.2.5.
    let realpath = find_function(None, Some("libc"), "realpath").expect("realpath");
    assert_eq!(
        realpath.address,
        libc::realpath as *const () as u64,
        "{realpath:?}"
    );
    unsafe extern "C" {
        safe fn exp(x: f64) -> f64;
    }
    std::hint::black_box(exp(std::hint::black_box(1.0)));
    let exp_symbol = find_function(None, Some("libm.so.6"), "exp").expect("exp in libm");
    assert_eq!(
        exp_symbol.address, exp as *const () as u64,
        "{exp_symbol:?}"
    );
    // cos is an indirect function in glibc's libm: its symbol is the resolver, so it is not offered as the code.
    let e = find_function(None, Some("libm"), "cos").unwrap_err();
    assert_eq!(e.status(), NtStatus::NOT_FOUND);
    assert!(e.detail().contains("STT_GNU_IFUNC"), "{e}");
}

#[test]
fn missing_names_are_not_found_with_a_detail() {
    let e = find_module(None, "libnothing.so.9").unwrap_err();
    assert_eq!(e.status(), NtStatus::NOT_FOUND);
    assert!(
        e.detail().contains("libnothing.so.9") && e.detail().contains("libc.so.6"),
        "{e}"
    );
    let e = find_function(None, None, "ntprofile_no_such_function").unwrap_err();
    assert_eq!(e.status(), NtStatus::NOT_FOUND);
    assert!(e.detail().contains("ntprofile_no_such_function"), "{e}");
    let e = find_function(None, Some("libnothing"), "qsort").unwrap_err();
    assert_eq!(e.status(), NtStatus::NOT_FOUND);
    assert!(e.detail().contains("no module"), "{e}");
    // qsort is libc's, not the program's.
    let e = find_function(None, Some("libgcc_s.so.1"), "qsort").unwrap_err();
    assert_eq!(e.status(), NtStatus::NOT_FOUND, "{e}");
}

#[test]
fn other_processes_missing_or_gone() {
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let e = modules(Some(pid)).unwrap_err();
    assert_eq!(e.status(), NtStatus::INVALID_CID, "{e}");
    assert!(e.detail().contains(&pid.to_string()), "{e}");
    assert_eq!(
        modules(Some(0)).unwrap_err().status(),
        NtStatus::INVALID_CID
    );
    assert_eq!(
        modules(Some(u32::MAX)).unwrap_err().status(),
        NtStatus::INVALID_CID
    );
}

#[test]
fn kernel_text_and_symbols() {
    match kernel_modules() {
        Ok(kernel) => {
            let image = &kernel[0];
            assert_eq!(image.name, "[kernel]");
            assert!(
                image.base >= ntprofile::target::KERNEL_SPACE_START,
                "{image:?}"
            );
            assert!(image.size > 1 << 20, "{image:?}");
            let symbols = kernel_symbols().unwrap();
            let schedule = symbols
                .iter()
                .find(|s| s.name == "schedule")
                .expect("schedule");
            assert!(
                image.contains(schedule.address) && schedule.size > 0,
                "{schedule:?}"
            );
            let found = ntprofile::find_kernel_function(None, "schedule").unwrap();
            assert_eq!(&found, schedule);
            println!(
                "[modules] kernel text {:#x}+{:#x}, {} text symbols, {} modules",
                image.base,
                image.size,
                symbols.len(),
                kernel.len() - 1
            );
        }
        Err(e) => {
            // Hidden addresses are the only acceptable failure, and only for a caller that cannot see them.
            assert_eq!(e.status(), NtStatus::PRIVILEGE_NOT_HELD, "{e}");
            assert!(
                !nix::unistd::geteuid().is_root(),
                "root must see kernel addresses: {e}"
            );
        }
    }
}
