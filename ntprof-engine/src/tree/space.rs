//! Tracking mappings: the modules of a run and each process's model of its executable address space.
//!
//! The kernel reports every executable mapping as it is made (perf's MMAP2 side-band record: the executable and
//! the loader after an exec, each library the loader maps, `dlopen`, anonymous memory made executable for JIT
//! code). A process's model is a map from start address to mapping; a new mapping replaces whatever it overlaps,
//! as the kernel does. A sample's address resolves to its mapping, its module and the address relative to the
//! module (the file offset for a file, the address itself for anonymous memory).

use std::collections::{BTreeMap, HashMap};

/// What a module is, for symbolization.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModuleKind {
    /// A mapped file (ELF executable or shared library): offsets are file offsets.
    File,
    /// A special mapping of the kernel (`[vdso]`, `[vsyscall]`): offsets from its start.
    Special,
    /// Anonymous executable memory of one process (JIT code): offsets are runtime addresses, named from the
    /// process's perf map file when it has one.
    Anon {
        /// The process's pid (the perf map file is `/tmp/perf-PID.map`).
        pid: u32,
    },
    /// JIT code named by time from a process's jitdump file: offsets are placements of its code (see
    /// [`crate::tree::jitdump`]), made when the run ends.
    JitDump {
        /// The process's pid.
        pid: u32,
        /// The dump, in the run's list.
        dump: u32,
    },
    /// The kernel image or a kernel module (symbols from kallsyms, under this name): runtime addresses.
    Kernel(String),
    /// A raw `--range`: offsets are runtime addresses.
    Range,
}

/// One module of the run (merged across processes: a file is one module however many map it).
#[derive(Clone, Debug)]
pub struct Module {
    /// Short name (`libc.so.6`, `[vdso]`, `[anon]`).
    pub name: String,
    /// Path (or `[vdso]`, `//anon`, `[kernel.kallsyms]`, `[range]`).
    pub path: String,
    /// How to symbolize it.
    pub kind: ModuleKind,
    /// The first mapping seen of it (runtime start, end, file offset of the start): where the report places it.
    pub first: (u64, u64, u64),
    /// When it was first mapped, in the sampler's clock (ns); 0 for a module mapped before the run started.
    pub mapped_ns: u64,
    /// Whether `--module`/`--range` selects it (samples of an unselected module count as outside).
    pub wanted: bool,
    /// A mapped file's object as its process maps it, checked to be the mapped file, or why it is not named
    /// (`None` for a module that is not a mapped file).
    pub object: Option<crate::files::Opened>,
}

/// The modules of a run, interned by identity.
#[derive(Default)]
pub struct Modules {
    /// Every module, by index.
    pub list: Vec<Module>,
    index: HashMap<(ModuleKind, String, u64, u64), u32>,
}

impl Modules {
    /// The index of the module `(kind, path, device, inode)`, created with `make` on first sight (two
    /// containers' files at one path are two modules).
    pub fn intern(
        &mut self,
        kind: ModuleKind,
        path: &str,
        (dev, inode): (u64, u64),
        make: impl FnOnce() -> Module,
    ) -> u32 {
        let key = (kind, path.to_string(), dev, inode);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        let i = self.list.len() as u32;
        self.list.push(make());
        self.index.insert(key, i);
        i
    }
}

/// One executable mapping of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Map {
    /// Exclusive end.
    pub end: u64,
    /// File offset of the start (0 for anonymous memory).
    pub pgoff: u64,
    /// The module.
    pub module: u32,
}

/// A process's executable address space.
#[derive(Clone, Debug, Default)]
pub struct Space {
    maps: BTreeMap<u64, Map>,
}

impl Space {
    /// Add the mapping `[start, end)`, replacing (or trimming) what it overlaps.
    pub fn insert(&mut self, start: u64, map: Map) {
        let end = map.end;
        if end <= start {
            return;
        }
        // A mapping starting below `start` that reaches into it: keep its head, and its tail past `end`.
        if let Some((&s, &m)) = self.maps.range(..start).next_back()
            && m.end > start
        {
            self.maps.insert(s, Map { end: start, ..m });
            if m.end > end {
                let pgoff = m.pgoff.wrapping_add(end - s);
                self.maps.insert(end, Map { pgoff, ..m });
            }
        }
        // Mappings starting inside `[start, end)`: removed, their tail past `end` kept.
        let inside: Vec<u64> = self.maps.range(start..end).map(|(&s, _)| s).collect();
        for s in inside {
            if let Some(m) = self.maps.remove(&s)
                && m.end > end
            {
                let pgoff = m.pgoff.wrapping_add(end - s);
                self.maps.insert(end, Map { pgoff, ..m });
            }
        }
        self.maps.insert(start, map);
    }

    /// The mapping holding `addr`: its start and itself.
    pub fn find(&self, addr: u64) -> Option<(u64, Map)> {
        let (&start, &map) = self.maps.range(..=addr).next_back()?;
        (addr < map.end).then_some((start, map))
    }

    /// Forget every mapping (an exec replaced the image).
    pub fn clear(&mut self) {
        self.maps.clear();
    }

    /// Every mapping, by start address.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Map)> {
        self.maps.iter().map(|(&s, m)| (s, m))
    }

    /// Number of mappings.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.maps.len()
    }
}

/// The short name of a module path.
pub fn module_name(path: &str) -> String {
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// True for the file name of an anonymous mapping as the kernel reports it (`//anon`, `[anon:NAME]`, a memfd,
/// `[heap]`, `[stack]`, or nothing): memory without a file to read symbols from.
pub fn is_anonymous(path: &str) -> bool {
    path.is_empty()
        || path == "//anon"
        || path.starts_with("[anon")
        || path.starts_with("/memfd:")
        || path == "[heap]"
        || path.starts_with("[stack")
        || path.starts_with("/dev/zero")
        || path.starts_with("anon_inode:")
}

/// One executable line of `/proc/PID/maps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcMap {
    /// First address.
    pub start: u64,
    /// Exclusive end.
    pub end: u64,
    /// File offset of `start`.
    pub pgoff: u64,
    /// Inode of the file (0 for anonymous memory).
    pub inode: u64,
    /// Device of the file, as `stat` gives it.
    pub dev: u64,
    /// The file (empty for anonymous memory).
    pub path: String,
}

/// The executable mappings of process `pid` as `/proc/PID/maps` lists them now (the mappings made before the
/// kernel's records could report them: the image of a process stopped after its exec, an attached process).
///
/// A process whose main thread ended (`pthread_exit`) while others run has an empty `/proc/PID/maps` (the
/// kernel reads it through the main thread, which has no address space left): the maps are then read through
/// a thread that still runs, `/proc/PID/task/TID/maps`.
pub fn read_executable_maps(pid: u32) -> std::io::Result<Vec<ProcMap>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
    let maps: Vec<ProcMap> = text.lines().filter_map(parse_maps_line).collect();
    if !maps.is_empty() {
        return Ok(maps);
    }
    for tid in super::threads::live_threads(pid) {
        if tid == pid {
            continue;
        }
        if let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/maps")) {
            let maps: Vec<ProcMap> = text.lines().filter_map(parse_maps_line).collect();
            if !maps.is_empty() {
                return Ok(maps);
            }
        }
    }
    Ok(maps)
}

/// One line of `/proc/PID/maps` if it is executable: `start-end perms offset dev inode [path]`.
fn parse_maps_line(line: &str) -> Option<ProcMap> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    let perms = fields.next()?;
    if perms.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let pgoff = u64::from_str_radix(fields.next()?, 16).ok()?;
    let (major, minor) = fields.next()?.split_once(':')?;
    let dev = crate::files::device(
        u32::from_str_radix(major, 16).ok()?,
        u32::from_str_radix(minor, 16).ok()?,
    );
    let inode = fields.next()?.parse().ok()?;
    let path = fields.next().unwrap_or("").trim_start().to_string();
    Some(ProcMap {
        dev,
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        pgoff,
        inode,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(end: u64, pgoff: u64, module: u32) -> Map {
        Map { end, pgoff, module }
    }

    #[test]
    fn a_new_mapping_replaces_what_it_overlaps() {
        let mut s = Space::default();
        s.insert(0x1000, map(0x5000, 0, 1));
        s.insert(0x6000, map(0x7000, 0, 2));
        // Into the middle of the first: head and tail survive, the tail's file offset moves along.
        s.insert(0x2000, map(0x3000, 0x100, 3));
        assert_eq!(s.find(0x1fff), Some((0x1000, map(0x2000, 0, 1))));
        assert_eq!(s.find(0x2000), Some((0x2000, map(0x3000, 0x100, 3))));
        assert_eq!(s.find(0x3000), Some((0x3000, map(0x5000, 0x2000, 1))));
        assert_eq!(s.find(0x5000), None);
        // Over the second entirely.
        s.insert(0x5800, map(0x8000, 0, 4));
        assert_eq!(s.find(0x6800).map(|(_, m)| m.module), Some(4));
        assert_eq!(s.len(), 4);
        s.clear();
        assert_eq!(s.find(0x1000), None);
    }

    #[test]
    fn maps_lines_and_anonymous_names() {
        let l = "7f12a000-7f12c000 r-xp 00002000 08:01 1234   /usr/lib/libx.so (deleted)";
        let m = parse_maps_line(l).unwrap();
        assert_eq!(
            (m.start, m.end, m.pgoff, m.inode),
            (0x7f12a000, 0x7f12c000, 0x2000, 1234)
        );
        assert_eq!(m.dev, crate::files::device(8, 1));
        assert_eq!(module_name(&m.path), "libx.so");
        assert!(parse_maps_line("1000-2000 rw-p 00000000 00:00 0").is_none());
        let anon = parse_maps_line("1000-2000 rwxp 00000000 00:00 0").unwrap();
        assert!(
            is_anonymous(&anon.path)
                && is_anonymous("//anon")
                && is_anonymous("/memfd:jit (deleted)")
        );
        assert!(!is_anonymous("/usr/bin/node") && !is_anonymous("[vdso]"));
    }
}
