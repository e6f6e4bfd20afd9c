//! The decoder of the sampler extension's variable-layout records: one record of a sampler's ring (its 8-byte
//! words, header first) becomes a [`SampleRecord`], borrowing its call chain, stack copy and names from those
//! words. It never allocates and refuses (`None`) a record too short for its layout.
//!
//! Every record carries a `sample_id_all` trailer (pid, tid, time, cpu for the sample types requested by
//! `sampler_event`); every layout, record kind and flag comes from `perf-event-open-sys2`'s bindings of
//! `<linux/perf_event.h>`.
//!
//! # Safety
//! One `unsafe` block: viewing a record's 8-byte words as bytes (same memory, alignment 1) for its names and its
//! stack copy.
#![allow(unsafe_code)]

use perf_event_open_sys::bindings as b;

use super::records::{Mmap, Sample, SampleRecord, UserRegs};
use super::sampler_event::SampleFormat;

/// Words of the `sample_id_all` trailer for IP|TID|TIME|CPU (+ the others, which add nothing to it): pid/tid,
/// time, cpu/res.
const TRAILER_WORDS: usize = 3;

/// The trailer of a non-sample record: (pid, tid, time, cpu).
fn trailer(words: &[u64]) -> Option<(u32, u32, u64, u32)> {
    let t = words.len().checked_sub(TRAILER_WORDS)?;
    let (pid, tid) = split(words[t]);
    Some((pid, tid, words[t + 1], words[t + 2] as u32))
}

/// The low and high 32-bit halves of a word (the kernel's `u32 a, b;` pairs on a little-endian machine; the
/// same fields on a big-endian one come out as native `u32`s too, since the word was read natively).
fn split(word: u64) -> (u32, u32) {
    let bytes = word.to_ne_bytes();
    (
        u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
        u32::from_ne_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
    )
}

/// A record's words as bytes.
fn bytes_of(words: &[u64]) -> &[u8] {
    // SAFETY: the same memory, `8 * len` bytes, read-only, borrowed for the same lifetime; u8 has alignment 1
    // and every bit pattern is a valid u8.
    unsafe { std::slice::from_raw_parts(words.as_ptr().cast::<u8>(), std::mem::size_of_val(words)) }
}

/// A NUL-padded name without its padding.
fn name(bytes: &[u8]) -> &[u8] {
    let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
    &bytes[..end]
}

/// Decode one record of a sampler's ring (its words, header first). `None` for a record kind a sampler does
/// not report (`PERF_RECORD_MMAP`, which `mmap2` replaces, and kinds never requested) and for a record too
/// short for its layout (never written by the kernel).
pub fn decode_record(words: &[u64], format: SampleFormat) -> Option<SampleRecord<'_>> {
    let header = *words.first()?;
    let kind = header as u32;
    let misc = (header >> 32) as u16;
    let body = &words[1..];
    match kind {
        b::PERF_RECORD_SAMPLE => decode_sample(body, misc, format).map(SampleRecord::Sample),
        b::PERF_RECORD_MMAP2 => decode_mmap2(body).map(SampleRecord::Mmap),
        b::PERF_RECORD_COMM => decode_comm(body, misc),
        b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => decode_task(body, kind == b::PERF_RECORD_FORK),
        b::PERF_RECORD_LOST => {
            // id, lost, trailer.
            if body.len() < 2 + TRAILER_WORDS {
                return None;
            }
            let (_, _, time, _) = trailer(body)?;
            Some(SampleRecord::Lost {
                lost: body[1],
                time,
            })
        }
        b::PERF_RECORD_LOST_SAMPLES => {
            // lost, trailer.
            if body.len() < 1 + TRAILER_WORDS {
                return None;
            }
            let (_, _, time, _) = trailer(body)?;
            Some(SampleRecord::Lost {
                lost: body[0],
                time,
            })
        }
        b::PERF_RECORD_SWITCH | b::PERF_RECORD_SWITCH_CPU_WIDE => {
            // (next_prev_pid/tid for the CPU-wide kind), trailer: the pid/tid of the trailer is the thread
            // switched (the one leaving at a switch-out, the one arriving at a switch-in).
            let fixed = usize::from(kind == b::PERF_RECORD_SWITCH_CPU_WIDE);
            if body.len() < fixed + TRAILER_WORDS {
                return None;
            }
            let (pid, tid, time, cpu) = trailer(body)?;
            let misc = u32::from(misc);
            Some(SampleRecord::Switch {
                pid,
                tid,
                time,
                cpu,
                out: misc & b::PERF_RECORD_MISC_SWITCH_OUT != 0,
                preempt: misc & b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT != 0,
            })
        }
        b::PERF_RECORD_THROTTLE | b::PERF_RECORD_UNTHROTTLE => {
            // time, id, stream_id, trailer.
            if body.len() < 3 + TRAILER_WORDS {
                return None;
            }
            Some(SampleRecord::Throttle {
                time: body[0],
                throttled: kind == b::PERF_RECORD_THROTTLE,
            })
        }
        _ => None,
    }
}

/// The body of a `PERF_RECORD_MMAP2` (the header's word removed).
fn decode_mmap2(body: &[u64]) -> Option<Mmap<'_>> {
    // pid/tid, addr, len, pgoff, maj/min, ino, ino_generation, prot/flags, filename..., trailer.
    const FIXED: usize = 8;
    let end = body.len().checked_sub(TRAILER_WORDS)?;
    if end < FIXED {
        return None;
    }
    let (pid, tid) = split(body[0]);
    let (maj, min) = split(body[4]);
    let (prot, flags) = split(body[7]);
    let (_, _, time, _) = trailer(body)?;
    Some(Mmap {
        pid,
        tid,
        time,
        addr: body[1],
        len: body[2],
        pgoff: body[3],
        prot,
        flags,
        maj,
        min,
        ino: body[5],
        ino_generation: body[6],
        filename: name(bytes_of(&body[FIXED..end])),
    })
}

/// The body of a `PERF_RECORD_COMM`; `misc` tells an exec's.
fn decode_comm(body: &[u64], misc: u16) -> Option<SampleRecord<'_>> {
    let end = body.len().checked_sub(TRAILER_WORDS)?;
    if end < 1 {
        return None;
    }
    let (pid, tid) = split(body[0]);
    let (_, _, time, _) = trailer(body)?;
    Some(SampleRecord::Comm {
        pid,
        tid,
        time,
        comm: name(bytes_of(&body[1..end])),
        exec: u32::from(misc) & b::PERF_RECORD_MISC_COMM_EXEC != 0,
    })
}

/// The body of a `PERF_RECORD_FORK` (`fork`) or `PERF_RECORD_EXIT`: pid/ppid, tid/ptid, time, trailer.
fn decode_task(body: &[u64], fork: bool) -> Option<SampleRecord<'static>> {
    if body.len() < 3 + TRAILER_WORDS {
        return None;
    }
    let (pid, ppid) = split(body[0]);
    let (tid, ptid) = split(body[1]);
    let time = body[2];
    Some(if fork {
        SampleRecord::Fork {
            pid,
            ppid,
            tid,
            ptid,
            time,
        }
    } else {
        SampleRecord::Exit {
            pid,
            ppid,
            tid,
            ptid,
            time,
        }
    })
}

/// The body of a `PERF_RECORD_SAMPLE`: ip, pid/tid, time, cpu/res, then the parts of `format`.
fn decode_sample(body: &[u64], misc: u16, format: SampleFormat) -> Option<Sample<'_>> {
    if body.len() < 4 {
        return None;
    }
    let ip = body[0];
    let (pid, tid) = split(body[1]);
    let time = body[2];
    let (cpu, _) = split(body[3]);
    let cpumode = u32::from(misc) & b::PERF_RECORD_MISC_CPUMODE_MASK;
    let kernel =
        cpumode == b::PERF_RECORD_MISC_KERNEL || cpumode == b::PERF_RECORD_MISC_GUEST_KERNEL;
    let mut at = 4;
    let mut callchain: &[u64] = &[];
    if format.callchain {
        let nr = usize::try_from(*body.get(at)?).ok()?;
        at += 1;
        callchain = body.get(at..at.checked_add(nr)?)?;
        at += nr;
    }
    let mut regs = None;
    let mut stack: &[u8] = &[];
    if format.regs {
        let abi = *body.get(at)?;
        at += 1;
        if abi != u64::from(b::PERF_SAMPLE_REGS_ABI_NONE) {
            let r = body.get(at..at + 3)?;
            regs = Some(UserRegs {
                bp: r[0],
                sp: r[1],
                ip: r[2],
            });
            at += 3;
        }
    }
    let (mut ip, mut kernel) = (ip, kernel);
    if format.user_entry
        && let Some(r) = regs
    {
        // Taken in the kernel for a user-space sampler: where the thread entered the kernel.
        (ip, kernel) = (r.ip, false);
    }
    if format.user_stack {
        let size = usize::try_from(*body.get(at)?).ok()?;
        at += 1;
        if size > 0 {
            let words = size.div_ceil(8);
            let data = body.get(at..at.checked_add(words)?)?;
            at += words;
            let dyn_size = usize::try_from(*body.get(at)?).ok()?;
            stack = &bytes_of(data)[..dyn_size.min(size)];
        }
    }
    Some(Sample {
        pid,
        tid,
        time,
        cpu,
        ip,
        kernel,
        callchain,
        regs,
        stack,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u32, misc: u16, words: usize) -> u64 {
        u64::from(kind) | u64::from(misc) << 32 | ((words as u64 * 8) << 48)
    }

    fn pair(a: u32, b: u32) -> u64 {
        u64::from(a) | u64::from(b) << 32
    }

    fn text(s: &str, words: usize) -> Vec<u64> {
        let mut bytes = s.as_bytes().to_vec();
        bytes.resize(words * 8, 0);
        bytes
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// A sample with a call chain, registers and a stack copy whose dyn_size is below its size.
    #[test]
    fn a_full_sample_decodes_and_every_truncation_is_refused() {
        let format = SampleFormat {
            callchain: true,
            regs: true,
            user_stack: true,
            user_entry: false,
        };
        let mut body = vec![0x401000, pair(10, 11), 123_456, pair(1, 0)];
        body.extend([3, b::PERF_CONTEXT_USER, 0x401000, 0x401100]);
        body.extend([
            u64::from(b::PERF_SAMPLE_REGS_ABI_64),
            0xB0,
            0x5000,
            0x401000,
        ]);
        body.extend([16, 0x1111, 0x2222, 12]);
        let mut words = vec![header(b::PERF_RECORD_SAMPLE, 2, body.len() + 1)];
        words.extend(&body);
        let Some(SampleRecord::Sample(s)) = decode_record(&words, format) else {
            panic!("not a sample");
        };
        assert_eq!(
            (s.pid, s.tid, s.time, s.cpu, s.ip, s.kernel),
            (10, 11, 123_456, 1, 0x401000, false)
        );
        assert_eq!(s.callchain, [b::PERF_CONTEXT_USER, 0x401000, 0x401100]);
        assert_eq!(
            s.regs,
            Some(UserRegs {
                ip: 0x401000,
                sp: 0x5000,
                bp: 0xB0
            })
        );
        assert_eq!(s.stack.len(), 12, "dyn_size bytes of the copy");
        // Every shorter record is refused, never read past its end.
        for n in 1..words.len() {
            assert!(decode_record(&words[..n], format).is_none(), "{n} words");
        }
        // A callchain length beyond the record.
        let mut bad = words.clone();
        bad[5] = u64::MAX;
        assert!(decode_record(&bad, format).is_none());
    }

    /// The side-band kinds (mmap2, comm of an exec, fork, exit, lost) with their `sample_id_all` trailer, each
    /// checked field by field, and a truncated one refused: a little over 80 lines, one short case per kind,
    /// read together.
    #[test]
    fn side_band_records_decode_with_their_trailer() {
        let format = SampleFormat::default();
        let trailer = [pair(7, 8), 999, pair(1, 0)];
        // MMAP2 of "/bin/x".
        let mut body = vec![
            pair(7, 8),
            0x1000,
            0x2000,
            0x3000,
            pair(8, 1),
            42,
            1,
            pair(5, 2),
        ];
        body.extend(text("/bin/x", 1));
        body.extend(trailer);
        let mut words = vec![header(b::PERF_RECORD_MMAP2, 0, body.len() + 1)];
        words.extend(&body);
        let Some(SampleRecord::Mmap(m)) = decode_record(&words, format) else {
            panic!("not an mmap");
        };
        assert_eq!(
            (
                m.pid, m.tid, m.time, m.addr, m.len, m.pgoff, m.maj, m.min, m.ino, m.prot, m.flags
            ),
            (7, 8, 999, 0x1000, 0x2000, 0x3000, 8, 1, 42, 5, 2)
        );
        assert_eq!(m.filename, b"/bin/x");
        // COMM with the exec flag.
        let mut body = vec![pair(7, 7)];
        body.extend(text("leaf", 1));
        body.extend(trailer);
        let mut words = vec![header(
            b::PERF_RECORD_COMM,
            b::PERF_RECORD_MISC_COMM_EXEC as u16,
            6,
        )];
        words.extend(&body);
        match decode_record(&words, format) {
            Some(SampleRecord::Comm {
                comm, exec, time, ..
            }) => {
                assert_eq!((comm, exec, time), (&b"leaf"[..], true, 999))
            }
            other => panic!("{other:?}"),
        }
        // FORK and EXIT.
        let mut words = vec![
            header(b::PERF_RECORD_FORK, 0, 7),
            pair(9, 7),
            pair(9, 7),
            555,
        ];
        words.extend(trailer);
        assert!(matches!(
            decode_record(&words, format),
            Some(SampleRecord::Fork {
                pid: 9,
                ppid: 7,
                tid: 9,
                ptid: 7,
                time: 555
            })
        ));
        words[0] = header(b::PERF_RECORD_EXIT, 0, 7);
        assert!(matches!(
            decode_record(&words, format),
            Some(SampleRecord::Exit { pid: 9, .. })
        ));
        // LOST and an unknown kind.
        let mut words = vec![header(b::PERF_RECORD_LOST, 0, 6), 1, 17];
        words.extend(trailer);
        assert!(matches!(
            decode_record(&words, format),
            Some(SampleRecord::Lost {
                lost: 17,
                time: 999
            })
        ));
        words[0] = header(1000, 0, 6);
        assert!(decode_record(&words, format).is_none());
    }

    /// Switch records: out (voluntary and preempted) and in, per task and CPU-wide, and a truncated one.
    #[test]
    fn switch_records_decode_direction_preemption_and_trailer() {
        let format = SampleFormat::default();
        let trailer = [pair(7, 8), 999, pair(1, 0)];
        let out_preempt =
            (b::PERF_RECORD_MISC_SWITCH_OUT | b::PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) as u16;
        for (misc, out, preempt) in [
            (b::PERF_RECORD_MISC_SWITCH_OUT as u16, true, false),
            (out_preempt, true, true),
            (0, false, false),
        ] {
            let mut words = vec![header(b::PERF_RECORD_SWITCH, misc, 4)];
            words.extend(trailer);
            match decode_record(&words, format) {
                Some(SampleRecord::Switch {
                    pid: 7,
                    tid: 8,
                    time: 999,
                    cpu: 1,
                    out: o,
                    preempt: p,
                }) => assert_eq!((o, p), (out, preempt)),
                other => panic!("{other:?}"),
            }
            let mut wide = vec![header(b::PERF_RECORD_SWITCH_CPU_WIDE, misc, 5), pair(3, 4)];
            wide.extend(trailer);
            assert!(matches!(
                decode_record(&wide, format),
                Some(SampleRecord::Switch { pid: 7, tid: 8, .. })
            ));
            assert!(decode_record(&wide[..4], format).is_none());
            assert!(decode_record(&words[..3], format).is_none());
        }
    }
}
