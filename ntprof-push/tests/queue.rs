//! The push queue against a local fake backend: a slow backend never stalls the submitter, a full queue drops
//! its oldest windows and counts them, a backend that is down is retried with backoff until it comes up, and a
//! refusal is not retried. Every window is accounted for: sent + dropped + failed = submitted.

mod common;

use std::net::TcpListener;
use std::sync::mpsc::RecvTimeoutError;
use std::time::{Duration, Instant, SystemTime};

use common::fake::Fake;
use ntprof_push::{Pusher, QueueConfig, Target, Window};

fn window(seq: u32) -> Window {
    Window {
        pprof: vec![0x0a, 0x00],
        start: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + u64::from(seq)),
        end: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_001 + u64::from(seq)),
        service: "queue-test".into(),
        labels: vec![("seq".into(), seq.to_string())],
    }
}

/// The `seq` label of a Pyroscope ingest request.
fn seq_of(target: &str) -> u32 {
    let at = target.find("seq%3D").expect("seq label in the name") + 6;
    target[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

fn config(capacity: usize) -> QueueConfig {
    QueueConfig {
        capacity,
        attempts: 3,
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        timeout: Duration::from_secs(30),
    }
}

#[test]
fn a_slow_backend_drops_the_oldest_windows_and_never_blocks_the_submitter() {
    let (fake, gate) = Fake::start_slow(|_| (200, String::new()));
    let target = Target::parse(&format!("pyroscope+http://127.0.0.1:{}", fake.port)).unwrap();
    let pusher = Pusher::start(target, config(3));
    pusher.submit(window(1));
    // Window 1 is now held by the backend: the push thread waits for its answer.
    let first = fake
        .requests
        .recv_timeout(Duration::from_secs(30))
        .expect("the first push reaches the backend");
    assert_eq!(seq_of(&first.target), 1);
    let mut slowest = Duration::ZERO;
    for seq in 2..=10 {
        let t = Instant::now();
        pusher.submit(window(seq));
        slowest = slowest.max(t.elapsed());
    }
    // submit takes a lock the push thread never holds across network I/O: microseconds, 1 s on a loaded machine.
    assert!(
        slowest < Duration::from_secs(1),
        "a submit took {slowest:?} while the backend was stalled"
    );
    let s = pusher.stats();
    assert_eq!(
        (s.submitted, s.sent, s.dropped, s.failed),
        (10, 0, 6, 0),
        "{s:?}"
    );
    drop(gate);
    let s = pusher.finish(Duration::from_secs(60));
    assert_eq!(
        (s.submitted, s.sent, s.dropped, s.failed, s.retries),
        (10, 4, 6, 0, 0),
        "{s:?}"
    );
    let rest: Vec<u32> = fake
        .requests
        .try_iter()
        .map(|r| seq_of(&r.target))
        .collect();
    assert_eq!(rest, [8, 9, 10], "the newest windows are kept, in order");
}

#[test]
fn a_backend_that_is_down_is_retried_with_backoff_until_it_comes_up() {
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let target = Target::parse(&format!("pyroscope+http://127.0.0.1:{port}")).unwrap();
    let cfg = QueueConfig {
        attempts: 1000,
        ..config(4)
    };
    let pusher = Pusher::start(target, cfg);
    let t = Instant::now();
    pusher.submit(window(1));
    assert!(t.elapsed() < Duration::from_secs(1));
    let until = Instant::now() + Duration::from_secs(60);
    while pusher.stats().retries < 3 {
        let s = pusher.stats();
        assert!(Instant::now() < until && s.failed == 0, "no retries: {s:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    let s = pusher.stats();
    assert_eq!((s.sent, s.failed), (0, 0), "{s:?}");
    let err = s.last_error.unwrap();
    assert!(
        err.contains("backend not reached") && err.contains(&port.to_string()),
        "{err}"
    );
    // Now the backend comes up on that port.
    let listener = TcpListener::bind(("127.0.0.1", port)).expect("the port is free again");
    let fake = Fake::from_listener(listener, |_| (200, String::new()));
    let s = pusher.finish(Duration::from_secs(60));
    assert_eq!(
        (s.submitted, s.sent, s.dropped, s.failed),
        (1, 1, 0, 0),
        "{s:?}"
    );
    assert!(s.retries >= 3, "{s:?}");
    assert_eq!(
        seq_of(
            &fake
                .requests
                .recv_timeout(Duration::from_secs(5))
                .unwrap()
                .target
        ),
        1
    );
}

#[test]
fn a_backend_down_for_good_is_given_up_after_the_attempts_and_counted() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let target = Target::parse(&format!("pyroscope+http://127.0.0.1:{port}")).unwrap();
    let pusher = Pusher::start(target, config(2));
    for seq in 1..=5 {
        pusher.submit(window(seq));
    }
    let s = pusher.finish(Duration::from_secs(60));
    assert_eq!(s.submitted, 5);
    assert_eq!(s.sent, 0);
    assert_eq!(s.sent + s.dropped + s.failed, 5, "{s:?}");
    assert!(s.failed >= 1 && s.dropped >= 2, "{s:?}");
    assert!(s.last_error.unwrap().contains("backend not reached"));
}

#[test]
fn a_refusal_is_not_retried_and_shows_the_backends_answer() {
    let fake = Fake::start(|_| (400, "invalid name: bad label".into()));
    let target = Target::parse(&format!("pyroscope+http://127.0.0.1:{}", fake.port)).unwrap();
    let pusher = Pusher::start(target, config(4));
    pusher.submit(window(1));
    let s = pusher.finish(Duration::from_secs(60));
    assert_eq!(
        (s.submitted, s.sent, s.dropped, s.failed, s.retries),
        (1, 0, 0, 1, 0),
        "{s:?}"
    );
    assert_eq!(
        s.last_error.unwrap(),
        "backend refused the profile: HTTP 400: invalid name: bad label"
    );
    assert_eq!(fake.requests.try_iter().count(), 1);
}

#[test]
fn an_overloaded_backend_is_retried() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let calls = AtomicU32::new(0);
    let fake = Fake::start(move |_| {
        // Relaxed: a counter read by this closure alone.
        if calls.fetch_add(1, Ordering::Relaxed) < 2 {
            (503, "busy".into())
        } else {
            (200, String::new())
        }
    });
    let target = Target::parse(&format!("pyroscope+http://127.0.0.1:{}", fake.port)).unwrap();
    let pusher = Pusher::start(target, config(4));
    pusher.submit(window(1));
    let s = pusher.finish(Duration::from_secs(60));
    assert_eq!((s.sent, s.failed, s.retries), (1, 0, 2), "{s:?}");
    assert_eq!(
        s.last_error.unwrap(),
        "backend refused the profile: HTTP 503: busy"
    );
    assert_eq!(fake.requests.try_iter().count(), 3);
    assert!(matches!(
        fake.requests.recv_timeout(Duration::from_millis(1)),
        Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected)
    ));
}

#[test]
fn finish_drops_what_it_cannot_send_in_time_and_counts_it() {
    let (fake, gate) = Fake::start_slow(|_| (200, String::new()));
    let target = Target::parse(&format!("pyroscope+http://127.0.0.1:{}", fake.port)).unwrap();
    let pusher = Pusher::start(
        target,
        QueueConfig {
            timeout: Duration::from_secs(2),
            ..config(8)
        },
    );
    for seq in 1..=4 {
        pusher.submit(window(seq));
    }
    fake.requests.recv_timeout(Duration::from_secs(30)).unwrap();
    // The backend holds window 1 past the push timeout; finish gives up on the queue at once.
    let s = pusher.finish(Duration::ZERO);
    drop(gate);
    assert_eq!(s.submitted, 4);
    assert_eq!(s.sent, 0);
    assert_eq!(s.dropped + s.failed, 4, "{s:?}");
    assert!(s.dropped >= 3, "{s:?}");
}
