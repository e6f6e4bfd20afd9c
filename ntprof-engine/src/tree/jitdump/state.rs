//! The run's JIT state: the dump files the processes mapped, the samples logged for them, their resolution when
//! the run ends, the perf maps of the JIT code left, and what the report says of each.

use std::collections::{BTreeSet, HashMap};

use super::format::{JitDump, is_dump_path};
use super::replay::{Placement, Resolver};
use crate::files::{self, Owners};
use crate::report::JitReport;
use crate::tree::hash::FastMap;
use crate::tree::jit::{self, PerfMap};
use crate::tree::mapped::{Opened, Place};
use crate::tree::space::{Module, ModuleKind};
use crate::tree::{Loc, Tracker};

/// A location in a dump's module: `placement << SHIFT | offset in the code`.
const SHIFT: u32 = 32;
/// The offset part of such a location.
const OFFSET_MASK: u64 = (1 << SHIFT) - 1;

/// A sample whose stack touches anonymous executable memory of a process with a dump.
#[derive(Clone, Copy, Debug)]
struct Logged {
    time: u64,
    /// The exact sampled address (the stack's leaf may be rounded to `--bucket`).
    ip: u64,
    stack: u32,
    image: u32,
    dump: u32,
    source: u8,
}

/// One dump file a process mapped.
#[derive(Debug, Default)]
pub struct Dump {
    /// The process's pid.
    pub pid: u32,
    /// The file, as the kernel reported its mapping.
    pub path: String,
    /// When it was mapped (sampler clock).
    mapped_ns: u64,
    /// Whose file it may be (learned when it was mapped, while the process ran).
    owners: Owners,
    /// The file mapped, held since (`None`: read by path).
    object: Option<Opened>,
    /// The file, read at the end of the run.
    parsed: Option<JitDump>,
    /// Where its code was, over the run (location offsets index it).
    placements: Vec<Placement>,
    /// The module of the locations it named.
    module: Option<u32>,
    report: Option<JitReport>,
}

/// The JIT state of a run.
#[derive(Debug, Default)]
pub struct JitState {
    dumps: Vec<Dump>,
    /// Process image → its dump.
    images: FastMap<u32, u32>,
    log: Vec<Logged>,
    /// Per stack id: 0 not looked at yet, 1 a frame lies in anonymous memory, 2 none does.
    anon_stack: Vec<u8>,
    /// The perf maps of the processes whose anonymous memory has samples left, read at the end of the run.
    perf_maps: HashMap<u32, Option<PerfMap>>,
    /// Where each pid finds its files (its perf map's root and name), learned while it ran.
    pub(crate) places: HashMap<u32, Place>,
    /// What the report says of each file that named JIT code.
    pub reports: Vec<JitReport>,
}

/// What a dump says of one location of its module.
#[derive(Debug, PartialEq, Eq)]
pub struct JitFrame<'a> {
    /// Runtime address.
    pub address: u64,
    /// The code's name.
    pub name: &'a str,
    /// The code's first address and size.
    pub start: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The source line of the address, when the dump gave the code's lines.
    pub line: Option<(&'a str, u32)>,
    /// The code's first line.
    pub first_line: Option<(&'a str, u32)>,
}

impl JitState {
    /// A new window: the perf maps are read again when the window's report is made (a runtime appends to
    /// them as it compiles), and the reports are the window's.
    pub fn start_window(&mut self) {
        self.perf_maps.clear();
        self.reports.clear();
    }

    /// The perf map of `pid` read at the end of the run: `None` when it was not looked for.
    pub fn perf_map(&self, pid: u32) -> Option<Option<&PerfMap>> {
        self.perf_maps.get(&pid).map(Option::as_ref)
    }

    /// The dump file that named some JIT code of `pid`.
    pub fn dump_path(&self, pid: u32) -> Option<&str> {
        self.dumps
            .iter()
            .find(|d| d.pid == pid && d.module.is_some())
            .map(|d| d.path.as_str())
    }

    /// The path of dump `dump`.
    pub fn path(&self, dump: u32) -> Option<&str> {
        self.dumps.get(dump as usize).map(|d| d.path.as_str())
    }

    /// The code that location `offset` of dump `dump`'s module stands for.
    pub fn locate(&self, dump: u32, offset: u64) -> Option<JitFrame<'_>> {
        let d = self.dumps.get(dump as usize)?;
        let parsed = d.parsed.as_ref()?;
        let p = d.placements.get((offset >> SHIFT) as usize)?;
        let delta = offset & OFFSET_MASK;
        let lines = |at| p.lines.and_then(|l| parsed.line(l, p.loaded_at, at));
        Some(JitFrame {
            address: p.start.wrapping_add(delta),
            name: parsed.names.get(p.name as usize)?.as_str(),
            start: p.start,
            size: p.size,
            line: lines(delta),
            first_line: lines(0),
        })
    }

    /// The report's notes on the JIT code: how each dump named it, where a perf map's names may be mixed.
    pub fn notes(reports: &[JitReport]) -> Vec<String> {
        let mut notes = Vec::new();
        for r in reports {
            if r.kind == "jitdump" {
                let mut n = format!(
                    "JIT code of pid {} named by time from {}: {} code loads ({} into memory that held earlier \
                     code); {} of the {} samples in it named by the code at their address at their moment",
                    r.pid, r.path, r.records, r.reused, r.named_by_time, r.samples
                );
                let rest = r.samples - r.named_by_time;
                if rest > 0 {
                    n += &format!(
                        "; {rest} in memory no load covered at their time are named from the perf map, if any, \
                         or [unknown]"
                    );
                }
                if let Some(p) = &r.problem {
                    n += &format!("; the file: {p}");
                }
                notes.push(n);
            } else if let Some(p) = &r.problem {
                notes.push(format!(
                    "the perf map {} of pid {} is not used to name its JIT code: {p}",
                    r.path, r.pid
                ));
            } else if r.reused > 0 {
                notes.push(format!(
                    "names may be mixed in the JIT code of pid {}: {} of the {} lines of {} name code over \
                     earlier lines' code (the JIT reused the memory), and {} of the {} samples in it fell where \
                     lines overlap; each is named by the latest line whatever its time (a jitdump, as \
                     'node --perf-prof' and the JVM's libperf-jvmti.so agent write, names code by time)",
                    r.pid, r.reused, r.records, r.path, r.mixed, r.samples
                ));
            }
        }
        notes
    }
}

/// Read the dump at `path`: a regular file owned as `owners` allow, at most [`files::JITDUMP_CAP`] bytes of
/// it, record by record.
pub(super) fn read_dump(path: &str, owners: &Owners) -> Result<JitDump, String> {
    let (file, len) = files::open(std::path::Path::new(path), owners)?;
    parse_dump(file, len)
}

/// The dump a process mapped: the very file (checked when it was mapped), owned as `owners` allow.
fn read_mapped_dump(object: &Opened, owners: &Owners) -> Result<JitDump, String> {
    let object = object.as_ref().map_err(Clone::clone)?;
    let (file, len) = files::checked(object.reopen()?, owners)?;
    parse_dump(file, len)
}

fn parse_dump(file: std::fs::File, len: u64) -> Result<JitDump, String> {
    let mut dump = JitDump::read(
        &mut std::io::BufReader::new(file),
        len.min(files::JITDUMP_CAP),
    )?;
    if len > files::JITDUMP_CAP {
        dump.capped = Some(len);
    }
    Ok(dump)
}

impl Tracker {
    /// Process `p` (pid `pid`) mapped `path` at `time`: a jitdump file names its current image's JIT code.
    pub(in crate::tree) fn jit_mapped(
        &mut self,
        p: u32,
        path: &str,
        time: u64,
        object: Option<&Opened>,
    ) {
        let pid = self.processes.list[p as usize].pid;
        if let Some(place) = self.places.get(&p) {
            self.jit.places.insert(pid, place.clone());
        }
        if !is_dump_path(path) {
            return;
        }
        let image = self.processes.image(p);
        if self.jit.images.contains_key(&image) {
            return;
        }
        self.jit.images.insert(image, self.jit.dumps.len() as u32);
        self.jit.dumps.push(Dump {
            pid,
            path: path.to_string(),
            mapped_ns: time,
            owners: Owners::of_process(pid),
            object: object.cloned(),
            ..Dump::default()
        });
    }

    /// A sample of `image` at `stack` was counted: logged with its time when the image has a dump and the
    /// stack touches anonymous memory. No allocation but the log's growth.
    pub(in crate::tree) fn jit_sample(&mut self, at: (u8, u32, u32), time: u64, ip: u64) {
        let (source, image, stack) = at;
        if self.jit.images.is_empty() {
            return;
        }
        let Some(&dump) = self.jit.images.get(&image) else {
            return;
        };
        let s = stack as usize;
        if self.jit.anon_stack.len() <= s {
            self.jit.anon_stack.resize(s + 1, 0);
        }
        if self.jit.anon_stack[s] == 0 {
            let anon = self.stacks.frames(stack).iter().any(|l| {
                matches!(
                    self.modules.list[l.module as usize].kind,
                    ModuleKind::Anon { .. }
                )
            });
            self.jit.anon_stack[s] = if anon { 1 } else { 2 };
        }
        if self.jit.anon_stack[s] == 1 {
            self.jit.log.push(Logged {
                time,
                ip,
                stack,
                image,
                dump,
                source,
            });
        }
    }

    /// At the end of the run: read the dumps and move each logged sample's JIT frames to the code that was
    /// there at its time; read the perf maps of the JIT code left; fill [`JitState::reports`].
    pub fn resolve_jit(&mut self) {
        let mut log = std::mem::take(&mut self.jit.log);
        log.sort_by_key(|l| (l.dump, l.time));
        for group in log.chunk_by(|a, b| a.dump == b.dump) {
            self.resolve_dump(group[0].dump, group);
        }
        self.jit.anon_stack = Vec::new();
        self.read_perf_maps();
    }

    fn resolve_dump(&mut self, d: u32, entries: &[Logged]) {
        let path = self.jit.dumps[d as usize].path.clone();
        let pid = self.jit.dumps[d as usize].pid;
        let mut report = JitReport {
            pid,
            kind: "jitdump".into(),
            path: path.clone(),
            records: 0,
            reused: 0,
            samples: 0,
            named_by_time: 0,
            mixed: 0,
            problem: None,
        };
        let dump = &self.jit.dumps[d as usize];
        let parsed = match &dump.object {
            Some(object) => read_mapped_dump(object, &dump.owners),
            None => read_dump(&path, &dump.owners),
        };
        let parsed = match parsed {
            Ok(p) if p.arch_timestamps => Err(format!(
                "its times are the processor's time stamp counter (JITDUMP_FLAGS_ARCH_TIMESTAMP), which cannot \
                 be compared with the samples' CLOCK_MONOTONIC times: not used ({} code loads)",
                p.loads
            )),
            other => other,
        };
        let parsed = match parsed {
            Ok(p) => p,
            Err(problem) => {
                report.samples = self.anon_leaves(entries);
                report.problem = Some(problem);
                self.jit.dumps[d as usize].report = Some(report);
                return;
            }
        };
        report.records = parsed.loads;
        report.problem = parsed.problem();
        let kind = ModuleKind::JitDump { pid, dump: d };
        let mapped_ns = self.jit.dumps[d as usize].mapped_ns;
        let module = self
            .modules
            .intern(kind.clone(), &path, (0, u64::from(d)), || Module {
                name: jit::jit_module_name(pid),
                path: path.clone(),
                kind,
                first: (0, 0, 0),
                mapped_ns,
                wanted: true,
                object: None,
            });
        let mut resolver = Resolver::new(&parsed);
        let mut frames: Vec<Loc> = Vec::new();
        for e in entries {
            resolver.advance(e.time);
            frames.clear();
            frames.extend_from_slice(self.stacks.frames(e.stack));
            let mut changed = false;
            for (i, loc) in frames.iter_mut().enumerate() {
                if !matches!(
                    self.modules.list[loc.module as usize].kind,
                    ModuleKind::Anon { .. }
                ) {
                    continue;
                }
                report.samples += u64::from(i == 0);
                // The leaf's offset may be rounded down to --bucket: the placement comes from the exact address.
                let addr = if i == 0 { e.ip } else { loc.offset };
                let Some(id) = resolver.lookup(addr) else {
                    continue;
                };
                let p = resolver.placements[id as usize];
                let delta = (loc.offset.max(p.start) - p.start).min(OFFSET_MASK);
                *loc = Loc {
                    module,
                    offset: (u64::from(id) << SHIFT) | delta,
                };
                changed = true;
                report.named_by_time += u64::from(i == 0);
            }
            if changed {
                let truncated = self.stacks.truncated(e.stack);
                let new = self.stacks.intern_frames(&frames, truncated);
                let counts = &mut self.sources[e.source as usize].counts;
                if let Some(n) = counts.get_mut(&(e.image, e.stack)) {
                    *n -= 1;
                    if *n == 0 {
                        counts.remove(&(e.image, e.stack));
                    }
                    *counts.entry((e.image, new)).or_insert(0) += 1;
                }
            }
        }
        resolver.advance(u64::MAX);
        report.reused = resolver.reused;
        let placements = std::mem::take(&mut resolver.placements);
        let start = placements.iter().map(|p| p.start).min().unwrap_or(0);
        let end = placements
            .iter()
            .map(|p| p.start.saturating_add(p.size))
            .max()
            .unwrap_or(0);
        self.modules.list[module as usize].first = (start, end, 0);
        let dump = &mut self.jit.dumps[d as usize];
        dump.placements = placements;
        dump.parsed = Some(parsed);
        dump.module = Some(module);
        dump.report = Some(report);
    }

    /// How many of `entries` were sampled in anonymous memory.
    fn anon_leaves(&self, entries: &[Logged]) -> u64 {
        entries
            .iter()
            .filter(|e| {
                self.stacks.frames(e.stack).first().is_some_and(|l| {
                    matches!(
                        self.modules.list[l.module as usize].kind,
                        ModuleKind::Anon { .. }
                    )
                })
            })
            .count() as u64
    }

    /// Read the perf maps of the processes whose anonymous memory still has samples (or callers), count the
    /// samples where their lines overlap, and gather the reports.
    fn read_perf_maps(&mut self) {
        let pid_of = |l: &Loc| match self.modules.list[l.module as usize].kind {
            ModuleKind::Anon { pid } => Some(pid),
            _ => None,
        };
        let mut pids = BTreeSet::new();
        let mut problems = Vec::new();
        for s in &self.sources {
            for &(_, stack) in s.counts.keys() {
                pids.extend(self.stacks.frames(stack).iter().filter_map(pid_of));
            }
        }
        for &pid in &pids {
            if self.jit.perf_maps.contains_key(&pid) {
                continue;
            }
            let place = self.jit.places.get(&pid).cloned().unwrap_or_default();
            let map = match PerfMap::load(pid, &place) {
                Some(Ok(map)) => Some(map),
                Some(Err(problem)) => {
                    problems.push((pid, problem));
                    None
                }
                None => None,
            };
            self.jit.perf_maps.insert(pid, map);
        }
        // Samples in each perf map's code, and those where its lines overlap.
        let mut sums: HashMap<u32, (u64, u64)> = HashMap::new();
        for s in &self.sources {
            for (&(_, stack), &n) in &s.counts {
                let Some(leaf) = self.stacks.frames(stack).first() else {
                    continue;
                };
                let Some(pid) = pid_of(leaf) else { continue };
                if let Some(Some(map)) = self.jit.perf_maps.get(&pid) {
                    let sum = sums.entry(pid).or_default();
                    sum.0 += n;
                    sum.1 += if map.mixed(leaf.offset) { n } else { 0 };
                }
            }
        }
        let mut reports: Vec<JitReport> = self
            .jit
            .dumps
            .iter_mut()
            .filter_map(|d| d.report.take())
            .collect();
        for (pid, (samples, mixed)) in sums {
            if let Some(Some(map)) = self.jit.perf_maps.get(&pid) {
                reports.push(JitReport {
                    pid,
                    kind: "perf map".into(),
                    path: jit::place_path(
                        pid,
                        &self.jit.places.get(&pid).cloned().unwrap_or_default(),
                    ),
                    records: map.lines(),
                    reused: map.reused,
                    samples,
                    named_by_time: 0,
                    mixed,
                    problem: None,
                });
            }
        }
        for (pid, problem) in problems {
            reports.push(JitReport {
                pid,
                kind: "perf map".into(),
                path: jit::place_path(pid, &self.jit.places.get(&pid).cloned().unwrap_or_default()),
                records: 0,
                reused: 0,
                samples: 0,
                named_by_time: 0,
                mixed: 0,
                problem: Some(problem),
            });
        }
        reports.sort_by(|a, b| (a.pid, &a.kind).cmp(&(b.pid, &b.kind)));
        self.jit.reports = reports;
    }
}
