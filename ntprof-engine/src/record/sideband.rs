//! The side-band sampler: the targets' mappings, execs, forks and exits in rings of their own, on the
//! kernel's dummy event (it never samples), with a wake-up at every record. A round then begins as soon as a
//! process is forked or execs, however long the CPU samplers' rings take to fill, so that a short-lived
//! program's command line is read from `/proc` while it runs: the kernel's exec record holds only the program's
//! 15-character name.

use ntprofile::Sampler;

/// Data pages of each side-band ring: a record is read as soon as it is written, so a ring holds only what
/// arrives while the recorder waits for a CPU (256 KiB: some 2,500 mapping records).
const SIDEBAND_PAGES: usize = 64;

/// The side-band sampler of the processes of a recorded command, `pids` (`follow`: their children too), or
/// `None` when it cannot be opened (the caller then takes the side-band from its first CPU sampler, read in rounds).
/// Only a command `record` started: it has one thread when the events open, so the sampler costs one event
/// per CPU; a running process attached to may have thousands of threads, and an event per thread and CPU
/// more would halve the threads an attach can follow within the descriptor limit.
pub fn open(pids: &[u32], follow: bool) -> Option<Sampler> {
    let b = Sampler::builder()
        .samples(false)
        .sideband(true)
        .inherit(follow)
        .ring_pages(SIDEBAND_PAGES)
        .wakeup_bytes(1);
    pids.iter().fold(b, |b, &pid| b.pid(pid)).build().ok()
}
