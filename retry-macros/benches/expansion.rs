//! Does `#[retry]` cost more than the hand-written `RetryPolicy::retry` call it stands for?
//!
//! `cargo bench -p retry-macros --bench expansion` prints nanoseconds per call for each
//! variant: the success path (one attempt) and a call that fails twice before succeeding,
//! with sleeps that end at once (a scoped clock, as in tests). No dependency beyond std: the
//! numbers are medians of a few runs of a timed loop, good for "same or not", not for
//! decimals. Results go to BENCHMARKS.md.
//!
//! The fair comparison for a `#[retry] async fn` is an `async fn` whose body awaits
//! `policy.retry(…)`: that is the code the attribute replaces. A bare `Retry` future polled
//! directly is listed too; it skips the enclosing `async fn`'s state machine, which costs
//! the same few nanoseconds with or without the attribute.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use retry_core::{Clock, RetryOptions, RetryPolicy, Scope, retry};

const POLICY: RetryPolicy = match RetryOptions::new()
    .with_max_attempts(5)
    .with_base_delay_ms(500)
    .resolve()
{
    Ok(policy) => policy,
    Err(e) => panic!("{}", e.message()),
};

/// Polls a future that is ready at once (no sleep registers with a runtime).
fn ready<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("benchmarked futures complete on their first poll"),
    }
}

#[retry(max_attempts = 5, base_delay_ms = 500)]
async fn expanded(n: u64) -> Result<u64, String> {
    Ok(black_box(n) + 1)
}

async fn by_hand(n: u64) -> Result<u64, String> {
    POLICY
        .retry(move |_| async move { Ok(black_box(n) + 1) })
        .await
}

fn bare_retry_future(n: u64) -> impl Future<Output = Result<u64, String>> {
    POLICY.retry(move |_| async move { Ok(black_box(n) + 1) })
}

static CALLS: AtomicU32 = AtomicU32::new(0);

/// Fails on two calls out of three.
fn flaky(n: u64) -> Result<u64, String> {
    if CALLS.fetch_add(1, Ordering::Relaxed) % 3 < 2 {
        Err(String::new())
    } else {
        Ok(n)
    }
}

#[retry(max_attempts = 5, base_delay_ms = 500)]
async fn expanded_flaky(n: u64) -> Result<u64, String> {
    flaky(n)
}

async fn by_hand_flaky(n: u64) -> Result<u64, String> {
    POLICY.retry(move |_| async move { flaky(n) }).await
}

/// Sleeps end at once.
#[derive(Clone, Copy)]
struct Instantly;

impl Clock for Instantly {
    type Sleep = std::future::Ready<()>;
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn sleep(&self, _: Duration) -> Self::Sleep {
        std::future::ready(())
    }
}

fn time(name: &str, iterations: u32, mut f: impl FnMut(u64)) {
    let mut runs: Vec<f64> = (0..5)
        .map(|_| {
            let start = Instant::now();
            for i in 0..iterations {
                f(u64::from(i));
            }
            start.elapsed().as_nanos() as f64 / f64::from(iterations)
        })
        .collect();
    runs.sort_by(f64::total_cmp);
    println!("{name:<40} {:>9.1} ns/call", runs[2]);
}

fn main() {
    time("success: no retry at all", 2_000_000, |n| {
        black_box(ready(async { Ok::<_, String>(black_box(n) + 1) }).ok());
    });
    time("success: #[retry] fn", 2_000_000, |n| {
        black_box(ready(expanded(n)).ok());
    });
    time("success: async fn awaiting policy.retry", 2_000_000, |n| {
        black_box(ready(by_hand(n)).ok());
    });
    time("success: bare Retry future", 2_000_000, |n| {
        black_box(ready(bare_retry_future(n)).ok());
    });

    let runtime = tokio::runtime::Builder::new_current_thread().build().ok();
    let Some(runtime) = runtime else { return };
    time("2 failures + success: #[retry] fn", 200_000, |n| {
        let call = Scope::new().clock(Instantly).seed(1).run(expanded_flaky(n));
        black_box(runtime.block_on(call).ok());
    });
    time("2 failures + success: policy.retry", 200_000, |n| {
        let call = Scope::new().clock(Instantly).seed(1).run(by_hand_flaky(n));
        black_box(runtime.block_on(call).ok());
    });
}
