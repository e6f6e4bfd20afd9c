//! 4. NtCreateProfileEx: processor checks, and pinned profiles.

use super::*;

// ---------------------------------------------------------------------------------------------------------
// 4. NtCreateProfileEx: processor checks, and pinned profiles.
// ---------------------------------------------------------------------------------------------------------

/// Pin the calling thread to `cpu`.
fn pin_to(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    set.set(cpu).expect("CPU number");
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set).expect("sched_setaffinity");
}

/// Run `hot_cpu` on a thread pinned to `cpu` for 300 ms of its CPU time; checks it never left the CPU.
fn spin_pinned(cpu: usize) -> Duration {
    std::thread::spawn(move || {
        pin_to(cpu);
        let start = thread_cpu();
        let mut x = 7u64;
        while thread_cpu() - start < Duration::from_millis(300) {
            x = hot_cpu(x, 20_000);
            assert_eq!(nix::sched::sched_getcpu().expect("sched_getcpu"), cpu);
        }
        std::hint::black_box(x);
        thread_cpu() - start
    })
    .join()
    .expect("pinned spinner")
}

/// NtCreateProfileEx: an empty mask, an offline processor, a group that does not exist and non-zero Reserved
/// words are STATUS_INVALID_PARAMETER; a misaligned array STATUS_DATATYPE_MISALIGNMENT; an unreadable one
/// STATUS_ACCESS_VIOLATION; GroupCount 0 is fine. Two profiles pinned to CPU 0 and CPU 1 over one function
/// count only the samples taken on their own processor.
#[test]
fn create_profile_ex_checks_processors_and_pinned_profiles_count_only_their_cpu() {
    let serial = Serial::with_interval(TEST_INTERVAL);
    let period = serial.period_ns();
    let (start, stop) = cpu_range();
    let size = stop - start;
    check_group_records(start, size);
    check_alignment(start, size);
    check_unreadable_records(start, size);
    // GroupCount 0: every active processor (the pointer is not looked at).
    let all = CProfile::create_ex(current_process(), start, size, 2, 0, std::ptr::null());
    assert!(all.is_ok(), "GroupCount 0: {:?}", all.err());
    drop(all);
    check_pinned_profiles(start, size, period);
}

/// Bad records (empty mask, offline CPU, a group that does not exist, a bad second record, a non-zero Reserved
/// word) are STATUS_INVALID_PARAMETER; two good records of one group are fine.
fn check_group_records(start: u64, size: u64) {
    let ex = |records: &[GroupAffinity]| {
        CProfile::create_ex(
            current_process(),
            start,
            size,
            2,
            records.len() as u16,
            records.as_ptr().cast(),
        )
        .map(drop)
        .err()
        .unwrap_or(NtStatus::SUCCESS)
    };
    let online = ntprofile::affinity::online_cpus();
    assert!(
        online.len() >= 2 && online.contains(0) && online.contains(1),
        "needs CPUs 0 and 1"
    );
    assert!(online.iter().all(|c| c < 64), "group 1 must not exist");
    let online_mask = online.group_mask(0);
    let offline_bit = if online_mask & (1 << 5) == 0 {
        5
    } else {
        (!online_mask).trailing_zeros()
    };
    assert!(offline_bit < 64, "every CPU of group 0 is online");
    let offline = 1usize << offline_bit;

    let mut reserved = GroupAffinity::new(1, 0);
    reserved.reserved = [0, 1, 0];
    let cases: [(&str, Vec<GroupAffinity>, NtStatus); 7] = [
        (
            "empty mask",
            vec![GroupAffinity::new(0, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "offline CPU",
            vec![GroupAffinity::new(offline, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "online and offline CPU",
            vec![GroupAffinity::new(1 | offline, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "group 1",
            vec![GroupAffinity::new(1, 1)],
            NtStatus::INVALID_PARAMETER,
        ),
        (
            "second record bad",
            vec![GroupAffinity::new(1, 0), GroupAffinity::new(0, 0)],
            NtStatus::INVALID_PARAMETER,
        ),
        ("reserved word", vec![reserved], NtStatus::INVALID_PARAMETER),
        (
            "two good records of one group",
            vec![GroupAffinity::new(1, 0), GroupAffinity::new(2, 0)],
            NtStatus::SUCCESS,
        ),
    ];
    for (what, records, want) in &cases {
        assert_eq!(ex(records), *want, "{what}");
    }
}

/// A `GROUP_AFFINITY` array 2 bytes off is STATUS_DATATYPE_MISALIGNMENT; 4 bytes off (not 8) is aligned enough.
fn check_alignment(start: u64, size: u64) {
    #[repr(C, align(16))]
    struct Raw([u8; 64]);
    let mut raw = Raw([0; 64]);
    let record = GroupAffinity::new(1, 0).to_bytes();
    raw.0[2..18].copy_from_slice(&record);
    let misaligned = CProfile::create_ex(
        current_process(),
        start,
        size,
        2,
        1,
        raw.0[2..].as_ptr().cast(),
    );
    assert_eq!(
        misaligned.err(),
        Some(NtStatus::DATATYPE_MISALIGNMENT),
        "GroupAffinity 2 bytes off"
    );
    let mut raw = Raw([0; 64]);
    raw.0[4..20].copy_from_slice(&record);
    let four = CProfile::create_ex(
        current_process(),
        start,
        size,
        2,
        1,
        raw.0[4..].as_ptr().cast(),
    );
    assert!(
        four.is_ok(),
        "GroupAffinity 4-byte aligned: {:?}",
        four.err()
    );
    drop(four);
}

/// An array on a PROT_NONE page, or whose second record runs into one, is STATUS_ACCESS_VIOLATION; the
/// readable first record alone is fine.
fn check_unreadable_records(start: u64, size: u64) {
    let record = GroupAffinity::new(1, 0).to_bytes();
    // Unreadable: a PROT_NONE page, and an array whose second record runs into it.
    let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .expect("sysconf")
        .expect("page size") as usize;
    let len = std::num::NonZeroUsize::new(2 * page).expect("non-zero");
    // SAFETY: a fresh anonymous private mapping that nothing else references; unmapped below.
    let map = unsafe {
        nix::sys::mman::mmap_anonymous(
            None,
            len,
            nix::sys::mman::ProtFlags::PROT_READ | nix::sys::mman::ProtFlags::PROT_WRITE,
            nix::sys::mman::MapFlags::MAP_PRIVATE,
        )
    }
    .expect("mmap");
    let first_page = map.as_ptr().cast::<u8>();
    // SAFETY: the second page of the mapping above.
    let second_page = unsafe { first_page.add(page) };
    // SAFETY: the last 16 bytes of the first page, which is mapped read-write and ours alone.
    unsafe { std::ptr::copy_nonoverlapping(record.as_ptr(), second_page.sub(16), 16) };
    // SAFETY: changes the protection of our own mapping's second page, which nothing references.
    unsafe {
        nix::sys::mman::mprotect(
            std::ptr::NonNull::new(second_page.cast()).expect("non-null"),
            page,
            nix::sys::mman::ProtFlags::PROT_NONE,
        )
    }
    .expect("mprotect PROT_NONE");
    let unreadable =
        CProfile::create_ex(current_process(), start, size, 2, 1, second_page.cast()).err();
    // SAFETY: the pointer stays inside the first page.
    let straddling_ptr = unsafe { second_page.sub(16) };
    let straddling =
        CProfile::create_ex(current_process(), start, size, 2, 2, straddling_ptr.cast()).err();
    let one_readable =
        CProfile::create_ex(current_process(), start, size, 2, 1, straddling_ptr.cast());
    // SAFETY: unmaps exactly the mapping made above; no reference into it remains.
    unsafe { nix::sys::mman::munmap(map, 2 * page) }.expect("munmap");
    assert_eq!(
        unreadable,
        Some(NtStatus::ACCESS_VIOLATION),
        "PROT_NONE GroupAffinity"
    );
    assert_eq!(
        straddling,
        Some(NtStatus::ACCESS_VIOLATION),
        "second record on a PROT_NONE page"
    );
    assert!(
        one_readable.is_ok(),
        "the readable record alone: {:?}",
        one_readable.err()
    );
    drop(one_readable);
}

/// Two profiles over `hot_cpu`, pinned to CPU 0 and CPU 1, count only the samples taken on their own processor.
fn check_pinned_profiles(start: u64, size: u64, period: f64) {
    // Two profiles over hot_cpu, one pinned to CPU 0, one to CPU 1.
    let on0 = [GroupAffinity::new(1, 0)];
    let on1 = [GroupAffinity::new(2, 0)];
    let mut p0 = CProfile::create_ex(current_process(), start, size, 2, 1, on0.as_ptr().cast())
        .expect("profile on CPU 0");
    let mut p1 = CProfile::create_ex(current_process(), start, size, 2, 1, on1.as_ptr().cast())
        .expect("profile on CPU 1");
    assert_eq!(p0.start(), NtStatus::SUCCESS);
    assert_eq!(p1.start(), NtStatus::SUCCESS);
    let cpu0_time = spin_pinned(0);
    p0.stats(); // drain
    let (c0_first, c1_first) = (p0.total(), p1.total());
    let cpu1_time = spin_pinned(1);
    assert_eq!(p0.stop(), NtStatus::SUCCESS);
    assert_eq!(p1.stop(), NtStatus::SUCCESS);
    let (c0, c1) = (p0.total(), p1.total());
    let (s0, s1) = (p0.stats(), p1.stats());
    assert_eq!(p0.close(), NtStatus::SUCCESS);
    assert_eq!(p1.close(), NtStatus::SUCCESS);
    let expected0 = cpu0_time.as_nanos() as f64 / period;
    let expected1 = cpu1_time.as_nanos() as f64 / period;
    note(format!(
        "pinned: on CPU 0 for {cpu0_time:?} (~{expected0:.0}): CPU-0 profile {c0_first}, CPU-1 profile \
         {c1_first}; then on CPU 1 for {cpu1_time:?} (~{expected1:.0}): CPU-0 profile {}, CPU-1 profile {}; \
         {s0:?} {s1:?}",
        c0 - c0_first,
        c1 - c1_first
    ));
    assert!(
        c0_first as f64 >= 0.5 * expected0,
        "the CPU-0 profile counted {c0_first} of ~{expected0:.0} while a thread spun on CPU 0"
    );
    assert_eq!(
        c1_first, 0,
        "the CPU-1 profile counted samples taken on CPU 0"
    );
    assert_eq!(
        c0, c0_first,
        "the CPU-0 profile counted samples taken on CPU 1"
    );
    assert!(
        (c1 - c1_first) as f64 >= 0.5 * expected1,
        "the CPU-1 profile counted {} of ~{expected1:.0} while a thread spun on CPU 1",
        c1 - c1_first
    );
}
