//! libFuzzer's entry to the `buckets` check (`fuzz/checks/buckets.rs`), which `tests/fuzz_corpus.rs` also runs, on
//! stable Rust, over every input of the committed corpus `fuzz/corpus/buckets/`.
#![no_main]

#[path = "../checks/buckets.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|input: check::Input| check::run(input));
