//! A model, under loom, of how ntprofile moves samples from the kernel to a profile's buffer, and of the two
//! guarantees built on it:
//!
//! - **Publication**: a start publishes the profile to the consumer (and waits for its acknowledgement) before
//!   it enables the event, so every sample taken after the start returns is counted.
//! - **The stop barrier**: a stop disables the event (synchronous in the kernel: no sample is written after the
//!   ioctl returns), then asks the consumer to unpublish the profile; the consumer drains the ring before it
//!   unpublishes and acknowledges. So when the stop returns every sample taken before it is counted, and the
//!   buffer never changes again.
//!
//! The ring follows the perf mmap protocol the library uses (`src/perf/ring.rs`): the kernel writes a record,
//! then stores `data_head` with release; the consumer loads `data_head` with acquire, reads the records, then
//! stores `data_tail` with release; the kernel loads `data_tail` (a full barrier in the kernel; acquire here)
//! before it reuses space. Record bytes are plain memory (`UnsafeCell`): loom reports any data race on them.
//!
//! Control messages go through a channel and are acknowledged, as in the library's consumer thread. The model
//! is small (ring of 2 records, 3 samples) so that loom explores every interleaving.

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use loom::sync::mpsc::{Receiver, Sender, channel};
use loom::sync::{Arc, Mutex};

/// Ring capacity in records.
pub const RING: u64 = 2;

/// The shared perf ring.
pub struct Ring {
    data: [UnsafeCell<u64>; RING as usize],
    head: AtomicU64,
    tail: AtomicU64,
}

impl Ring {
    fn new() -> Ring {
        Ring {
            data: [UnsafeCell::new(0), UnsafeCell::new(0)],
            head: AtomicU64::new(0),
            tail: AtomicU64::new(0),
        }
    }
}

/// The kernel's side of one event: enabled or not (changed under its lock, as the ioctl is synchronous with
/// sample output), and the samples it wrote or dropped while enabled.
pub struct Event {
    enabled: Mutex<bool>,
    written: AtomicU32,
    lost: AtomicU32,
}

/// How the consumer handles an unpublish request.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Variant {
    /// As the library: drain the ring first, then unpublish, then acknowledge.
    Correct,
    /// A broken barrier: unpublish and acknowledge without draining first.
    NoDrainOnUnpublish,
    /// A broken publication: the start enables the event before the consumer has published the profile.
    EnableBeforePublish,
}

enum Msg {
    Publish(Sender<()>),
    Unpublish(Sender<()>),
    Exit,
}

/// The kernel writing `n` samples, each only while the event is enabled and the ring has room.
fn kernel(ring: &Ring, event: &Event, n: u32) {
    for ip in 0..n {
        let enabled = event.enabled.lock().unwrap();
        if *enabled {
            let head = ring.head.load(Ordering::Relaxed);
            // Acquire: pairs with the consumer's release store of data_tail (the kernel's full barrier).
            let tail = ring.tail.load(Ordering::Acquire);
            if head - tail < RING {
                ring.data[(head % RING) as usize].with_mut(|p| unsafe { *p = u64::from(ip) + 1 });
                // Release: the record is visible before the new head.
                ring.head.store(head + 1, Ordering::Release);
                event.written.fetch_add(1, Ordering::Relaxed);
            } else {
                event.lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        drop(enabled);
        loom::thread::yield_now();
    }
}

/// The consumer thread: drain the ring into the published profile's buffer; handle requests.
fn consumer(ring: &Ring, buffer: &AtomicU32, rx: Receiver<Msg>, variant: Variant) {
    let mut published = false;
    let drain = |published: bool| {
        // Acquire: pairs with the kernel's release store of data_head.
        let head = ring.head.load(Ordering::Acquire);
        let mut pos = ring.tail.load(Ordering::Relaxed);
        while pos < head {
            let ip = ring.data[(pos % RING) as usize].with(|p| unsafe { *p });
            assert_ne!(ip, 0, "a record read before the kernel wrote it");
            if published {
                buffer.fetch_add(1, Ordering::Relaxed);
            }
            pos += 1;
        }
        // Release: the records were read before the kernel may reuse their space.
        ring.tail.store(pos, Ordering::Release);
    };
    loop {
        // The library drains on ring wake-ups, on a timer and before each request: here, whenever it is
        // scheduled, and the request is looked at after the drain.
        drain(published);
        let msg = match rx.try_recv() {
            Ok(msg) => msg,
            Err(_) => {
                loom::thread::yield_now();
                continue;
            }
        };
        match msg {
            Msg::Publish(ack) => {
                published = true;
                ack.send(()).unwrap();
            }
            Msg::Unpublish(ack) => {
                if variant != Variant::NoDrainOnUnpublish {
                    drain(published);
                }
                published = false;
                ack.send(()).unwrap();
            }
            Msg::Exit => return,
        }
    }
}

/// One start/stop of a profile while the kernel samples; returns (counted at stop, counted at the end,
/// samples written while enabled, samples dropped for a full ring).
pub fn start_stop(variant: Variant, samples: u32) -> (u32, u32, u32, u32) {
    let ring = Arc::new(Ring::new());
    let event = Arc::new(Event {
        enabled: Mutex::new(false),
        written: AtomicU32::new(0),
        lost: AtomicU32::new(0),
    });
    let buffer = Arc::new(AtomicU32::new(0));
    let (tx, rx) = channel();
    let consumer_thread = {
        let (ring, buffer) = (ring.clone(), buffer.clone());
        loom::thread::spawn(move || consumer(&ring, &buffer, rx, variant))
    };
    let kernel_thread = {
        let (ring, event) = (ring.clone(), event.clone());
        loom::thread::spawn(move || kernel(&ring, &event, samples))
    };
    // Start: publish (and wait), then enable.
    let (ack_tx, ack_rx) = channel();
    if variant == Variant::EnableBeforePublish {
        *event.enabled.lock().unwrap() = true;
        tx.send(Msg::Publish(ack_tx)).unwrap();
        ack_rx.recv().unwrap();
    } else {
        tx.send(Msg::Publish(ack_tx)).unwrap();
        ack_rx.recv().unwrap();
        *event.enabled.lock().unwrap() = true;
    }
    let started = Arc::new(AtomicBool::new(true));
    // Stop: disable (synchronous), then unpublish (and wait).
    *event.enabled.lock().unwrap() = false;
    let (ack_tx, ack_rx) = channel();
    tx.send(Msg::Unpublish(ack_tx)).unwrap();
    ack_rx.recv().unwrap();
    started.store(false, Ordering::Relaxed);
    let at_stop = buffer.load(Ordering::Relaxed);
    kernel_thread.join().unwrap();
    tx.send(Msg::Exit).unwrap();
    consumer_thread.join().unwrap();
    let at_end = buffer.load(Ordering::Relaxed);
    (
        at_stop,
        at_end,
        event.written.load(Ordering::Relaxed),
        event.lost.load(Ordering::Relaxed),
    )
}
