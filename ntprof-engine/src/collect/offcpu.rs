//! The off-CPU part of the report: totals per process, thread and wait kind, the mechanism that ran and what it
//! could not see (the stacks are the `off_cpu` and `preempted` sources, built like every source's).

use crate::offcpu::{Mechanism, OffCpu};
use crate::report::{OffCpuKind, OffCpuProcess, OffCpuReport, OffCpuThread, ProcessReport};
use crate::tree::Tracker;
use crate::tree::wait::wait_name;

/// What the mechanism that ran could not see, one sentence each.
fn limits(w: &OffCpu) -> Vec<String> {
    let mut out = Vec::new();
    match w.mechanism {
        Mechanism::SwitchSamples => {
            out.push(
                "switch samples: the wait's system call is named from the kernel's call chain, whose frames are \
                 not reported; a switch the kernel did not sample (throttled at kernel.perf_event_max_sample_rate) \
                 keeps its time under [wait not read]"
                    .to_string(),
            );
        }
        Mechanism::SwitchRecordsProc => {
            out.push(format!(
                "unprivileged: each thread switched out for 100 us or more was read from \
                 /proc/PID/task/TID/syscall and its memory (in rounds of about a millisecond); a wait over before \
                 that keeps its exact time under [wait not read] ({} of {} readings came too late)",
                w.stats.missed, w.stats.reads
            ));
            if w.stats.denied > 0 {
                out.push(format!(
                    "unprivileged: {} of {} readings were refused, not late: this user may not read the thread \
                     (its process made itself non-dumpable, changed its user or runs a set-uid program); those \
                     waits keep their exact time under [wait not read]",
                    w.stats.denied, w.stats.reads
                ));
            }
            out.push(
                "unprivileged: a preempted thread is runnable and /proc does not describe it: its preemption is \
                 placed at its last CPU sample since its last voluntary wait ([last CPU sample]), else under \
                 [wait not read]"
                    .to_string(),
            );
            out.push(
                "unprivileged: blocking stacks are unwound from the stack and instruction pointers with the \
                 modules' CFI (a blocked thread's frame pointer cannot be read without stopping it); the kernel \
                 side of a wait is not seen"
                    .to_string(),
            );
            if let Some(why) = &w.fallback {
                out.push(format!("the switch samples were refused: {why}"));
            }
        }
    }
    out.push(
        "a wait that began before the recording (a thread blocked when attached) is not counted, nor a thread's \
         last switch-out (its exit)"
            .to_string(),
    );
    out
}

/// The run's notes about the off-CPU recording.
pub fn notes(w: &OffCpu) -> Vec<String> {
    let mut out = vec![format!(
        "off-CPU time recorded with {} ({} switch-outs seen)",
        w.mechanism.name(),
        w.stats.switches
    )];
    if w.stats.lost > 0 {
        out.push(format!(
            "the kernel dropped {} switch records (a full ring): the waits they closed are not counted",
            w.stats.lost
        ));
    }
    out
}

/// The off-CPU report of a run, `None` without `--off-cpu`.
pub fn build(t: &Tracker, w: &OffCpu, processes: &[ProcessReport]) -> Option<OffCpuReport> {
    let waits = t.waits.as_ref()?;
    let mut threads: Vec<OffCpuThread> = waits
        .threads
        .iter()
        .map(|(&(pid, tid), th)| OffCpuThread {
            process: th.process,
            pid,
            tid,
            name: if th.name.is_empty() {
                t.processes.comm(th.process).to_string()
            } else {
                th.name.clone()
            },
            voluntary_ns: th.voluntary_ns,
            preempted_ns: th.preempted_ns,
            waits: th.waits,
        })
        .collect();
    threads.sort_by_key(|th| std::cmp::Reverse(th.voluntary_ns + th.preempted_ns));
    let mut procs: Vec<OffCpuProcess> = Vec::new();
    for p in processes {
        let (v, pr) = threads
            .iter()
            .filter(|th| th.process == p.id)
            .fold((0, 0), |(v, pr), th| {
                (v + th.voluntary_ns, pr + th.preempted_ns)
            });
        if v + pr > 0 {
            procs.push(OffCpuProcess {
                process: p.id,
                pid: p.pid,
                command: p.command.clone(),
                voluntary_ns: v,
                preempted_ns: pr,
            });
        }
    }
    let mut kinds: Vec<OffCpuKind> = waits
        .kinds
        .iter()
        .map(|(&(key, preempted), &(ns, n))| OffCpuKind {
            kind: wait_name(key),
            preempted,
            ns,
            waits: n,
        })
        .collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.ns));
    Some(OffCpuReport {
        mechanism: w.mechanism.name().to_string(),
        limits: limits(w),
        voluntary_ns: threads.iter().map(|th| th.voluntary_ns).sum(),
        preempted_ns: threads.iter().map(|th| th.preempted_ns).sum(),
        unread_ns: waits.threads.values().map(|th| th.unread_ns).sum(),
        switches: w.stats.switches,
        reads: w.stats.reads,
        missed: w.stats.missed,
        denied: w.stats.denied,
        lost: w.stats.lost,
        processes: procs,
        threads,
        kinds,
    })
}
