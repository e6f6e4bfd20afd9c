//! The handle table under arbitrary call sequences through the C exports: creates, process opens, starts,
//! stops, closes, statistics queries, on live handles, closed (stale) handles, pseudo-handles and arbitrary
//! values. A model of the table predicts every status; each input ends by closing what it opened.

use std::ffi::c_void;

use arbitrary::{self, Arbitrary};
use ntprofile::NtStatus;
use ntprofile::ffi::exports::{
    NtClose, NtCreateProfile, NtOpenProcess, NtStartProfile, NtStopProfile,
    NtprofileQueryStatistics,
};
use ntprofile::profile::ProfileStats;

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Which {
    /// The n-th handle this input obtained (live or closed).
    Known(u8),
    /// The n-th handle, its generation bumped (a value the table never issued or has retired).
    OtherGeneration(u8, u8),
    /// An arbitrary value.
    Raw(u64),
    CurrentProcess,
    CurrentThread,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
pub enum Op {
    Create,
    /// A profile of an opened process handle (or of whatever `Which` names).
    CreateOf(Which),
    Open,
    Start(Which),
    Stop(Which),
    Close(Which),
    Stats(Which),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Profile,
    Process,
}

struct Entry {
    value: usize,
    kind: Kind,
    live: bool,
    started: bool,
}

#[inline(never)]
fn range() -> (usize, usize) {
    (range as *const () as usize & !0xFFF, 0x1000)
}

struct Model {
    entries: Vec<Entry>,
    /// Boxed: the library keeps each buffer's address while its profile lives, and the Vec grows.
    #[allow(clippy::vec_box)]
    buffers: Vec<Box<[u32; 256]>>,
}

impl Model {
    fn resolve(&self, w: Which) -> (usize, Option<usize>) {
        let value = match w {
            Which::Known(i) if !self.entries.is_empty() => {
                self.entries[usize::from(i) % self.entries.len()].value
            }
            Which::OtherGeneration(i, g) if !self.entries.is_empty() => {
                let v = self.entries[usize::from(i) % self.entries.len()].value;
                // Another generation of the same slot: the generation field is bits 22..31 of the value.
                v ^ ((usize::from(g) % 511 + 1) << 22)
            }
            Which::Known(_) | Which::OtherGeneration(..) => 0x1234_0000,
            Which::Raw(v) => v as usize,
            Which::CurrentProcess => usize::MAX,
            Which::CurrentThread => usize::MAX - 1,
        };
        // Only the low 32 bits of a handle are significant (sign-extended, as on 64-bit Windows): the model
        // passes and compares the value the library reads.
        let value = value as u32 as i32 as isize as usize;
        let live = self.entries.iter().position(|e| e.live && e.value == value);
        (value, live)
    }

    fn create(&mut self, process: usize, expected: NtStatus) {
        let mut buffer = Box::new([0u32; 256]);
        let mut handle: *mut c_void = std::ptr::null_mut();
        let (base, size) = range();
        let s = NtStatus(NtCreateProfile(
            &mut handle,
            process as *mut c_void,
            base as *mut c_void,
            size,
            4,
            buffer.as_mut_ptr(),
            1024,
            0,
            usize::MAX,
        ));
        assert_eq!(s, expected, "create of process {process:#x}");
        if s.is_success() {
            assert!(
                self.entries
                    .iter()
                    .all(|e| !e.live || e.value != handle as usize),
                "a live handle value was issued twice"
            );
            assert!(
                self.entries.iter().all(|e| e.value != handle as usize),
                "a closed handle's value was issued again (same generation)"
            );
            self.entries.push(Entry {
                value: handle as usize,
                kind: Kind::Profile,
                live: true,
                started: false,
            });
            self.buffers.push(buffer);
        }
    }
}

/// The input the fuzzer builds from its bytes.
pub type Input = Vec<Op>;

/// The check of one input.
pub fn run(ops: Input) {
    let mut m = Model {
        entries: Vec::new(),
        buffers: Vec::new(),
    };
    for op in ops.into_iter().take(48) {
        match op {
            Op::Create => m.create(usize::MAX, NtStatus::SUCCESS),
            Op::CreateOf(w) => {
                let (value, live) = m.resolve(w);
                let expected = match (value, live.map(|i| m.entries[i].kind)) {
                    // The pseudo-handles, however they were spelled.
                    (usize::MAX, _) => NtStatus::SUCCESS,
                    (v, _) if v == usize::MAX - 1 => NtStatus::OBJECT_TYPE_MISMATCH,
                    (_, Some(Kind::Process)) => NtStatus::SUCCESS,
                    (_, Some(Kind::Profile)) => NtStatus::OBJECT_TYPE_MISMATCH,
                    // NULL is the global profile: it needs the privilege (root has it here, others may not).
                    (_, None) if value == 0 => continue,
                    (_, None) => NtStatus::INVALID_HANDLE,
                };
                m.create(value, expected);
            }
            Op::Open => {
                let mut handle: *mut c_void = std::ptr::null_mut();
                let mut cid = [u64::from(std::process::id()), 0];
                let s = NtStatus(NtOpenProcess(
                    &mut handle,
                    0,
                    std::ptr::null_mut(),
                    cid.as_mut_ptr().cast(),
                ));
                assert_eq!(s, NtStatus::SUCCESS);
                m.entries.push(Entry {
                    value: handle as usize,
                    kind: Kind::Process,
                    live: true,
                    started: false,
                });
            }
            Op::Start(w) | Op::Stop(w) | Op::Stats(w) => {
                let (value, live) = m.resolve(w);
                let kind = live.map(|i| m.entries[i].kind);
                let pseudo = matches!(w, Which::CurrentProcess | Which::CurrentThread)
                    || value == usize::MAX
                    || value == usize::MAX - 1;
                let mut stats = ProfileStats::default();
                let (s, expected) = match op {
                    Op::Start(_) => {
                        let s = NtStatus(NtStartProfile(value as *mut c_void));
                        let e = match (pseudo, kind) {
                            (true, _) | (_, Some(Kind::Process)) => NtStatus::OBJECT_TYPE_MISMATCH,
                            (_, None) => NtStatus::INVALID_HANDLE,
                            (_, Some(Kind::Profile)) if m.entries[live.unwrap()].started => {
                                NtStatus::PROFILING_NOT_STOPPED
                            }
                            (_, Some(Kind::Profile)) => {
                                m.entries[live.unwrap()].started = true;
                                NtStatus::SUCCESS
                            }
                        };
                        (s, e)
                    }
                    Op::Stop(_) => {
                        let s = NtStatus(NtStopProfile(value as *mut c_void));
                        let e = match (pseudo, kind) {
                            (true, _) | (_, Some(Kind::Process)) => NtStatus::OBJECT_TYPE_MISMATCH,
                            (_, None) => NtStatus::INVALID_HANDLE,
                            (_, Some(Kind::Profile)) if m.entries[live.unwrap()].started => {
                                m.entries[live.unwrap()].started = false;
                                NtStatus::SUCCESS
                            }
                            (_, Some(Kind::Profile)) => NtStatus::PROFILING_NOT_STARTED,
                        };
                        (s, e)
                    }
                    _ => {
                        let s =
                            NtStatus(NtprofileQueryStatistics(value as *mut c_void, &mut stats));
                        let e = match (pseudo, kind) {
                            (true, _) | (_, Some(Kind::Process)) => NtStatus::OBJECT_TYPE_MISMATCH,
                            (_, None) => NtStatus::INVALID_HANDLE,
                            (_, Some(Kind::Profile)) => NtStatus::SUCCESS,
                        };
                        (s, e)
                    }
                };
                assert_eq!(s, expected, "{op:?} on {value:#x}");
                assert!(stats.counted <= stats.counted + stats.outside);
            }
            Op::Close(w) => {
                let (value, live) = m.resolve(w);
                let s = NtStatus(NtClose(value as *mut c_void));
                let pseudo = value == usize::MAX || value == usize::MAX - 1;
                let expected = if pseudo {
                    NtStatus::SUCCESS
                } else if let Some(i) = live {
                    m.entries[i].live = false;
                    m.entries[i].started = false;
                    NtStatus::SUCCESS
                } else {
                    NtStatus::INVALID_HANDLE
                };
                assert_eq!(s, expected, "close of {value:#x}");
            }
        }
    }
    // Close what is left; every value is invalid afterwards.
    for e in &mut m.entries {
        let s = NtStatus(NtClose(e.value as *mut c_void));
        assert_eq!(
            s,
            if e.live {
                NtStatus::SUCCESS
            } else {
                NtStatus::INVALID_HANDLE
            }
        );
        e.live = false;
    }
    for e in &m.entries {
        assert_eq!(
            NtStatus(NtClose(e.value as *mut c_void)),
            NtStatus::INVALID_HANDLE
        );
    }
}
