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
//! Every name covers exactly its stub's bytes (the section's entry size), so nothing else is ever named by it.
//! The dynamic symbols and relocations survive `strip`, so a stripped program's stubs are named too. Objects of
//! other architectures get no stub names (their stubs are then named by `.eh_frame` bounds, `module+0xSTART`).

use std::collections::HashMap;

use object::read::elf::SectionHeader;
use object::{Architecture, Object, ObjectSection, ReadRef};

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
            let name = symbol_name(r.r_sym(endian, false));
            if kind == object::elf::R_X86_64_JUMP_SLOT || kind == object::elf::R_X86_64_GLOB_DAT {
                if let Some(name) = &name {
                    targets.slots.insert(r.r_offset.get(endian), name.clone());
                }
            }
            if is_rela_plt {
                targets.lazy.push(name);
            }
        }
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
