//! The fixed-layout decoder of the engine's ring records (`PERF_RECORD_SAMPLE` with IP and optionally TID,
//! lost, throttle), apart from the memory it reads: it never allocates, and runs over a mapped ring
//! ([`Ring::drain`](super::ring::Ring::drain)) or a byte slice (the fuzzer, Miri).
//!
//! The record kinds and header layout come from `perf-event-open-sys2`'s bindings of `<linux/perf_event.h>`;
//! the sample layout (which fields follow the header) is the one the engine's events request.

use std::mem::offset_of;

use perf_event_open_sys::bindings;

pub(super) const RECORD_LOST: u32 = bindings::PERF_RECORD_LOST;
pub(super) const RECORD_THROTTLE: u32 = bindings::PERF_RECORD_THROTTLE;
pub(super) const RECORD_UNTHROTTLE: u32 = bindings::PERF_RECORD_UNTHROTTLE;
pub(super) const RECORD_SAMPLE: u32 = bindings::PERF_RECORD_SAMPLE;
pub(super) const RECORD_LOST_SAMPLES: u32 = bindings::PERF_RECORD_LOST_SAMPLES;
pub(super) const RECORD_FORK: u32 = bindings::PERF_RECORD_FORK;
pub(super) const RECORD_EXIT: u32 = bindings::PERF_RECORD_EXIT;

/// One 8-byte word of the ring: records and their fields are 8-aligned `u64`s.
pub(super) const WORD: u64 = std::mem::size_of::<u64>() as u64;
/// Size of `struct perf_event_header`, the first word of every record.
pub(super) const HEADER: u64 = std::mem::size_of::<bindings::perf_event_header>() as u64;
/// Bit position of `perf_event_header.size` in the header word read as a little-endian `u64`.
pub(super) const SIZE_SHIFT: u64 = 8 * offset_of!(bindings::perf_event_header, size) as u64;
const _: () = assert!(offset_of!(bindings::perf_event_header, type_) == 0 && HEADER == WORD);

/// `PERF_RECORD_SAMPLE` with `PERF_SAMPLE_IP`: the IP is the word after the header.
const SAMPLE_IP: u64 = HEADER;
/// `PERF_SAMPLE_TID` (`u32 pid, tid`) follows the IP.
const SAMPLE_TID: u64 = SAMPLE_IP + WORD;
/// How many user registers a sample with `PERF_SAMPLE_REGS_USER` carries ([`USER_IP_MASK`](super::event::USER_IP_MASK)'s bits).
const USER_REGS: u64 = super::event::USER_IP_MASK.count_ones() as u64;
/// `PERF_SAMPLE_REGS_USER`'s `abi` of a sample with no user registers (a kernel thread).
const REGS_ABI_NONE: u64 = bindings::PERF_SAMPLE_REGS_ABI_NONE as u64;
/// `PERF_RECORD_LOST`: `u64 id, lost` after the header.
const LOST_LOST: u64 = HEADER + WORD;
/// `PERF_RECORD_LOST_SAMPLES`: `u64 lost` after the header.
const LOST_SAMPLES_LOST: u64 = HEADER;
/// `PERF_RECORD_FORK` and `PERF_RECORD_EXIT`: `u32 pid, ppid, tid, ptid; u64 time` after the header.
const TASK_PID: u64 = HEADER;
const TASK_TID: u64 = HEADER + WORD;

/// `Record::Sample::cpu` of a sample that does not record its processor.
pub const NO_CPU: u32 = u32::MAX;

/// The layout of a stream's `PERF_RECORD_SAMPLE`: always `PERF_SAMPLE_IP`, optionally `PERF_SAMPLE_TID`, then
/// optionally `PERF_SAMPLE_REGS_USER` ([`USER_IP_MASK`](super::event::USER_IP_MASK), the ip last).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleLayout {
    /// `PERF_SAMPLE_TID` follows the IP.
    pub tid: bool,
    /// `PERF_SAMPLE_REGS_USER` (`abi`, then the user ip unless `abi` is `PERF_SAMPLE_REGS_ABI_NONE`) follows:
    /// a sample that has the user ip is reported at it (an event sampled in the kernel: the address where the
    /// thread entered the kernel); one without (a kernel thread) keeps its kernel ip.
    pub user_ip: bool,
    /// `PERF_SAMPLE_CPU` (`u32 cpu, res`) follows the IP and TID: the ring of a per-thread event (any
    /// processor) tells the processor of each sample this way.
    pub cpu: bool,
}

/// One decoded record. Only the kinds the consumer acts on are told apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record {
    /// `PERF_RECORD_SAMPLE`: the sampled program counter, and the process and thread when recorded.
    Sample {
        /// The sampled instruction pointer.
        ip: u64,
        /// Process id (0 when not recorded).
        pid: u32,
        /// Thread id (0 when not recorded).
        tid: u32,
        /// The processor the sample was taken on ([`NO_CPU`] when not recorded: the ring's own processor).
        cpu: u32,
    },
    /// `PERF_RECORD_LOST` or `PERF_RECORD_LOST_SAMPLES`: this many samples were dropped.
    Lost(u64),
    /// `PERF_RECORD_THROTTLE`: the kernel throttled the event.
    Throttle,
    /// `PERF_RECORD_FORK` (an event with `task` set): the task created thread `tid` of process `pid`.
    Fork {
        /// The new thread's process.
        pid: u32,
        /// The new thread.
        tid: u32,
    },
    /// `PERF_RECORD_EXIT` (an event with `task` set): thread `tid` of process `pid` exited.
    Exit {
        /// The thread's process.
        pid: u32,
        /// The thread.
        tid: u32,
    },
    /// `PERF_RECORD_UNTHROTTLE`.
    Unthrottle,
    /// Anything else (ignored).
    Other,
}

/// The record decoder, apart from the memory it reads (so that it can be fuzzed and run under Miri over a byte
/// slice): decode the records at ring positions `[tail, head)`, reading 8-byte words with `word(pos)` (called
/// only with 8-aligned positions in `[tail, head)`), hand each to `sink`. Returns the position reached (the new
/// `data_tail`) and the number of records.
///
/// Whatever the words say, it terminates after at most `ring_len / 8` records, never reads outside
/// `[tail, head)` and never asks for an unaligned word: a header with a size below 8, not a multiple of 8 or
/// running past `head` (torn or corrupt) ends the pass at `head`; so does an unaligned `tail`, and a `head`
/// more than a ring's length (`ring_len` bytes) ahead of `tail`, which the kernel never publishes (reading it
/// would go round the ring again and again).
#[inline(always)]
pub(crate) fn decode(
    mut word: impl FnMut(u64) -> u64,
    tail: u64,
    head: u64,
    ring_len: u64,
    layout: SampleLayout,
    mut sink: impl FnMut(Record),
) -> (u64, u64) {
    let mut pos = tail;
    let mut n = 0;
    if pos % WORD != 0 || head.saturating_sub(tail) > ring_len {
        return (head.max(tail), 0);
    }
    while pos < head {
        let header = word(pos);
        let kind = header as u32;
        let size = header >> SIZE_SHIFT;
        if size < HEADER || size % WORD != 0 || size > head - pos {
            // A torn or corrupt header: never loop forever; skip to head.
            pos = head;
            break;
        }
        let rec = match kind {
            RECORD_SAMPLE if size >= SAMPLE_IP + WORD => {
                let mut ip = word(pos + SAMPLE_IP);
                let (pid, tid) = if layout.tid && size >= SAMPLE_TID + WORD {
                    let w = word(pos + SAMPLE_TID);
                    (w as u32, (w >> u32::BITS) as u32)
                } else {
                    (0, 0)
                };
                let cpu_at = SAMPLE_TID + if layout.tid { WORD } else { 0 };
                let cpu = if layout.cpu && size >= cpu_at + WORD {
                    word(pos + cpu_at) as u32
                } else {
                    NO_CPU
                };
                if layout.user_ip {
                    let regs = cpu_at + if layout.cpu { WORD } else { 0 };
                    ip = user_entry_ip(&mut word, pos, size, regs, ip);
                }
                Record::Sample { ip, pid, tid, cpu }
            }
            RECORD_LOST if size >= LOST_LOST + WORD => Record::Lost(word(pos + LOST_LOST)),
            RECORD_LOST_SAMPLES if size >= LOST_SAMPLES_LOST + WORD => {
                Record::Lost(word(pos + LOST_SAMPLES_LOST))
            }
            RECORD_THROTTLE => Record::Throttle,
            RECORD_UNTHROTTLE => Record::Unthrottle,
            RECORD_FORK | RECORD_EXIT if size >= TASK_TID + WORD => {
                let (pid, tid) = (word(pos + TASK_PID) as u32, word(pos + TASK_TID) as u32);
                if kind == RECORD_FORK {
                    Record::Fork { pid, tid }
                } else {
                    Record::Exit { pid, tid }
                }
            }
            _ => Record::Other,
        };
        sink(rec);
        n += 1;
        pos += size;
    }
    (pos, n)
}

/// The user ip of the sample at `pos` (`size` bytes) whose registers start at offset `regs`: `abi`, then
/// (unless `abi` is NONE) the user registers, the ip last; `ip` when it has none (a kernel thread). Kept out of
/// the decoding loop, which costs one test per sample for it.
#[inline(never)]
fn user_entry_ip(
    word: &mut impl FnMut(u64) -> u64,
    pos: u64,
    size: u64,
    regs: u64,
    ip: u64,
) -> u64 {
    let ip_at = regs + USER_REGS * WORD;
    if size >= ip_at + WORD && word(pos + regs) != REGS_ABI_NONE {
        word(pos + ip_at)
    } else {
        ip
    }
}

/// [`decode`] over a byte slice standing for a ring's data area (its length a power of two, at least 8):
/// position `pos` is byte `pos & (len - 1)`. For the fuzzer and Miri; the consumer reads mapped rings.
pub(crate) fn decode_slice(
    data: &[u8],
    tail: u64,
    head: u64,
    layout: SampleLayout,
    sink: impl FnMut(Record),
) -> (u64, u64) {
    assert!(data.len().is_power_of_two() && data.len() >= 8);
    let mask = data.len() as u64 - 1;
    let word = |pos: u64| {
        assert!(
            pos % 8 == 0 && pos >= tail && pos < head,
            "read outside [tail, head)"
        );
        let off = (pos & mask) as usize;
        let mut w = [0u8; 8];
        w.copy_from_slice(&data[off..off + 8]);
        u64::from_ne_bytes(w)
    };
    decode(word, tail, head, data.len() as u64, layout, sink)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u32, size: u64) -> u64 {
        u64::from(kind) | (size << 48)
    }

    fn ring_of(words: &[u64], len: usize) -> Vec<u8> {
        let mut data = vec![0u8; len];
        for (i, w) in words.iter().enumerate() {
            data[i * 8..i * 8 + 8].copy_from_slice(&w.to_ne_bytes());
        }
        data
    }

    #[test]
    fn decodes_records_and_wraps() {
        let layout = SampleLayout {
            tid: true,
            user_ip: false,
            cpu: false,
        };
        // A sample with tid, a lost record, a throttle, in a 64-byte ring starting 40 bytes in (it wraps).
        let recs = [
            header(RECORD_SAMPLE, 24),
            0x1234,
            (7u64 << 32) | 5,
            header(RECORD_LOST, 24),
            99,
            3,
            header(RECORD_THROTTLE, 8),
        ];
        let mut data = vec![0u8; 64];
        for (i, w) in recs.iter().enumerate() {
            let off = (40 + i * 8) % 64;
            data[off..off + 8].copy_from_slice(&w.to_ne_bytes());
        }
        let mut got = Vec::new();
        let (pos, n) = decode_slice(&data, 40, 40 + 56, layout, |r| got.push(r));
        assert_eq!((pos, n), (96, 3));
        assert_eq!(
            got,
            [
                Record::Sample {
                    ip: 0x1234,
                    pid: 5,
                    tid: 7,
                    cpu: NO_CPU
                },
                Record::Lost(3),
                Record::Throttle
            ]
        );
    }

    #[test]
    fn decodes_fork_and_exit_records() {
        let layout = SampleLayout::default();
        // FORK of thread 12 of process 10 by thread 11; EXIT of thread 12; a record too short to hold a tid.
        let words = [
            header(RECORD_FORK, 32),
            (10u64 << 32) | 10,
            (11u64 << 32) | 12,
            77,
            header(RECORD_EXIT, 32),
            (10u64 << 32) | 10,
            (11u64 << 32) | 12,
            78,
            header(RECORD_EXIT, 16),
            10,
        ];
        let data = ring_of(&words, 128);
        let mut got = Vec::new();
        let (pos, n) = decode_slice(&data, 0, 8 * words.len() as u64, layout, |r| got.push(r));
        assert_eq!((pos, n), (80, 3));
        assert_eq!(
            got,
            [
                Record::Fork { pid: 10, tid: 12 },
                Record::Exit { pid: 10, tid: 12 },
                Record::Other
            ]
        );
    }

    #[test]
    fn a_user_ip_layout_reports_the_user_ip() {
        let layout = SampleLayout {
            tid: true,
            user_ip: true,
            cpu: false,
        };
        let regs = USER_REGS as usize;
        // A sample with user registers (abi 2 = 64-bit, the ip last), then one of a kernel thread (abi NONE).
        let mut words = vec![
            header(RECORD_SAMPLE, 8 * (4 + regs as u64)),
            0xffff_ffff_8100_0000,
            (7u64 << 32) | 5,
            2,
        ];
        words.extend((0..regs as u64).map(|i| 0x40_1000 + i));
        words.extend([
            header(RECORD_SAMPLE, 32),
            0xffff_ffff_8100_0040,
            (9u64 << 32) | 9,
            REGS_ABI_NONE,
        ]);
        let data = ring_of(&words, 128);
        let mut got = Vec::new();
        let (pos, n) = decode_slice(&data, 0, 8 * words.len() as u64, layout, |r| got.push(r));
        assert_eq!((pos, n), (8 * words.len() as u64, 2));
        assert_eq!(
            got,
            [
                Record::Sample {
                    ip: 0x40_1000 + regs as u64 - 1,
                    pid: 5,
                    tid: 7,
                    cpu: NO_CPU
                },
                Record::Sample {
                    ip: 0xffff_ffff_8100_0040,
                    pid: 9,
                    tid: 9,
                    cpu: NO_CPU
                }
            ]
        );
    }

    #[test]
    fn a_cpu_layout_reports_the_processor_and_keeps_the_user_ip_after_it() {
        let layout = SampleLayout {
            tid: false,
            user_ip: true,
            cpu: true,
        };
        let regs = USER_REGS as usize;
        // ip, cpu (u32 cpu, u32 res), then the register block; then a sample of the plain IP|CPU layout.
        let mut words = vec![
            header(RECORD_SAMPLE, 8 * (4 + regs as u64)),
            0xffff_ffff_8100_0000,
            3,
            2,
        ];
        words.extend((0..regs as u64).map(|i| 0x40_2000 + i));
        let data = ring_of(&words, 128);
        let mut got = Vec::new();
        decode_slice(&data, 0, 8 * words.len() as u64, layout, |r| got.push(r));
        assert_eq!(
            got,
            [Record::Sample {
                ip: 0x40_2000 + regs as u64 - 1,
                pid: 0,
                tid: 0,
                cpu: 3
            }]
        );
        let plain = SampleLayout {
            tid: true,
            user_ip: false,
            cpu: true,
        };
        let words = [header(RECORD_SAMPLE, 32), 0x1234, (7u64 << 32) | 5, 1];
        let data = ring_of(&words, 64);
        let mut got = Vec::new();
        decode_slice(&data, 0, 32, plain, |r| got.push(r));
        assert_eq!(
            got,
            [Record::Sample {
                ip: 0x1234,
                pid: 5,
                tid: 7,
                cpu: 1
            }]
        );
    }

    #[test]
    fn corrupt_headers_end_the_pass() {
        let layout = SampleLayout {
            tid: false,
            user_ip: false,
            cpu: false,
        };
        for bad in [
            header(RECORD_SAMPLE, 0),
            header(RECORD_SAMPLE, 12),
            header(RECORD_SAMPLE, 4096),
        ] {
            let data = ring_of(&[bad, 1, 2, 3], 32);
            let mut count = 0;
            assert_eq!(decode_slice(&data, 0, 32, layout, |_| count += 1), (32, 0));
            assert_eq!(count, 0);
        }
        // Unaligned tail, head before tail, positions near the top of u64.
        let data = ring_of(&[header(RECORD_SAMPLE, 16), 1], 16);
        assert_eq!(decode_slice(&data, 3, 19, layout, |_| ()), (19, 0));
        assert_eq!(decode_slice(&data, 16, 8, layout, |_| ()), (16, 0));
        // A head further ahead than the ring is long: never read round and round.
        let throttles = ring_of(
            &[header(RECORD_THROTTLE, 8), header(RECORD_THROTTLE, 8)],
            16,
        );
        assert_eq!(decode_slice(&throttles, 0, 16, layout, |_| ()), (16, 2));
        assert_eq!(decode_slice(&throttles, 0, 24, layout, |_| ()), (24, 0));
        assert_eq!(
            decode_slice(&throttles, 0, !7u64, layout, |_| ()),
            (!7u64, 0)
        );
        let top = u64::MAX - 31;
        assert_eq!(decode_slice(&data, top + 1, u64::MAX, layout, |_| ()).1, 0);
        assert_eq!(
            decode_slice(&data, top, top + 16, layout, |_| ()),
            (top + 16, 1)
        );
        // A header whose size runs past the top of u64 ends the pass without overflow.
        let data = ring_of(&[header(RECORD_SAMPLE, 0xFFF8), 1], 16);
        assert_eq!(
            decode_slice(&data, top + 16, u64::MAX, layout, |_| ()),
            (u64::MAX, 0)
        );
    }
}
