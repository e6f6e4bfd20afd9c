//! The modules and symbols API: `modules`, `find_module`, `find_function`, `kernel_modules`, `kernel_symbols`,
//! their C exports `NtprofileEnumerateModules` and `NtprofileFindFunction`, and the Rust example
//! `examples/find_function.rs` (the C one runs in tests/c_abi.rs).
//!
//! The function ranges are checked against ground truth that does not come from the symbol tables: each hot
//! function here sits alone in a linker section, and the linker's `__start_`/`__stop_` symbols give its exact
//! extent.

use std::ffi::{CStr, c_void};

use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtOpenProcess, NtprofileEnumerateModules, NtprofileFindFunction,
};
use ntprofile::{
    Module, NtStatus, find_function, find_module, kernel_modules, kernel_symbols, modules,
};

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
    // Beside the raw name, the name the lookup took.
    assert_eq!(hot.demangled, "modules::section_hot", "{hot:?}");
    let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
    assert_eq!(hot.module_path, exe);
    // By symbol name, in the program named by its file name, and by its path.
    let (base, size) = named_range();
    for module in [None, Some(hot.module.as_str()), exe.to_str()] {
        let named = find_function(None, module, "ntprofile_modules_named_hot").expect("by name");
        assert_eq!((named.address, named.size), (base as u64, size as u64));
        assert_eq!(named.name, "ntprofile_modules_named_hot");
        assert_eq!(named.demangled, named.name);
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

// ---------------------------------------------------------------------------------------------------------
// The Rust example.
// ---------------------------------------------------------------------------------------------------------

/// `examples/find_function.rs` (built by `cargo test`): the samples of the program's code land in the
/// function's buckets only, and the library's in libm.
#[test]
fn find_function_example() {
    // .../target/<profile>/deps/modules-HASH → .../target/<profile>/examples/find_function
    let exe = std::env::current_exe().expect("current_exe");
    let path = exe
        .parent()
        .and_then(|d| d.parent())
        .expect("target dir")
        .join("examples")
        .join("find_function");
    assert!(
        path.exists(),
        "{} not built (cargo test builds the examples)",
        path.display()
    );
    let out = std::process::Command::new(&path)
        .output()
        .expect("run the example");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the example failed: {:?}", out.status);
    common::check_find_function_figures(&text);
}

// ---------------------------------------------------------------------------------------------------------
// The C exports.
// ---------------------------------------------------------------------------------------------------------

/// `NtCurrentProcess()`.
fn current_process() -> *mut c_void {
    std::ptr::without_provenance_mut(usize::MAX)
}

/// `NTPROFILE_MODULE_INFO`, as the header lays it out.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct ModuleInfo {
    base: usize,
    size: usize,
    file_offset: u64,
    load_bias: u64,
    flags: u32,
    offset_to_file_name: u16,
    reserved: u16,
    full_path_name: [u8; 256],
}

const RECORD: usize = std::mem::size_of::<ModuleInfo>();

impl ModuleInfo {
    fn path(&self) -> &str {
        CStr::from_bytes_until_nul(&self.full_path_name)
            .unwrap()
            .to_str()
            .unwrap()
    }

    fn name(&self) -> &str {
        &self.path()[usize::from(self.offset_to_file_name)..]
    }
}

/// Enumerate through the export: size first, then fill (again when the list grew in between, as the header
/// tells callers to do).
fn enumerate(handle: *mut c_void) -> Result<Vec<ModuleInfo>, NtStatus> {
    let empty = ModuleInfo {
        base: 0,
        size: 0,
        file_offset: 0,
        load_bias: 0,
        flags: 0,
        offset_to_file_name: 0,
        reserved: 0,
        full_path_name: [0; 256],
    };
    let mut needed = 0u32;
    let s = NtStatus(NtprofileEnumerateModules(
        handle,
        std::ptr::null_mut(),
        0,
        &mut needed,
    ));
    if s != NtStatus::BUFFER_TOO_SMALL {
        return if s.is_success() {
            Ok(Vec::new())
        } else {
            Err(s)
        };
    }
    for _ in 0..10 {
        assert_eq!(needed as usize % RECORD, 0);
        let mut records = vec![empty; needed as usize / RECORD];
        let mut written = 0u32;
        let s = NtStatus(NtprofileEnumerateModules(
            handle,
            records.as_mut_ptr().cast(),
            needed,
            &mut written,
        ));
        if s == NtStatus::BUFFER_TOO_SMALL {
            assert!(written > needed);
            needed = written;
            continue;
        }
        if !s.is_success() {
            return Err(s);
        }
        assert!(written <= needed);
        records.truncate(written as usize / RECORD);
        return Ok(records);
    }
    panic!("the module list kept growing");
}

fn same(record: &ModuleInfo, module: &Module) -> bool {
    record.base as u64 == module.base
        && record.size as u64 == module.size
        && record.file_offset == module.file_offset
        && (record.flags & 1 != 0) == module.load_bias.is_some()
        && module.load_bias.is_none_or(|b| b == record.load_bias)
        && record.name() == module.name
}

#[test]
fn enumerate_modules_export_matches_the_rust_api() {
    let records = enumerate(current_process()).expect("this process");
    let rust = modules(None).unwrap();
    assert_eq!(records.len(), rust.len());
    for (r, m) in records.iter().zip(&rust) {
        assert!(same(r, m), "{} vs {m:?}", r.path());
        if m.path.as_os_str().is_empty() {
            assert_eq!(r.flags & 4, 4, "no file: {}", r.path());
        } else {
            assert_eq!(r.path(), m.path.to_str().unwrap());
        }
    }
    // Another process through NtOpenProcess.
    let mut child = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    let mut handle: *mut c_void = std::ptr::null_mut();
    let mut cid = [child.id() as usize, 0];
    assert_eq!(
        NtStatus(NtOpenProcess(
            &mut handle,
            0x400,
            std::ptr::null_mut(),
            cid.as_mut_ptr().cast()
        )),
        NtStatus::SUCCESS
    );
    // Wait until the child has exec'ed sleep and the loader has mapped libc (then its list stays put).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let records = loop {
        let records = enumerate(handle).expect("the child");
        let has = |name: &str| records.iter().any(|r| r.name() == name);
        if (has("sleep") && has("libc.so.6")) || std::time::Instant::now() > deadline {
            break records;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let rust = modules(Some(child.id())).unwrap();
    assert!(
        records.iter().any(|r| r.name() == "sleep"),
        "{:?}",
        records.iter().map(|r| r.path()).collect::<Vec<_>>()
    );
    assert!(records.iter().any(|r| r.name() == "libc.so.6"));
    assert_eq!(records.len(), rust.len());
    for (r, m) in records.iter().zip(&rust) {
        assert!(same(r, m), "{} vs {m:?}", r.path());
    }
    // Find a function in the child through the handle: libc's getenv, at the child's own address.
    let mut base: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    assert_eq!(
        NtStatus(NtprofileFindFunction(
            handle,
            c"libc.so.6".as_ptr(),
            c"getenv".as_ptr(),
            &mut base,
            &mut size
        )),
        NtStatus::SUCCESS
    );
    let expected = find_function(Some(child.id()), Some("libc.so.6"), "getenv").unwrap();
    assert_eq!(
        (base as u64, size as u64),
        (expected.address, expected.size)
    );
    // Once the process has exited, it has no modules and no functions (its pid may name another process).
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(enumerate(handle).unwrap().len(), 0);
    assert_eq!(
        NtStatus(NtprofileFindFunction(
            handle,
            std::ptr::null(),
            c"getenv".as_ptr(),
            &mut base,
            &mut size
        )),
        NtStatus::NOT_FOUND
    );
    assert_eq!(NtStatus(NtClose(handle)), NtStatus::SUCCESS);
    // A closed handle is stale.
    let mut needed = 0u32;
    assert_eq!(
        NtStatus(NtprofileEnumerateModules(
            handle,
            std::ptr::null_mut(),
            0,
            &mut needed
        )),
        NtStatus::INVALID_HANDLE
    );
}

#[test]
fn enumerate_modules_export_checks_its_arguments_and_writes_nothing_on_failure() {
    let call = |handle: *mut c_void, buf: *mut c_void, len: u32, ret: *mut u32| {
        NtStatus(NtprofileEnumerateModules(handle, buf, len, ret))
    };
    let mut needed = 0u32;
    assert_eq!(
        call(
            current_process(),
            std::ptr::null_mut(),
            0,
            std::ptr::null_mut()
        ),
        NtStatus::ACCESS_VIOLATION,
        "ReturnLength NULL"
    );
    assert_eq!(
        call(current_process(), std::ptr::null_mut(), 0, &mut needed),
        NtStatus::BUFFER_TOO_SMALL
    );
    assert!(needed as usize >= 3 * RECORD, "{needed}");
    // One record short: nothing but the length is written.
    let mut buf = vec![0xA5A5_A5A5_A5A5_A5A5u64; needed as usize / 8 + 1];
    let mut ret = 0u32;
    assert_eq!(
        call(
            current_process(),
            buf.as_mut_ptr().cast(),
            needed - RECORD as u32,
            &mut ret
        ),
        NtStatus::BUFFER_TOO_SMALL
    );
    assert_eq!(ret, needed);
    assert!(
        buf.iter().all(|&w| w == 0xA5A5_A5A5_A5A5_A5A5),
        "written on BUFFER_TOO_SMALL"
    );
    // Misaligned (4 bytes into an 8-byte aligned buffer).
    let mut ret = 7u32;
    let misaligned = buf
        .as_mut_ptr()
        .cast::<u8>()
        .wrapping_add(4)
        .cast::<c_void>();
    assert_eq!(
        call(current_process(), misaligned, needed, &mut ret),
        NtStatus::DATATYPE_MISALIGNMENT
    );
    assert_eq!(ret, 7, "written on failure");
    assert!(
        buf.iter().all(|&w| w == 0xA5A5_A5A5_A5A5_A5A5),
        "written on failure"
    );
    // Not writable: this function's code, 8-byte aligned.
    let code = (enumerate_modules_export_checks_its_arguments_and_writes_nothing_on_failure
        as *const () as usize
        + 7)
        & !7;
    assert_eq!(
        call(
            current_process(),
            std::ptr::without_provenance_mut(code),
            needed,
            &mut ret
        ),
        NtStatus::ACCESS_VIOLATION
    );
    assert_eq!(ret, 7, "written on failure");
    // Wrong kinds of handle.
    assert_eq!(
        call(
            std::ptr::without_provenance_mut(usize::MAX - 1),
            std::ptr::null_mut(),
            0,
            &mut ret
        ),
        NtStatus::OBJECT_TYPE_MISMATCH,
        "NtCurrentThread()"
    );
    assert_eq!(
        call(
            std::ptr::without_provenance_mut(0x1234_0000),
            std::ptr::null_mut(),
            0,
            &mut ret
        ),
        NtStatus::INVALID_HANDLE
    );
    let mut counts = [0u32; 16];
    let mut profile: *mut c_void = std::ptr::null_mut();
    assert_eq!(
        NtStatus(NtCreateProfile(
            &mut profile,
            current_process(),
            std::ptr::without_provenance_mut(0x10000),
            64,
            2,
            counts.as_mut_ptr(),
            64,
            0,
            usize::MAX
        )),
        NtStatus::SUCCESS
    );
    assert_eq!(
        call(profile, std::ptr::null_mut(), 0, &mut ret),
        NtStatus::OBJECT_TYPE_MISMATCH
    );
    assert_eq!(NtStatus(NtClose(profile)), NtStatus::SUCCESS);
    assert_eq!(ret, 7, "written on failure");
}

#[test]
fn find_function_export() {
    std::hint::black_box(ntprofile_modules_named_hot(
        std::hint::black_box(1),
        std::hint::black_box(1),
    ));
    let (start, size) = named_range();
    let find =
        |module: Option<&CStr>, name: Option<&CStr>, base: *mut *mut c_void, size: *mut usize| {
            NtStatus(NtprofileFindFunction(
                current_process(),
                module.map_or(std::ptr::null(), CStr::as_ptr),
                name.map_or(std::ptr::null(), CStr::as_ptr),
                base,
                size,
            ))
        };
    let mut base: *mut c_void = std::ptr::null_mut();
    let mut length = 0usize;
    assert_eq!(
        find(
            None,
            Some(c"ntprofile_modules_named_hot"),
            &mut base,
            &mut length
        ),
        NtStatus::SUCCESS
    );
    assert_eq!((base as usize, length), (start, size));
    // By Rust path, in the program's module by file name.
    let exe = std::env::current_exe().unwrap();
    let exe_name = std::ffi::CString::new(exe.file_name().unwrap().to_str().unwrap()).unwrap();
    let b = std::hint::black_box;
    b(section_hot(b(1), b(1)));
    assert_eq!(
        find(
            Some(&exe_name),
            Some(c"modules::section_hot"),
            &mut base,
            &mut length
        ),
        NtStatus::SUCCESS
    );
    assert_eq!((base as usize, length), section_hot_range());
    // Failures write nothing.
    let (mut base, mut length) = (std::ptr::without_provenance_mut(0x77), 0x77usize);
    for (module, name, expected) in [
        (
            None,
            Some(c"ntprofile_no_such_function"),
            NtStatus::NOT_FOUND,
        ),
        (
            Some(c"libnothing.so.1"),
            Some(c"getenv"),
            NtStatus::NOT_FOUND,
        ),
        (Some(c"libm"), Some(c"cos"), NtStatus::NOT_FOUND),
        (None, None, NtStatus::INVALID_PARAMETER),
    ] {
        assert_eq!(
            find(module, name, &mut base, &mut length),
            expected,
            "{module:?} {name:?}"
        );
        assert_eq!((base as usize, length), (0x77, 0x77), "written on failure");
    }
    assert_eq!(
        find(None, Some(c"getenv"), std::ptr::null_mut(), &mut length),
        NtStatus::ACCESS_VIOLATION
    );
    assert_eq!(
        find(None, Some(c"getenv"), &mut base, std::ptr::null_mut()),
        NtStatus::ACCESS_VIOLATION
    );
    // A name that runs into unmapped memory, and one that is too long.
    let unreadable = NtStatus(NtprofileFindFunction(
        current_process(),
        std::ptr::null(),
        std::ptr::without_provenance(8),
        &mut base,
        &mut length,
    ));
    assert_eq!(unreadable, NtStatus::ACCESS_VIOLATION);
    let long = std::ffi::CString::new(vec![b'f'; 5000]).unwrap();
    assert_eq!(
        find(None, Some(&long), &mut base, &mut length),
        NtStatus::INVALID_PARAMETER
    );
    assert_eq!((base as usize, length), (0x77, 0x77), "written on failure");
}

#[test]
fn kernel_through_the_exports() {
    match kernel_modules() {
        Ok(kernel) => {
            let records = enumerate(std::ptr::null_mut()).expect("NULL: the kernel");
            assert_eq!(records.len(), kernel.len());
            assert_eq!(records[0].path(), "[kernel]");
            assert_eq!(records[0].flags & 4, 4);
            assert_eq!(records[0].base as u64, kernel[0].base);
            let mut base: *mut c_void = std::ptr::null_mut();
            let mut size = 0usize;
            assert_eq!(
                NtStatus(NtprofileFindFunction(
                    std::ptr::null_mut(),
                    std::ptr::null(),
                    c"schedule".as_ptr(),
                    &mut base,
                    &mut size
                )),
                NtStatus::SUCCESS
            );
            assert!(kernel[0].contains(base as u64) && size > 0);
        }
        Err(e) => {
            assert_eq!(enumerate(std::ptr::null_mut()).unwrap_err(), e.status());
        }
    }
}

/// The README's examples are the files that the build compiles (clippy and gcc with warnings as errors) and
/// that the tests run: `examples/readme.rs` (run here) and `ffi/readme.c` (run by tests/c_abi.rs).
#[test]
fn readme_examples_are_the_compiled_ones() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(repo.join("README.md")).unwrap();
    for (section, fence, file) in [
        ("### C\n", "```c\n", "ffi/readme.c"),
        ("### Rust\n", "```rust\n", "examples/readme.rs"),
    ] {
        let at = readme
            .find(section)
            .unwrap_or_else(|| panic!("no {section:?} in README.md"));
        let start = readme[at..].find(fence).expect("the fence") + at + fence.len();
        let end = readme[start..].find("```\n").expect("the closing fence") + start;
        let text = std::fs::read_to_string(repo.join(file)).unwrap();
        assert_eq!(
            &readme[start..end],
            text,
            "README.md's {section:?} example differs from {file}"
        );
    }
    let exe = std::env::current_exe().unwrap();
    let example = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("examples")
        .join("readme");
    let out = std::process::Command::new(&example)
        .output()
        .expect("run examples/readme");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}");
    assert!(
        out.status.success(),
        "{:?} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let samples: u64 = text.split_whitespace().next().unwrap().parse().unwrap();
    assert!(samples > 0, "{text}");
}
