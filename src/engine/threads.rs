//! The lifecycles of the library's two threads: the consumer thread (reads the rings, counts) and the jitter
//! thread (re-draws jittered periods, and opens the events of threads a per-thread stream sees created). Both start with the first stream (or earlier, for a sampler of the
//! calling process: `engine::pin_threads`) and stop when the last stream closes and no sampler of the calling
//! process is left, so an idle process keeps no thread of ours; neither is ever observed, and both block every
//! signal.
//!
//! The consumer thread is created while no stream exists and before any sampler of the calling process opens
//! its events, and it creates the jitter thread itself, so neither inherits a perf event.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{Sender, bounded, unbounded};

use super::consumer::{Consumer, ConsumerLink};
use super::follow::{NOTES_CAPACITY, Notes};
use super::jitter::{self, JitterMsg};
use super::stream::{SharedStream, Stream};
use crate::perf::proc;
use crate::perf::sys::{self, Tid, Waker, gettid};
use crate::status::NtStatus;

/// The running threads, owned by the engine.
pub(super) struct Threads {
    pub(super) link: ConsumerLink,
    thread: JoinHandle<()>,
    tid: Tid,
    /// The jitter thread: its tid (never observed) and its request channel (dropping it stops the thread).
    jitter: Option<(Tid, Sender<JitterMsg>)>,
}

impl Threads {
    /// Start the consumer thread, which starts the jitter thread.
    ///
    /// # Errors
    /// `STATUS_INSUFFICIENT_RESOURCES` (no thread, no eventfd or epoll), `STATUS_INTERNAL_ERROR`.
    pub(super) fn spawn() -> Result<Threads, NtStatus> {
        let waker = Arc::new(Waker::new()?);
        let (tx, rx) = unbounded();
        let (notes_tx, notes_rx) = bounded(NOTES_CAPACITY);
        let overflow = Arc::new(AtomicBool::new(false));
        let consumer = Consumer::new(rx, waker.clone(), Notes::new(notes_tx, overflow.clone()))?;
        let (tid_tx, tid_rx) = bounded(2);
        let (jitter_tx, jitter_rx) = unbounded::<JitterMsg>();
        let thread = std::thread::Builder::new()
            .name("ntprofile-consumer".into())
            .stack_size(256 * 1024)
            .spawn(move || {
                sys::block_all_signals();
                let _ = tid_tx.send(Some(gettid()));
                // The jitter thread is created here, by a thread that has no event: it inherits none.
                let jitter = std::thread::Builder::new()
                    .name("ntprofile-jitter".into())
                    .stack_size(256 * 1024)
                    .spawn(move || {
                        sys::block_all_signals();
                        let _ = tid_tx.send(Some(gettid()));
                        jitter::run(jitter_rx, notes_rx, overflow);
                    });
                consumer.run();
                // The engine dropped the jitter thread's channel before asking us to exit.
                if let Ok(j) = jitter {
                    let _ = j.join();
                }
            })
            .map_err(|_| NtStatus::INSUFFICIENT_RESOURCES)?;
        let tid = tid_rx
            .recv()
            .ok()
            .flatten()
            .ok_or(NtStatus::INTERNAL_ERROR)?;
        // Without a jitter thread (it could not be created), jitter is simply not applied.
        let jitter_tid = tid_rx.recv_timeout(Duration::from_secs(5)).ok().flatten();
        let link = ConsumerLink::new(tx, waker);
        let jitter = jitter_tid.map(|t| (t, jitter_tx));
        let threads = Threads {
            link,
            thread,
            tid,
            jitter,
        };
        if let Some((_, jitter_tx)) = &threads.jitter {
            let _ = jitter_tx.send(JitterMsg::Init {
                link: threads.link.clone(),
                own: threads.own_tids(),
            });
        }
        Ok(threads)
    }

    /// Threads of this library that are never observed: the consumer and the jitter thread.
    pub(super) fn own_tids(&self) -> Vec<Tid> {
        std::iter::once(self.tid)
            .chain(self.jitter.as_ref().map(|j| j.0))
            .collect()
    }

    /// Have the jitter thread draw `stream`'s next period now (its `jitter_next` is due).
    /// Have the helper thread follow a started per-thread stream: open the events of the threads it sees
    /// created, close those of the threads that exit, and look at once for threads created since the start's
    /// last scan of the thread list.
    pub(super) fn follow(&self, stream: &SharedStream) {
        if let Some((_, tx)) = &self.jitter {
            let _ = tx.send(JitterMsg::Follow(Arc::downgrade(stream)));
        }
    }

    pub(super) fn watch_jitter(&self, stream: &SharedStream) {
        if let Some((_, tx)) = &self.jitter {
            let weak: Weak<std::sync::Mutex<Stream>> = Arc::downgrade(stream);
            let _ = tx.send(JitterMsg::Watch(weak));
        }
    }

    /// Stop both threads and wait until they are gone (called when no stream is left).
    pub(super) fn shutdown(self) {
        let tids = self.own_tids();
        // First the jitter thread's channel (it stops; it never waits for the engine), then the consumer, which
        // joins it.
        drop(self.jitter);
        self.link.exit();
        let _ = self.thread.join();
        // A join returns when the kernel clears the thread's tid, a moment before the thread is released:
        // wait (briefly) until it is gone from /proc, so that no thread of ours outlives the call.
        for tid in tids {
            for _ in 0..2000 {
                if !proc::own_thread_exists(tid) {
                    break;
                }
                std::thread::sleep(Duration::from_micros(5));
            }
        }
    }

    /// In a forked child, where neither thread exists: forget them (never join or detach).
    pub(super) fn forget(self) {
        let Threads {
            link,
            thread,
            jitter,
            ..
        } = self;
        std::mem::forget(thread);
        drop((link, jitter));
    }
}
