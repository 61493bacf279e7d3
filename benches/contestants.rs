//! The contestants: one trivial operation, called directly, in a hand-written loop, and
//! through each retry crate with a comparable policy.
//!
//! Both bench binaries build their futures here, so the timings, the allocation counts and
//! the future sizes are all taken from the very same code.
//!
//! The policy everywhere is retry-toolkit's default: 3 attempts, exponential backoff from
//! 100 ms, capped at 3 s, with jitter. "Zero delay" variants wait `Duration::ZERO` between
//! attempts, the way each crate spells it.

use std::cell::Cell;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use backon::{ConstantBuilder, ExponentialBuilder, Retryable};
use retry_toolkit::{Clock, Constant, JitterRng, RetryOptions, RetryPolicy, Scope};
use tokio_retry::strategy::{ExponentialBackoff, FixedInterval, jitter};
use tower::Service;
use tower::retry::Policy;
use tower::retry::backoff::{Backoff, ExponentialBackoffMaker, MakeBackoff};
use tower::util::rng::HasherRng;

/// Attempts in every policy, the first included.
pub(crate) const ATTEMPTS: u32 = 3;
/// The first attempt succeeds.
pub(crate) const FIRST: u32 = 1;
/// Attempts 1 and 2 fail, attempt 3 succeeds.
pub(crate) const THIRD: u32 = 3;

/// Base delay, cap and jitter of every default policy.
pub(crate) const BASE: Duration = Duration::from_millis(100);
pub(crate) const CAP: Duration = Duration::from_secs(3);

/// The one error every operation fails with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fail;

/// The operation's future: ready at its first poll, and exactly `N` bytes large.
///
/// Byte 0 says whether this attempt succeeds; the others are payload, standing for whatever
/// state a real operation keeps (a request, a buffer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct OpFuture<const N: usize>([u8; N]);

impl<const N: usize> OpFuture<N> {
    const NOT_EMPTY: () = assert!(N > 0, "an operation future has at least its outcome byte");

    pub(crate) fn new(succeed: bool) -> Self {
        let () = Self::NOT_EMPTY;
        let mut bytes = [0; N];
        bytes[0] = u8::from(succeed);
        Self(bytes)
    }
}

impl<const N: usize> Future for OpFuture<N> {
    type Output = Result<u8, Fail>;

    fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Self::Output> {
        Poll::Ready(if self.0[0] == 0 {
            Err(Fail)
        } else {
            Ok(self.0[N - 1])
        })
    }
}

/// The operation as retry-toolkit and the hand-written loop call it: with the attempt number.
/// `black_box` keeps the compiler from knowing which attempt succeeds.
pub(crate) fn numbered_op<const N: usize>(
    succeed_at: u32,
) -> impl FnMut(u32) -> OpFuture<N> + Copy {
    move |attempt| OpFuture::new(black_box(attempt) >= succeed_at)
}

/// The operation as backon and tokio-retry call it: without an attempt number, so it counts
/// its own calls.
pub(crate) fn counted_op<const N: usize>(succeed_at: u32) -> impl FnMut() -> OpFuture<N> {
    let mut calls = 0;
    move || {
        calls += 1;
        OpFuture::new(black_box(calls) >= succeed_at)
    }
}

/// Polls `future` once with a no-op waker. Every contestant polled this way must finish in
/// one poll: that is the point (no timer, no runtime).
///
/// Inlined always, so that the future is built where it is pinned, as an `.await` builds it
/// in its caller's state: a call that is not inlined receives the future by value and copies
/// it into its own frame (`memcpy` of the whole future, 29 instructions for 152 bytes), a
/// cost of this harness, not of any contestant.
#[inline(always)]
pub(crate) fn poll_once<F: Future>(future: F) -> F::Output {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(future).poll(&mut cx) {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("the future did not finish in one poll"),
    }
}

/// A current-thread tokio runtime with a real (unpaused) timer, as applications run.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a current-thread runtime")
}

// ---------------------------------------------------------------------------------------
// The baselines.

/// The operation called once, directly.
pub(crate) fn direct<const N: usize>() -> OpFuture<N> {
    numbered_op::<N>(FIRST)(1)
}

/// What a careful programmer writes instead of a crate: up to three calls, no waiting.
pub(crate) fn hand_loop<const N: usize>(succeed_at: u32) -> impl Future<Output = Result<u8, Fail>> {
    let mut op = numbered_op::<N>(succeed_at);
    async move {
        let mut attempt = 1;
        loop {
            match op(attempt).await {
                Ok(value) => return Ok(value),
                Err(error) if attempt >= ATTEMPTS => return Err(error),
                Err(_) => attempt += 1,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// retry-toolkit.

/// The default policy: 3 attempts, 100 ms → 3 s, full jitter, the default clock.
pub(crate) fn retry_toolkit<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    RetryPolicy::DEFAULT.retry(numbered_op::<N>(succeed_at))
}

/// The default policy with a zero delay between attempts.
pub(crate) fn retry_toolkit_zero<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    RetryPolicy::DEFAULT
        .retry(numbered_op::<N>(succeed_at))
        .backoff(Constant(Duration::ZERO))
}

/// The same with a seeded policy: no entropy is read when the first retry creates the
/// jitter generator.
pub(crate) fn retry_toolkit_zero_seeded<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    RetryPolicy::DEFAULT
        .with_seed(1)
        .retry(numbered_op::<N>(succeed_at))
        .backoff(Constant(Duration::ZERO))
}

/// A clock whose sleep is a 1-byte ready future: comparing retry-toolkit on it with retry-toolkit
/// on the default clock shows what the (96-byte) tokio sleep costs in size and time.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ReadyClock;

impl Clock for ReadyClock {
    type Sleep = Ready<()>;

    fn now(&self) -> Instant {
        Instant::now()
    }

    fn sleep(&self, _: Duration) -> Ready<()> {
        ready(())
    }
}

// ---------------------------------------------------------------------------------------
// backon.

/// backon's exponential backoff with jitter, configured like our default.
pub(crate) fn backon_builder() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(BASE)
        .with_max_delay(CAP)
        .with_max_times(ATTEMPTS as usize - 1)
}

pub(crate) fn backon<const N: usize>(succeed_at: u32) -> impl Future<Output = Result<u8, Fail>> {
    counted_op::<N>(succeed_at).retry(backon_builder())
}

pub(crate) fn backon_zero<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    let zero = ConstantBuilder::default()
        .with_delay(Duration::ZERO)
        .with_max_times(ATTEMPTS as usize - 1);
    counted_op::<N>(succeed_at).retry(zero)
}

// ---------------------------------------------------------------------------------------
// tokio-retry.

/// tokio-retry's exponential backoff (2^k · 50 ms = 100, 200, 400 … ms), capped, then
/// jittered as its docs show.
pub(crate) fn tokio_retry_strategy() -> impl Iterator<Item = Duration> {
    ExponentialBackoff::from_millis(2)
        .factor(50)
        .max_delay(CAP)
        .map(jitter)
        .take(ATTEMPTS as usize - 1)
}

pub(crate) fn tokio_retry<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    tokio_retry::Retry::start(tokio_retry_strategy(), counted_op::<N>(succeed_at))
}

pub(crate) fn tokio_retry_zero<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    let zero = FixedInterval::new(Duration::ZERO).take(ATTEMPTS as usize - 1);
    tokio_retry::Retry::start(zero, counted_op::<N>(succeed_at))
}

// ---------------------------------------------------------------------------------------
// tower: `Retry` around a service, with a policy we write (tower ships none that counts
// attempts). The policy decides how to wait: `NoWait` hands back a ready future (no timer,
// the cheapest tower can be), `TowerBackoff` uses tower's own jittered exponential backoff.

/// A service whose calls fail until call number `succeed_at`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Flaky<const N: usize> {
    calls: u32,
    succeed_at: u32,
}

impl<const N: usize> Service<()> for Flaky<N> {
    type Response = u8;
    type Error = Fail;
    type Future = OpFuture<N>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Fail>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, (): ()) -> OpFuture<N> {
        self.calls += 1;
        OpFuture::new(black_box(self.calls) >= self.succeed_at)
    }
}

/// Retries every error, `ATTEMPTS - 1` times, without waiting.
#[derive(Clone, Copy, Debug)]
pub(crate) struct NoWait {
    retries_left: u32,
}

impl<R> Policy<(), R, Fail> for NoWait {
    type Future = Ready<()>;

    fn retry(&mut self, (): &mut (), result: &mut Result<R, Fail>) -> Option<Ready<()>> {
        if result.is_err() && self.retries_left > 0 {
            self.retries_left -= 1;
            Some(ready(()))
        } else {
            None
        }
    }

    fn clone_request(&mut self, (): &()) -> Option<()> {
        Some(())
    }
}

/// Retries every error, `ATTEMPTS - 1` times, waiting as tower's exponential backoff says.
#[derive(Clone, Debug)]
pub(crate) struct TowerBackoff {
    retries_left: u32,
    backoff: tower::retry::backoff::ExponentialBackoff,
}

/// tower's backoff configured like our default: 100 ms → 3 s, jitter up to 100% of the
/// un-jittered delay.
pub(crate) fn tower_backoff_maker(cap: Duration) -> ExponentialBackoffMaker {
    ExponentialBackoffMaker::new(BASE, cap, 1.0, HasherRng::default())
        .expect("a valid tower backoff")
}

impl Policy<(), u8, Fail> for TowerBackoff {
    type Future = tokio::time::Sleep;

    fn retry(&mut self, (): &mut (), result: &mut Result<u8, Fail>) -> Option<tokio::time::Sleep> {
        if result.is_err() && self.retries_left > 0 {
            self.retries_left -= 1;
            Some(self.backoff.next_backoff())
        } else {
            None
        }
    }

    fn clone_request(&mut self, (): &()) -> Option<()> {
        Some(())
    }
}

/// Calls a fresh `tower::retry::Retry` service once, as `ServiceExt::oneshot` would.
fn tower_call<P, const N: usize>(
    policy: P,
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>>
where
    P: Policy<(), u8, Fail> + Clone,
{
    called_once(
        policy,
        Flaky::<N> {
            calls: 0,
            succeed_at,
        },
    )
}

/// `service` under `tower::retry::Retry` with `policy`, made ready and called once.
#[inline(always)]
fn called_once<P, S, R>(policy: P, service: S) -> impl Future<Output = Result<R, Fail>>
where
    P: Policy<(), R, Fail> + Clone,
    S: Service<(), Response = R, Error = Fail> + Clone,
{
    let mut service = tower::retry::Retry::new(policy, service);
    let mut cx = Context::from_waker(Waker::noop());
    assert!(service.poll_ready(&mut cx).is_ready());
    service.call(())
}

pub(crate) fn tower_no_wait<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    let policy = NoWait {
        retries_left: ATTEMPTS - 1,
    };
    tower_call::<_, N>(policy, succeed_at)
}

pub(crate) fn tower_backoff<const N: usize>(
    succeed_at: u32,
) -> impl Future<Output = Result<u8, Fail>> {
    let policy = TowerBackoff {
        retries_left: ATTEMPTS - 1,
        backoff: tower_backoff_maker(CAP).make_backoff(),
    };
    tower_call::<_, N>(policy, succeed_at)
}

// ---------------------------------------------------------------------------------------
// 5. `#[retry]` and the same policy called by hand.
//
// An `#[retry]` body is not told the attempt number, so both twins run the same operation,
// which counts its own calls in a `Cell` the caller lends: only the loop around it differs.
// Both use the default policy (the attribute without options resolves to it).

/// One attempt of group 5's operation: call number `calls + 1` succeeds from `succeed_at` on.
fn counted_attempt<const N: usize>(calls: &Cell<u32>, succeed_at: u32) -> OpFuture<N> {
    let call = calls.get() + 1;
    calls.set(call);
    OpFuture::new(black_box(call) >= succeed_at)
}

/// The attribute, with the default policy.
#[retry_toolkit::retry]
pub(crate) async fn retry_macro<const N: usize>(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> Result<u8, Fail> {
    counted_attempt::<N>(calls, succeed_at).await
}

/// The code the attribute stands for: an `async fn` awaiting `policy.retry(op)`.
pub(crate) async fn retry_by_hand<const N: usize>(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> Result<u8, Fail> {
    RetryPolicy::DEFAULT
        .retry(|_| counted_attempt::<N>(calls, succeed_at))
        .await
}

/// The same by hand with a zero delay, which the attribute cannot express (`base_delay_ms`
/// must be `> 0` and it has no `backoff` option): what its closest equivalent gives up.
pub(crate) async fn retry_by_hand_zero<const N: usize>(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> Result<u8, Fail> {
    RetryPolicy::DEFAULT
        .retry(|_| counted_attempt::<N>(calls, succeed_at))
        .backoff(Constant(Duration::ZERO))
        .await
}

/// The scope group 5's retrying calls run in: every wait of the default clock ends at once
/// (`ReadyClock`) and the jitter is seeded, as in a test of `#[retry]` code. Created once;
/// each call clones it (one reference count).
pub(crate) fn instant_scope() -> Scope {
    Scope::new().clock(ReadyClock).seed(1)
}

/// `retry_macro` as a future that owns its counter (for the allocation counts).
pub(crate) async fn retry_macro_owned<const N: usize>(succeed_at: u32) -> Result<u8, Fail> {
    retry_macro::<N>(&Cell::new(0), succeed_at).await
}

// ---------------------------------------------------------------------------------------
// 6. retry-toolkit's schedules, as the retry loop calls them.

/// The failed attempt the loop-step rows compute the wait for: past the 1 s cap of group 6
/// (100 ms · 2^4 = 1.6 s), and as small as attempt numbers are in a retry loop.
pub(crate) const LOOP_ATTEMPT: u32 = 5;

/// retry-toolkit's `ExponentialBackoff` from `BASE`, doubling, capped at `cap`, full jitter.
pub(crate) fn exponential(cap: Duration) -> retry_toolkit::ExponentialBackoff {
    retry_toolkit::ExponentialBackoff::builder()
        .base(BASE)
        .cap(cap)
        .build()
        .expect("a valid backoff")
}

/// The default loop's schedule from `BASE` to `cap`, full jitter.
pub(crate) fn d1_schedule(cap: Duration) -> retry_toolkit::PolicyBackoff {
    let cap_ms = u64::try_from(cap.as_millis()).expect("a cap of a few seconds");
    RetryOptions::new()
        .with_base_delay_ms(BASE.as_millis() as u64)
        .with_max_delay_ms(cap_ms)
        .resolve()
        .expect("valid options")
        .backoff()
}

/// A routine computing one wait with `schedule` the way the retry loop does: one
/// `Backoff::delay` for failed attempt `LOOP_ATTEMPT`.
pub(crate) fn loop_step(mut schedule: impl retry_toolkit::Backoff) -> impl FnMut() -> Duration {
    let mut rng = JitterRng::seeded(7);
    move || {
        retry_toolkit::Backoff::delay(
            &mut schedule,
            black_box(LOOP_ATTEMPT),
            black_box(Duration::from_millis(500)),
            &mut rng,
        )
    }
}

// ---------------------------------------------------------------------------------------
// The operation as users write it: an `async fn`, and a closure capturing state.
//
// The hand-written `OpFuture` above is 1 byte and has no drop glue, which flatters every
// wrapper: an `async fn`'s future is a compiler-generated state machine. These contestants
// run the same comparisons with the operation of the independent measurement of issue 11
// (`async fn op() -> Result<u64, Fail> { Ok(black_box(42)) }`), so both shapes are
// published side by side.

/// The success path's operation, exactly as the issue wrote it.
pub(crate) async fn op() -> Result<u64, Fail> {
    Ok(black_box(42))
}

/// The fail path's operation: attempt `attempt` succeeds from `succeed_at` on.
pub(crate) async fn flaky(attempt: u32, succeed_at: u32) -> Result<u64, Fail> {
    if black_box(attempt) >= succeed_at {
        Ok(black_box(42))
    } else {
        Err(Fail)
    }
}

/// An attempt of a closure capturing state: it counts its calls in a lent `Cell`, as an
/// operation borrowing a client or a connection pool would borrow it.
pub(crate) async fn capturing(calls: &Cell<u32>, succeed_at: u32) -> Result<u64, Fail> {
    let call = calls.get() + 1;
    calls.set(call);
    if black_box(call) >= succeed_at {
        Ok(black_box(42))
    } else {
        Err(Fail)
    }
}

/// `op` called once, directly.
pub(crate) fn direct_async() -> impl Future<Output = Result<u64, Fail>> {
    op()
}

/// The hand-written loop around `flaky`.
pub(crate) async fn hand_loop_async(succeed_at: u32) -> Result<u64, Fail> {
    let mut attempt = 1;
    loop {
        match flaky(attempt, succeed_at).await {
            Ok(value) => return Ok(value),
            Err(error) if attempt >= ATTEMPTS => return Err(error),
            Err(_) => attempt += 1,
        }
    }
}

pub(crate) fn retry_toolkit_async() -> impl Future<Output = Result<u64, Fail>> {
    RetryPolicy::DEFAULT.retry(|_| op())
}

pub(crate) fn retry_toolkit_zero_async(succeed_at: u32) -> impl Future<Output = Result<u64, Fail>> {
    RetryPolicy::DEFAULT
        .retry(move |attempt| flaky(attempt, succeed_at))
        .backoff(Constant(Duration::ZERO))
}

pub(crate) fn retry_toolkit_capturing(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> impl Future<Output = Result<u64, Fail>> + '_ {
    RetryPolicy::DEFAULT.retry(move |_| capturing(calls, succeed_at))
}

pub(crate) fn retry_toolkit_zero_capturing(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> impl Future<Output = Result<u64, Fail>> + '_ {
    RetryPolicy::DEFAULT
        .retry(move |_| capturing(calls, succeed_at))
        .backoff(Constant(Duration::ZERO))
}

/// `#[retry]` around the operation.
#[retry_toolkit::retry]
pub(crate) async fn retry_macro_async() -> Result<u64, Fail> {
    op().await
}

pub(crate) fn backon_async() -> impl Future<Output = Result<u64, Fail>> {
    op.retry(backon_builder())
}

pub(crate) fn tokio_retry_async() -> impl Future<Output = Result<u64, Fail>> {
    tokio_retry::Retry::start(tokio_retry_strategy(), op)
}

pub(crate) fn tokio_retry_capturing(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> impl Future<Output = Result<u64, Fail>> + '_ {
    tokio_retry::Retry::start(tokio_retry_strategy(), move || capturing(calls, succeed_at))
}

pub(crate) fn tokio_retry_zero_async(succeed_at: u32) -> impl Future<Output = Result<u64, Fail>> {
    let zero = FixedInterval::new(Duration::ZERO).take(ATTEMPTS as usize - 1);
    let mut calls = 0;
    tokio_retry::Retry::start(zero, move || {
        calls += 1;
        flaky(calls, succeed_at)
    })
}

/// tower's `Retry` around a `service_fn` calling `flaky`, with the policy that never waits.
pub(crate) fn tower_async(succeed_at: u32) -> impl Future<Output = Result<u64, Fail>> {
    let mut calls = 0;
    let service = tower::service_fn(move |()| {
        calls += 1;
        flaky(calls, succeed_at)
    });
    let policy = NoWait {
        retries_left: ATTEMPTS - 1,
    };
    called_once(policy, service)
}

/// The same around a closure capturing state (`&Cell`, copied into each clone of the service).
pub(crate) fn tower_capturing(
    calls: &Cell<u32>,
    succeed_at: u32,
) -> impl Future<Output = Result<u64, Fail>> + '_ {
    let service = tower::service_fn(move |()| capturing(calls, succeed_at));
    let policy = NoWait {
        retries_left: ATTEMPTS - 1,
    };
    called_once(policy, service)
}

// ---------------------------------------------------------------------------------------
// Blocking retry (`RetryPolicy::retry_blocking`, backon's `BlockingRetryable`), and the loop
// options of issue 21 as the success path sees them.

/// A blocking operation that succeeds from attempt `succeed_at` on.
pub(crate) fn blocking_op(attempt: u32, succeed_at: u32) -> Result<u64, Fail> {
    if black_box(attempt) >= succeed_at {
        Ok(black_box(42))
    } else {
        Err(Fail)
    }
}

/// The blocking call, no wrapper.
pub(crate) fn direct_blocking() -> Result<u64, Fail> {
    blocking_op(FIRST, FIRST)
}

/// retry-toolkit's blocking loop around it, default policy.
pub(crate) fn retry_toolkit_blocking(succeed_at: u32) -> Result<u64, Fail> {
    RetryPolicy::DEFAULT
        .retry_blocking(|attempt| blocking_op(attempt, succeed_at))
        .call()
}

/// The same with zero waits, for the fail path.
pub(crate) fn retry_toolkit_blocking_zero(succeed_at: u32) -> Result<u64, Fail> {
    RetryPolicy::DEFAULT
        .with_seed(1)
        .retry_blocking(|attempt| blocking_op(attempt, succeed_at))
        .backoff(Constant(Duration::ZERO))
        .call()
}

/// backon's blocking retry, configured like our default, sleeping the thread.
pub(crate) fn backon_blocking(succeed_at: u32) -> Result<u64, Fail> {
    use backon::BlockingRetryable;
    let attempt = Cell::new(0);
    (|| {
        attempt.set(attempt.get() + 1);
        blocking_op(attempt.get(), succeed_at)
    })
    .retry(backon_builder())
    .sleep(std::thread::sleep)
    .call()
}

/// backon's blocking retry with zero waits.
pub(crate) fn backon_blocking_zero(succeed_at: u32) -> Result<u64, Fail> {
    use backon::BlockingRetryable;
    let attempt = Cell::new(0);
    (|| {
        attempt.set(attempt.get() + 1);
        blocking_op(attempt.get(), succeed_at)
    })
    .retry(
        backon::ConstantBuilder::default()
            .with_delay(Duration::ZERO)
            .with_max_times(ATTEMPTS as usize - 1),
    )
    .sleep(std::thread::sleep)
    .call()
}

/// The hand-written blocking loop, zero waits.
pub(crate) fn hand_loop_blocking(succeed_at: u32) -> Result<u64, Fail> {
    let mut attempt = 1;
    loop {
        match blocking_op(attempt, succeed_at) {
            Err(_) if attempt < ATTEMPTS => attempt += 1,
            outcome => return outcome,
        }
    }
}

/// retry-toolkit's success path with a value predicate that never retries (`when_ok`).
pub(crate) fn retry_toolkit_when_ok() -> impl Future<Output = Result<u64, Fail>> {
    RetryPolicy::DEFAULT
        .retry(|_| op())
        .when_ok(|value, _| *value == 0)
}

/// retry-toolkit's success path with a summary.
pub(crate) fn retry_toolkit_summarized()
-> impl Future<Output = (Result<u64, Fail>, retry_toolkit::RetrySummary)> {
    RetryPolicy::DEFAULT.retry(|_| op()).summarize()
}

/// retry-toolkit's Fibonacci schedule from `BASE` to `cap`, full jitter.
pub(crate) fn fibonacci(cap: Duration) -> retry_toolkit::Fibonacci {
    retry_toolkit::Fibonacci::builder()
        .base(BASE)
        .cap(cap)
        .build()
        .expect("a valid backoff")
}
