//! The fuzz corpora replayed as ordinary tests on stable Rust: every committed input of `fuzz/corpus/<target>/`
//! is decoded as libFuzzer's driver decodes it for that target (too short for the input type's minimum size:
//! skipped; `Arbitrary::arbitrary_take_rest` otherwise, an input it rejects skipped) and run through the same
//! check the fuzz target runs (`fuzz/checks/<target>.rs`, compiled here too). This needs no nightly toolchain,
//! no sanitizer and no cargo-fuzz, so the corpora are checked wherever the test suite runs.

use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};

#[path = "../fuzz/checks/buckets.rs"]
mod buckets;
#[path = "../fuzz/checks/create_checks.rs"]
mod create_checks;
#[path = "../fuzz/checks/handle_table.rs"]
mod handle_table;
#[path = "../fuzz/checks/ring_decoder.rs"]
mod ring_decoder;

/// The files of `fuzz/corpus/<target>/`, sorted; the corpus must not be empty.
fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no inputs in {}", dir.display());
    files
}

/// Decode `bytes` as the fuzz target's driver does: `None` where the driver skips the input.
fn decode<'a, T: Arbitrary<'a>>(bytes: &'a [u8]) -> Option<T> {
    if bytes.len() < T::size_hint(0).0 {
        return None;
    }
    T::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

/// Run `check` over every input of `target`'s corpus; the number of inputs run (not skipped).
fn replay(target: &str, check: impl Fn(&[u8]) -> bool) -> usize {
    let files = corpus(target);
    let mut ran = 0;
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&bytes)));
        match outcome {
            Ok(true) => ran += 1,
            Ok(false) => {}
            Err(_) => panic!("fuzz target {target} fails on {}", file.display()),
        }
    }
    println!("{target}: {ran} of {} inputs run", files.len());
    assert!(ran > 0, "{target}: every input of the corpus was skipped");
    ran
}

#[test]
fn buckets_corpus() {
    replay("buckets", |b| {
        decode::<buckets::Input>(b).map(buckets::run).is_some()
    });
}

#[test]
fn ring_decoder_corpus() {
    replay("ring_decoder", |b| {
        decode::<ring_decoder::Input<'_>>(b)
            .map(ring_decoder::run)
            .is_some()
    });
}

#[test]
fn create_checks_corpus() {
    replay("create_checks", |b| {
        decode::<create_checks::Input>(b)
            .map(create_checks::run)
            .is_some()
    });
}

#[test]
fn handle_table_corpus() {
    replay("handle_table", |b| {
        decode::<handle_table::Input>(b)
            .map(handle_table::run)
            .is_some()
    });
}
