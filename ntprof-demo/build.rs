//! Builds the demo's C parts: the executable's hot function as a static archive linked into `ntprof-demo`, and
//! two shared libraries in OUT_DIR: `libntprof_demo_lib.so` (linked, found through an rpath) and
//! `libntprof_demo_plugin.so` (loaded with dlopen; its path is compiled into the program).

use std::path::PathBuf;

fn main() {
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    for f in [
        "csrc/hot.h",
        "csrc/demo_main.c",
        "csrc/demo_lib.c",
        "csrc/demo_plugin.c",
    ] {
        println!("cargo:rerun-if-changed={f}");
    }
    // -g: line tables, so that ntprof names the hot lines; -O2 as a release build would.
    cc::Build::new()
        .file("csrc/demo_main.c")
        .opt_level(2)
        .debug(true)
        .compile("ntprof_demo_main");

    let compiler = cc::Build::new()
        .opt_level(2)
        .debug(true)
        .pic(true)
        .get_compiler();
    for (lib, src) in [
        ("ntprof_demo_lib", "csrc/demo_lib.c"),
        ("ntprof_demo_plugin", "csrc/demo_plugin.c"),
    ] {
        let so = out.join(format!("lib{lib}.so"));
        let status = compiler
            .to_command()
            .args(["-shared", "-fPIC", "-g", "-O2", "-o"])
            .arg(&so)
            .arg(src)
            .status()
            .expect("run the C compiler");
        assert!(status.success(), "building {} failed", so.display());
    }
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=dylib=ntprof_demo_lib");
    println!("cargo:rustc-link-lib=dylib=dl");
    println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", out.display());
    println!(
        "cargo:rustc-env=NTPROF_DEMO_PLUGIN={}",
        out.join("libntprof_demo_plugin.so").display()
    );
}
