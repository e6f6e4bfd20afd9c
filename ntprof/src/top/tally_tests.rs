//! Unit tests of `top`'s tallies: the sliding window's sums and drops, the orders, the process column.

use std::collections::HashMap;

use super::*;

fn window(index: u64, fns: &[(&str, u32, u64)]) -> WindowTally {
    let mut functions: HashMap<Key, FnTally> = HashMap::new();
    for &(name, pid, n) in fns {
        functions
            .entry(("prog".to_string(), name.to_string()))
            .or_default()
            .add(pid, "prog", n);
    }
    let total = fns.iter().map(|f| f.2).sum();
    WindowTally {
        index,
        start: format!("s{index}"),
        end: format!("e{index}"),
        seconds: 1.0,
        command_pid: None,
        sources: vec![SourceTally {
            name: "Timer".into(),
            off_cpu: false,
            total,
            lost: index,
            functions,
        }],
    }
}

fn names(t: &Table) -> Vec<&str> {
    t.rows.iter().map(|r| r.function.as_str()).collect()
}

#[test]
fn the_window_sums_the_last_refreshes_and_drops_the_oldest() {
    let mut ring = Ring::new(2);
    ring.push(window(0, &[("old", 1, 1000)]));
    ring.push(window(1, &[("zeta", 1, 30), ("alpha", 1, 10)]));
    ring.push(window(2, &[("zeta", 1, 30), ("alpha", 1, 50)]));
    let t = ring.table("Timer", Sort::Share).unwrap();
    assert_eq!(names(&t), ["alpha", "zeta"], "{t:?}");
    assert_eq!((t.total, t.lost, t.refreshes, t.index), (120, 3, 2, 2));
    assert_eq!(t.rows[0].samples, 60);
    assert_eq!(t.rows[0].recent, 50);
    assert_eq!(t.span, ("s2".to_string(), "e2".to_string()));
    assert!(ring.table("off_cpu", Sort::Share).unwrap().rows.is_empty());
}

#[test]
fn the_sorts_order_by_window_by_last_refresh_and_by_name() {
    let mut ring = Ring::new(10);
    ring.push(window(0, &[("b_many_before", 1, 100), ("c_few", 1, 1)]));
    ring.push(window(
        1,
        &[("b_many_before", 1, 1), ("c_few", 1, 20), ("a_some", 1, 5)],
    ));
    let order = |s| names(&ring.table("Timer", s).unwrap()).join(" ");
    assert_eq!(order(Sort::Share), "b_many_before c_few a_some");
    assert_eq!(order(Sort::Recent), "c_few a_some b_many_before");
    assert_eq!(order(Sort::Name), "a_some b_many_before c_few");
    assert_eq!(Sort::Share.next().next().next(), Sort::Share);
}

#[test]
fn the_process_column_names_the_main_process_or_counts_them() {
    let mut p = HashMap::new();
    assert_eq!(process_label(&p), "-");
    p.insert(7, ("prog".to_string(), 10));
    assert_eq!(process_label(&p), "prog 7");
    p.insert(8, ("sh".to_string(), 3));
    assert_eq!(process_label(&p), "prog 7 +1");
    p.insert(9, ("cc".to_string(), 8));
    assert_eq!(process_label(&p), "3 procs");
}
