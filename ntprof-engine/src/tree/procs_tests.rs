//! The process list's unit tests: forks, execs, exits, adoption, the names of processes.

use super::*;
use crate::tree::space::Map;

#[test]
fn a_process_seen_without_its_fork_takes_its_parent_from_its_exit() {
    let mut p = Processes::default();
    let sh = p.add(100, 1, "forker.sh", 0, Space::default());
    // First seen by its exec record, after it had exited: no parent, no name.
    let child = p.add(105, 0, &unknown_comm(105), 10, Space::default());
    p.exec(child, "true");
    p.adopt(child, 100);
    assert_eq!(p.list[child as usize].ppid, 100);
    assert_eq!(p.list[child as usize].parent, Some(sh));
    assert_eq!(p.chain(child), ["forker.sh", "true"]);
    // A known parent is kept: a later exit record names the reaper the process was reparented to.
    p.adopt(child, 1);
    assert_eq!(p.list[child as usize].ppid, 100);
    // A name that was read is kept.
    let other = p.add(106, 0, "awk", 10, Space::default());
    p.adopt(other, 100);
    assert_eq!(p.chain(other), ["awk"]);
    assert_eq!(p.list[other as usize].parent, Some(sh));
}

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

#[test]
fn a_process_ends_with_its_last_thread_not_with_its_main_thread() {
    let mut p = Processes::default();
    let server = p.add(300, 1, "server", 0, Space::default());
    p.thread_started(server, 301);
    p.thread_started(server, 302);
    // The main thread ends with pthread_exit: the process goes on.
    assert!(!p.thread_exited(server, 300));
    assert!(!p.thread_exited(server, 301));
    // An exit reported for a thread the model never knew changes nothing.
    assert!(!p.thread_exited(server, 999));
    assert!(
        p.thread_exited(server, 302),
        "the last thread ends the process"
    );
    // A thread that execs takes the process's id: one thread is left, the process's.
    let other = p.add(400, 1, "app", 0, Space::default());
    p.thread_started(other, 401);
    p.exec(other, "tool");
    assert_eq!(p.list[other as usize].threads.len(), 1);
    assert!(p.thread_exited(other, 400));
}

#[test]
fn the_state_is_read_after_a_command_with_parentheses_and_live_threads_are_listed() {
    assert_eq!(parse_state("42 (a) b) Z 7 42"), Some('Z'));
    assert_eq!(parse_state("42 (x"), None);
    let me = std::process::id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let t = std::thread::spawn(move || rx.recv());
    let live = live_threads(me);
    tx.send(()).unwrap();
    t.join().unwrap().unwrap();
    assert!(live.contains(&me) && live.len() >= 2, "{live:?}");
    assert!(live_threads(u32::MAX).is_empty());
}

#[test]
fn a_fork_keeps_its_parents_command_line_until_it_execs() {
    let mut p = Processes::default();
    let parent = p.add(200, 1, "python3", 0, Space::default());
    p.list[parent as usize].cmdline = Some(vec!["python3".into(), "pool.py".into()]);
    let worker = p.fork(200, 201, 5);
    assert_eq!(
        p.list[worker as usize].cmdline,
        p.list[parent as usize].cmdline
    );
    p.exec(worker, "gzip");
    assert_eq!(p.list[worker as usize].cmdline, None);
}

#[test]
fn descendants_come_parents_first_and_skip_other_trees() {
    // 10 → 11, 12; 12 → 13; 13 → 14; 20 (another tree) → 21; a loop 30 ↔ 31 never reached.
    let all = [
        (14, 13),
        (11, 10),
        (13, 12),
        (12, 10),
        (21, 20),
        (10, 1),
        (30, 31),
        (31, 30),
    ];
    assert_eq!(
        descendants_in(&all, &[10]),
        [(11, 10), (12, 10), (13, 12), (14, 13)]
    );
    assert_eq!(
        descendants_in(&all, &[12, 20]),
        [(13, 12), (21, 20), (14, 13)]
    );
    assert_eq!(descendants_in(&all, &[14]), []);
}

#[test]
fn the_parent_is_read_after_a_command_with_spaces_and_parentheses() {
    assert_eq!(parse_ppid("42 (a b) c) S 7 42 42 0 -1"), Some(7));
    assert_eq!(parse_ppid("42 (x"), None);
    assert_eq!(
        parent_pid(std::process::id()),
        Some(std::os::unix::process::parent_id())
    );
    assert!(
        descendants(&[std::os::unix::process::parent_id()])
            .iter()
            .any(|&(pid, _)| pid == std::process::id())
    );
}

#[test]
fn pid_0_is_the_idle_task_named_as_perf_names_it() {
    // A system-wide profile samples every idle processor as pid 0, which has no /proc entry: it is listed as
    // perf lists it, not as a process whose name could not be read.
    let mut t = crate::tree::Tracker::new(1, false, false, 0, crate::tree::Filter::default());
    let kernel = crate::tree::space::ModuleKind::Kernel("[kernel]".into());
    t.add_fixed(
        "[kernel]",
        "[kernel.kallsyms]",
        kernel,
        0xffff_0000,
        0xffff_1000,
    );
    let idle = crate::tree::order::Event::Sample {
        source: 0,
        pid: 0,
        tid: 0,
        ip: 0xffff_0800,
        kernel: true,
        chain: (0, 0),
        regs: None,
        stack: (0, 0),
    };
    t.apply(1, &idle, &[]);
    let p = t.processes.get(0).expect("pid 0 listed");
    assert_eq!(t.processes.comm(p), IDLE_TASK);
    assert_eq!(IDLE_TASK, "swapper");
    assert_eq!(t.sources[0].counts.values().sum::<u64>(), 1);
    // A process whose name cannot be read (it exited) still reads as its pid.
    assert_eq!(comm(u32::MAX), None);
}
