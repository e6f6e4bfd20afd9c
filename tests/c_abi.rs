//! The C ABI from real C: `include/ntprofile.h` compiles alone as C99, C11 and C++17; it declares exactly the
//! functions `libntprofile.so` exports; its constants agree with the crate's; and the C programs in `ffi/`
//! (the conformance test, the hot-function example and the two-function accuracy test) build against the header,
//! link with the shared library and pass.
//!
//! Where the shared library is: cargo builds every crate type of the library for an integration test, and the
//! `cdylib` is written as `deps/libntprofile.so` next to this test binary (`target/<profile>/deps/`, or
//! `target/<triple>/<profile>/deps/` with `--target`). It is found from `std::env::current_exe()` whatever
//! `CARGO_TARGET_DIR` and the profile are, and it is the one built by the same `cargo test` run. (The copy in
//! `target/<profile>/` exists only after a `cargo build`; see `common/cbuild.rs`.) `NTPROFILE_LIB_DIR` overrides.
//!
//! Needs `gcc`, `g++` and `nm` (binutils). Build outputs go to a temporary directory, never into the repository.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use ntprofile::{NtStatus, ProfileSource};

#[path = "common/cbuild.rs"]
mod cbuild;
mod common;
use cbuild::{Scratch, repo, run_tool};

/// The C programs sample this machine's CPUs: run one at a time, so that they do not disturb each other's
/// accuracy figures.
static RUN_SERIAL: Mutex<()> = Mutex::new(());

/// How long a C program may run before it is killed and the test fails.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

fn include_dir() -> PathBuf {
    repo().join("include")
}

fn header() -> PathBuf {
    include_dir().join("ntprofile.h")
}

/// The directory holding the `libntprofile.so` of this build (see the module's notes).
fn lib_dir() -> PathBuf {
    cbuild::lib_dir(&["libntprofile.so"])
}

/// The strict flags every compile here uses.
const STRICT: [&str; 4] = ["-Wall", "-Wextra", "-Werror", "-pedantic"];

// ---------------------------------------------------------------------------------------------------------
// (b) The header alone, in three languages.
// ---------------------------------------------------------------------------------------------------------

/// A translation unit that includes only the header and uses every type and macro, and pins every prototype to
/// the expected signature (a mismatch is an incompatible-pointer error under -Werror).
const HEADER_TU: &str = r#"
#include "ntprofile.h"

/* File-scope checks: a negative array size fails the compile in every language mode. */
typedef char check_enum_maximum[ProfileMaximum == 0x18 ? 1 : -1];
typedef char check_enum_last_nt[ProfileLoadLinkedIssues == 0x17 ? 1 : -1];
typedef char check_enum_intel[ProfileBranchMispredictsRetired == 0x1F ? 1 : -1];
typedef char check_enum_linux[ProfileLinuxAlignmentFaults == 0x10006 ? 1 : -1];
typedef char check_status_signed[STATUS_ACCESS_VIOLATION < 0 ? 1 : -1];
typedef char check_warning_fails[!NT_SUCCESS(STATUS_BUFFER_OVERFLOW) ? 1 : -1];
typedef char check_success[NT_SUCCESS(STATUS_SUCCESS) ? 1 : -1];

typedef NTSTATUS(NTAPI *create_fn)(PHANDLE, HANDLE, PVOID, SIZE_T, ULONG, PULONG, ULONG, KPROFILE_SOURCE,
                                   KAFFINITY);
typedef NTSTATUS(NTAPI *create_ex_fn)(PHANDLE, HANDLE, PVOID, SIZE_T, ULONG, PULONG, ULONG, KPROFILE_SOURCE,
                                      USHORT, PGROUP_AFFINITY);
typedef NTSTATUS(NTAPI *open_fn)(PHANDLE, ACCESS_MASK, POBJECT_ATTRIBUTES, PCLIENT_ID);
typedef NTSTATUS(NTAPI *handle_fn)(HANDLE);
typedef NTSTATUS(NTAPI *query_fn)(KPROFILE_SOURCE, PULONG);
typedef NTSTATUS(NTAPI *set_fn)(ULONG, KPROFILE_SOURCE);
typedef NTSTATUS(NTAPI *stats_fn)(HANDLE, PNTPROFILE_STATISTICS);
typedef NTSTATUS(NTAPI *sources_fn)(PNTPROFILE_SOURCE_INFO, ULONG, PULONG);
typedef NTSTATUS(NTAPI *register_fn)(ULONG, ULONGLONG, ULONGLONG, ULONGLONG, PKPROFILE_SOURCE);
typedef NTSTATUS(NTAPI *jitter_fn)(KPROFILE_SOURCE, ULONG);
typedef const char *(NTAPI *message_fn)(NTSTATUS);
typedef ULONG(NTAPI *dos_error_fn)(NTSTATUS);
typedef NTSTATUS(NTAPI *last_status_fn)(void);

/* The Windows base types have Windows widths. */
typedef char check_dword[sizeof(DWORD) == 4 && (DWORD)-1 > 0 ? 1 : -1];
typedef char check_word[sizeof(WORD) == 2 ? 1 : -1];
typedef char check_byte[sizeof(BYTE) == 1 ? 1 : -1];
typedef char check_bool[sizeof(BOOL) == sizeof(int) && TRUE == 1 && FALSE == 0 ? 1 : -1];
typedef char check_dword64[sizeof(DWORD64) == 8 ? 1 : -1];
typedef char check_dword_ptr[sizeof(DWORD_PTR) == sizeof(void *) ? 1 : -1];
typedef char check_profile_source_info[sizeof(PROFILE_SOURCE_INFO) == sizeof(NTPROFILE_SOURCE_INFO) ? 1 : -1];

int ntprofile_header_check(int which);

int ntprofile_header_check(int which)
{
    create_fn create[2] = {NtCreateProfile, ZwCreateProfile};
    create_ex_fn create_ex[2] = {NtCreateProfileEx, ZwCreateProfileEx};
    open_fn open[2] = {NtOpenProcess, ZwOpenProcess};
    handle_fn handle[6] = {NtStartProfile, ZwStartProfile, NtStopProfile, ZwStopProfile, NtClose, ZwClose};
    query_fn query[2] = {NtQueryIntervalProfile, ZwQueryIntervalProfile};
    set_fn set[2] = {NtSetIntervalProfile, ZwSetIntervalProfile};
    stats_fn stats = NtprofileQueryStatistics;
    sources_fn sources = NtprofileQuerySources;
    register_fn reg = NtprofileRegisterSource;
    jitter_fn jitter = NtprofileSetSourceJitter;
    message_fn message = NtprofileStatusMessage;
    dos_error_fn dos_error[2] = {RtlNtStatusToDosError, RtlNtStatusToDosErrorNoTeb};
    last_status_fn last_status = RtlGetLastNtStatus;

    GROUP_AFFINITY ga;
    CLIENT_ID cid;
    UNICODE_STRING name;
    OBJECT_ATTRIBUTES attrs;
    NTPROFILE_STATISTICS st;
    NTPROFILE_SOURCE_INFO info;
    KPROFILE_SOURCE src = ProfileTime;
    HANDLE h = NtCurrentProcess();
    HANDLE thread = NtCurrentThread();
    ULONG interval = 0;
    KAFFINITY all = (KAFFINITY)-1;
    NTSTATUS status = STATUS_SUCCESS;
    PPROFILE_SOURCE_INFO listing = &info;
    LPVOID any = &interval;
    LPCVOID any_const = &interval;
    UINT u = 1;
    INT n = 1;
    BOOL flag = TRUE;
    DWORD dw = 1;

    ga.Mask = all;
    ga.Group = 0;
    ga.Reserved[0] = ga.Reserved[1] = ga.Reserved[2] = 0;
    cid.UniqueProcess = h;
    cid.UniqueThread = thread;
    name.Length = 0;
    name.MaximumLength = 0;
    name.Buffer = NULL;
    InitializeObjectAttributes(&attrs, &name, 0, NULL, NULL);
    st.SamplesCounted = st.SamplesOutside = st.SamplesLost = st.ThrottleEvents = 0;
    info.Source = ProfileLinuxTaskClock;
    info.Name[0] = 0;

    switch (status) {
    case STATUS_SUCCESS:
    case STATUS_DATATYPE_MISALIGNMENT:
    case STATUS_BUFFER_OVERFLOW:
    case STATUS_ACCESS_VIOLATION:
    case STATUS_INVALID_HANDLE:
    case STATUS_INVALID_CID:
    case STATUS_INVALID_PARAMETER:
    case STATUS_ACCESS_DENIED:
    case STATUS_BUFFER_TOO_SMALL:
    case STATUS_OBJECT_TYPE_MISMATCH:
    case STATUS_PRIVILEGE_NOT_HELD:
    case STATUS_INSUFFICIENT_RESOURCES:
    case STATUS_PROFILING_NOT_STARTED:
    case STATUS_PROFILING_NOT_STOPPED:
    case STATUS_NOT_SUPPORTED:
    case STATUS_PROFILING_AT_LIMIT:
    case STATUS_INTERNAL_ERROR:
    case STATUS_INVALID_PARAMETER_7:
    case STATUS_UNSUCCESSFUL:
    case STATUS_NO_MEMORY:
        break;
    default:
        return -1;
    }

    switch (which) {
    case 0: return create[which & 1](&h, NtCurrentProcess(), NULL, 0, 2, &interval, 4, src, all);
    case 1: return create_ex[which & 1](&h, h, NULL, 0, 2, &interval, 4, src, 1, &ga);
    case 2: return open[which & 1](&h, PROCESS_QUERY_INFORMATION | PROFILE_CONTROL, &attrs, &cid);
    case 3: return handle[which % 6](h);
    case 4: return query[which & 1](src, &interval);
    case 5: return set[which & 1](interval, src);
    case 6: return stats(h, &st);
    case 7: return sources(&info, 1, &interval);
    case 8: return reg(0, 0, 0, 0, &src);
    case 9: return jitter(src, 0);
    case 10: return message(status)[0];
    case 11: return sources(listing, 1, &interval) + (any == any_const) + (int)u + n + flag + (int)dw;
    case 12: return (int)dos_error[which & 1](status) + (int)last_status();
    default: return (int)sizeof(UCHAR) + (int)sizeof(BOOLEAN) + (int)sizeof(LONG) + (int)sizeof(ULONG_PTR) +
                    (int)sizeof(LONG_PTR) + (int)sizeof(SIZE_T) + (int)sizeof(PVOID);
    }
}
"#;

#[test]
fn header_compiles_alone_as_c99_c11_and_cxx17() {
    let scratch = Scratch::new("header");
    let c = scratch.path("header_check.c");
    let cc = scratch.path("header_check.cc");
    std::fs::write(&c, HEADER_TU).unwrap();
    std::fs::write(&cc, HEADER_TU).unwrap();
    for (compiler, std_flag, src) in [
        ("gcc", "-std=c99", &c),
        ("gcc", "-std=c11", &c),
        ("g++", "-std=c++17", &cc),
    ] {
        let obj = scratch.path(&format!("header_check{std_flag}.o"));
        run_tool(
            Command::new(compiler)
                .arg(std_flag)
                .args(STRICT)
                .arg("-I")
                .arg(include_dir())
                .arg("-c")
                .arg(src)
                .arg("-o")
                .arg(&obj),
        );
        println!("{compiler} {std_flag} {}: ok", STRICT.join(" "));
    }
}

// ---------------------------------------------------------------------------------------------------------
// (c) Header declarations ↔ library exports.
// ---------------------------------------------------------------------------------------------------------

fn is_api_name(name: &str) -> bool {
    name.starts_with("Nt") || name.starts_with("Zw") || name.starts_with("Rtl")
}

/// Functions the header declares: identifiers starting with `Nt`/`Zw`/`Rtl` followed by `(` in the preprocessed header
/// (the preprocessor has removed the function-like macros such as `NtCurrentProcess()`).
fn declared_functions() -> BTreeSet<String> {
    let out = run_tool(
        Command::new("gcc")
            .args(["-std=c11", "-E", "-P", "-x", "c"])
            .arg(header()),
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let bytes = text.as_bytes();
    let mut names = BTreeSet::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let ident = &text[start..i];
            let mut j = i;
            while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                j += 1;
            }
            if is_api_name(ident) && bytes.get(j) == Some(&b'(') {
                names.insert(ident.to_string());
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Functions the shared library exports with an NT name (`Nt*`, `Zw*`, `Ntprofile*`, `Rtl*`).
fn exported_functions(lib: &Path) -> BTreeSet<String> {
    let out = run_tool(Command::new("nm").args(["-D", "--defined-only"]).arg(lib));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let mut f = line.split_whitespace();
            let (_addr, kind, name) = (f.next()?, f.next()?, f.next()?);
            (matches!(kind, "T" | "W" | "i") && is_api_name(name)).then(|| name.to_string())
        })
        .collect()
}

#[test]
fn header_declares_exactly_the_exports() {
    let lib = lib_dir().join("libntprofile.so");
    let declared = declared_functions();
    let exported = exported_functions(&lib);
    println!("declared in ntprofile.h: {declared:?}");
    println!("exported by {}: {exported:?}", lib.display());
    let missing_export: Vec<_> = declared.difference(&exported).collect();
    let missing_decl: Vec<_> = exported.difference(&declared).collect();
    assert!(
        missing_export.is_empty() && missing_decl.is_empty(),
        "include/ntprofile.h and libntprofile.so disagree:\n  \
         declared in the header but not exported: {missing_export:?}\n  \
         exported but not declared in the header: {missing_decl:?}"
    );
    for core in [
        "NtCreateProfile",
        "NtCreateProfileEx",
        "NtStartProfile",
        "NtStopProfile",
        "NtSetIntervalProfile",
        "NtQueryIntervalProfile",
        "NtClose",
        "NtprofileQueryStatistics",
    ] {
        assert!(declared.contains(core), "{core} is missing");
        let zw = core.replacen("Nt", "Zw", 1);
        if !core.starts_with("Ntprofile") {
            assert!(declared.contains(&zw), "{zw} is missing");
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Header constants ↔ the crate's.
// ---------------------------------------------------------------------------------------------------------

/// Constants by name.
type Named = Vec<(String, u32)>;

/// `name value` pairs from lines of the form `#define STATUS_X ((NTSTATUS)0x...L)` (statuses) and
/// `ProfileX = 0x...,` (KPROFILE_SOURCE enumerators).
fn header_constants() -> (Named, Named) {
    let text = std::fs::read_to_string(header()).expect("read include/ntprofile.h");
    let hex = |s: &str| -> Option<u32> {
        let digits = s.trim_start_matches("0x").trim_start_matches("0X");
        let digits = digits.trim_end_matches(|c: char| !c.is_ascii_hexdigit());
        u32::from_str_radix(digits, 16).ok()
    };
    let mut statuses = Vec::new();
    let mut sources = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("#define STATUS_") {
            let mut f = rest.split_whitespace();
            let name = format!("STATUS_{}", f.next().unwrap_or(""));
            let value = f
                .next()
                .and_then(|v| v.strip_prefix("((NTSTATUS)"))
                .and_then(hex)
                .unwrap_or_else(|| panic!("cannot read the value of {name}: {line}"));
            statuses.push((name, value));
        } else if line.starts_with("Profile") && line.contains(" = 0x") {
            let (name, value) = line.split_once(" = ").unwrap();
            let value = hex(value.trim_end_matches(','))
                .unwrap_or_else(|| panic!("bad enumerator: {line}"));
            sources.push((name.to_string(), value));
        }
    }
    (statuses, sources)
}

/// Statuses the header defines for code ported from Windows although the library never returns them.
const WINDOWS_ONLY_STATUSES: [(&str, u32); 2] = [
    ("STATUS_UNSUCCESSFUL", 0xC000_0001),
    ("STATUS_NO_MEMORY", 0xC000_0017),
];

/// Every status value the crate names (scanning the ranges NT statuses of this contract live in).
fn crate_statuses() -> Vec<(String, u32)> {
    [
        0u32..=0x1000,
        0x8000_0000..=0x8000_1000,
        0xC000_0000..=0xC000_1000,
    ]
    .into_iter()
    .flatten()
    .filter_map(|v| Some((NtStatus(v as i32).name()?.to_string(), v)))
    .collect()
}

#[test]
fn header_constants_match_the_crate() {
    let (statuses, sources) = header_constants();
    for (name, value) in crate_statuses() {
        assert!(
            statuses.contains(&(name.clone(), value)),
            "the crate's {name} (0x{value:08X}) is not defined in the header: {statuses:?}"
        );
    }
    for (name, value) in &statuses {
        if let Some((_, windows)) = WINDOWS_ONLY_STATUSES.iter().find(|(n, _)| n == name) {
            assert_eq!(value, windows, "{name} has the wrong value in the header");
            continue;
        }
        assert_eq!(
            NtStatus(*value as i32).name(),
            Some(name.as_str()),
            "{name} = 0x{value:08X} in the header, but the crate names that value differently"
        );
    }
    let values: BTreeSet<u32> = sources.iter().map(|(_, v)| *v).collect();
    for s in ProfileSource::ALL {
        assert!(
            values.contains(&s.to_raw()),
            "{s:?} (0x{:X}) has no KPROFILE_SOURCE enumerator in the header",
            s.to_raw()
        );
    }
    let registered_first = ntprofile::source::REGISTERED_BASE;
    let registered_last = registered_first + ntprofile::source::MAX_REGISTERED as u32 - 1;
    for (name, value) in &sources {
        match name.as_str() {
            "ProfileMaximum" => assert_eq!(*value, 0x18),
            "ProfileLinuxRegisteredFirst" => assert_eq!(*value, registered_first),
            "ProfileLinuxRegisteredLast" => assert_eq!(*value, registered_last),
            _ => assert!(
                ProfileSource::ALL.iter().any(|s| s.to_raw() == *value),
                "{name} = 0x{value:X} in the header is no source of the crate"
            ),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// Windows base types beside a program's own.
// ---------------------------------------------------------------------------------------------------------

/// Programs that define `DWORD`, `BOOL` and friends themselves, before or after the include, in the ways ported
/// code does: each must compile as C11 and C++17 with -Werror -pedantic, and as C99 when the flag is true (an
/// unguarded redefinition after the include is only valid where the language allows an identical typedef
/// twice, which C99 does not).
const OWN_TYPES: [(&str, &str, bool); 5] = [
    (
        "macros_before",
        "#define DWORD unsigned int\n#define BOOL int\n#define BYTE unsigned char\n\
         #include \"ntprofile.h\"\n",
        true,
    ),
    (
        "typedefs_before_with_switch",
        "#include <stdint.h>\ntypedef uint32_t DWORD;\ntypedef int BOOL;\ntypedef unsigned short WORD;\n\
         #define NTPROFILE_NO_WINDOWS_TYPES\n#include \"ntprofile.h\"\n",
        true,
    ),
    (
        "windows_header_before",
        "/* what a mingw or Wine <minwindef.h> leaves behind */\n#define _MINWINDEF_\n\
         typedef unsigned int DWORD;\ntypedef int BOOL;\ntypedef unsigned char BYTE;\ntypedef void *LPVOID;\n\
         #ifndef TRUE\n#define TRUE 1\n#endif\n#include \"ntprofile.h\"\n",
        true,
    ),
    (
        "guarded_after",
        "#include \"ntprofile.h\"\n#ifndef NTPROFILE_WINDOWS_TYPES\ntypedef unsigned int DWORD;\n\
         typedef int BOOL;\n#endif\n",
        true,
    ),
    (
        "identical_typedefs_after",
        "#include \"ntprofile.h\"\ntypedef unsigned int DWORD;\ntypedef int BOOL;\n\
         #ifndef TRUE\n#define TRUE 1\n#endif\n",
        false,
    ),
];

/// The part every variant shares: the types are usable with Windows widths, and so is the API.
const OWN_TYPES_BODY: &str = "
typedef char own_dword_is_32_bits[sizeof(DWORD) == 4 ? 1 : -1];
typedef char own_bool_is_int[sizeof(BOOL) == sizeof(int) ? 1 : -1];
int own_types_check(void);
int own_types_check(void)
{
    DWORD d = 7;
    BOOL b = TRUE;
    ULONG interval = 0;
    return (int)d + b + NtQueryIntervalProfile(ProfileTime, &interval);
}
";

#[test]
fn windows_types_coexist_with_the_programs_own() {
    let scratch = Scratch::new("own_types");
    for (name, prelude, c99) in OWN_TYPES {
        let c = scratch.path(&format!("{name}.c"));
        let cc = scratch.path(&format!("{name}.cc"));
        let text = format!("{prelude}{OWN_TYPES_BODY}");
        std::fs::write(&c, &text).unwrap();
        std::fs::write(&cc, &text).unwrap();
        let modes: &[(&str, &str, &PathBuf)] = if c99 {
            &[
                ("gcc", "-std=c99", &c),
                ("gcc", "-std=c11", &c),
                ("g++", "-std=c++17", &cc),
            ]
        } else {
            &[("gcc", "-std=c11", &c), ("g++", "-std=c++17", &cc)]
        };
        for (compiler, std_flag, src) in modes {
            run_tool(
                Command::new(compiler)
                    .arg(std_flag)
                    .args(STRICT)
                    .arg("-I")
                    .arg(include_dir())
                    .arg("-c")
                    .arg(src)
                    .arg("-o")
                    .arg(scratch.path(&format!("{name}{std_flag}.o"))),
            );
            println!("{name}: {compiler} {std_flag} {}: ok", STRICT.join(" "));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------
// (d) The C programs.
// ---------------------------------------------------------------------------------------------------------

/// Compile `ffi/<name>.c` against the header and the shared library into `scratch`.
///
/// The library's SONAME is `libntprofile.so.<major>`, so the program records that name; cargo writes only
/// `libntprofile.so`, so the scratch directory gets a `libntprofile.so.<major>` symlink to it and becomes the
/// program's rpath.
fn build_program(scratch: &Scratch, name: &str) -> PathBuf {
    let lib_dir = lib_dir();
    let exe = scratch.path(name);
    let soname = scratch.path(concat!("libntprofile.so.", env!("CARGO_PKG_VERSION_MAJOR")));
    if std::fs::symlink_metadata(&soname).is_err() {
        std::os::unix::fs::symlink(lib_dir.join("libntprofile.so"), &soname)
            .expect("symlink the SONAME to libntprofile.so");
    }
    let mut rpath = std::ffi::OsString::from("-Wl,-rpath,");
    rpath.push(scratch.dir());
    run_tool(
        Command::new("gcc")
            .args(["-O2", "-std=c11"])
            .args(STRICT)
            .arg("-I")
            .arg(include_dir())
            .arg(repo().join("ffi").join(format!("{name}.c")))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&lib_dir)
            .arg("-lntprofile")
            .arg(rpath)
            .arg("-lm"),
    );
    exe
}

/// Run a built program (one at a time), print its output, and return (success, stdout).
fn run_program(exe: &Path) -> (bool, String) {
    run_program_with(exe, &[], RUN_TIMEOUT)
}

/// [`run_program`] with arguments and a timeout of its own.
fn run_program_with(exe: &Path, args: &[&str], timeout: Duration) -> (bool, String) {
    let _serial = RUN_SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let started = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", exe.display()));
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut stderr = child.stderr.take().expect("piped stderr");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if started.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = out_reader.join().unwrap_or_default();
    let err = err_reader.join().unwrap_or_default();
    println!("$ {}\n{out}", exe.display());
    if !err.is_empty() {
        println!("stderr:\n{err}");
    }
    let elapsed = started.elapsed();
    match status {
        Some(status) => {
            println!(
                "{}: {status} after {:.2} s",
                exe.display(),
                elapsed.as_secs_f64()
            );
            (status.success(), out)
        }
        None => {
            println!(
                "{}: killed after {:.0} s",
                exe.display(),
                timeout.as_secs_f64()
            );
            (false, out)
        }
    }
}

/// Build `ffi/NAME.c` against the library in a scratch directory of its own and run it: whether it exited with
/// 0, and its output.
fn build_and_run(name: &str) -> (bool, String) {
    let scratch = Scratch::new(name);
    let exe = build_program(&scratch, name);
    run_program(&exe)
}

/// Build and run `ffi/NAME.c`, a program of counted checks: it must exit with 0 and end with `N passed, 0 failed`;
/// the failure names the lines of the checks that failed.
fn run_checks(name: &str) {
    let (ok, out) = build_and_run(name);
    let summary = out
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    let failures: Vec<&str> = out.lines().filter(|l| l.starts_with("FAIL")).collect();
    assert!(
        ok && summary.ends_with(" passed, 0 failed"),
        "ffi/{name}.c failed: `{summary}`\n{}",
        failures.join("\n")
    );
}

#[test]
fn conformance_c() {
    run_checks("conformance");
}

/// `ffi/handles.c`: every kind of handle (profile, process, sampler) reaches its object when kept in 32 bits
/// (sign- or zero-extended, or with garbage above), a stale handle after its slot's reuse is refused, the
/// table holds exactly 1,048,576 handles, and `RtlNtStatusToDosError` maps every status as Windows does.
#[test]
fn handles_c() {
    run_checks("handles");
}

/// `ffi/handles.c limit`: the C API's handle table holds exactly 1,048,576 handles, then
/// `STATUS_INSUFFICIENT_RESOURCES`; a close makes room. A million creations (each probes its buffer against
/// the memory map) take 19 s on an idle two-core machine (60 s when each read `/proc/self/maps` whole) and
/// several times that when it is loaded, hence a timeout of its own.
#[test]
fn handle_table_limit_c() {
    let scratch = Scratch::new("handles_limit");
    let exe = build_program(&scratch, "handles");
    let (ok, out) = run_program_with(&exe, &["limit"], Duration::from_secs(900));
    assert!(
        ok && out.trim_end().ends_with(" passed, 0 failed"),
        "ffi/handles.c limit failed:\n{out}"
    );
    assert!(
        out.contains("1048575 handles open with one more held, then 0xC000009A"),
        "{out}"
    );
}

/// The sampler extension from C (`ffi/sampler.c`): a forked child and its own child sampled to their exit,
/// and the statuses of bad input and of handles of the wrong kind.
#[test]
fn sampler_c() {
    run_checks("sampler");
}

#[test]
fn example_hot_c() {
    let (ok, out) = build_and_run("example_hot");
    assert!(ok, "ffi/example_hot.c failed:\n{out}");
}

#[test]
fn status_message_c() {
    let (ok, out) = build_and_run("status_message");
    assert!(ok, "ffi/status_message.c failed:\n{out}");
    let mut compared = 0;
    for line in out.lines().filter(|l| l.starts_with("0x")) {
        let (hex, text) = line.split_once(' ').unwrap();
        let value = u32::from_str_radix(&hex[2..], 16).unwrap();
        let status = NtStatus(value as i32);
        assert_eq!(
            text,
            status.message(),
            "NtprofileStatusMessage(0x{value:08X}) differs from the Rust API's text"
        );
        if let Some(name) = status.name() {
            assert!(text.starts_with(&format!("{name}: ")), "{line}");
        }
        compared += 1;
    }
    assert_eq!(compared, 25, "{out}");
}

#[test]
fn two_functions_c() {
    let (ok, out) = build_and_run("two_functions");
    assert!(ok, "ffi/two_functions.c failed:\n{out}");
}

/// `ffi/find_function.c`: a function found by name (`NtprofileFindFunction`) and libm found by name
/// (`NtprofileEnumerateModules`) are profiled; the program's samples land in the function's buckets only, and
/// the library's in libm.
#[test]
fn find_function_c() {
    let (ok, out) = build_and_run("find_function");
    assert!(ok, "ffi/find_function.c failed:\n{out}");
    // The figures themselves, checked here too (not only by the program's own exit status).
    common::check_find_function_figures(&out);
}

/// `ffi/readme.c`, the README's C example, builds without a warning and counts samples in the function it found.
#[test]
fn readme_c() {
    let (ok, out) = build_and_run("readme");
    assert!(ok, "ffi/readme.c failed:\n{out}");
}

/// `ffi/exited.c`: a process that has exited is still a process. A zombie child, a child reaped while its
/// handle is kept, and a started profile whose process exits: open, create, start, stop, restart and close all
/// succeed, count nothing and leave nothing open; 500 starts racing the child's exit all succeed; a profile of
/// this process keeps counting meanwhile.
#[test]
fn exited_process_c() {
    run_checks("exited");
}

/// `ffi/offcpu.c`, off-CPU profiling from C: `NTPROFILE_SAMPLER_SWITCH` records of a child sleeping 5 × 40 ms
/// (switch-outs without PREEMPT whose intervals add up to 200 ms within 10 %, plausible fields, alone and beside
/// INHERIT and SIDEBAND; an unknown flag refused), `NtprofileReadBlockedThread` on that child in its sleep (the
/// system call, ip, sp and a stack copy holding the sleep's argument), on a spinning thread (running) and on
/// threads that do not exist, every pointer check in the documented order, and no descriptor left open.
#[test]
fn offcpu_c() {
    run_checks("offcpu");
}
