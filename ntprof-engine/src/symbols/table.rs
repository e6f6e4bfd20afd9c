//! A symbol table indexed for lookup: entries sorted by address, one per address, found by binary search.
//!
//! A symbol without a size (`_init`, hand-written assembly) names the bytes up to the next symbol, but never past
//! the end of its own section: the bytes after it belong to something else (`.plt` follows `.init`, whose
//! unsized `_init` would otherwise name every PLT stub).
//!
//! Several symbols often share an address: `malloc`, `__libc_malloc` and (in a debug file) `__GI___libc_malloc`
//! are one function. The one a user knows is kept: a sized symbol over an unsized one, an exported name over a
//! local one (a global export first, then a weak one: libc exports `qsort_r` only as weak, and its debug file
//! adds the local `__qsort_r` and `__GI___qsort_r`), then a name that is not one of glibc's internal aliases
//! (`__GI_` and `__EI_` prepended to the function's own name: the debug file has both `____strtod_l_internal`
//! and `__GI_____strtod_l_internal`, local alike, and the alias has fewer leading underscores), then the name
//! with fewer leading underscores, then the longer name (then the alphabetically first, so the choice never
//! depends on the order of the file). perf ranks a local name above a weak export and so shows
//! `__GI___qsort_r`; a user calls it `qsort_r`.

use std::cmp::Ordering;

/// A symbol-table entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Start address (file virtual address for ELF objects, runtime address for the kernel).
    pub address: u64,
    /// Size in bytes (0 when the table does not say).
    pub size: u64,
    /// Name (as the table has it: ELF names are demangled when looked up, not when indexed).
    pub name: String,
}

/// How an ELF symbol is bound, for choosing among aliases at one address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Binding {
    /// `STB_WEAK` (or kallsyms `w`/`W`).
    Weak = 0,
    /// `STB_LOCAL` (or kallsyms `t`).
    Local = 1,
    /// `STB_GLOBAL` (or kallsyms `T`).
    Global = 2,
}

impl Binding {
    /// How well a user knows a name of this binding: the names a library exports (global, then weak: `qsort_r`
    /// is a weak export) come before the local ones only its debug information has (`__GI___qsort_r`).
    fn exported_rank(self) -> u8 {
        match self {
            Binding::Global => 2,
            Binding::Weak => 1,
            Binding::Local => 0,
        }
    }
}

/// A sorted symbol table with a containment lookup.
#[derive(Debug, Default)]
pub struct SymbolTable {
    symbols: Vec<Symbol>,
    /// Per entry: the end of its section, which an unsized entry never reaches past (`u64::MAX`: unknown).
    limits: Vec<u64>,
}

/// A candidate entry: the symbol, its binding, and the end of its section (`u64::MAX` when unknown).
pub type Candidate = (Symbol, Binding, u64);

fn leading_underscores(name: &str) -> usize {
    name.bytes().take_while(|&b| b == b'_').count()
}

/// glibc's internal alias of a function (`__GI_` + its name: calls inside libc that bypass the PLT; `__EI_`
/// in some builds): a name no user writes.
fn internal_alias(name: &str) -> bool {
    name.starts_with("__GI_") || name.starts_with("__EI_")
}

/// `Less` when `a` is the better name for their shared address.
fn better((sa, ba): (&Symbol, Binding), (sb, bb): (&Symbol, Binding)) -> Ordering {
    (sb.size > 0)
        .cmp(&(sa.size > 0))
        .then(bb.exported_rank().cmp(&ba.exported_rank()))
        .then(internal_alias(&sa.name).cmp(&internal_alias(&sb.name)))
        .then(leading_underscores(&sa.name).cmp(&leading_underscores(&sb.name)))
        .then(sb.name.len().cmp(&sa.name.len()))
        .then(sa.name.cmp(&sb.name))
}

impl SymbolTable {
    /// Build from unsorted entries with their bindings: one entry per address, the best name of its aliases.
    pub fn ranked(symbols: Vec<(Symbol, Binding)>) -> SymbolTable {
        Self::ranked_in_sections(symbols.into_iter().map(|(s, b)| (s, b, u64::MAX)).collect())
    }

    /// The same for entries that know the end of their section.
    pub fn ranked_in_sections(mut symbols: Vec<Candidate>) -> SymbolTable {
        // Sorted by address alone (a comparison of integers: a large C++ program has 100,000 names), then the
        // best name chosen within each run of aliases, which compares names only where they share an address.
        symbols.sort_unstable_by_key(|(s, _, _)| s.address);
        let mut kept: Vec<Symbol> = Vec::with_capacity(symbols.len());
        let mut limits = Vec::with_capacity(symbols.len());
        let mut rest = symbols.into_iter().peekable();
        while let Some(mut best) = rest.next() {
            while let Some(next) = rest.next_if(|n| n.0.address == best.0.address) {
                if better((&next.0, next.1), (&best.0, best.1)) == Ordering::Less {
                    best = next;
                }
            }
            limits.push(best.2);
            kept.push(best.0);
        }
        SymbolTable {
            symbols: kept,
            limits,
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.symbols.len()
    }

    /// The index of the symbol that contains `addr`: the last one starting at or below it, if its size covers
    /// `addr` (a symbol without a size extends to the next symbol, within its section).
    pub fn lookup_index(&self, addr: u64) -> Option<usize> {
        let i = self.symbols.partition_point(|s| s.address <= addr);
        let idx = i.checked_sub(1)?;
        let sym = &self.symbols[idx];
        let end = if sym.size > 0 {
            sym.address.saturating_add(sym.size)
        } else {
            let next = self.symbols.get(i).map_or(u64::MAX, |next| next.address);
            next.min(self.limits[idx])
        };
        (addr < end).then_some(idx)
    }

    /// The symbol that contains `addr` (see [`SymbolTable::lookup_index`]).
    pub fn lookup(&self, addr: u64) -> Option<&Symbol> {
        self.lookup_index(addr).map(|i| &self.symbols[i])
    }

    /// The entry at `index`.
    pub fn get(&self, index: usize) -> Option<&Symbol> {
        self.symbols.get(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(address: u64, size: u64, name: &str) -> Symbol {
        Symbol {
            address,
            size,
            name: name.into(),
        }
    }

    #[test]
    fn symbol_table_containment() {
        let t = SymbolTable::ranked(
            [
                sym(0x200, 0, "b"),
                sym(0x100, 0x10, "a"),
                sym(0x300, 0x20, "c"),
            ]
            .into_iter()
            .map(|s| (s, Binding::Global))
            .collect(),
        );
        assert_eq!(t.lookup(0x100).map(|s| s.name.as_str()), Some("a"));
        assert_eq!(t.lookup(0x10f).map(|s| s.name.as_str()), Some("a"));
        assert_eq!(t.lookup(0x110), None, "past a's size");
        assert_eq!(
            t.lookup(0x2ff).map(|s| s.name.as_str()),
            Some("b"),
            "unsized: up to the next"
        );
        assert_eq!(t.lookup(0x320), None);
        assert_eq!(t.lookup(0xff), None);
    }

    #[test]
    fn an_unsized_symbol_stops_at_the_end_of_its_section() {
        // A program's `_init` (unsized, in .init 0x1000..0x1017), then .plt without symbols, then `main`.
        let t = SymbolTable::ranked_in_sections(vec![
            (sym(0x1000, 0, "_init"), Binding::Global, 0x1017),
            (sym(0x1100, 0x40, "main"), Binding::Global, 0x1200),
            (sym(0x1180, 0, "label"), Binding::Local, u64::MAX),
        ]);
        assert_eq!(t.lookup(0x1016).map(|s| s.name.as_str()), Some("_init"));
        assert_eq!(
            t.lookup(0x1017),
            None,
            "the .plt after .init is not _init's"
        );
        assert_eq!(t.lookup(0x1050), None);
        // Without a known section, up to the next symbol as before.
        assert_eq!(t.lookup(0x11ff).map(|s| s.name.as_str()), Some("label"));
    }

    #[test]
    fn aliases_give_the_name_a_user_knows() {
        use Binding::*;
        // libc's malloc with its debug file: a global name, a global internal one, a local internal one.
        let names = |entries: Vec<(Symbol, Binding)>| {
            let mut rev = entries.clone();
            rev.reverse();
            let a = SymbolTable::ranked(entries);
            let b = SymbolTable::ranked(rev);
            let (a, b) = (
                a.lookup(0x1004).unwrap().clone(),
                b.lookup(0x1004).unwrap().clone(),
            );
            assert_eq!(a, b, "the choice does not depend on the order of the table");
            a.name
        };
        assert_eq!(
            names(vec![
                (sym(0x1000, 791, "__GI___libc_malloc"), Local),
                (sym(0x1000, 791, "__libc_malloc"), Global),
                (sym(0x1000, 791, "malloc"), Global),
            ]),
            "malloc"
        );
        assert_eq!(
            names(vec![
                (sym(0x1000, 16, "__GI___strcoll_l"), Local),
                (sym(0x1000, 16, "strcoll"), Global)
            ]),
            "strcoll"
        );
        // libc's qsort_r is exported only as a weak symbol: it still beats the local names of the debug file.
        assert_eq!(
            names(vec![
                (sym(0x1000, 834, "__qsort_r"), Local),
                (sym(0x1000, 834, "__GI___qsort_r"), Local),
                (sym(0x1000, 834, "qsort_r"), Weak)
            ]),
            "qsort_r"
        );
        // Both local (a function libc does not export): the name over its internal alias, although the alias
        // has fewer leading underscores.
        assert_eq!(
            names(vec![
                (sym(0x1000, 5000, "__GI_____strtod_l_internal"), Local),
                (sym(0x1000, 5000, "____strtod_l_internal"), Local)
            ]),
            "____strtod_l_internal"
        );
        // A global export beats a weak one; a sized entry beats an unsized one.
        assert_eq!(
            names(vec![
                (sym(0x1000, 8, "strcoll_l"), Weak),
                (sym(0x1000, 8, "__strcoll_l"), Global)
            ]),
            "__strcoll_l"
        );
        assert_eq!(
            names(vec![
                (sym(0x1000, 0, "label"), Global),
                (sym(0x1000, 8, "__func"), Local)
            ]),
            "__func"
        );
    }
}
