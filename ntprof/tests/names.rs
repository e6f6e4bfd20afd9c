//! Names as a user reads them, end to end:
//!
//! - PLT stubs: a program whose page faults are all in its PLT stubs (`tests/names/plt_main.c` calling the tiny
//!   functions of `plt_lib.c`), linked four ways so that its stubs are in `.plt` (lazy binding), `.plt.got` (a
//!   function whose address is also taken, `-z now`), `.plt.sec` (indirect branch tracking, `-fcf-protection
//!   -z ibtplt`) and both of the last two, each also stripped: every stub's samples are reported as
//!   `function@plt` at the address objdump gives that stub, never as `_init` or `module+0x…`, in the flat table
//!   and in stacks (frame pointers and DWARF).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{call_tree_report, gcc, gcc_shared, run_bounded, run_ok, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
const LIMIT: Duration = Duration::from_secs(120);

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| common::build_dir("names"))
}

fn src(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/names")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

/// The PLT program's link variants: (name, extra gcc flags).
const PLT_VARIANTS: [(&str, &[&str]); 4] = [
    ("plt_lazy", &[]),
    ("plt_got", &["-DTAKE_ADDRESS", "-Wl,-z,now"]),
    ("plt_ibt", &["-fcf-protection", "-Wl,-z,ibtplt"]),
    (
        "plt_ibt_got",
        &["-fcf-protection", "-Wl,-z,ibtplt", "-DTAKE_ADDRESS"],
    ),
];

/// A stub as objdump names it: its section and file virtual address.
#[derive(Clone, Debug)]
struct Stub {
    section: String,
    address: u64,
}

/// `objdump FLAG program`'s output.
fn objdump(flag: &str, program: &Path) -> String {
    let out = Command::new("objdump")
        .arg(flag)
        .arg(program)
        .output()
        .expect("run objdump");
    assert!(out.status.success(), "objdump {flag} {}", program.display());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The addresses of the program's `.init` section (from `objdump -h`): where `_init`, a real function, lies.
fn init_section(program: &Path) -> std::ops::Range<u64> {
    let text = objdump("-h", program);
    let fields: Vec<&str> = text
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|f| f.get(1) == Some(&".init"))
        .unwrap_or_else(|| panic!("no .init section in {}: {text}", program.display()));
    let size = u64::from_str_radix(fields[2], 16).unwrap();
    let start = u64::from_str_radix(fields[3], 16).unwrap();
    start..start + size
}

/// `_init` names only addresses of the `.init` section. A sample may truly land there (the program's start
/// runs `_init`: one sample of 2,384 did in a loaded run), but an address of the PLT named `_init` (the symbol
/// before it, extended over it) is the defect these tests guard against.
fn check_init(module: &str, init: &std::ops::Range<u64>, at: u64, name: &str) {
    if name == "_init" {
        assert!(
            init.contains(&at),
            "{module}: {at:#x} is named _init but lies outside .init {init:#x?}"
        );
    }
}

/// The `name@plt` labels of `objdump -d program`, with their sections.
fn objdump_stubs(program: &Path) -> HashMap<String, Stub> {
    let text = objdump("-d", program);
    let mut section = String::new();
    let mut stubs = HashMap::new();
    for line in text.lines() {
        if let Some(s) = line.strip_prefix("Disassembly of section ") {
            section = s.trim_end_matches(':').to_string();
        } else if let Some((addr, label)) = line.split_once(" <")
            && let Some(name) = label.strip_suffix(">:")
            && name.ends_with("@plt")
        {
            let address = u64::from_str_radix(addr, 16).unwrap();
            stubs.insert(
                name.to_string(),
                Stub {
                    section: section.clone(),
                    address,
                },
            );
        }
    }
    stubs
}

/// A built PLT program: its path, its stripped copy's path, and objdump's stubs.
type PltProgram = (PathBuf, PathBuf, HashMap<String, Stub>);

/// The built PLT programs, one per variant.
fn plt_programs() -> &'static Vec<PltProgram> {
    static P: OnceLock<Vec<PltProgram>> = OnceLock::new();
    P.get_or_init(|| {
        let d = dir().to_str().unwrap();
        gcc_shared(&format!("{d}/libplt.so"), &src("plt_lib.c"), dir());
        PLT_VARIANTS
            .iter()
            .map(|(name, flags)| {
                let out = format!("{d}/{name}");
                let main = src("plt_main.c");
                let mut args = vec!["-O2", "-g", "-fno-omit-frame-pointer"];
                args.extend_from_slice(flags);
                args.extend_from_slice(&[
                    "-o",
                    &out,
                    &main,
                    "-L",
                    d,
                    "-lplt",
                    "-Wl,-rpath,$ORIGIN",
                ]);
                gcc(&args, dir());
                let stripped = format!("{d}/{name}_stripped");
                std::fs::copy(&out, &stripped).unwrap();
                let st = Command::new("strip")
                    .args(["--strip-all", &stripped])
                    .status()
                    .expect("run strip");
                assert!(st.success());
                let stubs = objdump_stubs(Path::new(&out));
                (PathBuf::from(out), PathBuf::from(stripped), stubs)
            })
            .collect()
    })
}

/// `ntprof record -q --format json -i 2000 OPTIONS -- PROGRAM ARGS`: its JSON report.
fn record_json(options: &[&str], program: &Path, args: &[&str]) -> Value {
    let mut cmd = Command::new(NTPROF);
    // Page faults, every one sampled: plt_main.c makes each call fault in its stub.
    cmd.args(["record", "-q", "--format", "json", "-e", "page-faults"])
        .args(options)
        .arg("--")
        .arg(program)
        .args(args);
    let out = run_ok(cmd, LIMIT);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn module_bias(source: &Value, module: &str) -> u64 {
    let m = source["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == module)
        .unwrap_or_else(|| panic!("no module {module}"));
    u(&m["bias"])
}

/// The size of a stub: 8 bytes in the `.plt.got` of a program built without indirect branch tracking, else 16.
fn stub_size(module: &str, stub: &Stub) -> u64 {
    if stub.section == ".plt.got" && !module.contains("ibt") {
        8
    } else {
        16
    }
}

/// An address `at` of `module` named `name`: inside a stub, the name is the stub's.
fn check_inside_stub(module: &str, stubs: &HashMap<String, Stub>, at: u64, name: &str) {
    for (stub_name, stub) in stubs {
        if (stub.address..stub.address + stub_size(module, stub)).contains(&at) {
            assert_eq!(name, stub_name, "{module}: the location at {at:#x}");
        }
    }
}

/// The stubs of one run's program: every function of the program's module whose address is a stub's (by objdump)
/// has that stub's name; `_init` and `module+0x…` never name a stub; the two hot stubs are there with the share
/// the program's design gives them (within sampling noise), the one called three times as often the hotter.
/// The rounds the PLT program runs (three calls of plt_three and one of plt_one each).
const ROUNDS: u64 = 2000;
const ROUNDS_ARG: &str = "2000";

/// Returns `(plt_three@plt, plt_one@plt)` samples.
fn check_stubs(
    r: &Value,
    module: &str,
    stubs: &HashMap<String, Stub>,
    init: &std::ops::Range<u64>,
) -> (u64, u64) {
    let s = &r["sources"][0];
    let bias = module_bias(s, module);
    let by_address: HashMap<u64, &str> = stubs
        .iter()
        .map(|(name, stub)| (stub.address, name.as_str()))
        .collect();
    let mut samples = HashMap::new();
    for f in s["functions"].as_array().unwrap() {
        if f["module"] != module {
            continue;
        }
        let name = f["name"].as_str().unwrap();
        let at = u(&f["address"]).wrapping_sub(bias);
        check_init(module, init, at, name);
        if let Some(stub) = by_address.get(&at) {
            assert_eq!(name, *stub, "{module}: the function at {at:#x}");
        }
        if name.ends_with("@plt") {
            let stub = &stubs[name];
            assert_eq!(at, stub.address, "{module}: {name}");
            *samples.entry(name.to_string()).or_insert(0) += u(&f["samples"]);
        }
    }
    // No bucket inside a stub is named otherwise.
    for b in s["buckets"].as_array().unwrap() {
        if b["module"] == module {
            let at = u(&b["address"]).wrapping_sub(bias);
            let frames = b["frames"].as_array().unwrap();
            let name = frames
                .last()
                .map_or("", |f| f["function"].as_str().unwrap());
            check_inside_stub(module, stubs, at, name);
            check_init(module, init, at, name);
        }
    }
    let three = samples.get("plt_three@plt").copied().unwrap_or(0);
    let one = samples.get("plt_one@plt").copied().unwrap_or(0);
    let counted = u(&s["stats"]["counted"]);
    eprintln!("{module}: plt_three@plt {three}, plt_one@plt {one} of {counted}");
    // Every call faults in its stub (plt_main.c drops the stubs' page before it), and every fault is sampled:
    // three in plt_three@plt and one in plt_one@plt per round, exactly, but for samples reported lost: a DWARF
    // run copies 8 KiB of stack per fault, and a reader kept from its processor on a loaded machine lets its
    // ring fill; at most a quarter of them (none was lost unloaded at the program's pace).
    let lost = u(&s["stats"]["lost"]);
    let short = (3 * ROUNDS - three.min(3 * ROUNDS)) + (ROUNDS - one.min(ROUNDS));
    assert!(
        three <= 3 * ROUNDS && one <= ROUNDS && short <= lost && lost <= ROUNDS,
        "{module}: the stubs' faults: plt_three@plt {three} (of {}), plt_one@plt {one} (of {ROUNDS}), lost {lost}: {}",
        3 * ROUNDS,
        s["functions"]
    );
    (three, one)
}

#[test]
fn plt_stubs_are_named_function_at_plt_in_every_layout_and_when_stripped() {
    let expected_sections = [
        (".plt", ".plt"),
        (".plt", ".plt.got"),
        (".plt.sec", ".plt.sec"),
        (".plt.sec", ".plt.got"),
    ];
    for ((program, stripped, stubs), (three_in, one_in)) in
        plt_programs().iter().zip(expected_sections)
    {
        // The build gave the layout this variant stands for.
        assert_eq!(
            stubs["plt_three@plt"].section,
            three_in,
            "{}",
            program.display()
        );
        assert_eq!(
            stubs["plt_one@plt"].section,
            one_in,
            "{}",
            program.display()
        );
        for p in [program, stripped] {
            let r = record_json(&[], p, &[ROUNDS_ARG]);
            let module = p.file_name().unwrap().to_str().unwrap();
            check_stubs(&r, module, stubs, &init_section(p));
        }
    }
}

/// The stacks of a run: the names of the frames of each stack whose sampled location is in `module`.
fn stacks(r: &Value, module: &str) -> Vec<(Vec<String>, u64)> {
    let s = &r["sources"][0];
    let locations = s["locations"].as_array().unwrap();
    s["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|st| {
            let first = st["frames"][0].as_u64().unwrap() as usize;
            locations[first]["module"] == module
        })
        .map(|st| {
            let names = st["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| {
                    locations[i.as_u64().unwrap() as usize]["function"]
                        .as_str()
                        .unwrap()
                        .to_string()
                })
                .collect();
            (names, u(&st["samples"]))
        })
        .collect()
}

#[test]
fn plt_stubs_are_named_in_stacks_from_frame_pointers_and_dwarf() {
    let (program, stripped, stubs) = &plt_programs()[2];
    for (options, p) in [
        (&["-g"][..], program),
        (&["--call-graph", "dwarf"][..], program),
        (&["--call-graph", "dwarf"][..], stripped),
    ] {
        let r = record_json(options, p, &[ROUNDS_ARG]);
        let module = p.file_name().unwrap().to_str().unwrap();
        let init = init_section(p);
        check_stubs(&r, module, stubs, &init);
        // Every location of the stacks inside a stub is named by it; `_init` only inside `.init`.
        for l in r["sources"][0]["locations"].as_array().unwrap() {
            if l["module"] == module {
                let (at, name) = (u(&l["offset"]), l["function"].as_str().unwrap());
                check_inside_stub(module, stubs, at, name);
                check_init(module, &init, at, name);
            }
        }
        let all = stacks(&r, module);
        let in_stub: u64 = all
            .iter()
            .filter(|(f, _)| f[0] == "plt_three@plt")
            .map(|(_, n)| n)
            .sum();
        let three = r["sources"][0]["functions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["name"] == "plt_three@plt")
            .map(|f| u(&f["samples"]))
            .sum::<u64>();
        assert_eq!(
            in_stub, three,
            "{options:?} {module}: the stacks in plt_three@plt: {all:?}"
        );
        if options[0] == "--call-graph" && p == program {
            // DWARF unwinds the stub (the linker's CFI for the PLT) to the loop that calls it.
            let from_main: u64 = all
                .iter()
                .filter(|(f, _)| {
                    f[0] == "plt_three@plt" && f.get(1).map(String::as_str) == Some("main")
                })
                .map(|(_, n)| n)
                .sum();
            assert!(
                from_main * 10 >= in_stub * 9,
                "{options:?}: {from_main} of {in_stub} stacks in the stub go on to main: {all:?}"
            );
        }
        eprintln!("{options:?} {module}: {in_stub} stacks in plt_three@plt");
    }
}

/// `ntprof record -q OPTIONS --json BASE.json --flamegraph BASE.svg -- PROGRAM ARGS`, then the text report of that
/// JSON with its call tree: (JSON, text, SVG path).
fn record_with_text(
    tag: &str,
    options: &[&str],
    program: &Path,
    args: &[&str],
) -> (Value, String, PathBuf) {
    let base = dir().join(tag);
    let (json, svg) = (base.with_extension("json"), base.with_extension("svg"));
    let mut cmd = Command::new(NTPROF);
    cmd.args(["record", "-q", "-i", "2000"])
        .args(options)
        .arg("--json")
        .arg(&json)
        .arg("--flamegraph")
        .arg(&svg)
        .arg("--")
        .arg(program)
        .args(args);
    run_ok(cmd, LIMIT);
    let text = call_tree_report(&json, LIMIT);
    (
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap(),
        text,
        svg,
    )
}

/// The C++ program of the stack tests (templates, a class, an inlined `std::sort` with a lambda).
fn cpp_program() -> PathBuf {
    let out = dir().join("names_cpp");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/stacks/stacks_cpp.cpp");
    let built = Command::new("g++")
        .args(["-O2", "-g", "-o"])
        .arg(&out)
        .arg(&src)
        .output()
        .expect("run g++");
    assert!(
        built.status.success(),
        "g++: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    out
}

#[test]
fn cpp_names_in_the_text_tables_lose_parameters_and_return_types_json_keeps_them() {
    let program = cpp_program();
    let (json, text, svg) = record_with_text("cpp", &["--call-graph", "dwarf"], &program, &["1"]);
    let s = &json["sources"][0];
    // JSON: the full demangled names.
    let full_add =
        "Accumulator<double>::add(std::vector<double, std::allocator<double> > const&, int)";
    assert!(
        s["functions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["name"] == full_add),
        "{}",
        s["functions"]
    );
    assert!(
        s["locations"].as_array().unwrap().iter().any(|l| l["function"]
            == "double run_kernel<Accumulator<double>, double>(Accumulator<double>&, std::vector<double, std::allocator<double> > const&, int)"),
        "the caller's full name in the JSON locations"
    );
    // Text: the functions table, the callers and the call tree without parameter lists and return types.
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("Function") || !l.contains("Module"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(
        table
            .iter()
            .any(|l| l.contains("  Accumulator<double>::add  ")),
        "{text}"
    );
    // A parameter list ends a name (a space or the line's end follows its ')'); a lambda's signature inside
    // template arguments (`{lambda(unsigned int, unsigned int)#1}`), which names now printed whole show, does
    // not.
    for l in &table {
        assert!(
            !(l.contains(") ") || l.trim_end().ends_with(')')) || l.contains("[clone"),
            "a parameter list in the table: {l}\n{text}"
        );
    }
    let called_from = &text[text.find("Called from").expect(&text)..];
    assert!(
        called_from.contains("Accumulator<double>::add  self"),
        "{called_from}"
    );
    assert!(
        called_from.contains("  run_kernel<Accumulator<double>, double>\n"),
        "the caller without its return type and parameters: {called_from}"
    );
    let tree = &text[text.find("Call tree").expect(&text)..];
    for name in [
        "main\n",
        "Engine::step\n",
        "run_kernel<Accumulator<float>, float>\n",
        "Engine::reorder\n",
    ] {
        assert!(tree.contains(&format!("  {name}")), "{name}: {tree}");
    }
    assert!(
        !tree.contains("(int)") && !tree.contains("const&"),
        "{tree}"
    );
    println!("{text}");
    // The flame graph keeps the full names, and its root frame says what was profiled.
    let svg_text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg_text.contains(&xml(full_add)),
        "full names in the flame graph"
    );
    let label = format!("all: {} 1 [Timer]", program.display());
    assert!(
        svg_text.contains(&format!(">{}</text>", xml(&label))),
        "the root frame's box says {label}"
    );
    assert!(!svg_text.contains("<title>all ("), "no bare 'all' root");
    if let Some(rsvg) = common::tool(
        "rsvg-convert",
        common::on_path("rsvg-convert"),
        "apt-get install librsvg2-bin",
    ) {
        let png = svg.with_extension("png");
        let out = run_bounded(Command::new(rsvg).arg("-o").arg(&png).arg(&svg), LIMIT);
        assert!(
            out.status.success(),
            "rsvg-convert: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        println!("flame graph PNG: {}", png.display());
    }
}

/// `s` escaped as the SVG escapes text.
fn xml(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
