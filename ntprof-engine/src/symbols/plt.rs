//! Names for the PLT stubs of an x86-64 ELF object: `function@plt`, as objdump and perf name them.
//!
//! A call into another object goes through a stub of the caller's procedure linkage table, which jumps through a
//! GOT slot the dynamic loader fills in. No symbol table names the stubs (a program's symbols end at `_init`
//! just before them), yet the stubs are hot whenever the functions they reach are short. Each stub is decoded:
//!
//! * a jump through a slot, `jmp *disp(%rip)` (after an optional `endbr64` and `bnd` prefix): the stub of the
//!   function whose dynamic relocation fills that slot (`R_X86_64_JUMP_SLOT` in `.rela.plt` for `.plt` and
//!   `.plt.sec` stubs, `R_X86_64_GLOB_DAT` in `.rela.dyn` for the `.plt.got` stubs of functions whose address
//!   the program also takes). This holds for the lazy `.plt`, the `.plt.sec` of programs built for indirect
//!   branch tracking (`-fcf-protection`), and `.plt.got`, whatever order the linker chose.
//! * a `push $N` without a jump through a slot (the lazy-binding half of an entry whose stub proper is in
//!   `.plt.sec`): the function of relocation `N` of `.rela.plt`, which that push hands to the dynamic loader;
//! * `push disp(%rip)`: the PLT's header, the lazy binder's entry, named `.plt` (objdump's label for it).
//!
//! A slot filled by an `R_X86_64_IRELATIVE` relocation (libc's calls of its own IFUNC functions, `strchrnul`,
//! `memcpy`, …) has no symbol: its addend is the address of the function's resolver, which is also the value of
//! the IFUNC symbol. The stub is named after that symbol (`strnlen@plt`; among aliases the name with the fewest
//! leading underscores, then a global one), or `*ABS*+0xADDEND@plt` as objdump names it when no symbol is there.
//!
//! Every name covers exactly its stub's bytes (the section's entry size), so nothing else is ever named by it.
//! The dynamic symbols and relocations survive `strip`, so a stripped program's stubs are named too. Objects of
//! other architectures get no stub names (their stubs are then named by `.eh_frame` bounds, `module+0xSTART`).

use std::collections::HashMap;

use object::read::elf::SectionHeader;
use object::{Architecture, Object, ObjectSection, ObjectSymbol, ReadRef, SymbolKind};

use super::table::Symbol;

/// The sections whose entries are PLT stubs (`.plt.bnd`: the same stubs as `.plt.sec`, from the MPX era).
const PLT_SECTIONS: [&str; 4] = [".plt", ".plt.sec", ".plt.got", ".plt.bnd"];

/// The name of the PLT's header.
pub const HEADER: &str = ".plt";

/// The suffix of a stub's name.
pub const SUFFIX: &str = "@plt";

/// `endbr64`, the landing pad of indirect branch tracking.
const ENDBR64: [u8; 4] = [0xf3, 0x0f, 0x1e, 0xfa];

/// What a stub does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stub {
    /// `jmp *disp(%rip)`: jumps through the GOT slot at this address.
    Jump(u64),
    /// `push $N`: hands relocation `N` of `.rela.plt` to the lazy binder.
    Push(u32),
    /// `push disp(%rip)`: the PLT's header.
    Header,
}

/// Decode the stub whose first byte is at file virtual address `address`.
pub fn decode(address: u64, bytes: &[u8]) -> Option<Stub> {
    let mut at = if bytes.starts_with(&ENDBR64) { 4 } else { 0 };
    if bytes.get(at) == Some(&0xf2) {
        at += 1; // `bnd`
    }
    let imm32 = |from: usize| -> Option<[u8; 4]> { bytes.get(from..from + 4)?.try_into().ok() };
    match (bytes.get(at)?, bytes.get(at + 1)) {
        (0xff, Some(0x25)) => {
            let disp = i32::from_le_bytes(imm32(at + 2)?);
            let next = address.wrapping_add(at as u64 + 6);
            Some(Stub::Jump(next.wrapping_add_signed(disp.into())))
        }
        (0xff, Some(0x35)) => Some(Stub::Header),
        (0x68, _) => Some(Stub::Push(u32::from_le_bytes(imm32(at + 1)?))),
        _ => None,
    }
}

/// The size of one stub of section `name` (`sh_entsize` when the linker gives a plausible one): 16 bytes, but
/// 8 for the `.plt.got` stubs of a program built without indirect branch tracking (`jmp` and a 2-byte `nop`).
fn entry_size(name: &str, entsize: u64, bytes: &[u8]) -> u64 {
    match entsize {
        8 | 16 => entsize,
        _ if name == ".plt.got" && !bytes.starts_with(&ENDBR64) => 8,
        _ => 16,
    }
}

/// The dynamic relocations that name stubs: GOT slot → function, and the functions of `.rela.plt` in order.
#[derive(Debug, Default)]
pub struct Targets {
    /// `R_X86_64_JUMP_SLOT` and `R_X86_64_GLOB_DAT` slots and the symbol each is filled with.
    pub slots: HashMap<u64, String>,
    /// The symbols of `.rela.plt`, by index (`None` for a relocation without a symbol, such as `IRELATIVE`).
    pub lazy: Vec<Option<String>>,
}

/// Name the stubs of one PLT section at `address`: one symbol per stub whose target is known.
pub fn stubs(
    name: &str,
    address: u64,
    entsize: u64,
    bytes: &[u8],
    targets: &Targets,
) -> Vec<Symbol> {
    let size = entry_size(name, entsize, bytes);
    let mut out = Vec::new();
    for (i, entry) in bytes.chunks(size as usize).enumerate() {
        let start = address + i as u64 * size;
        let function = match decode(start, entry) {
            Some(Stub::Jump(slot)) => targets.slots.get(&slot).map(|f| format!("{f}{SUFFIX}")),
            Some(Stub::Push(n)) => targets
                .lazy
                .get(n as usize)
                .and_then(Option::as_ref)
                .map(|f| format!("{f}{SUFFIX}")),
            Some(Stub::Header) if name == ".plt" && i == 0 => Some(HEADER.to_string()),
            _ => None,
        };
        if let Some(function) = function {
            out.push(Symbol {
                address: start,
                size: entry.len() as u64,
                name: function,
            });
        }
    }
    out
}

/// The stub symbols of an object (empty unless it is a 64-bit x86 ELF object with PLT sections).
pub fn plt_symbols<'data, R: ReadRef<'data>>(file: &object::File<'data, R>) -> Vec<Symbol> {
    let object::File::Elf64(elf) = file else {
        return Vec::new();
    };
    if file.architecture() != Architecture::X86_64 {
        return Vec::new();
    }
    let endian = elf.endian();
    let dynsym = elf.elf_dynamic_symbol_table();
    let symbol_name = |index: u32| -> Option<String> {
        let sym = dynsym.symbol(object::SymbolIndex(index as usize)).ok()?;
        let name = dynsym.symbol_name(endian, sym).ok()?;
        (!name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
    };
    let mut targets = Targets::default();
    let mut irelative = Vec::new();
    for section in elf.sections() {
        let header = section.elf_section_header();
        let Ok(Some((relocations, link))) = header.rela(endian, elf.data()) else {
            continue;
        };
        if link != dynsym.section() {
            continue;
        }
        let is_rela_plt = section.name() == Ok(".rela.plt");
        for r in relocations {
            let kind = r.r_type(endian, false);
            let mut name = symbol_name(r.r_sym(endian, false));
            if kind == object::elf::R_X86_64_IRELATIVE {
                // Named below, once the symbols at the addends are known.
                let resolver = r.r_addend.get(endian) as u64;
                irelative.push((r.r_offset.get(endian), resolver));
                name = Some(format!("{IRELATIVE_MARK}{resolver:x}"));
            }
            if kind == object::elf::R_X86_64_JUMP_SLOT
                || kind == object::elf::R_X86_64_GLOB_DAT
                || kind == object::elf::R_X86_64_IRELATIVE
            {
                if let Some(name) = &name {
                    targets.slots.insert(r.r_offset.get(endian), name.clone());
                }
            }
            if is_rela_plt {
                targets.lazy.push(name);
            }
        }
    }
    if !irelative.is_empty() {
        let names = function_names_at(file, irelative.iter().map(|r| r.1).collect());
        let named = |target: &mut String| {
            if let Some(hex) = target.strip_prefix(IRELATIVE_MARK) {
                let resolver = u64::from_str_radix(hex, 16).unwrap_or_default();
                *target = match names.get(&resolver) {
                    Some(function) => function.clone(),
                    None => format!("*ABS*+{resolver:#x}"),
                };
            }
        };
        targets.slots.values_mut().for_each(named);
        targets.lazy.iter_mut().flatten().for_each(named);
    }
    let mut out = Vec::new();
    for section in elf.sections() {
        let Ok(name) = section.name() else { continue };
        if !PLT_SECTIONS.contains(&name) {
            continue;
        }
        let Ok(bytes) = section.data() else { continue };
        let entsize = section.elf_section_header().sh_entsize(endian);
        out.extend(stubs(name, section.address(), entsize, bytes, &targets));
    }
    out
}

/// Marks, until it is named, the target of an `IRELATIVE` slot (no symbol name starts with a NUL).
const IRELATIVE_MARK: &str = "\0irelative:";

/// The best name of the function symbols at each of `addresses`: the fewest leading underscores (`strnlen`,
/// not `__strnlen`), then a global symbol, then the shortest name.
fn function_names_at<'data, R: ReadRef<'data>>(
    file: &object::File<'data, R>,
    addresses: std::collections::HashSet<u64>,
) -> HashMap<u64, String> {
    let mut best: HashMap<u64, (usize, bool, usize, String)> = HashMap::new();
    for s in file.dynamic_symbols().chain(file.symbols()) {
        if s.kind() != SymbolKind::Text || s.is_undefined() || !addresses.contains(&s.address()) {
            continue;
        }
        let Ok(name) = s.name() else { continue };
        let name = name.split('@').next().unwrap_or(name);
        if name.is_empty() {
            continue;
        }
        let rank = (
            name.len() - name.trim_start_matches('_').len(),
            !s.is_global(),
            name.len(),
            name.to_string(),
        );
        best.entry(s.address())
            .and_modify(|b| {
                if rank < *b {
                    *b = rank.clone();
                }
            })
            .or_insert(rank);
    }
    best.into_iter().map(|(a, r)| (a, r.3)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stubs_of_each_layout() {
        // Bytes as GNU ld lays them out (addresses of a small PIE).
        let targets = Targets {
            slots: HashMap::from([
                (0x4000, "strtod".to_string()),
                (0x4010, "plt_three".to_string()),
                (0x3fc8, "plt_one".to_string()),
            ]),
            lazy: vec![Some("strtod".into()), None, Some("plt_three".into())],
        };
        // The lazy .plt: header, then `jmp *slot(%rip); push $N; jmp .plt`.
        let plt = [
            0xff, 0x35, 0xca, 0x2f, 0, 0, 0xff, 0x25, 0xcc, 0x2f, 0, 0, 0x0f, 0x1f, 0x40,
            0, // header
            0xff, 0x25, 0xca, 0x2f, 0, 0, 0x68, 0, 0, 0, 0, 0xe9, 0xe0, 0xff, 0xff,
            0xff, // → 0x4000
            0xff, 0x25, 0xc2, 0x2f, 0, 0, 0x68, 1, 0, 0, 0, 0xe9, 0xd0, 0xff, 0xff,
            0xff, // → 0x4008: none
            0xff, 0x25, 0xba, 0x2f, 0, 0, 0x68, 2, 0, 0, 0, 0xe9, 0xc0, 0xff, 0xff,
            0xff, // → 0x4010
        ];
        let got = |s: &[Symbol]| -> Vec<(u64, u64, String)> {
            s.iter()
                .map(|s| (s.address, s.size, s.name.clone()))
                .collect()
        };
        assert_eq!(
            got(&stubs(".plt", 0x1020, 16, &plt, &targets)),
            [
                (0x1020, 16, ".plt".to_string()),
                (0x1030, 16, "strtod@plt".to_string()),
                (0x1050, 16, "plt_three@plt".to_string()),
            ]
        );
        // .plt.got without IBT: 8-byte `jmp *slot(%rip); xchg %ax,%ax` entries, even where sh_entsize is 0.
        let plt_got = [0xff, 0x25, 0x62, 0x2f, 0, 0, 0x66, 0x90];
        assert_eq!(
            got(&stubs(".plt.got", 0x1060, 0, &plt_got, &targets)),
            [(0x1060, 8, "plt_one@plt".to_string())]
        );
        // IBT: the .plt entries only push (named by .rela.plt's order), .plt.sec holds the stubs proper.
        let ibt_lazy = [
            0xf3, 0x0f, 0x1e, 0xfa, 0x68, 2, 0, 0, 0, 0xf2, 0xe9, 0xc2, 0xff, 0xff, 0xff, 0x90,
        ];
        assert_eq!(
            got(&stubs(".plt", 0x1050, 16, &ibt_lazy, &targets)),
            [(0x1050, 16, "plt_three@plt".to_string())],
            "not the header: only the first entry of .plt can be"
        );
        let sec = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xf2, 0xff, 0x25, 0x65, 0x2f, 0, 0, 0x0f, 0x1f, 0x44, 0, 0,
        ];
        assert_eq!(
            decode(0x10a0, &sec),
            Some(Stub::Jump(0x10a0 + 11 + 0x2f65)),
            "endbr64 and bnd before the jump"
        );
        let sec_nobnd = [
            0xf3, 0x0f, 0x1e, 0xfa, 0xff, 0x25, 0x66, 0x2f, 0, 0, 0x66, 0x0f, 0x1f, 0x44, 0, 0,
        ];
        assert_eq!(
            got(&stubs(".plt.sec", 0x10a0, 16, &sec_nobnd, &targets)),
            [(0x10a0, 16, "plt_three@plt".to_string())]
        );
        // Truncated or unknown bytes name nothing.
        assert_eq!(decode(0, &[0xff, 0x25, 1]), None);
        assert_eq!(decode(0, &[0x90; 16]), None);
        assert!(stubs(".plt", 0, 16, &[], &targets).is_empty());
    }
}

#[cfg(test)]
mod libc_tests {
    use super::*;

    /// libc's `.plt` holds the stubs of its calls of its own IFUNC functions, whose slots are filled by
    /// `IRELATIVE` relocations: every stub of it is named, by the IFUNC symbol at the relocation's addend.
    #[test]
    fn libc_irelative_stubs_are_named_after_their_ifunc() {
        let maps = super::super::read_maps("self").unwrap();
        let Some(libc) = maps
            .iter()
            .find(|m| m.is_executable() && m.path.contains("/libc.so"))
        else {
            crate::symbols::hostile::skip::skip(
                "this test binary is not linked against a shared libc",
            );
            return;
        };
        let data = std::fs::read(&libc.path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let plt = file.section_by_name(".plt").expect("libc has a .plt");
        let stubs = plt_symbols(&file);
        let in_plt: Vec<&Symbol> = stubs
            .iter()
            .filter(|s| s.address >= plt.address() && s.address < plt.address() + plt.size())
            .collect();
        // Every 16-byte entry of .plt, the header included, has its name.
        assert_eq!(
            in_plt.len() as u64,
            plt.size() / 16,
            "{:?}",
            in_plt.iter().map(|s| &s.name).collect::<Vec<_>>()
        );
        // strnlen is an IFUNC of libc that libc calls itself (its slot is IRELATIVE).
        let strnlen = file
            .dynamic_symbols()
            .find(|s| s.name() == Ok("strnlen"))
            .expect("libc defines strnlen");
        let names: Vec<&str> = in_plt.iter().map(|s| s.name.as_str()).collect();
        assert!(
            names.contains(&"strnlen@plt"),
            "strnlen at {:#x}: {names:?}",
            strnlen.address()
        );
        assert!(!names.iter().any(|n| n.starts_with('\0')), "{names:?}");
    }
}
