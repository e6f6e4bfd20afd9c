//! Link settings of the C shared library (`libntprofile.so`), in the conventions of Rust C libraries (cargo-c):
//! a versioned SONAME, `libntprofile.so.<major>`, so that programs linked with `-lntprofile` record
//! `NEEDED libntprofile.so.0` and survive a compatible upgrade; and a linker version script that keeps every
//! symbol but the API's (`Nt*`, `Zw*`, `Ntprofile*`, `Rtl*`) local. Only the `cdylib` gets these arguments; the `rlib`
//! and the `staticlib` are not linked here.

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let major =
        std::env::var("CARGO_PKG_VERSION_MAJOR").expect("cargo sets CARGO_PKG_VERSION_MAJOR");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let script = format!("{manifest_dir}/pkg/ntprofile.map");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={script}");
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libntprofile.so.{major}");
        println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={script}");
    }
}
