//! Names of code the project did not write, as real programs meet it:
//!
//! - the vDSO (`tests/real/vdso_loop.c`, a loop of `clock_gettime`): its code is named by the vDSO's own
//!   symbols (`__vdso_clock_gettime`), one row, not one `[vdso]+0x…` row per sampled address;
//! - libc's own PLT (`tests/real/libc_plt.c`: `strdup` and `strndup` call `strlen`, `strnlen` and `memcpy`
//!   through libc's `.plt`, whose slots `IRELATIVE` relocations fill): each stub is `function@plt`, never the
//!   section's start `libc.so.6+0x…`;
//! - lines apart per function (`tests/real/one_line.c`: three hot functions on one source line, as a minifier
//!   writes JavaScript): one lines-table row per function at that line, none with more samples than its function;
//! - one name per function in every format: the CSV's rows, summed per module and function, are the JSON's
//!   (and the text's) function rows exactly, for named code, the vDSO, PLT stubs and a stripped program's
//!   functions named by their `.eh_frame` bounds.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;

mod common;
use common::{gcc, run_ok, u};

const NTPROF: &str = env!("CARGO_BIN_EXE_ntprof");
const LIMIT: Duration = Duration::from_secs(180);

fn dir() -> &'static Path {
    static D: OnceLock<PathBuf> = OnceLock::new();
    D.get_or_init(|| common::build_dir("real"))
}

/// Build `tests/real/NAME.c` as `NAME`, or as a stripped `NAME_stripped` (each test builds its own file, so
/// that no test runs a program another is writing).
fn program(name: &str, stripped: bool) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/real")
        .join(format!("{name}.c"));
    let out = dir().join(if stripped {
        format!("{name}_stripped")
    } else {
        name.to_string()
    });
    gcc(
        &[
            "-O2",
            "-g",
            "-o",
            out.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
        dir(),
    );
    if stripped {
        let st = Command::new("strip")
            .arg("--strip-all")
            .arg(&out)
            .status()
            .expect("run strip");
        assert!(st.success());
    }
    out
}

/// `ntprof record -q -i 1000 --json T.json --csv T.csv -o T.txt -- PROGRAM ARGS`: (JSON, CSV text, text).
fn record(tag: &str, program: &Path, args: &[&str]) -> (Value, String, String) {
    let base = dir().join(tag);
    let (json, csv, txt) = (
        base.with_extension("json"),
        base.with_extension("csv"),
        base.with_extension("txt"),
    );
    let mut cmd = Command::new(NTPROF);
    cmd.args(["record", "-q", "-i", "1000", "--json"])
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .arg("-o")
        .arg(&txt)
        .arg("--")
        .arg(program)
        .args(args);
    run_ok(cmd, LIMIT);
    (
        serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap(),
        std::fs::read_to_string(&csv).unwrap(),
        std::fs::read_to_string(&txt).unwrap(),
    )
}

/// Samples per (module, function) of the first source's function rows (all commands together).
fn json_functions(r: &Value) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for f in r["sources"][0]["functions"].as_array().unwrap() {
        let key = (
            f["module"].as_str().unwrap().to_string(),
            f["name"].as_str().unwrap().to_string(),
        );
        *out.entry(key).or_insert(0) += u(&f["samples"]);
    }
    out
}

/// Samples per (module, function) of the CSV's rows of the first source (the `[outside]` rows left out).
fn csv_functions(csv: &str, source: &str) -> BTreeMap<(String, String), u64> {
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (src, module, function, samples) = (
        col("source"),
        col("module"),
        col("function"),
        col("samples"),
    );
    let mut out = BTreeMap::new();
    for line in rows {
        // The test programs' names hold no comma or quote: a plain split is exact here.
        let f: Vec<&str> = line.split(',').collect();
        if f[src] != source || f[module] == "[outside]" {
            continue;
        }
        let key = (f[module].to_string(), f[function].to_string());
        *out.entry(key).or_insert(0) += f[samples].parse::<u64>().unwrap();
    }
    out
}

/// The CSV names every function as JSON does: the same (module, function) pairs with the same samples.
fn formats_agree(r: &Value, csv: &str) {
    let source = r["sources"][0]["name"].as_str().unwrap();
    let (json, csv) = (json_functions(r), csv_functions(csv, source));
    let differ: Vec<String> = json
        .keys()
        .chain(csv.keys())
        .filter(|k| json.get(*k) != csv.get(*k))
        .map(|k| format!("{k:?}: JSON {:?}, CSV {:?}", json.get(k), csv.get(k)))
        .collect();
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}

/// Samples of module `module` in the first source.
fn module_samples(r: &Value, module: &str) -> u64 {
    r["sources"][0]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["name"] == module)
        .map(|m| u(&m["samples"]))
        .sum()
}

#[test]
fn the_vdso_is_named_by_its_own_symbols() {
    let prog = program("vdso_loop", false);
    let (r, csv, text) = record("vdso", &prog, &[]);
    let vdso = module_samples(&r, "[vdso]");
    assert!(
        vdso > 100,
        "a clock_gettime loop spends its time in the vDSO: {vdso} samples there"
    );
    let rows: Vec<(String, u64)> = json_functions(&r)
        .into_iter()
        .filter(|((m, _), _)| m == "[vdso]")
        .map(|((_, f), n)| (f, n))
        .collect();
    assert!(
        rows.iter().all(|(f, _)| !f.starts_with("[vdso]+")),
        "vDSO code named by offsets: {rows:?}"
    );
    let named: u64 = rows
        .iter()
        .filter(|(f, _)| f == "__vdso_clock_gettime")
        .map(|r| r.1)
        .sum();
    // Its only other functions (gettimeofday, time, getcpu) are not called: every sample there is in one row.
    assert_eq!(named, vdso, "{rows:?}");
    assert!(
        text.lines()
            .any(|l| l.contains(" __vdso_clock_gettime ") && l.contains("[vdso]")),
        "{text}"
    );
    assert!(!text.contains("[vdso]+0x"), "{text}");
    formats_agree(&r, &csv);
}

/// libc's `.plt` section: (file address, size), from `readelf -SW`.
fn libc_plt_section(path: &str) -> (u64, u64) {
    let out = Command::new("readelf")
        .args(["-SW", path])
        .output()
        .expect("run readelf");
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(" .plt ") && !l.contains(".plt."))
        .unwrap_or_else(|| panic!("no .plt in {path}:\n{text}"));
    // [Nr] Name Type Address Off Size ...: the fields after the name.
    let after = &line[line.find(" .plt ").unwrap() + 6..];
    let f: Vec<&str> = after.split_whitespace().collect();
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap();
    (hex(f[1]), hex(f[3]))
}

#[test]
fn libc_own_plt_stubs_are_named_after_their_functions_and_every_format_agrees() {
    let prog = program("libc_plt", false);
    let (r, csv, text) = record("libc_plt", &prog, &[]);
    let libc = r["sources"][0]["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"].as_str().is_some_and(|n| n.starts_with("libc.so")))
        .expect("libc in the modules")
        .clone();
    let (name, path, bias) = (
        libc["name"].as_str().unwrap(),
        libc["path"].as_str().unwrap(),
        u(&libc["bias"]),
    );
    let (plt, size) = libc_plt_section(path);
    let in_plt: Vec<(String, u64)> = r["sources"][0]["functions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["module"] == name)
        .filter(|f| (plt..plt + size).contains(&u(&f["address"]).wrapping_sub(bias)))
        .map(|f| (f["name"].as_str().unwrap().to_string(), u(&f["samples"])))
        .collect();
    let total: u64 = in_plt.iter().map(|r| r.1).sum();
    assert!(
        total > 0,
        "strdup and strndup call through libc's .plt: no sample there"
    );
    assert!(
        in_plt
            .iter()
            .all(|(f, _)| f.ends_with("@plt") && !f.starts_with("*ABS*")),
        "libc's .plt at {plt:#x}: {in_plt:?}"
    );
    assert!(
        in_plt
            .iter()
            .any(|(f, _)| ["strlen@plt", "strnlen@plt", "memcpy@plt"].contains(&f.as_str())),
        "{in_plt:?}"
    );
    assert!(!text.contains(&format!("{name}+{plt:#x}")), "{text}");
    formats_agree(&r, &csv);
}

#[test]
fn every_format_names_a_function_alike_when_eh_frame_bounds_name_it() {
    // A stripped program: its functions are named by their .eh_frame bounds (`module+0xSTART`), libc's PLT
    // stubs by their relocations, libc's functions by its symbols.
    let prog = program("libc_plt", true);
    let (r, csv, _) = record("libc_plt_stripped", &prog, &[]);
    formats_agree(&r, &csv);
    let main = json_functions(&r)
        .into_iter()
        .filter(|((m, f), _)| m == "libc_plt_stripped" && f.starts_with("libc_plt_stripped+0x"))
        .map(|(_, n)| n)
        .sum::<u64>();
    assert!(main > 0, "the stripped main has samples: {r}");
}

#[test]
fn functions_on_one_line_keep_their_own_line_rows() {
    let prog = program("one_line", false);
    let (r, _, text) = record("one_line", &prog, &[]);
    let source = &r["sources"][0];
    let functions = json_functions(&r);
    let mut at_line = Vec::new();
    for l in source["lines"].as_array().unwrap() {
        let key = (
            l["module"].as_str().unwrap().to_string(),
            l["function"].as_str().unwrap().to_string(),
        );
        // A line of an inlined function is its row; the function table has the function it is inlined into.
        let Some(&own) = functions.get(&key) else {
            continue;
        };
        assert!(
            u(&l["samples"]) <= own,
            "a line row of {key:?} has more samples than the function ({own}): {l}"
        );
        if l["file"].as_str().unwrap().ends_with("one_line.c") && u(&l["line"]) == 5 {
            at_line.push((key.1, u(&l["samples"])));
        }
    }
    at_line.sort();
    let names: Vec<&str> = at_line.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(names, ["alpha", "beta", "gamma_"], "{text}");
    // Each function's code is all on that line: its row holds nearly all of its samples.
    for (f, n) in &at_line {
        let own = functions[&("one_line".to_string(), f.clone())];
        assert!(
            *n * 10 >= own * 9,
            "{f}: {n} of {own} samples on its line\n{text}"
        );
    }
}
