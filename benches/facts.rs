//! Counts and sizes, not timings: heap allocations per call and per retry, the size of each
//! crate's retry future, and an audit of jittered delays against the configured maximum.
//!
//! These numbers do not depend on the machine's load, so this binary prints them once, as
//! Markdown tables for BENCHMARKS.md (groups 3, 4 and 6 there). It links
//! `allocation-counter`, which replaces the global allocator with a counting one: that is why
//! it is a binary of its own, apart from the timings.

#[allow(
    dead_code,
    reason = "shared with the `overhead` bench, which uses other parts"
)]
mod contestants;

use std::fmt::Write as _;
use std::future::Future;
use std::mem::size_of;
use std::time::{Duration, Instant};

use allocation_counter::AllocationInfo;
use backon::{BackoffBuilder, ExponentialBuilder, FibonacciBuilder};
use retry_toolkit::{
    Clock, DefaultSleep, ExponentialBackoff, Jitter, JitterRng, RetryOptions, RetryPolicy,
    TokioClock,
};
use tower::retry::backoff::{Backoff, MakeBackoff};

use contestants::{FIRST, Fail, OpFuture, THIRD, poll_once};

fn main() {
    let mut out = String::new();
    allocations(&mut out);
    sizes(&mut out);
    jitter_audit(&mut out);
    println!("{out}");
}

// ---------------------------------------------------------------------------------------
// 3. Heap allocations.

/// Calls measured per row (after one warm-up call), so that a rare allocation shows as a
/// fraction instead of hiding.
const CALLS: u64 = 1_000;

/// How a contestant's future is driven to completion.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Driver {
    /// One poll, no runtime.
    PollOnce,
    /// `block_on` of a current-thread runtime with a real timer.
    Runtime,
    /// `block_on` of a current-thread runtime whose time is paused (and so auto-advances):
    /// real backoff delays, without waiting for them.
    PausedRuntime,
}

impl Driver {
    fn label(self) -> &'static str {
        match self {
            Driver::PollOnce => "one poll, no runtime",
            Driver::Runtime => "tokio runtime",
            Driver::PausedRuntime => "tokio runtime, paused time",
        }
    }

    fn runtime(self) -> Option<tokio::runtime::Runtime> {
        match self {
            Driver::PollOnce => None,
            Driver::Runtime => Some(contestants::runtime()),
            Driver::PausedRuntime => Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .start_paused(true)
                    .build()
                    .expect("a paused runtime"),
            ),
        }
    }
}

/// Allocations of `calls` runs of `make()`'s future, after one warm-up run.
fn count_allocations<F, Fut>(driver: Driver, calls: u64, make: F) -> AllocationInfo
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<u8, Fail>>,
{
    let rt = driver.runtime();
    let run = || {
        let result = match &rt {
            None => poll_once(make()),
            Some(rt) => rt.block_on(make()),
        };
        assert!(result.is_ok(), "every measured call ends in success");
    };
    run();
    allocation_counter::measure(|| (0..calls).for_each(|_| run()))
}

/// Allocations of the first run on a fresh thread (thread-local state not yet created).
fn count_cold<F, Fut>(driver: Driver, make: F) -> AllocationInfo
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<u8, Fail>>,
{
    std::thread::scope(|s| {
        s.spawn(move || {
            let rt = driver.runtime();
            allocation_counter::measure(|| {
                let result = match &rt {
                    None => poll_once(make()),
                    Some(rt) => rt.block_on(make()),
                };
                assert!(result.is_ok());
            })
        })
        .join()
        .expect("the measuring thread")
    })
}

struct AllocRow {
    name: &'static str,
    driver: Driver,
    /// Allocations (count, bytes) per call on the success path.
    success: (f64, f64),
    /// Allocations (count, bytes) per retry, net of the same driver's baseline.
    per_retry: (f64, f64),
    /// Allocations of the very first fail-twice call on a fresh thread, net of the baseline.
    cold: u64,
}

macro_rules! alloc_row {
    ($name:expr, $driver:expr, $success:expr, $retrying:expr) => {{
        let driver = $driver;
        let base_hot = count_allocations(driver, CALLS, || contestants::hand_loop::<1>(THIRD));
        let base_cold = count_cold(driver, || contestants::hand_loop::<1>(THIRD));
        let success = count_allocations(driver, CALLS, || $success(FIRST));
        let retrying = count_allocations(driver, CALLS, || $retrying(THIRD));
        let cold = count_cold(driver, || $retrying(THIRD));
        let retries = (CALLS * u64::from(THIRD - 1)) as f64;
        AllocRow {
            name: $name,
            driver,
            success: (
                success.count_total as f64 / CALLS as f64,
                success.bytes_total as f64 / CALLS as f64,
            ),
            per_retry: (
                retrying.count_total.saturating_sub(base_hot.count_total) as f64 / retries,
                retrying.bytes_total.saturating_sub(base_hot.bytes_total) as f64 / retries,
            ),
            cold: cold.count_total.saturating_sub(base_cold.count_total),
        }
    }};
}

fn allocations(out: &mut String) {
    use contestants as c;
    let rows = [
        alloc_row!(
            "retry-toolkit, zero delay",
            Driver::PollOnce,
            c::retry_toolkit_zero::<1>,
            c::retry_toolkit_zero::<1>
        ),
        alloc_row!(
            "retry-toolkit, zero delay, seeded policy",
            Driver::PollOnce,
            c::retry_toolkit_zero_seeded::<1>,
            c::retry_toolkit_zero_seeded::<1>
        ),
        alloc_row!(
            "retry-toolkit, default backoff",
            Driver::PausedRuntime,
            c::retry_toolkit::<1>,
            c::retry_toolkit::<1>
        ),
        alloc_row!(
            "retry-toolkit `#[retry]` fn, default policy",
            Driver::PausedRuntime,
            c::retry_macro_owned::<1>,
            c::retry_macro_owned::<1>
        ),
        alloc_row!(
            "backon, zero delay",
            Driver::Runtime,
            c::backon_zero::<1>,
            c::backon_zero::<1>
        ),
        alloc_row!(
            "backon, exponential + jitter",
            Driver::PausedRuntime,
            c::backon::<1>,
            c::backon::<1>
        ),
        alloc_row!(
            "tokio-retry, zero delay",
            Driver::Runtime,
            c::tokio_retry_zero::<1>,
            c::tokio_retry_zero::<1>
        ),
        alloc_row!(
            "tokio-retry, exponential + jitter",
            Driver::PausedRuntime,
            c::tokio_retry::<1>,
            c::tokio_retry::<1>
        ),
        alloc_row!(
            "tower, policy without wait",
            Driver::PollOnce,
            c::tower_no_wait::<1>,
            c::tower_no_wait::<1>
        ),
        alloc_row!(
            "tower, tower's exponential backoff",
            Driver::PausedRuntime,
            c::tower_backoff::<1>,
            c::tower_backoff::<1>
        ),
    ];
    let _ = writeln!(
        out,
        "### 3. Heap allocations\n\n\
         Per call on the success path, and per retry of a fail-fail-succeed call (net of the \
         same driver running the hand-written loop), averaged over {CALLS} calls after one \
         warm-up call. \"First call\" is the fail-fail-succeed call made first on a fresh \
         thread.\n\n\
         | | driven by | success path: allocations (bytes) per call | per retry: allocations (bytes) | first call on a new thread: allocations |\n\
         |---|---|---:|---:|---:|"
    );
    for row in rows {
        let _ = writeln!(
            out,
            "| {} | {} | {} ({}) | {} ({}) | {} |",
            row.name,
            row.driver.label(),
            number(row.success.0),
            number(row.success.1),
            number(row.per_retry.0),
            number(row.per_retry.1),
            row.cold,
        );
    }
    out.push('\n');
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.3}")
    }
}

// ---------------------------------------------------------------------------------------
// 4. Future sizes.

fn sizes(out: &mut String) {
    use contestants as c;
    use std::mem::size_of_val as size;

    let calls = std::cell::Cell::new(0);
    let rows: [(&str, usize, usize); 16] = [
        (
            "direct call (the operation's own future)",
            size(&c::direct::<1>()),
            size(&c::direct::<280>()),
        ),
        (
            "hand-written loop (async block)",
            size(&c::hand_loop::<1>(1)),
            size(&c::hand_loop::<280>(1)),
        ),
        (
            "**retry-toolkit** `policy.retry(op)`",
            size(&c::retry_toolkit::<1>(1)),
            size(&c::retry_toolkit::<280>(1)),
        ),
        (
            "retry-toolkit, operation capturing nothing",
            size(&RetryPolicy::DEFAULT.retry(|_| OpFuture::<1>::new(true))),
            size(&RetryPolicy::DEFAULT.retry(|_| OpFuture::<280>::new(true))),
        ),
        (
            "retry-toolkit `.backoff(Constant(ZERO))`",
            size(&c::retry_toolkit_zero::<1>(1)),
            size(&c::retry_toolkit_zero::<280>(1)),
        ),
        (
            "retry-toolkit `.clock(TokioClock)`",
            size(&ours_on::<1, _>(TokioClock)),
            size(&ours_on::<280, _>(TokioClock)),
        ),
        (
            "retry-toolkit on a clock whose sleep is 1 byte",
            size(&ours_on::<1, _>(contestants::ReadyClock)),
            size(&ours_on::<280, _>(contestants::ReadyClock)),
        ),
        (
            "retry-toolkit `.deadline(…)`",
            size(&ours_deadline::<1>()),
            size(&ours_deadline::<280>()),
        ),
        (
            "retry-toolkit `#[retry]` fn (default policy)",
            size(&c::retry_macro::<1>(&calls, 1)),
            size(&c::retry_macro::<280>(&calls, 1)),
        ),
        (
            "retry-toolkit `async fn` awaiting `policy.retry(op)` (its twin)",
            size(&c::retry_by_hand::<1>(&calls, 1)),
            size(&c::retry_by_hand::<280>(&calls, 1)),
        ),
        (
            "backon `op.retry(ExponentialBuilder)`",
            size(&c::backon::<1>(1)),
            size(&c::backon::<280>(1)),
        ),
        (
            "tokio-retry `Retry::start(strategy, op)`",
            size(&c::tokio_retry::<1>(1)),
            size(&c::tokio_retry::<280>(1)),
        ),
        (
            "tokio-retry, operation capturing nothing",
            size(&tokio_retry::Retry::start(
                contestants::tokio_retry_strategy(),
                || OpFuture::<1>::new(true),
            )),
            size(&tokio_retry::Retry::start(
                contestants::tokio_retry_strategy(),
                || OpFuture::<280>::new(true),
            )),
        ),
        (
            "tokio-retry, `FixedInterval` strategy",
            size(&c::tokio_retry_zero::<1>(1)),
            size(&c::tokio_retry_zero::<280>(1)),
        ),
        (
            "tower `Retry`, policy without wait",
            size(&c::tower_no_wait::<1>(1)),
            size(&c::tower_no_wait::<280>(1)),
        ),
        (
            "tower `Retry`, tower's exponential backoff",
            size(&c::tower_backoff::<1>(1)),
            size(&c::tower_backoff::<280>(1)),
        ),
    ];
    let _ = writeln!(
        out,
        "### 4. Size of the returned future (`std::mem::size_of_val`, bytes)\n\n\
         | | 1-byte operation | 280-byte operation | 280-byte minus 1-byte |\n|---|---:|---:|---:|"
    );
    for (name, one, big) in rows {
        let _ = writeln!(out, "| {name} | {one} | {big} | {} |", big - one);
    }

    // The same with the operations users write: the issue's `async fn op()`, the fail path's
    // `async fn flaky(attempt, succeed_at)`, and a closure capturing a `&Cell`.
    let async_rows: [(&str, usize); 17] = [
        ("direct call, `op()`", size(&c::direct_async())),
        (
            "hand-written loop around `flaky`",
            size(&c::hand_loop_async(1)),
        ),
        (
            "**retry-toolkit** `policy.retry(|_| op())`",
            size(&c::retry_toolkit_async()),
        ),
        (
            "**retry-toolkit** `.retry(|a| flaky(a, s)).backoff(Constant(ZERO))` (the fail path)",
            size(&c::retry_toolkit_zero_async(1)),
        ),
        (
            "retry-toolkit, capturing closure",
            size(&c::retry_toolkit_capturing(&calls, 1)),
        ),
        (
            "retry-toolkit, capturing closure, `Constant(ZERO)`",
            size(&c::retry_toolkit_zero_capturing(&calls, 1)),
        ),
        (
            "retry-toolkit `#[retry]` fn around `op()`",
            size(&c::retry_macro_async()),
        ),
        (
            "backon `op.retry(ExponentialBuilder)`",
            size(&c::backon_async()),
        ),
        (
            "tokio-retry `Retry::start(strategy, op)`",
            size(&c::tokio_retry_async()),
        ),
        (
            "tokio-retry, `FixedInterval` around `flaky` (the fail path)",
            size(&c::tokio_retry_zero_async(1)),
        ),
        (
            "tokio-retry, capturing closure",
            size(&c::tokio_retry_capturing(&calls, 1)),
        ),
        (
            "tower `Retry` around `service_fn(flaky)`, no wait",
            size(&c::tower_async(1)),
        ),
        (
            "tower `Retry`, capturing closure",
            size(&c::tower_capturing(&calls, 1)),
        ),
        (
            "retry-toolkit `.when_ok(…)` around `op()`",
            size(&c::retry_toolkit_when_ok()),
        ),
        (
            "retry-toolkit `.summarize()` around `op()`",
            size(&c::retry_toolkit_summarized()),
        ),
        ("`op()`'s own future", size(&c::op())),
        ("`flaky(a, s)`'s own future", size(&c::flaky(1, 1))),
    ];
    let _ = writeln!(
        out,
        "\nThe same with the operations users write (`async fn`, a capturing closure):\n\n\
         | | bytes |\n|---|---:|"
    );
    for (name, bytes) in async_rows {
        let _ = writeln!(out, "| {name} | {bytes} |");
    }

    // What the parts of retry-toolkit's futures measure; how they are laid out (the private
    // `Progress` and `State`) is in BENCHMARKS.md.
    let parts: [(&str, usize); 8] = [
        ("`RetryPolicy` (default clock)", size_of::<RetryPolicy>()),
        (
            "the operation (`numbered_op`'s closure)",
            size(&c::numbered_op::<1>(1)),
        ),
        ("`JitterRng`", size_of::<JitterRng>()),
        (
            "a `Retry` minus its `DefaultSleep` and operation (the loop's own state, padding included)",
            size(&c::retry_toolkit::<1>(1))
                - size_of::<DefaultSleep>()
                - size(&c::numbered_op::<1>(1)),
        ),
        ("`DefaultSleep`", size_of::<DefaultSleep>()),
        ("`tokio::time::Sleep`", size_of::<tokio::time::Sleep>()),
        (
            "`retry_toolkit::__private_0_1::Driver<Fail>` (an `#[retry]` call's loop state)",
            size_of::<retry_toolkit::__private_0_1::Driver<Fail>>(),
        ),
        (
            "`Option<Instant>` (a deadline's start, limited loops only)",
            size_of::<Option<Instant>>(),
        ),
    ];
    let _ = writeln!(
        out,
        "\nThe parts retry-toolkit's future is made of:\n\n| part | bytes |\n|---|---:|"
    );
    for (name, bytes) in parts {
        let _ = writeln!(out, "| {name} | {bytes} |");
    }
    out.push('\n');
}

fn ours_on<const N: usize, C: Clock>(clock: C) -> impl Future<Output = Result<u8, Fail>> {
    RetryPolicy::DEFAULT
        .retry(contestants::numbered_op::<N>(1))
        .clock(clock)
}

fn ours_deadline<const N: usize>()
-> impl Future<Output = Result<u8, retry_toolkit::RetryError<Fail>>> {
    RetryPolicy::DEFAULT
        .retry(contestants::numbered_op::<N>(1))
        .deadline(Duration::from_secs(10))
}

// ---------------------------------------------------------------------------------------
// 6. Jitter audit.

/// The audited configuration: 100 ms doubling to a 1 s maximum, 20 retries per sequence.
const AUDIT_BASE: Duration = Duration::from_millis(100);
const AUDIT_MAX: Duration = Duration::from_secs(1);
const RETRIES_PER_SEQUENCE: usize = 20;
const SEQUENCES: usize = 10_000;

#[derive(Default)]
struct Audit {
    draws: u64,
    above: u64,
    at_max: u64,
    largest: Duration,
}

impl Audit {
    /// Audits `SEQUENCES` sequences; `sequence(i)` yields the delays of sequence `i`.
    fn run<I: Iterator<Item = Duration>>(mut sequence: impl FnMut(u64) -> I) -> Self {
        let mut audit = Audit::default();
        for i in 0..SEQUENCES as u64 {
            for delay in sequence(i).take(RETRIES_PER_SEQUENCE) {
                audit.draws += 1;
                audit.above += u64::from(delay > AUDIT_MAX);
                audit.at_max += u64::from(delay == AUDIT_MAX);
                audit.largest = audit.largest.max(delay);
            }
        }
        audit
    }
}

fn ours_exponential(jitter: Jitter) -> ExponentialBackoff {
    ExponentialBackoff::builder()
        .base(AUDIT_BASE)
        .factor(2.0)
        .cap(AUDIT_MAX)
        .jitter(jitter)
        .build()
        .expect("a valid backoff")
}

fn ours_policy(jitter: Jitter) -> RetryPolicy {
    RetryOptions::new()
        .with_max_attempts(RETRIES_PER_SEQUENCE as u32 + 1)
        .with_base_delay_ms(AUDIT_BASE.as_millis() as u64)
        .with_max_delay_ms(AUDIT_MAX.as_millis() as u64)
        .with_jitter(jitter)
        .resolve()
        .expect("valid options")
}

fn jitter_audit(out: &mut String) {
    let mut rows: Vec<(String, Audit)> = Vec::new();
    for jitter in Jitter::ALL {
        let backoff = ours_exponential(jitter);
        rows.push((
            format!("retry-toolkit `ExponentialBackoff`, `Jitter::{jitter:?}`"),
            Audit::run(|i| backoff.delays(JitterRng::seeded(i))),
        ));
    }
    for jitter in Jitter::ALL {
        let policy = ours_policy(jitter);
        rows.push((
            format!("retry-toolkit `RetryPolicy` (default schedule), `{jitter}`"),
            Audit::run(|i| {
                let mut rng = JitterRng::seeded(i);
                policy.delays(&mut rng).collect::<Vec<_>>().into_iter()
            }),
        ));
    }
    for jitter in [Jitter::Full, Jitter::None] {
        let fib = retry_toolkit::Fibonacci::builder()
            .base(AUDIT_BASE)
            .cap(AUDIT_MAX)
            .jitter(jitter)
            .build()
            .expect("valid settings");
        rows.push((
            format!("retry-toolkit `Fibonacci`, `{jitter}`"),
            Audit::run(|i| {
                let mut rng = JitterRng::seeded(i);
                let mut previous = std::time::Duration::ZERO;
                (0..RETRIES_PER_SEQUENCE as u32)
                    .map(|k| {
                        previous = fib.delay_at(k, previous, &mut rng);
                        previous
                    })
                    .collect::<Vec<_>>()
                    .into_iter()
            }),
        ));
    }
    rows.push((
        "backon `ExponentialBuilder::with_jitter()`".into(),
        Audit::run(|i| {
            ExponentialBuilder::default()
                .with_jitter()
                .with_jitter_seed(i)
                .with_min_delay(AUDIT_BASE)
                .with_factor(2.0)
                .with_max_delay(AUDIT_MAX)
                .with_max_times(RETRIES_PER_SEQUENCE)
                .build()
        }),
    ));
    rows.push((
        "backon `FibonacciBuilder::with_jitter()`".into(),
        Audit::run(|i| {
            FibonacciBuilder::default()
                .with_jitter()
                .with_jitter_seed(i)
                .with_min_delay(AUDIT_BASE)
                .with_max_delay(AUDIT_MAX)
                .with_max_times(RETRIES_PER_SEQUENCE)
                .build()
        }),
    ));
    rows.push((
        "tokio-retry `ExponentialBackoff::max_delay(…).map(jitter)`".into(),
        Audit::run(|_| {
            tokio_retry::strategy::ExponentialBackoff::from_millis(2)
                .factor(50)
                .max_delay(AUDIT_MAX)
                .map(tokio_retry::strategy::jitter)
        }),
    ));
    // tower's backoff returns a `Sleep`; on paused time its delay is `deadline - now`.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a paused runtime");
    let _context = rt.enter();
    let maker = contestants::tower_backoff_maker(AUDIT_MAX);
    rows.push((
        "tower `ExponentialBackoff` (jitter 1.0)".into(),
        Audit::run(|_| {
            let mut backoff = maker.clone().make_backoff();
            std::iter::repeat_with(move || {
                let sleep = backoff.next_backoff();
                sleep.deadline() - tokio::time::Instant::now()
            })
        }),
    ));

    let _ = writeln!(
        out,
        "### 6b. Jitter audit: delays above the configured maximum\n\n\
         {SEQUENCES} sequences of {RETRIES_PER_SEQUENCE} retries each ({} draws per row), \
         base {AUDIT_BASE:?} doubling, maximum {AUDIT_MAX:?}. retry-toolkit and backon are \
         seeded with the sequence number; tokio-retry and tower draw from their own \
         entropy.\n\n\
         | strategy | draws | above max | share above max | largest delay | share exactly at max |\n\
         |---|---:|---:|---:|---:|---:|",
        SEQUENCES * RETRIES_PER_SEQUENCE
    );
    for (name, a) in rows {
        let _ = writeln!(
            out,
            "| {name} | {} | {} | {:.2}% | {:?} | {:.2}% |",
            a.draws,
            a.above,
            100.0 * a.above as f64 / a.draws as f64,
            a.largest,
            100.0 * a.at_max as f64 / a.draws as f64,
        );
    }
}

// The operation future's size is what the 1-byte / 280-byte columns say it is.
const _: () = assert!(size_of::<OpFuture<1>>() == 1 && size_of::<OpFuture<280>>() == 280);
