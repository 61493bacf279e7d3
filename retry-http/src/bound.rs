//! Time limits on a response body: the rest of the attempt timeout or of the deadline for a
//! body the caller reads to its end, and an idle timeout (no byte for a while) for any body.
//!
//! The loop times an attempt until its response is established; what the caller awaits after
//! that — `collect()`, reqwest's `bytes()` — runs outside the loop. Without a limit there, a
//! server that sends a head and then stalls holds the caller forever although the policy
//! promised a deadline. A body that runs out of time fails with [`BodyTimedOut`], naming the
//! limit, and is never replayed (its head was the call's answer).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use pin_project_lite::pin_project;
use retry_toolkit::Clock;

/// Which time limit ended a response body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Bound {
    /// The attempt timeout, counted from the start of the attempt whose response this is.
    AttemptTimeout(Duration),
    /// The call's deadline, counted from the start of the call.
    Deadline(Duration),
    /// The idle timeout: no byte arrived for this long.
    Idle(Duration),
}

impl fmt::Display for Bound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Bound::AttemptTimeout(t) => write!(f, "the attempt timeout of {t:?} ran out"),
            Bound::Deadline(t) => write!(f, "the call's deadline of {t:?} passed"),
            Bound::Idle(t) => write!(f, "no byte arrived within the idle timeout of {t:?}"),
        }
    }
}

/// A response body ran out of time before it ended: [`Bound`] says which limit fired. The
/// body is not read further and the request is not sent again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the response body did not end in time: {0}")]
pub struct BodyTimedOut(pub Bound);

/// The limits of one response body, created when its head arrived: `None` when no limit is
/// set (then nothing is timed and nothing is allocated).
pub(crate) type Watch = Mutex<Pin<Box<dyn Watcher + Send>>>;

/// The body's side of its timers: told of every frame, asked whether a limit fired.
pub(crate) trait Watcher {
    /// A frame arrived: the idle timer starts over.
    fn activity(self: Pin<&mut Self>);
    /// `Ready` with the limit that fired.
    fn poll_expired(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Bound>;
}

pin_project! {
    /// The timers of an exchange on the policy's clock, in one box: an attempt's timeout
    /// while the attempt waits for its response ([`Limits`]); then, when the response is the
    /// answer, the limits of its body (the same box, and the same timer when the attempt
    /// timeout is what ends the exchange).
    pub(crate) struct Timers<C: Clock> {
        clock: C,
        // Until the whole body must have arrived, and which limit that is; while the attempt
        // runs, its timeout.
        #[pin]
        total: Option<C::Sleep>,
        total_bound: Bound,
        // When the exchange, body included, must be over (the attempt's end), if a limit says.
        end: Option<(Instant, Bound)>,
        // Until the next byte must arrive.
        #[pin]
        idle: Option<C::Sleep>,
        idle_for: Duration,
        // A frame arrived since the idle timer started.
        moved: bool,
    }
}

impl<C: Clock> Watcher for Timers<C> {
    fn activity(self: Pin<&mut Self>) {
        *self.project().moved = true;
    }

    fn poll_expired(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Bound> {
        let mut this = self.project();
        if let Some(total) = this.total.as_pin_mut() {
            if total.poll(cx).is_ready() {
                return Poll::Ready(*this.total_bound);
            }
        }
        if std::mem::take(this.moved) && this.idle.is_some() {
            // Restarted only when the body waits again: one timer per wait, not per frame.
            this.idle.set(Some(this.clock.sleep(*this.idle_for)));
        }
        if let Some(idle) = this.idle.as_pin_mut() {
            if idle.poll(cx).is_ready() {
                return Poll::Ready(Bound::Idle(*this.idle_for));
            }
        }
        Poll::Pending
    }
}

/// When the exchange must be over, as the call's limits say: the earlier of the attempt's
/// end (`attempt`: its start and the attempt timeout) and the call's deadline (its instant
/// and the deadline).
pub(crate) fn exchange_end(
    attempt: Option<(Instant, Duration)>,
    deadline: Option<(Instant, Duration)>,
) -> Option<(Instant, Bound)> {
    let attempt = attempt.and_then(|(start, timeout)| {
        start
            .checked_add(timeout)
            .map(|end| (end, Bound::AttemptTimeout(timeout)))
    });
    let deadline = deadline.map(|(end, budget)| (end, Bound::Deadline(budget)));
    match (attempt, deadline) {
        (Some(a), Some(d)) => Some(if d.0 < a.0 { d } else { a }),
        (a, d) => a.or(d),
    }
}

/// When an attempt starting now must be over: [`exchange_end`] of its attempt timeout and the
/// call's deadline (`deadline_at`, the policy's `deadline`). Reads the clock only when a limit
/// needs it.
pub(crate) fn attempt_end<C: Clock>(
    clock: &C,
    timeout: Option<Duration>,
    deadline_at: Option<Instant>,
    deadline: Option<Duration>,
) -> Option<(Instant, Bound)> {
    match (timeout, deadline_at) {
        (None, None) => None,
        (timeout, deadline_at) => exchange_end(
            timeout.map(|timeout| (clock.now(), timeout)),
            deadline_at.zip(deadline),
        ),
    }
}

/// The limits of an attempt through the tower layer: its timeout, and when its exchange must
/// be over. Boxed, so that an attempt without limits (the default) keeps one word for them,
/// and the body of its answer takes the box over ([`watch_after`]).
pub(crate) type Limits<C> = Pin<Box<Timers<C>>>;

/// The limits of an attempt that starts now, when its `timeout` or a deadline is set: the
/// timeout and [`attempt_end`]. The loop's attempts leave the call's deadline to the loop; one
/// run without the loop (`own_deadline`) ends itself there, when the deadline comes first.
/// Out of line: an attempt without limits (the default) never calls it.
#[inline(never)]
pub(crate) fn limits<C: Clock + Clone>(
    clock: &C,
    timeout: Option<Duration>,
    deadline_at: Option<Instant>,
    deadline: Option<Duration>,
    own_deadline: bool,
) -> Limits<C> {
    let end = attempt_end(clock, timeout, deadline_at, deadline);
    let (total, total_bound) = attempt_timer(clock, timeout, end, own_deadline);
    Box::pin(Timers {
        total,
        total_bound,
        end,
        idle: None,
        idle_for: Duration::ZERO,
        moved: false,
        clock: clock.clone(),
    })
}

/// The timer an attempt waits for its response under, and the limit it enforces: the attempt
/// timeout; or, for an attempt that keeps the call's deadline itself (`own_deadline`: one run
/// without the loop), the deadline when that comes first or alone (`end` says which). At the
/// same instant the timeout fires, as in the loop, which then decides.
pub(crate) fn attempt_timer<C: Clock>(
    clock: &C,
    timeout: Option<Duration>,
    end: Option<(Instant, Bound)>,
    own_deadline: bool,
) -> (Option<C::Sleep>, Bound) {
    match end {
        Some((at, bound @ Bound::Deadline(_))) if own_deadline => {
            let left = at.saturating_duration_since(clock.now());
            (Some(clock.sleep(left)), bound)
        }
        _ => (
            timeout.map(|timeout| clock.sleep(timeout)),
            Bound::AttemptTimeout(timeout.unwrap_or_default()),
        ),
    }
}

impl<C: Clock> Timers<C> {
    /// The limit that ended the attempt, if one did (asked while the attempt waits for its
    /// response): its timeout, or the call's deadline for an attempt that keeps its own.
    pub(crate) fn attempt_expired(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Option<Bound> {
        let this = self.project();
        let total = this.total.as_pin_mut();
        let fired = total.is_some_and(|sleep| sleep.poll(cx).is_ready());
        fired.then_some(*this.total_bound)
    }

    /// Turns the timers to a body's: the rest of `end` and the idle timeout. The attempt's
    /// timer stays when the limit it times is what ends the exchange: it fires at that end.
    fn for_body(self: Pin<&mut Self>, end: Option<(Instant, Bound)>, idle: Option<Duration>) {
        let mut this = self.project();
        match end {
            Some((_, bound)) if this.total.is_some() && bound == *this.total_bound => {}
            Some((at, bound)) => {
                let left = at.saturating_duration_since(this.clock.now());
                this.total.set(Some(this.clock.sleep(left)));
                *this.total_bound = bound;
            }
            None => this.total.set(None),
        }
        this.idle.set(idle.map(|idle| this.clock.sleep(idle)));
        *this.idle_for = idle.unwrap_or_default();
        *this.moved = false;
    }
}

/// The timers of a body whose head just arrived: the rest of `end` (unless the body is a
/// stream, which the caller reads for as long as it lasts) and the idle timeout.
#[inline]
pub(crate) fn watch<C>(
    clock: &C,
    end: Option<(Instant, Bound)>,
    idle: Option<Duration>,
    stream: bool,
) -> Option<Watch>
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    watch_in(clock, None, end, idle, stream)
}

/// [`watch`] for the answer of an attempt whose limits were `limits`: the body takes their
/// box over, and their end.
#[inline]
pub(crate) fn watch_after<C>(
    clock: &C,
    limits: Limits<C>,
    idle: Option<Duration>,
    stream: bool,
) -> Option<Watch>
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    let end = limits.end;
    watch_in(clock, Some(limits), end, idle, stream)
}

/// [`watch`] in `limits`' box, if there is one. Inlined: an answer without limits (the
/// default) decides that in two tests.
#[inline]
fn watch_in<C>(
    clock: &C,
    limits: Option<Limits<C>>,
    end: Option<(Instant, Bound)>,
    idle: Option<Duration>,
    stream: bool,
) -> Option<Watch>
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    let end = if stream { None } else { end };
    if end.is_none() && idle.is_none() {
        return None;
    }
    Some(timers(clock, limits, end, idle))
}

/// The timers of [`watch`] and [`watch_after`] when a limit is set, in `limits`' box if
/// there is one.
#[inline(never)]
fn timers<C>(
    clock: &C,
    limits: Option<Limits<C>>,
    end: Option<(Instant, Bound)>,
    idle: Option<Duration>,
) -> Watch
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    let mut timers = limits.unwrap_or_else(|| {
        Box::pin(Timers {
            total: None,
            total_bound: Bound::Idle(Duration::ZERO),
            end: None,
            idle: None,
            idle_for: Duration::ZERO,
            moved: false,
            clock: clock.clone(),
        })
    });
    timers.as_mut().for_body(end, idle);
    Mutex::new(timers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h6_the_earlier_limit_names_the_end() {
        let start = Instant::now();
        let s = Duration::from_secs;
        let deadline_at = start + s(5);
        assert_eq!(
            exchange_end(Some((start, s(2))), Some((deadline_at, s(5)))),
            Some((start + s(2), Bound::AttemptTimeout(s(2))))
        );
        assert_eq!(
            exchange_end(Some((start, s(9))), Some((deadline_at, s(5)))),
            Some((deadline_at, Bound::Deadline(s(5))))
        );
        assert_eq!(exchange_end(None, None), None);
        // An end the clock cannot represent is no end.
        assert_eq!(exchange_end(Some((start, Duration::MAX)), None), None);
    }
}
