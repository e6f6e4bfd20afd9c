//! A side-band-only sampler (`samples(false)`) woken at each record (`wakeup_bytes(1)`), waited on beside the
//! sampler that takes the samples (`Sampler::wait_any`): an exec ends the wait at once, though no ring of the
//! sampling sampler is anywhere near its watermark.

use super::*;

#[test]
fn a_side_band_sampler_wakes_the_wait_at_an_exec() {
    // Serial: its child, killed at the end, must not be reaped by a test that counts the children it forked.
    let _serial = common::serial();
    let mut child = Command::new("sh")
        .args(["-c", "read line; exec sleep 5"])
        .stdin(Stdio::piped())
        .spawn()
        .expect("sh");
    let process = Process::open(child.id()).expect("open");
    let mut sideband = Sampler::builder()
        .process(&process)
        .samples(false)
        .ring_pages(8)
        .wakeup_bytes(1)
        .build()
        .expect("side-band sampler");
    let mut cpu = Sampler::builder()
        .process(&process)
        .sideband(false)
        .build()
        .expect("sampler");
    sideband.enable().unwrap();
    cpu.enable().unwrap();
    // Once sh waits for its line (its start may still be mapping libraries, each mapping a wake-up), nothing
    // happens: a wait runs to its timeout.
    let mut quiet = false;
    for _ in 0..100 {
        let t = Instant::now();
        let woke = Sampler::wait_any(&[&sideband, &cpu], Duration::from_millis(200)).unwrap();
        sideband.read(|_| {}).unwrap();
        // A per-thread sampler's wait also ends when its rings hold anything (`per_thread`): sh's first samples.
        cpu.read(|_| {}).unwrap();
        if !woke {
            assert!(
                t.elapsed() >= Duration::from_millis(200),
                "{:?}",
                t.elapsed()
            );
            quiet = true;
            break;
        }
    }
    assert!(quiet, "the wait never ran to its timeout while sh waited");

    writeln!(child.stdin.as_mut().unwrap()).unwrap();
    let t = Instant::now();
    let mut exec = false;
    let mut samples = 0;
    // The exec wakes the wait (its timeout, 60 s, is never reached); records other than the exec (the
    // mappings of the new program) may wake it first.
    while !exec && t.elapsed() < Duration::from_secs(60) {
        assert!(
            Sampler::wait_any(&[&sideband, &cpu], Duration::from_secs(60)).unwrap(),
            "the wait ended without a record after {:?}",
            t.elapsed()
        );
        sideband
            .read(|r| match r {
                SampleRecord::Comm {
                    comm, exec: true, ..
                } => exec |= *comm == b"sleep",
                SampleRecord::Sample(_) => samples += 1,
                _ => {}
            })
            .unwrap();
    }
    let took = t.elapsed();
    let _ = child.kill();
    let _ = child.wait();
    assert!(exec, "no exec record of sleep");
    assert_eq!(samples, 0, "a side-band-only sampler took samples");
    // Far below the timeout: the wait ended at the records, not at a timeout (a loaded machine may delay the
    // waiter, never by the minute the timeout is).
    assert!(
        took < Duration::from_secs(30),
        "the exec was seen after {took:?}"
    );
}
