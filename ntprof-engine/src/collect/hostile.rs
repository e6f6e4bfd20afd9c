//! Tests of the report's notes on objects whose names are lost: an object with a corrupt section table is
//! named `module+0x…` with a note that says why.

use super::symbolize::Symbolizers;
use crate::tree::jitdump::JitState;
use crate::tree::space::{Module, ModuleKind};

#[test]
fn an_object_with_a_corrupt_section_table_is_named_with_a_note() {
    let dir = std::env::temp_dir().join(format!("ntprof-notes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("p.c");
    std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
    let exe = dir.join("p");
    let out = std::process::Command::new("gcc")
        .args(["-o", exe.to_str().unwrap(), src.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The section table is said to lie far past the end of the file (the program still runs: the loader
    // reads only the program headers).
    let mut bytes = std::fs::read(&exe).unwrap();
    bytes[0x28..0x30].copy_from_slice(&0x7fff_ffff_0000u64.to_le_bytes());
    std::fs::write(&exe, &bytes).unwrap();
    let path = exe.to_str().unwrap().to_string();
    let modules = [Module {
        name: "p".into(),
        path: path.clone(),
        kind: ModuleKind::File,
        first: (0x40_0000, 0x40_1000, 0),
        mapped_ns: 0,
        wanted: true,
        object: None,
    }];
    let jit = JitState::default();
    let s = Symbolizers::open(&modules, &[true], None, &jit, &Default::default());
    let located = s.locate(0, 0x40_0010);
    assert!(located.function.starts_with("p+0x"), "{}", located.function);
    let notes = s.notes();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("module+0x") && n.contains(&path)),
        "{notes:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
