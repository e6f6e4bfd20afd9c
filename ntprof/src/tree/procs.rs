//! Following the tree: the processes of a run, from the kernel's fork, comm (exec) and exit records.
//!
//! A process is one pid from its creation (or from the start, for the profiled command and attached processes)
//! to its exit; a pid the kernel reuses later is another process. Its *images* are what it ran: the command it
//! inherited at fork, then each program it exec'd (`sh` → `gzip`). Samples are attributed to an image, so that
//! the report can merge them by command as `perf report --sort comm` does.

use super::hash::FastMap;
use super::space::Space;

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
    /// Its command line (`/proc/PID/cmdline`), when it could still be read after its last exec.
    pub cmdline: Option<Vec<String>>,
    /// When it was created (or first seen), sampler clock, ns.
    pub start_ns: u64,
    /// When it exited, if it did during the run.
    pub exit_ns: Option<u64>,
    /// Its executable address space (dropped at its exit).
    pub space: Space,
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
        });
        self.by_pid.insert(pid, index);
        index
    }

    /// `pid` forked `child` (a new process, not a thread): it starts with a copy of its parent's address space
    /// and command.
    pub fn fork(&mut self, parent_pid: u32, child: u32, time: u64) -> u32 {
        let (comm, space) = match self.get(parent_pid) {
            Some(p) => (
                self.comm(p).to_string(),
                self.list[p as usize].space.clone(),
            ),
            None => (String::new(), Space::default()),
        };
        self.add(child, parent_pid, &comm, time, space)
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

    /// Process `p` exec'd `comm`: a new image, an empty address space (the new image's mappings follow).
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
    }

    /// Process `p` renamed itself (`prctl(PR_SET_NAME)`): the current image takes the new name.
    pub fn rename(&mut self, p: u32, comm: &str) {
        let image = self.image(p);
        self.images[image as usize].comm = comm.to_string();
    }

    /// Process `p` exited at `time`: its address space is forgotten, its pid free for reuse.
    pub fn exit(&mut self, p: u32, time: u64) {
        let process = &mut self.list[p as usize];
        process.exit_ns = Some(time);
        process.space = Space::default();
        if self.by_pid.get(&process.pid) == Some(&p) {
            self.by_pid.remove(&process.pid);
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

/// The command name of a process (`/proc/PID/comm`), if it can be read.
pub fn comm(pid: u32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .ok()
        .map(|s| s.trim_end_matches('\n').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::space::Map;

    #[test]
    fn fork_copies_exec_clears_exit_frees_the_pid() {
        let mut p = Processes::default();
        let mut space = Space::default();
        space.insert(
            0x1000,
            Map {
                end: 0x2000,
                pgoff: 0,
                module: 7,
            },
        );
        let sh = p.add(100, 1, "sh", 0, space);
        let child = p.fork(100, 101, 10);
        assert_eq!(p.list[child as usize].parent, Some(sh));
        assert_eq!(p.comm(child), "sh");
        assert!(p.list[child as usize].space.find(0x1800).is_some());
        p.exec(child, "gzip");
        assert_eq!(p.comm(child), "gzip");
        assert!(p.list[child as usize].space.find(0x1800).is_none());
        assert_eq!(p.chain(child), ["sh", "gzip"]);
        assert_ne!(p.image(child), p.image(sh));
        p.exit(child, 20);
        assert_eq!(p.get(101), None);
        // The pid comes back as another process.
        let again = p.fork(100, 101, 30);
        assert_ne!(again, child);
        assert_eq!(p.get(101), Some(again));
    }
}
