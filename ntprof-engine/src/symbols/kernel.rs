//! The kernel's symbols: `/proc/kallsyms` (text symbols of the kernel image and of its loaded modules) and the
//! module list of `/proc/modules`. Read once per report and indexed per module.

use std::collections::HashMap;

use super::table::{Binding, Symbol, SymbolTable};

/// The kernel's text symbols from `/proc/kallsyms`, and the kernel modules of `/proc/modules`.
#[derive(Debug, Default)]
pub struct Kallsyms {
    /// Symbols per module (`[kernel]` for the kernel image).
    pub modules: HashMap<String, SymbolTable>,
    /// The kernel image's text `[_stext, _etext)`.
    pub text: Option<(u64, u64)>,
    /// Loaded modules: name, start, size.
    pub loaded: Vec<(String, u64, u64)>,
}

/// The name the kernel image has in reports.
pub const KERNEL_MODULE: &str = "[kernel]";

impl Kallsyms {
    /// Parse `/proc/kallsyms` and `/proc/modules` (the addresses are zero unless the reader is privileged).
    pub fn load() -> Result<Kallsyms, String> {
        let syms = std::fs::read_to_string("/proc/kallsyms")
            .map_err(|e| format!("cannot read /proc/kallsyms: {e}"))?;
        let modules = std::fs::read_to_string("/proc/modules").unwrap_or_default();
        Ok(Kallsyms::parse(&syms, &modules))
    }

    /// Parse the texts of `/proc/kallsyms` and `/proc/modules`.
    pub fn parse(kallsyms: &str, modules: &str) -> Kallsyms {
        let mut per: HashMap<String, Vec<(Symbol, Binding)>> = HashMap::new();
        let (mut stext, mut etext) = (None, None);
        for line in kallsyms.lines() {
            let mut f = line.split_whitespace();
            let (Some(addr), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let Ok(addr) = u64::from_str_radix(addr, 16) else {
                continue;
            };
            if addr == 0 {
                continue;
            }
            match name {
                "_stext" => stext = Some(addr),
                "_etext" => etext = Some(addr),
                _ => {}
            }
            // At one address a global (upper case) name wins over a local one, a local over a weak one.
            let rank = match kind {
                "T" => Binding::Global,
                "W" | "w" => Binding::Weak,
                "t" => Binding::Local,
                _ => continue,
            };
            let module = f
                .next()
                .map(|m| m.trim_start_matches('[').trim_end_matches(']').to_string())
                .unwrap_or_else(|| KERNEL_MODULE.to_string());
            per.entry(module).or_default().push((
                Symbol {
                    address: addr,
                    size: 0,
                    name: name.to_string(),
                },
                rank,
            ));
        }
        let loaded = modules
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                let size: u64 = f.get(1)?.parse().ok()?;
                let addr = parse_hex(f.get(5)?)?;
                (addr != 0 && size > 0).then(|| (f[0].to_string(), addr, size))
            })
            .collect();
        Kallsyms {
            modules: per
                .into_iter()
                .map(|(k, v)| (k, SymbolTable::ranked(v)))
                .collect(),
            text: stext.zip(etext).filter(|(a, b)| a < b),
            loaded,
        }
    }

    /// The function of module `module` containing runtime address `addr`.
    pub fn lookup(&self, module: &str, addr: u64) -> Option<&Symbol> {
        self.modules.get(module)?.lookup(addr)
    }
}

fn parse_hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kallsyms_text() {
        let k = Kallsyms::parse(
            "ffffffff81000000 T _stext\nffffffff81000100 T do_syscall_64\nffffffff81000200 t helper\n\
             ffffffff82000000 T _etext\nffffffff82000010 D some_data\nffffffffc0000000 t ext4_read\t[ext4]\n",
            "ext4 1000 1 - Live 0xffffffffc0000000\n",
        );
        assert_eq!(k.text, Some((0xffff_ffff_8100_0000, 0xffff_ffff_8200_0000)));
        assert_eq!(
            k.lookup(KERNEL_MODULE, 0xffff_ffff_8100_0150).unwrap().name,
            "do_syscall_64"
        );
        assert_eq!(
            k.lookup("ext4", 0xffff_ffff_c000_0004).unwrap().name,
            "ext4_read"
        );
        assert_eq!(
            k.loaded,
            vec![("ext4".to_string(), 0xffff_ffff_c000_0000, 1000)]
        );
    }

    #[test]
    fn kallsyms_prefers_the_global_name() {
        let k = Kallsyms::parse(
            "ffffffff81000100 t __pfx_x\nffffffff81000100 t __local_alias\nffffffff81000100 T entry_point\n",
            "",
        );
        assert_eq!(
            k.lookup(KERNEL_MODULE, 0xffff_ffff_8100_0104).unwrap().name,
            "entry_point"
        );
    }
}
