//! libFuzzer's entry to the `create_checks` check (`fuzz/checks/create_checks.rs`), which `tests/fuzz_corpus.rs` also runs, on
//! stable Rust, over every input of the committed corpus `fuzz/corpus/create_checks/`.
#![no_main]

#[path = "../checks/create_checks.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|input: check::Input| check::run(input));
