//! libFuzzer's entry to the `ring_decoder` check (`fuzz/checks/ring_decoder.rs`), which `tests/fuzz_corpus.rs` also runs, on
//! stable Rust, over every input of the committed corpus `fuzz/corpus/ring_decoder/`.
#![no_main]

#[path = "../checks/ring_decoder.rs"]
mod check;

libfuzzer_sys::fuzz_target!(|input: check::Input<'_>| check::run(input));
