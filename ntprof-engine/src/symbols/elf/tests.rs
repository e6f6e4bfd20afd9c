//! Tests of one ELF object's symbols: aliases, the last address.

use super::*;
use object::ObjectSymbol;

/// libc's `malloc` is named `malloc`, although `__libc_malloc` (and, with libc's debug file installed,
/// `__GI___libc_malloc`) name the same address.
#[test]
fn libc_malloc_is_malloc() {
    let maps = super::super::read_maps("self").unwrap();
    let Some(libc) = maps
        .iter()
        .find(|m| m.is_executable() && m.path.contains("/libc.so"))
    else {
        crate::symbols::hostile::skip::skip("this test binary is not linked against a shared libc");
        return;
    };
    let elf = ElfSymbolizer::open(Path::new(&libc.path)).unwrap();
    let data = std::fs::read(&libc.path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let malloc = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok("malloc") && s.is_definition())
        .expect("libc defines malloc");
    let aliases = file
        .dynamic_symbols()
        .filter(|s| s.address() == malloc.address() && s.name() != Ok("malloc"))
        .count();
    assert!(
        aliases > 0,
        "libc has aliases of malloc (__libc_malloc): the test would prove nothing"
    );
    let s = elf.symbol(malloc.address() + 1).unwrap();
    assert_eq!(s.name, "malloc", "{elf:?}");
    assert_eq!(
        elf.resolve(malloc.address() + 1).symbol.unwrap().name,
        "malloc"
    );
}

/// The last address is looked up without a panic: addr2line computes the address after the one looked up,
/// which overflows there (a fuzzer found it; debug and fuzz builds check overflow).
#[test]
fn the_last_address_resolves_to_nothing() {
    let exe = std::env::current_exe().unwrap();
    let elf = ElfSymbolizer::open(&exe).unwrap();
    assert!(
        elf.dwarf(&mut elf.lock()).is_some(),
        "the test binary has DWARF: the test would prove nothing"
    );
    let r = elf.resolve(u64::MAX);
    assert!(r.frames.is_empty(), "{:?}", r.frames);
    assert_eq!(elf.location(u64::MAX), None);
}
