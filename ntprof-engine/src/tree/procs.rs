//! Following the tree: the processes of a run, from the kernel's fork, comm (exec) and exit records.
//!
//! A process is one pid from its creation (or from the start, for the profiled command and attached processes)
//! to its exit; a pid the kernel reuses later is another process. Its *images* are what it ran: the command it
//! inherited at fork, then each program it exec'd (`sh` → `gzip`). Samples are attributed to an image, so that
//! the report can merge them by command as `perf report --sort comm` does.
//!
//! A process ends with its last thread, not with its main thread: the kernel reports the exit of each thread
//! (`pid == tid` is the main thread's), and a main thread that ends with `pthread_exit` — common in servers —
//! leaves the others running in the same address space. So the model keeps each process's live threads (those
//! it had when first seen, then each thread's creation and exit) and ends the process when none is left.

use super::hash::{FastMap, FastSet};
use super::space::Space;
pub use super::threads::live_threads;
#[cfg(test)]
use super::threads::parse_state;

/// How many exited processes keep their address space (see [`Processes::exit`]).
pub const KEPT_SPACES: usize = 64;

/// One process of the run.
#[derive(Clone, Debug)]
pub struct Process {
    /// Its pid.
    pub pid: u32,
    /// Its parent's pid (0 when unknown).
    pub ppid: u32,
    /// The index of its parent among the run's processes, when the parent is one of them.
    pub parent: Option<u32>,
    /// Its images, in order: the last is the current one.
    pub images: Vec<u32>,
    /// Its command line (`/proc/PID/cmdline`), when it could still be read after its last exec (a forked
    /// process that has not exec'd has its parent's).
    pub cmdline: Option<Vec<String>>,
    /// When it was created (or first seen), sampler clock, ns.
    pub start_ns: u64,
    /// When it exited, if it did during the run.
    pub exit_ns: Option<u64>,
    /// Its executable address space (dropped a while after its exit).
    pub space: Space,
    /// Its live threads (tids); the process exits with the last of them.
    pub threads: FastSet<u32>,
    /// Its cgroup v2 path, read while it ran ([`cgroup_of`](super::cgroup::cgroup_of)): when it was first seen
    /// and at each exec; a forked process starts with its parent's (where the kernel creates it).
    pub cgroup: Option<String>,
}

/// What a process ran between two execs.
#[derive(Clone, Debug)]
pub struct Image {
    /// The process (index).
    pub process: u32,
    /// The command (the kernel's comm: the program's file name, at most 15 bytes).
    pub comm: String,
}

/// The processes and images of a run.
#[derive(Default)]
pub struct Processes {
    /// Every process, by index.
    pub list: Vec<Process>,
    /// Every image, by index.
    pub images: Vec<Image>,
    by_pid: FastMap<u32, u32>,
    /// The last processes that exited, oldest first: their address spaces are kept a while, for the off-CPU
    /// intervals of their threads that end after the exit record (a thread woken by its process's exit).
    recent_exits: std::collections::VecDeque<u32>,
    /// Processes created that were not followed (`--no-inherit`): their pids.
    pub not_followed: Vec<u32>,
}

impl Processes {
    /// The process with this pid now, if known.
    pub fn get(&self, pid: u32) -> Option<u32> {
        self.by_pid.get(&pid).copied()
    }

    /// A new process `pid` with command `comm`, child of `ppid`, with the address space `space`.
    pub fn add(&mut self, pid: u32, ppid: u32, comm: &str, time: u64, space: Space) -> u32 {
        let index = self.list.len() as u32;
        let image = self.images.len() as u32;
        self.images.push(Image {
            process: index,
            comm: comm.to_string(),
        });
        let parent = self.by_pid.get(&ppid).copied();
        self.list.push(Process {
            pid,
            ppid,
            parent,
            images: vec![image],
            cmdline: None,
            start_ns: time,
            exit_ns: None,
            space,
            threads: std::iter::once(pid).collect(),
            cgroup: None,
        });
        self.by_pid.insert(pid, index);
        index
    }

    /// `pid` forked `child` (a new process, not a thread): it starts with a copy of its parent's address space,
    /// command and command line (its arguments are its parent's until it execs).
    pub fn fork(&mut self, parent_pid: u32, child: u32, time: u64) -> u32 {
        let (comm, space, cmdline, cgroup) = match self.get(parent_pid) {
            Some(p) => (
                self.comm(p).to_string(),
                self.list[p as usize].space.clone(),
                self.list[p as usize].cmdline.clone(),
                self.list[p as usize].cgroup.clone(),
            ),
            None => (String::new(), Space::default(), None, None),
        };
        let c = self.add(child, parent_pid, &comm, time, space);
        self.list[c as usize].cmdline = cmdline;
        // Created in its parent's cgroup; read again at its exec, while it runs.
        self.list[c as usize].cgroup = cgroup;
        c
    }

    /// Process `p` appeared without the kernel's record of its creation (a child forked while an attach was
    /// opening its parent's events) and exited before its parent could be read from `/proc`: its exit record
    /// names the parent `ppid`. A process whose parent is known already keeps it. Until its first exec it ran
    /// its parent's program, whose name replaces the placeholder it was listed under.
    pub fn adopt(&mut self, p: u32, ppid: u32) {
        let process = &self.list[p as usize];
        if process.ppid != 0 || ppid == 0 || ppid == process.pid {
            return;
        }
        let parent = self.by_pid.get(&ppid).copied();
        let first = process.images[0] as usize;
        if self.images[first].comm == unknown_comm(process.pid)
            && let Some(q) = parent
        {
            let named = self.images[self.image(q) as usize].comm.clone();
            self.images[first].comm = named;
        }
        let process = &mut self.list[p as usize];
        process.ppid = ppid;
        process.parent = parent;
    }

    /// The command of process `p` now.
    pub fn comm(&self, p: u32) -> &str {
        let process = &self.list[p as usize];
        process
            .images
            .last()
            .map_or("", |&i| self.images[i as usize].comm.as_str())
    }

    /// The current image of process `p`.
    pub fn image(&self, p: u32) -> u32 {
        *self.list[p as usize]
            .images
            .last()
            .expect("a process has an image from its creation")
    }

    /// Thread `tid` of process `p` started (a thread created by a thread of the process, or one found running
    /// when the process was first seen).
    pub fn thread_started(&mut self, p: u32, tid: u32) {
        self.list[p as usize].threads.insert(tid);
    }

    /// Thread `tid` of process `p` exited; true when it was the last one: the process has exited.
    pub fn thread_exited(&mut self, p: u32, tid: u32) -> bool {
        let threads = &mut self.list[p as usize].threads;
        threads.remove(&tid);
        threads.is_empty()
    }

    /// Process `p` exec'd `comm`: a new image, an empty address space (the new image's mappings follow), and
    /// one thread left, which has the process's id (an exec ends every other thread, and a thread other than
    /// the main one that execs takes the process's id).
    pub fn exec(&mut self, p: u32, comm: &str) {
        let image = self.images.len() as u32;
        self.images.push(Image {
            process: p,
            comm: comm.to_string(),
        });
        let process = &mut self.list[p as usize];
        process.images.push(image);
        process.space.clear();
        process.cmdline = None;
        process.threads.clear();
        process.threads.insert(process.pid);
    }

    /// Process `p` renamed itself (`prctl(PR_SET_NAME)`): the current image takes the new name.
    pub fn rename(&mut self, p: u32, comm: &str) {
        let image = self.image(p);
        self.images[image as usize].comm = comm.to_string();
    }

    /// Process `p` exited at `time`: its address space is forgotten, its pid free for reuse.
    /// Returns the process whose address space is dropped now, if one is (the oldest of the last
    /// [`KEPT_SPACES`] exits).
    pub fn exit(&mut self, p: u32, time: u64) -> Option<u32> {
        let process = &mut self.list[p as usize];
        process.exit_ns = Some(time);
        if self.by_pid.get(&process.pid) == Some(&p) {
            self.by_pid.remove(&process.pid);
        }
        self.recent_exits.push_back(p);
        if self.recent_exits.len() <= KEPT_SPACES {
            return None;
        }
        let old = self.recent_exits.pop_front()?;
        self.list[old as usize].space = Space::default();
        Some(old)
    }

    /// The process `pid` was at `time`: the one running now if it existed then, else one of the last that
    /// exited, alive at `time` (its address space still kept).
    pub fn at(&self, pid: u32, time: u64) -> Option<u32> {
        match self.get(pid) {
            Some(p) if self.list[p as usize].start_ns <= time => Some(p),
            now => self
                .recent_exits
                .iter()
                .rev()
                .copied()
                .find(|&e| {
                    let e = &self.list[e as usize];
                    e.pid == pid && e.start_ns <= time && e.exit_ns.is_some_and(|x| x >= time)
                })
                .or(now),
        }
    }

    /// The commands process `p` ran, in order, without repeats (`sh → gzip`).
    pub fn chain(&self, p: u32) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for &i in &self.list[p as usize].images {
            let c = &self.images[i as usize].comm;
            if out.last() != Some(c) {
                out.push(c.clone());
            }
        }
        out
    }
}

/// The command line of a process (`/proc/PID/cmdline`), empty when it cannot be read.
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The command line of process `pid` if it still runs the program named `comm` (the name an exec record
/// gave it): read right when the record is read, before the process can exit and take its arguments along.
pub fn exec_cmdline(pid: u32, comm: &[u8]) -> Option<Vec<String>> {
    let line = cmdline(pid);
    // Checked after the read: a line read before a later exec would be the earlier program's.
    let now = comm_bytes(pid)?;
    (now == comm && !line.is_empty()).then_some(line)
}

fn comm_bytes(pid: u32) -> Option<Vec<u8>> {
    let mut b = std::fs::read(format!("/proc/{pid}/comm")).ok()?;
    if b.last() == Some(&b'\n') {
        b.pop();
    }
    Some(b)
}

/// The name a process is listed under when its command could not be read (it had exited).
pub fn unknown_comm(pid: u32) -> String {
    format!("pid {pid}")
}

/// The parent of a running process (`/proc/PID/stat`, field 4).
pub fn parent_pid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_ppid(&stat)
}

/// Field 4 of a `/proc/PID/stat` line: the command (field 2) is in parentheses and may hold spaces and
/// parentheses, so fields are counted after the last `)`.
fn parse_ppid(stat: &str) -> Option<u32> {
    stat.get(stat.rfind(')')? + 2..)?
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

/// Every process running now with its parent, from `/proc/*/stat`: (pid, ppid).
fn running_with_parents() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        Some((pid, parent_pid(pid)?))
    })
    .collect()
}

/// The descendants of `roots` running now (children, their children, ...), parents before children, each with
/// its parent: (pid, ppid). The roots themselves are not in the list.
pub fn descendants(roots: &[u32]) -> Vec<(u32, u32)> {
    descendants_in(&running_with_parents(), roots)
}

/// The descendants of `roots` in the (pid, ppid) list `all`, breadth first, in pid order among siblings.
fn descendants_in(all: &[(u32, u32)], roots: &[u32]) -> Vec<(u32, u32)> {
    let mut children: FastMap<u32, Vec<u32>> = FastMap::default();
    for &(pid, ppid) in all {
        children.entry(ppid).or_default().push(pid);
    }
    let mut seen: std::collections::HashSet<u32> = roots.iter().copied().collect();
    let mut out = Vec::new();
    let mut next = 0;
    let mut frontier: Vec<u32> = roots.to_vec();
    loop {
        for parent in std::mem::take(&mut frontier) {
            let mut kids = children.get(&parent).cloned().unwrap_or_default();
            kids.sort_unstable();
            for kid in kids {
                if seen.insert(kid) {
                    out.push((kid, parent));
                }
            }
        }
        frontier = out[next..].iter().map(|&(pid, _)| pid).collect();
        next = out.len();
        if frontier.is_empty() {
            return out;
        }
    }
}

/// The name of pid 0, the idle task a processor runs when it has nothing else to run (a system-wide profile
/// samples it on every idle processor): perf's name for it (each processor's is `swapper/N` in the kernel).
pub const IDLE_TASK: &str = "swapper";

/// The command name of a process (`/proc/PID/comm`), if it can be read; pid 0 (which has no `/proc` entry)
/// is the idle task, [`IDLE_TASK`].
pub fn comm(pid: u32) -> Option<String> {
    if pid == 0 {
        return Some(IDLE_TASK.to_string());
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

#[cfg(test)]
#[path = "procs_tests.rs"]
mod tests;
