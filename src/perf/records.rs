//! The sampler extension's kernel side: the perf events of a sampler (samples with tid, time, cpu, optional
//! call chain, user registers and user stack; side-band records of mappings, comm/exec, fork and exit) and the
//! decoder of their variable-layout records.
//!
//! The record types are the public ones of `ntprofile::sampler` (re-exported there): a record borrows its
//! variable parts (call chain, stack copy, names) from the ring, or from the caller's scratch buffer for a
//! record that wraps round the ring's end, for the duration of one call of the caller's function.
//!
//! Every record carries a `sample_id_all` trailer (pid, tid, time, cpu for the sample types requested here);
//! every layout, record kind and flag comes from `perf-event-open-sys2`'s bindings of `<linux/perf_event.h>`.
//!
//! # Safety
//! One `unsafe` block: viewing a record's 8-byte words as bytes (same memory, alignment 1) for its names and its
//! stack copy. The event opening goes through perf-event2's `Builder`.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, IntoRawFd, OwnedFd};

use nix::errno::Errno;
use perf_event::Builder;
use perf_event_open_sys::bindings as b;

use super::event::{PerfEventSpec, SpecEvent, errno_of};
use super::sys::Tid;

/// What a sampler counted since it was built.
///
/// `samples` counts the [`SampleRecord::Sample`] records delivered, `records` every record delivered,
/// `lost` the records the kernel dropped because a ring was full ([`SampleRecord::Lost`]), `throttled` and
/// `unthrottled` the kernel's throttle and unthrottle records (the sample rate was above
/// `kernel.perf_event_max_sample_rate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SamplerStats {
    /// Records delivered, of every kind.
    pub records: u64,
    /// [`SampleRecord::Sample`] records delivered.
    pub samples: u64,
    /// Records the kernel dropped (a full ring): the sum of every [`SampleRecord::Lost`]'s `lost`.
    pub lost: u64,
    /// Throttle records: sampling of an event was paused because the sample rate was too high.
    pub throttled: u64,
    /// Unthrottle records: sampling resumed.
    pub unthrottled: u64,
}

/// One record of a sampler's rings.
///
/// Every record carries the kernel's `time` ([`sampler_clock_ns`](crate::sampler_clock_ns)'s clock). Within
/// one ring, records come in the order the kernel wrote them; across rings (one per CPU) order them by `time`.
#[derive(Debug)]
pub enum SampleRecord<'a> {
    /// A sample.
    Sample(Sample<'a>),
    /// An executable mapping appeared (`PERF_RECORD_MMAP2`): a file mapped executable, an anonymous region
    /// made executable (`//anon`, JIT code), the vDSO.
    Mmap(Mmap<'a>),
    /// A thread's command name changed (`PERF_RECORD_COMM`); `exec` when the change comes from an `execve`
    /// (the Comm record of an exec comes before the Mmap records of the new image).
    Comm {
        /// Process id.
        pid: u32,
        /// Thread id.
        tid: u32,
        /// Kernel time of the change.
        time: u64,
        /// The new command name, without its NUL padding.
        comm: &'a [u8],
        /// True when the name changed because of an `execve` (`PERF_RECORD_MISC_COMM_EXEC`).
        exec: bool,
    },
    /// A thread or process was created (`PERF_RECORD_FORK`); a new thread of an existing process has
    /// `pid == ppid`.
    Fork {
        /// Process id of the new task.
        pid: u32,
        /// Process id of its creator.
        ppid: u32,
        /// Thread id of the new task.
        tid: u32,
        /// Thread id of its creator.
        ptid: u32,
        /// Kernel time of the creation.
        time: u64,
    },
    /// A thread exited (`PERF_RECORD_EXIT`); `pid == tid` for the process's main thread.
    Exit {
        /// Process id.
        pid: u32,
        /// Parent process id.
        ppid: u32,
        /// Thread id.
        tid: u32,
        /// Parent thread id.
        ptid: u32,
        /// Kernel time of the exit.
        time: u64,
    },
    /// The kernel dropped `lost` records because the ring was full (`PERF_RECORD_LOST`, `PERF_RECORD_LOST_SAMPLES`).
    Lost {
        /// Records dropped.
        lost: u64,
        /// Kernel time of the report.
        time: u64,
    },
    /// Sampling was throttled (`throttled: true`) or resumed (`false`) by the kernel's sample-rate limit.
    Throttle {
        /// Kernel time.
        time: u64,
        /// True for a throttle, false for an unthrottle.
        throttled: bool,
    },
}

/// A sample: who, when, where, and optionally the call chain and a copy of the user stack.
#[derive(Debug, Clone, Copy)]
pub struct Sample<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Kernel time of the sample ([`sampler_clock_ns`](crate::sampler_clock_ns)'s clock).
    pub time: u64,
    /// The CPU the sample was taken on.
    pub cpu: u32,
    /// The sampled instruction address.
    pub ip: u64,
    /// The ip is a kernel address (the record's cpumode).
    pub kernel: bool,
    /// The raw call chain, with the kernel's `PERF_CONTEXT_*` markers; empty without
    /// [`SamplerBuilder::callchain`](crate::SamplerBuilder::callchain). See [`Sample::frames`].
    pub callchain: &'a [u64],
    /// With [`SamplerBuilder::user_stack`](crate::SamplerBuilder::user_stack): the user registers at the
    /// sample; `None` when the sample has none (a kernel thread, or the option is off).
    pub regs: Option<UserRegs>,
    /// With [`SamplerBuilder::user_stack`](crate::SamplerBuilder::user_stack): the copy of the user stack from
    /// `regs.sp` upward, as many bytes as the kernel could copy (empty otherwise).
    pub stack: &'a [u8],
}

/// The first value of the kernel's call-chain context markers (`PERF_CONTEXT_MAX`): every entry at or above it
/// is a marker, not an address.
const CONTEXT_MAX: u64 = perf_event_open_sys::bindings::PERF_CONTEXT_MAX;

impl<'a> Sample<'a> {
    /// The call chain without its markers: each address with the context it belongs to (the kernel puts a
    /// marker before the kernel part, the user part and the guest parts).
    ///
    /// ```
    /// use ntprofile::{CallchainContext, Sample};
    ///
    /// // PERF_CONTEXT_KERNEL, two kernel frames, PERF_CONTEXT_USER, one user frame.
    /// let chain = [u64::MAX - 127, 0xffff_ffff_8100_0000, 0xffff_ffff_8100_0100, u64::MAX - 511, 0x401000];
    /// let sample = Sample {
    ///     pid: 1, tid: 1, time: 0, cpu: 0, ip: 0xffff_ffff_8100_0000, kernel: true,
    ///     callchain: &chain, regs: None, stack: &[],
    /// };
    /// let frames: Vec<_> = sample.frames().collect();
    /// assert_eq!(frames, [
    ///     (CallchainContext::Kernel, 0xffff_ffff_8100_0000),
    ///     (CallchainContext::Kernel, 0xffff_ffff_8100_0100),
    ///     (CallchainContext::User, 0x401000),
    /// ]);
    /// ```
    pub fn frames(&self) -> impl Iterator<Item = (CallchainContext, u64)> + 'a {
        let mut context = if self.kernel {
            CallchainContext::Kernel
        } else {
            CallchainContext::User
        };
        self.callchain.iter().filter_map(move |&entry| {
            if entry >= CONTEXT_MAX {
                context = context_of(entry).unwrap_or(context);
                None
            } else {
                Some((context, entry))
            }
        })
    }
}

/// The context a marker opens (`None` for a value that is no marker the kernel defines).
fn context_of(marker: u64) -> Option<CallchainContext> {
    use perf_event_open_sys::bindings as b;
    match marker {
        b::PERF_CONTEXT_KERNEL | b::PERF_CONTEXT_HV => Some(CallchainContext::Kernel),
        b::PERF_CONTEXT_USER => Some(CallchainContext::User),
        b::PERF_CONTEXT_GUEST | b::PERF_CONTEXT_GUEST_KERNEL | b::PERF_CONTEXT_GUEST_USER => {
            Some(CallchainContext::Guest)
        }
        _ => None,
    }
}

/// Which part of the call chain an address belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallchainContext {
    /// A kernel (or hypervisor) address.
    Kernel,
    /// A user-space address of the sampled process.
    User,
    /// An address of a guest (virtual machine) context.
    Guest,
}

/// The user registers a sample carries with [`SamplerBuilder::user_stack`](crate::SamplerBuilder::user_stack):
/// what a DWARF unwinder needs to start from the stack copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UserRegs {
    /// Instruction pointer.
    pub ip: u64,
    /// Stack pointer: the address of the first byte of [`Sample::stack`].
    pub sp: u64,
    /// Frame pointer (`rbp` on x86-64, `x29` on AArch64).
    pub bp: u64,
}

/// An executable mapping (`PERF_RECORD_MMAP2`).
#[derive(Debug, Clone, Copy)]
pub struct Mmap<'a> {
    /// Process id.
    pub pid: u32,
    /// Thread id of the thread that mapped it.
    pub tid: u32,
    /// Kernel time of the mapping.
    pub time: u64,
    /// Start address.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// File offset of `addr` (bytes, page-aligned).
    pub pgoff: u64,
    /// `PROT_*` bits.
    pub prot: u32,
    /// `MAP_*` bits.
    pub flags: u32,
    /// Device major number of the file.
    pub maj: u32,
    /// Device minor number of the file.
    pub min: u32,
    /// Inode number of the file.
    pub ino: u64,
    /// Inode generation of the file.
    pub ino_generation: u64,
    /// The file name without its NUL padding: a path, `//anon`, `[vdso]`, `/memfd:x (deleted)`, ...
    pub filename: &'a [u8],
}

/// What a sampler's events record and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SamplerEventParams {
    /// The event.
    pub spec: PerfEventSpec,
    /// Sample period (ns for timers, events otherwise).
    pub period: u64,
    /// `exclude_kernel` (and `exclude_callchain_kernel`).
    pub exclude_kernel: bool,
    /// `inherit`: tasks created by an observed task are observed too.
    pub inherit: bool,
    /// `inherit_thread`: only threads (`CLONE_THREAD`) inherit, not new processes.
    pub inherit_thread: bool,
    /// Side-band records: `mmap`, `mmap2`, `comm`, `comm_exec`, `task`.
    pub sideband: bool,
    /// `PERF_SAMPLE_CALLCHAIN` with `sample_max_stack` frames (0: no call chain).
    pub max_stack: u16,
    /// `PERF_SAMPLE_REGS_USER` (ip, sp, frame pointer) and `PERF_SAMPLE_STACK_USER` of this many bytes (a
    /// multiple of 8; 0: neither).
    pub stack_user: u32,
    /// Wake-up watermark in bytes.
    pub wakeup_watermark: usize,
}

/// The user registers a sample carries: the frame pointer, the stack pointer and the instruction pointer, in
/// the order of their bits in the mask (ascending), which is the order the kernel writes them in.
#[cfg(target_arch = "x86_64")]
pub const USER_REGS_MASK: u64 =
    1 << b::PERF_REG_X86_BP | 1 << b::PERF_REG_X86_SP | 1 << b::PERF_REG_X86_IP;
/// The user registers a sample carries (`x29`, `sp`, `pc`), in the order the kernel writes them.
#[cfg(target_arch = "aarch64")]
pub const USER_REGS_MASK: u64 =
    1 << b::PERF_REG_ARM64_X29 | 1 << b::PERF_REG_ARM64_SP | 1 << b::PERF_REG_ARM64_PC;
/// No user-register dump on this architecture (a sampler with a user stack is not supported here).
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const USER_REGS_MASK: u64 = 0;

/// The largest user-stack copy the kernel accepts: below `u16::MAX` and a multiple of 8.
pub const MAX_STACK_USER: u32 = 65_528;

/// The sample layout of events opened with `params`: what follows the fixed fields of a sample.
pub fn format_of(params: &SamplerEventParams) -> SampleFormat {
    SampleFormat {
        callchain: params.max_stack > 0,
        user_stack: params.stack_user > 0,
    }
}

/// Open one sampler event, disabled, for task `tid` (or [`Tid::ALL_TASKS`]) on CPU `cpu`: `sample_type`
/// IP|TID|TIME|CPU (+CALLCHAIN, +REGS_USER|STACK_USER), `sample_id_all`, the monotonic clock, and the
/// side-band flags of `params`.
///
/// # Errors
/// The errno of `perf_event_open(2)`.
pub fn open_sampler_event(
    params: &SamplerEventParams,
    tid: Tid,
    cpu: usize,
) -> Result<OwnedFd, Errno> {
    let mut builder = Builder::new(SpecEvent(params.spec));
    if tid == Tid::ALL_TASKS {
        builder.any_pid();
    } else {
        builder.observe_pid(tid.0);
    }
    builder
        .one_cpu(cpu)
        .sample_period(params.period)
        .exclude_kernel(params.exclude_kernel)
        .exclude_hv(true)
        .inherit(params.inherit)
        .inherit_thread(params.inherit && params.inherit_thread)
        .wakeup_watermark(params.wakeup_watermark)
        .enabled(false);
    let attr = builder.attrs_mut();
    let mut sample_type = u64::from(b::PERF_SAMPLE_IP)
        | u64::from(b::PERF_SAMPLE_TID)
        | u64::from(b::PERF_SAMPLE_TIME)
        | u64::from(b::PERF_SAMPLE_CPU);
    if params.max_stack > 0 {
        sample_type |= u64::from(b::PERF_SAMPLE_CALLCHAIN);
        attr.sample_max_stack = params.max_stack;
        attr.set_exclude_callchain_kernel(u64::from(params.exclude_kernel));
    }
    if params.stack_user > 0 {
        sample_type |= u64::from(b::PERF_SAMPLE_REGS_USER) | u64::from(b::PERF_SAMPLE_STACK_USER);
        attr.sample_regs_user = USER_REGS_MASK;
        attr.sample_stack_user = params.stack_user;
    }
    attr.sample_type = sample_type;
    attr.set_sample_id_all(1);
    attr.set_use_clockid(1);
    attr.clockid = libc::CLOCK_MONOTONIC;
    let sideband = u64::from(params.sideband);
    attr.set_mmap(sideband);
    attr.set_mmap2(sideband);
    attr.set_comm(sideband);
    attr.set_comm_exec(sideband);
    attr.set_task(sideband);
    let counter = builder.build().map_err(|e| errno_of(&e))?;
    let raw = counter.into_raw_fd();
    // SAFETY: `into_raw_fd` hands us sole ownership of a valid, open descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

/// What follows the fixed fields (ip, pid/tid, time, cpu) of a sampler's sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SampleFormat {
    /// `PERF_SAMPLE_CALLCHAIN`: `nr`, then `nr` entries.
    pub callchain: bool,
    /// `PERF_SAMPLE_REGS_USER` with [`USER_REGS_MASK`] (`abi`, then three registers unless `abi` is NONE) and
    /// `PERF_SAMPLE_STACK_USER` (`size`, `size` bytes, then `dyn_size` unless `size` is 0).
    pub user_stack: bool,
}

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
        b::PERF_RECORD_MMAP2 => {
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
            Some(SampleRecord::Mmap(Mmap {
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
            }))
        }
        b::PERF_RECORD_COMM => {
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
        b::PERF_RECORD_FORK | b::PERF_RECORD_EXIT => {
            if body.len() < 3 + TRAILER_WORDS {
                return None;
            }
            let (pid, ppid) = split(body[0]);
            let (tid, ptid) = split(body[1]);
            let time = body[2];
            Some(if kind == b::PERF_RECORD_FORK {
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
    if format.user_stack {
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
            user_stack: true,
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
}
