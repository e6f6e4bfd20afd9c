//! The threads of a process as `/proc` lists them, for the process table and the reading of mappings.

/// The threads of process `pid` that have not exited (`/proc/PID/task`, less the zombies: a main thread that
/// ended with `pthread_exit` stays listed, as a zombie, until the whole process exits); empty when the process
/// cannot be read (it is gone).
pub fn live_threads(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let mut tids: Vec<u32> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&tid| {
            std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat"))
                .ok()
                .and_then(|s| parse_state(&s))
                .is_some_and(|state| state != 'Z' && state != 'X')
        })
        .collect();
    tids.sort_unstable();
    tids
}

/// Field 3 of a `/proc/PID/stat` line: the state letter (`R`, `S`, `Z`...), after the command's parentheses.
pub fn parse_state(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 2..)?.chars().next()
}
