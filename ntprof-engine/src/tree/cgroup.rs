//! The cgroup of a process and the container it names: the cgroup v2 path of `/proc/PID/cgroup` (its `0::`
//! line), read while the process lives, and the 64-hex container id that the runtimes put in the path of a
//! container's cgroup (Docker `docker-ID.scope` or `/docker/ID`, containerd `cri-containerd-ID.scope`, CRI-O
//! `crio-ID.scope`, Podman `libpod-ID.scope`).

/// The cgroup v2 path of process `pid` (`/` for the root cgroup), from the `0::` line of `/proc/PID/cgroup`;
/// `None` when the process is gone, or the machine has no cgroup v2 hierarchy (cgroup v1 only).
pub fn cgroup_of(pid: u32) -> Option<String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    v2_path(&text).map(str::to_string)
}

/// At an exec of process `p`: its cgroup read again while it runs the new program (a runtime moves a
/// container's first process into the container's cgroup before its exec); kept as it was when it is gone.
pub fn exec_read(p: &mut super::procs::Process) {
    if let Some(cg) = cgroup_of(p.pid) {
        p.cgroup = Some(cg);
    }
}

/// The path of the `0::PATH` line (the cgroup v2 hierarchy) of a `/proc/PID/cgroup` text. A process of a cgroup
/// that was removed while it ran reads `PATH (deleted)`: the path is kept without the suffix.
pub fn v2_path(text: &str) -> Option<&str> {
    let path = text.lines().find_map(|l| l.strip_prefix("0::"))?;
    let path = path.strip_suffix(" (deleted)").unwrap_or(path);
    path.starts_with('/').then_some(path)
}

/// The runtimes' prefixes of a container's cgroup name before its id, and the systemd unit suffix after it.
const PREFIXES: [&str; 5] = [
    "docker-",
    "cri-containerd-",
    "crio-",
    "libpod-",
    "crio-conmon-",
];

/// The container id (64 lowercase hex digits) in a cgroup path, where the path holds one: the last component
/// that is `PREFIX-ID.scope` (systemd's cgroup driver: Docker, containerd, CRI-O, Podman) or the bare `ID`
/// under a `docker`, `libpod_parent`, `kubepods` or `crio` directory or as the last component of a pod's
/// directory (the cgroupfs driver: `/docker/ID`, `/kubepods/burstable/podUID/ID`). A conmon scope
/// (`crio-conmon-ID.scope`) names the container's monitor, not the container: no id.
pub fn container_id(path: &str) -> Option<&str> {
    let mut found = None;
    let mut parent = "";
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if let Some(id) = scoped_id(part) {
            found = Some(id);
        } else if is_id(part)
            && (matches!(parent, "docker" | "libpod_parent" | "crio" | "containerd")
                || parent.starts_with("pod")
                || parent.starts_with("kubepods"))
        {
            found = Some(part);
        }
        parent = part;
    }
    found
}

/// The id of a `PREFIX-ID.scope` cgroup name.
fn scoped_id(part: &str) -> Option<&str> {
    let name = part.strip_suffix(".scope")?;
    if name.starts_with("crio-conmon-") {
        return None;
    }
    PREFIXES
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .filter(|id| is_id(id))
}

/// 64 lowercase hexadecimal digits.
fn is_id(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f2a9c1d8e7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a10";

    /// Paths as each runtime makes them, with the systemd and the cgroupfs drivers.
    #[test]
    fn container_ids_of_every_runtime() {
        let cases = [
            // Docker, systemd driver and cgroupfs driver.
            format!("/system.slice/docker-{ID}.scope"),
            format!("/docker/{ID}"),
            // containerd (Kubernetes, systemd driver).
            format!(
                "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0c6e.slice/cri-containerd-{ID}.scope"
            ),
            // containerd, cgroupfs driver.
            format!("/kubepods/burstable/pod0c6e1b2a-1111-2222-3333-444455556666/{ID}"),
            // CRI-O.
            format!("/kubepods.slice/kubepods-pod0c6e.slice/crio-{ID}.scope"),
            // Podman, rootful and rootless (the user's slice).
            format!("/machine.slice/libpod-{ID}.scope"),
            format!(
                "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope/container"
            ),
            format!("/machine.slice/libpod-{ID}.scope/container"),
        ];
        for path in &cases {
            assert_eq!(container_id(path), Some(ID), "{path}");
        }
    }

    /// Paths that hold no container id: the host's services and sessions, a conmon monitor, ids of the wrong
    /// length or case, a bare id outside a runtime's directory.
    #[test]
    fn no_container_id() {
        let upper = ID.to_ascii_uppercase();
        let short = &ID[..63];
        let cases = [
            "/".to_string(),
            "/system.slice/ssh.service".to_string(),
            "/user.slice/user-1000.slice/session-3.scope".to_string(),
            format!("/machine.slice/crio-conmon-{ID}.scope"),
            format!("/system.slice/docker-{upper}.scope"),
            format!("/system.slice/docker-{short}.scope"),
            format!("/system.slice/docker-{ID}.service"),
            format!("/mygroup/{ID}"),
            format!("/system.slice/other-{ID}.scope"),
        ];
        for path in &cases {
            assert_eq!(container_id(path), None, "{path}");
        }
    }

    /// The `0::` line of `/proc/PID/cgroup`, with v1 lines beside it (a hybrid machine) and after a removal.
    #[test]
    fn v2_line() {
        let hybrid = "12:perf_event:/\n11:memory:/user.slice\n0::/user.slice/session-3.scope\n";
        assert_eq!(v2_path(hybrid), Some("/user.slice/session-3.scope"));
        assert_eq!(v2_path("0::/\n"), Some("/"));
        assert_eq!(v2_path("0::/gone (deleted)\n"), Some("/gone"));
        assert_eq!(v2_path("12:perf_event:/\n1:name=systemd:/\n"), None);
        // This process has one (the machine has cgroup v2, as the tests require).
        assert!(cgroup_of(std::process::id()).is_some());
    }
}
