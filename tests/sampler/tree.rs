//! Process trees: fork, exec and exit followed with inherit, and not followed without it; `dlopen`.

use super::*;

/// The spin time of each process of the tree, in ms of CPU time.
const SPIN_MS: &str = "250";

/// With inherit (the default): a Fork record for each of the three children, a Comm record with the exec flag
/// for the child that execs `leaf`, then the Mmap of leaf's executable, an Exit for every process, samples from
/// every process, and the leaf's samples inside leaf's executable mapping.
#[test]
fn a_process_tree_is_followed_through_fork_exec_and_exit() {
    let _serial = common::serial();
    let programs = Programs::new("tree");
    let tree = programs.build("tree", &[]);
    let leaf = programs.build("leaf", &[]);
    let program = Waiting::spawn(&tree, &[leaf.to_str().unwrap(), SPIN_MS]);
    let root = program.pid();
    let process = Process::open(root).expect("open the tree's root");
    let mut sampler = Sampler::builder().process(&process).build().expect("build");
    assert_eq!(sampler.source(), ProfileSource::Time);
    let (recs, delivered) = record_until_exit(&mut sampler, program, Duration::from_secs(60));
    let stats = sampler.stats();
    note("tree", &recs, stats);
    assert_eq!(delivered, recs.len());
    assert_eq!(stats.records as usize, recs.len());

    // The three children of the root.
    let children: Vec<u32> = recs
        .iter()
        .filter_map(|r| match r {
            Rec::Fork { pid, ppid, .. } if *ppid == root && *pid != root => Some(*pid),
            _ => None,
        })
        .collect();
    assert_eq!(
        children.len(),
        3,
        "Fork records of the root's children: {children:?}"
    );
    // The child that exec'd leaf: its Comm record has the exec flag and the name "leaf".
    let execs: Vec<(u32, u64)> = recs
        .iter()
        .filter_map(|r| match r {
            Rec::Comm {
                pid,
                comm,
                exec: true,
                time,
                ..
            } if comm == "leaf" => Some((*pid, *time)),
            _ => None,
        })
        .collect();
    assert_eq!(execs.len(), 1, "one exec of leaf: {execs:?}");
    let (leaf_pid, exec_time) = execs[0];
    assert!(children.contains(&leaf_pid));
    // The Mmap of leaf's executable code, after the exec.
    let leaf_name = leaf.to_str().unwrap();
    let leaf_maps: Vec<(u64, u64, u64)> = recs
        .iter()
        .filter_map(|r| match r {
            Rec::Mmap {
                pid,
                addr,
                len,
                prot,
                filename,
                time,
                ..
            } if *pid == leaf_pid
                && filename == leaf_name
                && prot & libc::PROT_EXEC as u32 != 0 =>
            {
                Some((*addr, *len, *time))
            }
            _ => None,
        })
        .collect();
    assert!(
        !leaf_maps.is_empty(),
        "no executable Mmap of {leaf_name} for pid {leaf_pid}"
    );
    assert!(
        leaf_maps.iter().all(|&(_, _, t)| t >= exec_time),
        "the Mmap of the new image comes after the exec's Comm"
    );
    // An Exit of the main thread of every process.
    let exits: BTreeSet<u32> = recs
        .iter()
        .filter_map(|r| match r {
            Rec::Exit { pid, tid, .. } if pid == tid => Some(*pid),
            _ => None,
        })
        .collect();
    for pid in children.iter().chain([&root]) {
        assert!(exits.contains(pid), "no Exit of process {pid}: {exits:?}");
    }
    // Samples from every process: 250 ms at 1 ms each (at least a fifth of them, on a shared machine).
    let per = samples_per_pid(&recs);
    for pid in children.iter().chain([&root]) {
        let n = per.get(pid).copied().unwrap_or(0);
        assert!(n >= 50, "process {pid}: {n} samples (per pid: {per:?})");
    }
    assert_eq!(
        per.keys().copied().collect::<BTreeSet<u32>>(),
        children.iter().copied().chain([root]).collect(),
        "samples from processes outside the tree"
    );
    assert_eq!(per.values().sum::<usize>() as u64, stats.samples);
    // Leaf's samples: most in leaf's executable mapping (leaf_spin), none before the exec.
    let (mut inside, mut total) = (0, 0);
    for r in &recs {
        if let Rec::Sample { pid, ip, time, .. } = r
            && *pid == leaf_pid
            && *time > exec_time
        {
            total += 1;
            if leaf_maps.iter().any(|&(a, l, _)| *ip >= a && *ip < a + l) {
                inside += 1;
            }
        }
    }
    println!("leaf: {inside} of {total} samples after the exec in leaf's executable mapping");
    assert!(total >= 50 && inside * 2 >= total, "{inside} of {total}");
    if per_thread_layout() {
        // Each of the three children runs until a read finds its fork record (a wait lasts 10 ms at most).
        assert!(stats.lost * 5 < stats.samples, "{stats:?}");
    } else {
        assert_eq!(stats.lost, 0, "nothing lost at 1 ms");
    }
}

/// With inherit(false): the root's own samples only, none from its children (their Fork records still come,
/// from the root's events).
#[test]
fn without_inherit_children_are_not_sampled() {
    let _serial = common::serial();
    let programs = Programs::new("noinherit");
    let tree = programs.build("tree", &[]);
    let leaf = programs.build("leaf", &[]);
    let program = Waiting::spawn(&tree, &[leaf.to_str().unwrap(), SPIN_MS]);
    let root = program.pid();
    let mut sampler = Sampler::builder()
        .pid(root)
        .inherit(false)
        .build()
        .expect("build");
    let (recs, _) = record_until_exit(&mut sampler, program, Duration::from_secs(60));
    note("no inherit", &recs, sampler.stats());
    let per = samples_per_pid(&recs);
    assert!(per.get(&root).copied().unwrap_or(0) >= 50, "{per:?}");
    assert_eq!(
        per.len(),
        1,
        "samples from other processes than the root: {per:?}"
    );
    let forks = recs
        .iter()
        .filter(|r| matches!(r, Rec::Fork { ppid, pid, .. } if *ppid == root && *pid != root))
        .count();
    assert_eq!(forks, 3, "the root's Fork records");
}

/// `dlopen`: the Mmap record of the library comes before any sample in it, and its samples fall inside it.
#[test]
fn a_dlopened_library_is_mapped_before_its_first_sample() {
    let _serial = common::serial();
    let programs = Programs::new("dlopen");
    let dl = programs.build("dl", &[]);
    let lib = programs.build_lib("libspin");
    let program = Waiting::spawn(&dl, &[lib.to_str().unwrap(), "250"]);
    let pid = program.pid();
    let mut sampler = Sampler::builder().pid(pid).build().expect("build");
    let (recs, _) = record_until_exit(&mut sampler, program, Duration::from_secs(60));
    note("dlopen", &recs, sampler.stats());
    let lib_name = lib.to_str().unwrap();
    let map = recs
        .iter()
        .find_map(|r| match r {
            Rec::Mmap {
                pid: p,
                addr,
                len,
                time,
                prot,
                filename,
            } if *p == pid && filename == lib_name && prot & libc::PROT_EXEC as u32 != 0 => {
                Some((*addr, *len, *time))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("no executable Mmap of {lib_name}"));
    let in_lib: Vec<u64> = recs
        .iter()
        .filter_map(|r| match r {
            Rec::Sample { ip, time, .. } if *ip >= map.0 && *ip < map.0 + map.1 => Some(*time),
            _ => None,
        })
        .collect();
    println!("{} samples in {lib_name}", in_lib.len());
    assert!(
        in_lib.len() >= 50,
        "{} samples in the library",
        in_lib.len()
    );
    assert!(
        in_lib.iter().all(|&t| t > map.2),
        "a sample in the library before its Mmap record"
    );
}
