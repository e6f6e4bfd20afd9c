//! The labels of a pprof sample: its process's `pid`, `command`, `cgroup` and `container_id`.

use super::{Builder, Label};
use crate::report::ProcessReport;

/// The labels of a sample: `pid` (numeric) and `command` (string), for `pprof -tags` and `-tagfocus`; and its
/// process's `cgroup` and `container_id` where known, so that a backend can select one container.
pub(super) fn labels(
    b: &mut Builder,
    pid: u32,
    command: &str,
    process: Option<&ProcessReport>,
) -> Vec<Label> {
    let mut labels = vec![Label {
        key: b.string("pid"),
        str: 0,
        num: i64::from(pid),
        num_unit: 0,
    }];
    let text = [
        ("command", Some(command).filter(|c| !c.is_empty())),
        ("cgroup", process.and_then(|p| p.cgroup.as_deref())),
        (
            "container_id",
            process.and_then(|p| p.container_id.as_deref()),
        ),
    ];
    for (key, value) in text {
        if let Some(value) = value {
            labels.push(Label {
                key: b.string(key),
                str: b.string(value),
                num: 0,
                num_unit: 0,
            });
        }
    }
    labels
}
