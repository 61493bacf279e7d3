//! Run-time behaviour of `#[retry]` functions (SPEC X1, X4 with O5, D1, R2–R5), on paused
//! tokio time or a recording clock: no test sleeps for real.
//!
//! Hooks are plain functions (the attribute takes paths), so each test that observes them has
//! its own static log.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use retry_toolkit::{Clock, Jitter, LimitExceeded, RetryOptions, RetryPolicy, Scope, retry};

#[derive(Clone, Debug, PartialEq)]
enum Error {
    /// A failure of attempt `n`.
    Failed(u32),
    Fatal,
    Limit(LimitExceeded),
    Parse,
}

impl From<LimitExceeded> for Error {
    fn from(limit: LimitExceeded) -> Self {
        Error::Limit(limit)
    }
}

impl From<std::num::ParseIntError> for Error {
    fn from(_: std::num::ParseIntError) -> Self {
        Error::Parse
    }
}

/// A log of `(attempt, delay)` pairs, as `notify` reports them.
type Log = Mutex<Vec<(u32, Duration)>>;

fn take(log: &Log) -> Vec<(u32, Duration)> {
    std::mem::take(&mut *log.lock().unwrap())
}

fn elapsed_since(start: tokio::time::Instant) -> Duration {
    tokio::time::Instant::now() - start
}

/// Tokio's timer rounds each sleep up to the next millisecond.
fn assert_slept(start: tokio::time::Instant, waits: &[Duration]) {
    let elapsed = elapsed_since(start);
    let total: Duration = waits.iter().sum();
    let slack = Duration::from_millis(waits.len() as u64);
    assert!(
        elapsed >= total && elapsed <= total + slack,
        "{elapsed:?} vs {waits:?}"
    );
}

// X1 ------------------------------------------------------------------------------------------

static X1_CALLS: AtomicU32 = AtomicU32::new(0);
static X1_LOG: Log = Mutex::new(Vec::new());

fn x1_notify(_: &Error, attempt: u32, delay: Duration) {
    X1_LOG.lock().unwrap().push((attempt, delay));
}

#[retry(max_attempts = 5, base_delay_ms = 500, max_delay_ms = 10_000, notify = x1_notify)]
async fn x1_fails_twice() -> Result<u32, Error> {
    let call = X1_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if call < 3 {
        Err(Error::Failed(call))
    } else {
        Ok(call)
    }
}

#[tokio::test(start_paused = true)]
async fn x1_body_reruns_until_it_succeeds_with_d1_waits() {
    let start = tokio::time::Instant::now();
    assert_eq!(x1_fails_twice().await, Ok(3));
    assert_eq!(X1_CALLS.load(Ordering::SeqCst), 3);
    let log = take(&X1_LOG);
    // D1: two waits, after attempts 1 and 2, each in [0, min(2^k · 500, 10 000)).
    assert_eq!(log.iter().map(|(a, _)| *a).collect::<Vec<_>>(), [1, 2]);
    assert!(log[0].1 < Duration::from_millis(1000), "{log:?}");
    assert!(log[1].1 < Duration::from_millis(2000), "{log:?}");
    // The waits happened on the (paused) tokio clock, and nothing else did.
    assert_slept(start, &[log[0].1, log[1].1]);
}

// R2, R3 --------------------------------------------------------------------------------------

static R2_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 5, base_delay_ms = 10)]
async fn r2_always_fails() -> Result<(), Error> {
    Err(Error::Failed(R2_CALLS.fetch_add(1, Ordering::SeqCst) + 1))
}

#[tokio::test(start_paused = true)]
async fn r2_every_attempt_used_and_the_last_error_returned() {
    assert_eq!(r2_always_fails().await, Err(Error::Failed(5)));
    assert_eq!(R2_CALLS.load(Ordering::SeqCst), 5);
}

static R3_CONSULTED: Mutex<Vec<u32>> = Mutex::new(Vec::new());

fn r3_record(_: &Error, next_attempt: u32) -> bool {
    R3_CONSULTED.lock().unwrap().push(next_attempt);
    true
}

#[retry(max_attempts = 5, base_delay_ms = 10, when = r3_record)]
async fn r3_always_fails() -> Result<(), Error> {
    Err(Error::Fatal)
}

#[tokio::test(start_paused = true)]
async fn r3_when_sees_the_next_attempt_and_never_after_the_last() {
    assert_eq!(r3_always_fails().await, Err(Error::Fatal));
    assert_eq!(*R3_CONSULTED.lock().unwrap(), [2, 3, 4, 5]);
}

fn r3_only_failed(error: &Error, _: u32) -> bool {
    matches!(error, Error::Failed(_))
}

static R3_STOP_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 5, when = r3_only_failed)]
async fn r3_fatal_on_second() -> Result<(), Error> {
    let call = R3_STOP_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    Err(if call == 1 {
        Error::Failed(1)
    } else {
        Error::Fatal
    })
}

#[tokio::test(start_paused = true)]
async fn r3_when_false_stops_at_once_with_that_error() {
    assert_eq!(r3_fatal_on_second().await, Err(Error::Fatal));
    assert_eq!(R3_STOP_CALLS.load(Ordering::SeqCst), 2);
}

// R4, D1 --------------------------------------------------------------------------------------

static R4_LOG: Mutex<Vec<(Error, u32, Duration)>> = Mutex::new(Vec::new());

fn r4_notify(error: &Error, attempt: u32, delay: Duration) {
    R4_LOG.lock().unwrap().push((error.clone(), attempt, delay));
}

static R4_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 6, notify = r4_notify)]
async fn r4_always_fails() -> Result<(), Error> {
    Err(Error::Failed(R4_CALLS.fetch_add(1, Ordering::SeqCst) + 1))
}

#[tokio::test(start_paused = true)]
async fn r4_notify_sees_each_error_attempt_and_a_delay_below_the_d1_cap() {
    let start = tokio::time::Instant::now();
    assert_eq!(r4_always_fails().await, Err(Error::Failed(6)));
    let log = R4_LOG.lock().unwrap().clone();
    // Built-in caps: 200, 400, 800, 1600, 3000 ms; no wait after the sixth attempt.
    let caps = [200, 400, 800, 1600, 3000].map(Duration::from_millis);
    assert_eq!(log.len(), caps.len());
    for ((error, attempt, delay), (k, cap)) in log.iter().zip((1..).zip(caps)) {
        assert_eq!((error, *attempt), (&Error::Failed(k), k));
        assert!(*delay < cap, "attempt {k}: {delay:?} >= {cap:?}");
    }
    assert_slept(start, &log.iter().map(|l| l.2).collect::<Vec<_>>());
}

// O5 ------------------------------------------------------------------------------------------

static O5_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 1)]
async fn o5_single_attempt() -> Result<(), Error> {
    O5_CALLS.fetch_add(1, Ordering::SeqCst);
    Err(Error::Fatal)
}

#[tokio::test(start_paused = true)]
async fn o5_one_attempt_means_no_retry_and_no_wait() {
    let start = tokio::time::Instant::now();
    assert_eq!(o5_single_attempt().await, Err(Error::Fatal));
    assert_eq!(O5_CALLS.load(Ordering::SeqCst), 1);
    assert_eq!(elapsed_since(start), Duration::ZERO);
}

// X1: `?` and `return` end the current attempt -------------------------------------------------

static X1_Q_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(base_delay_ms = 1)]
async fn x1_question_mark(inputs: &[&str]) -> Result<u32, Error> {
    let call = X1_Q_CALLS.fetch_add(1, Ordering::SeqCst);
    let value: u32 = inputs[call as usize].parse()?;
    if value == 0 {
        return Err(Error::Failed(call + 1));
    }
    Ok(value)
}

#[tokio::test(start_paused = true)]
async fn x1_question_mark_and_return_end_the_attempt_not_the_loop() {
    assert_eq!(x1_question_mark(&["nope", "0", "7"]).await, Ok(7));
    assert_eq!(X1_Q_CALLS.load(Ordering::SeqCst), 3);
}

// X4: receivers, borrowed and owned arguments, generics ---------------------------------------

struct Connection {
    opened: u32,
    log: Vec<String>,
}

impl Connection {
    const RETRY: RetryOptions = RetryOptions::new()
        .with_max_attempts(4)
        .with_base_delay_ms(1);

    /// `&mut self`, an owned argument mutated by each attempt, and a borrowed `&mut` one.
    #[retry(defaults = Self::RETRY)]
    async fn send(&mut self, mut message: String, sent: &mut Vec<String>) -> Result<u32, Error> {
        self.opened += 1;
        message.push_str(&format!("#{}", self.opened));
        sent.push(message.clone());
        self.log.push(message);
        if self.opened < 3 {
            Err(Error::Failed(self.opened))
        } else {
            Ok(self.opened)
        }
    }

    #[retry(max_attempts = 2, base_delay_ms = 1)]
    async fn last(&self) -> Result<&str, Error> {
        self.log.last().map(String::as_str).ok_or(Error::Fatal)
    }
}

#[tokio::test(start_paused = true)]
async fn x4_mut_self_and_arguments_are_lent_or_cloned_per_attempt() {
    let mut connection = Connection {
        opened: 0,
        log: Vec::new(),
    };
    let mut sent = Vec::new();
    assert_eq!(connection.send("hello".to_owned(), &mut sent).await, Ok(3));
    // Each attempt started from the caller's `message`, not from the previous attempt's.
    assert_eq!(sent, ["hello#1", "hello#2", "hello#3"]);
    assert_eq!(connection.log, sent);
    assert_eq!(connection.last().await, Ok("hello#3"));
}

static X4_GENERIC_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 3, base_delay_ms = 1)]
async fn x4_generic<T, K>(
    items: &[T],
    key: K,
    wanted: impl Into<usize> + Clone,
) -> Result<usize, Error>
where
    T: PartialEq<K>,
    K: Clone,
{
    let call = X4_GENERIC_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    let count = items.iter().filter(|item| **item == key).count();
    if count < wanted.into() && call < 2 {
        Err(Error::Failed(call))
    } else {
        Ok(count)
    }
}

#[tokio::test(start_paused = true)]
async fn x4_generic_fn_with_impl_trait_and_where_clause() {
    assert_eq!(x4_generic(&[1, 2, 2], 2, 5u8).await, Ok(2));
    assert_eq!(X4_GENERIC_CALLS.load(Ordering::SeqCst), 2);
}

// R5: deadline and attempt timeout ------------------------------------------------------------

#[retry(
    max_attempts = 100,
    base_delay_ms = 400,
    jitter = "none",
    deadline_ms = 1_000
)]
async fn r5_deadline() -> Result<(), Error> {
    Err(Error::Fatal)
}

#[tokio::test(start_paused = true)]
async fn r5_deadline_ends_the_loop_as_the_functions_error() {
    let start = tokio::time::Instant::now();
    let result = r5_deadline().await;
    // Waits of 800 ms, then 1600 ms would cross the 1 s budget: the loop stops at once.
    let limit = LimitExceeded::DeadlineExceeded {
        attempts: 2,
        budget: Duration::from_secs(1),
    };
    assert_eq!(result, Err(Error::Limit(limit)));
    assert_eq!(elapsed_since(start), Duration::from_millis(800));
}

#[retry(max_attempts = 3, deadline_ms = 300)]
async fn r5_hangs() -> Result<(), Error> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn r5_deadline_drops_a_hung_attempt() {
    let start = tokio::time::Instant::now();
    let limit = LimitExceeded::DeadlineExceeded {
        attempts: 1,
        budget: Duration::from_millis(300),
    };
    assert_eq!(r5_hangs().await, Err(Error::Limit(limit)));
    assert_eq!(elapsed_since(start), Duration::from_millis(300));
}

static R5_TIMEOUT_LOG: Mutex<Vec<(Error, u32)>> = Mutex::new(Vec::new());

fn r5_timeout_notify(error: &Error, attempt: u32, _: Duration) {
    R5_TIMEOUT_LOG
        .lock()
        .unwrap()
        .push((error.clone(), attempt));
}

static R5_TIMEOUT_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 3, base_delay_ms = 10, attempt_timeout_ms = 100, notify = r5_timeout_notify)]
async fn r5_first_attempt_hangs() -> Result<u32, Error> {
    let call = R5_TIMEOUT_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if call == 1 {
        std::future::pending::<()>().await;
    }
    Ok(call)
}

#[tokio::test(start_paused = true)]
async fn r5_a_timed_out_attempt_fails_like_any_other_and_is_retried() {
    assert_eq!(r5_first_attempt_hangs().await, Ok(2));
    let timeout = LimitExceeded::AttemptTimeout {
        attempt: 1,
        timeout: Duration::from_millis(100),
    };
    assert_eq!(
        *R5_TIMEOUT_LOG.lock().unwrap(),
        [(Error::Limit(timeout), 1)]
    );
}

fn r5_not_timeouts(error: &Error, _: u32) -> bool {
    !matches!(error, Error::Limit(_))
}

#[retry(max_attempts = 3, attempt_timeout_ms = 100, when = r5_not_timeouts)]
async fn r5_timeouts_not_retried() -> Result<(), Error> {
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn r5_when_decides_whether_a_timeout_is_retried() {
    let start = tokio::time::Instant::now();
    let timeout = LimitExceeded::AttemptTimeout {
        attempt: 1,
        timeout: Duration::from_millis(100),
    };
    assert_eq!(r5_timeouts_not_retried().await, Err(Error::Limit(timeout)));
    assert_eq!(elapsed_since(start), Duration::from_millis(100));
}

// Scope: a clock and a seed reach a `#[retry]` function unchanged (T1, T2) ----------------------

/// Sleeps end at once and are recorded; time moves by what was slept.
#[derive(Clone, Default)]
struct RecordingClock {
    slept: std::sync::Arc<Mutex<Vec<Duration>>>,
}

impl Clock for RecordingClock {
    type Sleep = std::future::Ready<()>;

    fn now(&self) -> Instant {
        static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        *ORIGIN.get_or_init(Instant::now) + self.slept.lock().unwrap().iter().sum::<Duration>()
    }

    fn sleep(&self, duration: Duration) -> Self::Sleep {
        self.slept.lock().unwrap().push(duration);
        std::future::ready(())
    }
}

/// A clock whose waits overrun: each ends twice as late as asked, as on a loaded machine.
#[derive(Clone)]
struct LateClock {
    origin: Instant,
    slept: std::sync::Arc<Mutex<Duration>>,
}

impl Clock for LateClock {
    type Sleep = std::future::Ready<()>;

    fn now(&self) -> Instant {
        self.origin + *self.slept.lock().unwrap()
    }

    fn sleep(&self, duration: Duration) -> Self::Sleep {
        *self.slept.lock().unwrap() += duration * 2;
        std::future::ready(())
    }
}

static R5_OVERRUN_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(
    max_attempts = 5,
    base_delay_ms = 100,
    jitter = "none",
    deadline_ms = 250
)]
async fn r5_overrun() -> Result<(), Error> {
    R5_OVERRUN_CALLS.fetch_add(1, Ordering::SeqCst);
    Err(Error::Fatal)
}

#[tokio::test]
async fn r5_a_wait_that_overruns_the_deadline_stops_before_the_next_attempt() {
    // R5: the 200 ms wait fits the 250 ms budget, but ends 400 ms in: no second attempt.
    let clock = LateClock {
        origin: Instant::now(),
        slept: Default::default(),
    };
    let result = Scope::new().clock(clock).run(r5_overrun()).await;
    let limit = LimitExceeded::DeadlineExceeded {
        attempts: 1,
        budget: Duration::from_millis(250),
    };
    assert_eq!(result, Err(Error::Limit(limit)));
    assert_eq!(R5_OVERRUN_CALLS.load(Ordering::SeqCst), 1);
}

fn retry_at_once(_: &Error) -> Option<Duration> {
    Some(Duration::ZERO)
}

static R2_READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static R2_UNTIL_READY_CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 100_000, retry_after = retry_at_once)]
async fn r2_until_ready() -> Result<u32, Error> {
    let call = R2_UNTIL_READY_CALLS.fetch_add(1, Ordering::SeqCst) + 1;
    if R2_READY.load(Ordering::SeqCst) {
        Ok(call)
    } else {
        Err(Error::Failed(call))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn r2_immediate_retries_of_an_attribute_fn_yield_so_other_tasks_run() {
    // A zero wait never touches the timer, but a run of them must not starve this thread.
    tokio::spawn(async { R2_READY.store(true, Ordering::SeqCst) });
    let attempts = r2_until_ready().await.unwrap();
    assert!(
        (2..=17).contains(&attempts),
        "the spawned task waited {attempts} attempts"
    );
}

#[retry(max_attempts = 4, base_delay_ms = 100)]
async fn scoped_always_fails() -> Result<(), Error> {
    Err(Error::Fatal)
}

#[tokio::test]
async fn scope_clock_and_seed_reach_the_function_and_match_the_hand_written_loop() {
    let clock = RecordingClock::default();
    let result = Scope::new()
        .clock(clock.clone())
        .seed(7)
        .run(scoped_always_fails())
        .await;
    assert_eq!(result, Err(Error::Fatal));
    let expanded = clock.slept.lock().unwrap().clone();
    assert_eq!(expanded.len(), 3);

    // The same policy written by hand draws the same delays from the same seed.
    let by_hand = RecordingClock::default();
    let policy: RetryPolicy = RetryOptions::new()
        .with_max_attempts(4)
        .with_base_delay_ms(100)
        .resolve()
        .unwrap();
    let result: Result<(), Error> = Scope::new()
        .clock(by_hand.clone())
        .seed(7)
        .run(policy.retry(|_| async { Err(Error::Fatal) }))
        .await;
    assert_eq!(result, Err(Error::Fatal));
    assert_eq!(*by_hand.slept.lock().unwrap(), expanded);
}

#[retry(max_attempts = 5, base_delay_ms = 500, jitter = "none")]
async fn d1_no_jitter() -> Result<(), Error> {
    Err(Error::Fatal)
}

#[tokio::test]
async fn d1_caps_with_max_attempts_5_base_500() {
    let clock = RecordingClock::default();
    let _ = Scope::new().clock(clock.clone()).run(d1_no_jitter()).await;
    let ms: Vec<u128> = clock
        .slept
        .lock()
        .unwrap()
        .iter()
        .map(Duration::as_millis)
        .collect();
    assert_eq!(ms, [1000, 2000, 3000, 3000]);
    assert_eq!(Jitter::None.name(), "none");
}

// D5 ------------------------------------------------------------------------------------------

#[derive(Debug, PartialEq)]
struct Throttled {
    retry_after: Duration,
}

/// The server's hint, as an HTTP client would read it from a `Retry-After` header.
fn server_hint(error: &Throttled) -> Option<Duration> {
    Some(error.retry_after)
}

static D5_LOG: Log = Mutex::new(Vec::new());

fn d5_log(_: &Throttled, attempt: u32, delay: Duration) {
    D5_LOG.lock().unwrap().push((attempt, delay));
}

#[retry(max_attempts = 3, retry_after = server_hint, notify = d5_log)]
async fn throttled(attempt_that_succeeds: u32, calls: &AtomicU32) -> Result<u32, Throttled> {
    let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
    if call < attempt_that_succeeds {
        return Err(Throttled {
            retry_after: Duration::from_millis(2500),
        });
    }
    Ok(call)
}

#[retry(max_attempts = 3, retry_after = server_hint)]
async fn parked(calls: &AtomicU32) -> Result<(), Throttled> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(Throttled {
        retry_after: Duration::from_secs(3600),
    })
}

#[tokio::test(start_paused = true)]
async fn d5_retry_after_hint_replaces_the_computed_wait() {
    let calls = AtomicU32::new(0);
    let start = tokio::time::Instant::now();
    assert_eq!(throttled(3, &calls).await, Ok(3));
    // The hint (2.5 s) replaces the computed wait, even above max_delay_ms (3 s is the cap).
    assert_eq!(
        take(&D5_LOG),
        [
            (1, Duration::from_millis(2500)),
            (2, Duration::from_millis(2500))
        ]
    );
    assert_slept(start, &[Duration::from_millis(2500); 2]);
}

#[tokio::test(start_paused = true)]
async fn d5_retry_after_hint_above_the_ceiling_ends_the_call_at_once() {
    let calls = AtomicU32::new(0);
    let start = tokio::time::Instant::now();
    let result = parked(&calls).await;
    assert_eq!(
        result,
        Err(Throttled {
            retry_after: Duration::from_secs(3600)
        })
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert_eq!(elapsed_since(start), Duration::ZERO);
}

// R9: a plain (blocking) `fn` under `#[retry]`: the same loop, waiting by blocking on the same
// clock (a scope's clock here, so nothing sleeps for real) ---------------------------------------

static R9_LOG: Log = Mutex::new(Vec::new());

fn r9_notify(_: &Error, attempt: u32, delay: Duration) {
    R9_LOG.lock().unwrap().push((attempt, delay));
}

#[retry(max_attempts = 5, jitter = "none", notify = r9_notify)]
fn r9_read(reads: &mut u32, input: String) -> Result<u32, Error> {
    *reads += 1;
    if *reads < 3 {
        return Err(Error::Failed(*reads));
    }
    Ok(input.parse::<u32>()? + *reads)
}

#[tokio::test]
async fn r9_a_blocking_fn_is_retried_with_waits_on_the_scope_clock() {
    let clock = RecordingClock::default();
    let mut reads = 0;
    let result = Scope::new()
        .clock(clock.clone())
        .run(async { r9_read(&mut reads, "40".to_owned()) })
        .await;
    assert_eq!(result, Ok(43));
    assert_eq!(reads, 3);
    let waits = [Duration::from_millis(200), Duration::from_millis(400)];
    assert_eq!(*clock.slept.lock().unwrap(), waits);
    assert_eq!(take(&R9_LOG), [(1, waits[0]), (2, waits[1])]);
}

#[retry(max_attempts = 5, jitter = "none", when = r3_only_failed)]
fn r9_fatal_second(calls: &AtomicU32) -> Result<(), Error> {
    let call = calls.fetch_add(1, Ordering::SeqCst) + 1;
    Err(if call == 1 {
        Error::Failed(1)
    } else {
        Error::Fatal
    })
}

#[retry(
    max_attempts = 5,
    base_delay_ms = 100,
    jitter = "none",
    deadline_ms = 250
)]
fn r9_overrun(calls: &AtomicU32) -> Result<(), Error> {
    calls.fetch_add(1, Ordering::SeqCst);
    Err(Error::Fatal)
}

#[tokio::test]
async fn r9_when_and_the_deadline_hold_for_a_blocking_fn() {
    let calls = AtomicU32::new(0);
    let clock = RecordingClock::default();
    let result = Scope::new()
        .clock(clock.clone())
        .run(async { r9_fatal_second(&calls) })
        .await;
    assert_eq!(result, Err(Error::Fatal));
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(*clock.slept.lock().unwrap(), [Duration::from_millis(200)]);
    // The 200 ms wait fits the 250 ms budget but ends 400 ms in: no second attempt.
    let calls = AtomicU32::new(0);
    let clock = LateClock {
        origin: Instant::now(),
        slept: Default::default(),
    };
    let result = Scope::new()
        .clock(clock)
        .run(async { r9_overrun(&calls) })
        .await;
    let limit = LimitExceeded::DeadlineExceeded {
        attempts: 1,
        budget: Duration::from_millis(250),
    };
    assert_eq!(result, Err(Error::Limit(limit)));
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[retry(max_attempts = 3)]
fn r9_succeeds() -> Result<u32, Error> {
    Ok(7)
}

#[test]
fn r9_a_blocking_fn_needs_no_runtime_and_its_success_waits_nothing() {
    assert_eq!(r9_succeeds(), Ok(7));
}

// X4: a body that lends a `&mut` keeps its own loop around each attempt; limits and yields -----
// hold there as for any other body.

#[retry(max_attempts = 3, base_delay_ms = 10, attempt_timeout_ms = 100)]
async fn x4_lent_first_attempt_hangs(calls: &mut u32) -> Result<u32, Error> {
    *calls += 1;
    if *calls == 1 {
        std::future::pending::<()>().await;
    }
    Ok(*calls)
}

#[tokio::test(start_paused = true)]
async fn x4_a_lent_attempt_that_times_out_is_retried() {
    let start = tokio::time::Instant::now();
    let mut calls = 0;
    assert_eq!(x4_lent_first_attempt_hangs(&mut calls).await, Ok(2));
    assert_eq!(calls, 2);
    assert!(elapsed_since(start) >= Duration::from_millis(100));
}

#[retry(max_attempts = 3, deadline_ms = 300)]
async fn x4_lent_hangs(calls: &mut u32) -> Result<(), Error> {
    *calls += 1;
    std::future::pending().await
}

#[tokio::test(start_paused = true)]
async fn x4_the_deadline_drops_a_hung_lent_attempt() {
    let start = tokio::time::Instant::now();
    let mut calls = 0;
    let limit = LimitExceeded::DeadlineExceeded {
        attempts: 1,
        budget: Duration::from_millis(300),
    };
    assert_eq!(x4_lent_hangs(&mut calls).await, Err(Error::Limit(limit)));
    assert_eq!(calls, 1);
    assert_eq!(elapsed_since(start), Duration::from_millis(300));
}

static X4_READY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[retry(max_attempts = 100_000, retry_after = retry_at_once)]
async fn x4_lent_until_ready(calls: &mut u32) -> Result<u32, Error> {
    *calls += 1;
    if X4_READY.load(Ordering::SeqCst) {
        Ok(*calls)
    } else {
        Err(Error::Failed(*calls))
    }
}

#[tokio::test(flavor = "current_thread")]
async fn x4_immediate_retries_of_a_lent_body_yield_so_other_tasks_run() {
    tokio::spawn(async { X4_READY.store(true, Ordering::SeqCst) });
    let mut calls = 0;
    let attempts = x4_lent_until_ready(&mut calls).await.unwrap();
    assert_eq!(attempts, calls);
    assert!(
        (2..=17).contains(&attempts),
        "the spawned task waited {attempts} attempts"
    );
}
