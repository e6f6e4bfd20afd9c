//! libFuzzer's entry to the `handle_table` check (`fuzz/checks/handle_table.rs`), which `tests/fuzz_corpus.rs` also runs, on
//! stable Rust, over every input of the committed corpus `fuzz/corpus/handle_table/`.
#![no_main]

#[path = "../checks/handle_table.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|input: check::Input| check::run(input));
