//! Time limits on a response body: the rest of the attempt timeout or of the deadline for a
//! body the caller reads to its end, and an idle timeout (no byte for a while) for any body.
//!
//! The loop times an attempt until its response is established; what the caller awaits after
//! that — `collect()`, reqwest's `bytes()` — runs outside the loop. Without a limit there, a
//! server that sends a head and then stalls holds the caller forever although the policy
//! promised a deadline. A body that runs out of time fails with [`BodyTimedOut`], naming the
//! limit, and is never replayed (its head was the call's answer).
//!
//! Timers are made when something first waits: an attempt answered at once, and a body read
//! at once, make none. The limits count from the attempt's start all the same, so a timer made
//! later fires at the instant one made at the start would have.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
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

/// What bounds one attempt: when it started, the policy's attempt timeout, the call's deadline
/// (when it passes, and how long it is), and whether the attempt ends itself at the deadline
/// (one run without the loop) or leaves that to the loop.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Span {
    pub(crate) start: Instant,
    pub(crate) timeout: Option<Duration>,
    pub(crate) deadline: Option<(Instant, Duration)>,
    pub(crate) own_deadline: bool,
}

impl Span {
    /// When the exchange must be over, body included, and which limit says so.
    pub(crate) fn end(&self) -> Option<(Instant, Bound)> {
        exchange_end(self.timeout.map(|t| (self.start, t)), self.deadline)
    }

    /// The timer the attempt waits for its response under, and the limit it enforces: the
    /// attempt timeout; or, for an attempt that keeps the call's deadline itself, the deadline
    /// when that comes first or alone. At the same instant the timeout fires, as in the loop,
    /// which then decides. Made when the attempt first waits: it fires at the same instant.
    /// `end` is this span's [`end`](Self::end), which the caller has already.
    pub(crate) fn timer<C: Clock>(
        &self,
        end: Option<(Instant, Bound)>,
        clock: &C,
    ) -> (Option<C::Sleep>, Bound) {
        match end {
            // The timeout first; or the deadline, for an attempt that keeps it.
            Some((at, bound)) if self.own_deadline || !matches!(bound, Bound::Deadline(_)) => {
                (Some(sleep_until(clock, at)), bound)
            }
            // No limit; or the deadline first, which the loop keeps: the attempt's own timeout.
            _ => {
                let timeout = self.timeout.unwrap_or_default();
                let at = self.timeout.and_then(|t| self.start.checked_add(t));
                let sleep = at.map(|at| sleep_until(clock, at));
                (sleep, Bound::AttemptTimeout(timeout))
            }
        }
    }

    /// The attempt's timers, in their box: made when the attempt first waits for its response
    /// (an attempt answered at once makes none). Out of line: the success path never calls it.
    #[inline(never)]
    pub(crate) fn timers<C: Clock + Clone>(&self, clock: &C) -> Pin<Box<Timers<C>>> {
        let end = self.end();
        let (total, total_bound) = self.timer(end, clock);
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
}

/// A timer on `clock` that fires at `at` (at once when that has passed).
fn sleep_until<C: Clock>(clock: &C, at: Instant) -> C::Sleep {
    clock.sleep(at.saturating_duration_since(clock.now()))
}

/// The limits of an attempt through the tower layer, when the policy sets a timeout or a
/// deadline: the instant it started until it first waits, then its timers. An attempt answered
/// at once (a cache, a service in the same process) never makes a timer nor allocates; one
/// that waits gets them in one box, one word in its future, which the body of its answer then
/// takes over ([`answer_timing`]).
pub(crate) enum Limits<C: Clock> {
    /// The attempt started at this instant and has not waited yet.
    Due(Instant),
    /// Its timers, since it first waited.
    Running(Pin<Box<Timers<C>>>),
}

impl<C: Clock + Clone> Limits<C> {
    /// The limit that ended the attempt, if one did (asked while the attempt waits for its
    /// response); the timers are made at the first wait. `span`: what bounds an attempt that
    /// started at the given instant.
    pub(crate) fn attempt_expired(
        &mut self,
        cx: &mut Context<'_>,
        clock: &C,
        span: impl FnOnce(Instant) -> Span,
    ) -> Option<Bound> {
        if let Limits::Due(start) = *self {
            *self = Limits::Running(span(start).timers(clock));
        }
        match self {
            Limits::Running(timers) => timers.as_mut().attempt_expired(cx),
            Limits::Due(_) => None,
        }
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

/// How the answer of an attempt whose limits were `limits` (what bounds it: `span`) times its
/// body: the rest of the exchange (unless the body is a stream) and the idle timeout. An
/// attempt that waited hands its timers' box over; one answered at once leaves the body only
/// when it must end, and its timer is made when the body first waits (`clock`, shared with the
/// body for that): an answer read at once makes none.
#[inline]
pub(crate) fn answer_timing<C>(
    clock: &C,
    limits: Option<Limits<C>>,
    span: impl FnOnce(Instant) -> Span,
    idle: Option<Duration>,
    stream: bool,
    body_clock: impl FnOnce() -> Arc<dyn BodyClock>,
) -> Timing
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    match limits {
        Some(Limits::Running(timers)) => {
            let end = timers.end;
            Timing::from(watch_in(clock, Some(timers), end, idle, stream))
        }
        Some(Limits::Due(start)) => body_timing(clock, span(start).end(), idle, stream, body_clock),
        None => body_timing(clock, None, idle, stream, body_clock),
    }
}

/// How a body whose exchange must be over by `end` is timed, with no timers of its attempt to
/// take over: until it first waits, only when it must end (`body_clock` then makes its timer),
/// unless an idle timeout starts now.
#[inline]
pub(crate) fn body_timing<C>(
    clock: &C,
    end: Option<(Instant, Bound)>,
    idle: Option<Duration>,
    stream: bool,
    body_clock: impl FnOnce() -> Arc<dyn BodyClock>,
) -> Timing
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    match (end, idle) {
        (Some((at, bound)), None) if !stream => Timing::Due(Due {
            at,
            deadline: matches!(bound, Bound::Deadline(_)),
            clock: body_clock(),
        }),
        (end, idle) => Timing::from(watch_in(clock, None, end, idle, stream)),
    }
}

/// [`watch`] in `limits`' box, if there is one. Inlined: an answer without limits (the
/// default) decides that in two tests.
#[inline]
fn watch_in<C>(
    clock: &C,
    limits: Option<Pin<Box<Timers<C>>>>,
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

/// The timers of a body when a limit is set, in `limits`' box if there is one.
#[inline(never)]
fn timers<C>(
    clock: &C,
    limits: Option<Pin<Box<Timers<C>>>>,
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

/// The timers of a body that must end at `at`, when `bound` says: what a [`BodyClock`] makes.
pub(crate) fn ending_at<C>(clock: &C, at: Instant, bound: Bound) -> Watch
where
    C: Clock + Clone + Send + 'static,
    C::Sleep: Send + 'static,
{
    timers(clock, None, Some((at, bound)), None)
}

/// Makes a body's timers when it first waits: the policy's clock and limits, shared with the
/// bodies of its answers (a reference count, no allocation).
pub(crate) trait BodyClock: Send + Sync {
    /// Timers that end a body at `at`: the call's deadline (`deadline`) or the attempt timeout.
    fn watch(&self, at: Instant, deadline: bool) -> Watch;
}

/// A body that must end at an instant, whose timer is not made yet.
pub(crate) struct Due {
    at: Instant,
    deadline: bool,
    clock: Arc<dyn BodyClock>,
}

/// How a response body is timed: not at all; by when it must end, until it first waits (its
/// timer is made then); by its running timers; or no more, the limit that fired named.
pub(crate) enum Timing {
    Untimed,
    Due(Due),
    Watching(Watch),
    Expired(Bound),
}

impl From<Option<Watch>> for Timing {
    fn from(watch: Option<Watch>) -> Self {
        match watch {
            Some(watch) => Timing::Watching(watch),
            None => Timing::Untimed,
        }
    }
}

impl Timing {
    /// The limit that ended the body already, if one did.
    pub(crate) fn expired(&self) -> Option<Bound> {
        match self {
            Timing::Expired(bound) => Some(*bound),
            _ => None,
        }
    }

    /// A frame arrived: the idle timer starts over.
    pub(crate) fn activity(&mut self) {
        if let Timing::Watching(watch) = self {
            // `get_mut`: no lock is taken (the mutex only makes the body `Sync`).
            let timers = watch.get_mut().unwrap_or_else(PoisonError::into_inner);
            timers.as_mut().activity();
        }
    }

    /// The body waits: `Ready` with the limit that ended it, which it remembers. A timer due
    /// is made now.
    pub(crate) fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<Bound> {
        if let Timing::Due(due) = self {
            *self = Timing::Watching(due.clock.watch(due.at, due.deadline));
        }
        let fired = match self {
            Timing::Untimed | Timing::Due(_) => return Poll::Pending,
            Timing::Expired(bound) => return Poll::Ready(*bound),
            Timing::Watching(watch) => {
                let timers = watch.get_mut().unwrap_or_else(PoisonError::into_inner);
                match timers.as_mut().poll_expired(cx) {
                    Poll::Ready(bound) => bound,
                    Poll::Pending => return Poll::Pending,
                }
            }
        };
        *self = Timing::Expired(fired);
        Poll::Ready(fired)
    }
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
