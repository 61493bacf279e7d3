//! S14 (issue 30): a worker logs once, at INFO as it starts, what it found in flight — work
//! leased by other workers and when the first lease ends, and expired leases it takes back
//! at once — or that nothing was, as the stock fmt subscriber prints it.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_durable::{Jobs, MemoryStore, Store, When, WorkOptions};
use retry_testkit::MockClock;
use retry_toolkit::CancelToken;
use retry_toolkit::store::Timestamp;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn capture() -> (Captured, tracing::subscriber::DefaultGuard) {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .finish();
    (captured, tracing::subscriber::set_default(subscriber))
}

/// The lines of a worker's start.
fn started(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| l.contains("worker started"))
        .collect()
}

const START: Timestamp = Timestamp::from_millis(1_767_571_200_000);

fn jobs(store: MemoryStore, clock: &MockClock) -> Jobs<MemoryStore, MockClock> {
    Jobs::builder(store)
        .owner("o")
        .clock(clock.clone())
        .starting_at(START)
        .handler("n", |_: u32, _ctx| async { Ok(()) })
        .build()
        .unwrap()
}

/// A worker that is told to stop at once: it only reports and stops.
fn stopped() -> CancelToken {
    let stop = CancelToken::new();
    stop.cancel();
    stop
}

#[tokio::test]
async fn s14_a_starting_worker_logs_what_it_found_in_flight_once() {
    let (captured, _guard) = capture();
    let clock = MockClock::new();
    let store = MemoryStore::new();
    let jobs = jobs(store.clone(), &clock);
    for n in 0..3u32 {
        jobs.schedule(When::Now, "n", &n, WorkOptions::new())
            .await
            .unwrap();
    }
    // Another worker claims two items: one lease ends in 10 s, the other has already ended
    // (that worker died); the third item is only waiting.
    let now = jobs.now();
    let gone = store
        .claim("o", now, now + Duration::from_secs(1), 1)
        .await
        .unwrap();
    assert_eq!(gone.work.len(), 1);
    clock.advance(Duration::from_secs(2));
    let now = jobs.now();
    let held = store
        .claim("o", now, now + Duration::from_secs(10), 1)
        .await
        .unwrap();
    assert_eq!(held.work.len(), 1);
    assert_ne!(held.work[0].id, gone.work[0].id);

    jobs.run(stopped()).await;
    let text = captured.text();
    let lines = started(&text);
    assert_eq!(lines.len(), 1, "{text}");
    let line = lines[0];
    assert!(line.contains(" INFO "), "{line}");
    assert!(line.contains("found work in flight"), "{line}");
    assert!(line.contains("leased_by_others=1"), "{line}");
    assert!(line.contains("first_lease_ends_in=Some(10s)"), "{line}");
    assert!(
        line.contains(&format!(
            "first_lease_ends_at={}",
            now + Duration::from_secs(10)
        )),
        "{line}"
    );
    assert!(line.contains("expired=1"), "{line}");
}

#[tokio::test]
async fn s14_a_starting_worker_with_nothing_in_flight_says_so() {
    let (captured, _guard) = capture();
    let clock = MockClock::new();
    let jobs = jobs(MemoryStore::new(), &clock);
    jobs.schedule(When::Now, "n", &1u32, WorkOptions::new())
        .await
        .unwrap();
    jobs.run(stopped()).await;
    let text = captured.text();
    let lines = started(&text);
    assert_eq!(lines.len(), 1, "{text}");
    assert!(lines[0].contains("nothing in flight"), "{text}");
}
