//! What an attempt's outcome means for the loop, written once for the tower layer and the
//! reqwest middleware: a [`Failure`] carries the diagnosis and the verdict the loop's hooks
//! read, and [`finish`] turns the loop's end into a response or an [`Error`].
//!
//! The loop is retry-toolkit's (`RetryPolicy::retry_operation`, `RetryPolicy::retry`); its hooks
//! are the plain functions here, so that the layer's future type can name them.

use std::fmt;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method, StatusCode};
use retry_toolkit::protect::{Chosen, Counts, Protected};
use retry_toolkit::{CircuitBreaker, Clock, RetryBudget, RetryError};

use crate::classify::{Classify, Kind, Outcome, never_sent};
use crate::config::Shared;
use crate::error::{AttemptTimedOut, BoxError, Error, RetryReport, StopReason, open, write_chain};
use crate::method::Safety;
use crate::protect::{Held, Protection};
use crate::retry_after::response_hint;
use crate::target::Target;

/// Where the events of this crate go.
pub(crate) const TARGET: &str = "retry_http";

/// What a call's attempts share: its target, its method's safety, whether its body can be
/// sent again.
#[derive(Clone, Debug)]
pub(crate) struct Call {
    pub(crate) target: Target,
    pub(crate) safety: Safety,
    pub(crate) replayable: bool,
}

/// An attempt worth retrying, or a failure the caller must see: what the loop calls an
/// error, always boxed (`Lost`): the loop keeps its last failure during a backoff and the
/// success path moves the loop's future by value several times, so the rare case takes one
/// pointer there, not 200 bytes.
pub(crate) struct Failure<R> {
    /// The attempt, from 1.
    pub(crate) attempt: u32,
    pub(crate) what: What<R>,
    /// `Ok` if another attempt may follow; otherwise why not.
    pub(crate) verdict: Result<(), StopReason>,
    /// The server's `Retry-After`, when the verdict allows a retry.
    pub(crate) retry_after: Option<Duration>,
    /// Whether the policy's circuit breaker counts this outcome as a failure.
    pub(crate) counts: bool,
    pub(crate) target: Target,
    /// The policy's `notify` hook, if a retry may follow (cloned on failures only).
    pub(crate) hook: Option<Hook>,
}

pub(crate) type Lost<R> = Box<Failure<R>>;

/// The policy's `notify` hook: what failed, the attempt, the wait before the next.
pub(crate) type Hook = std::sync::Arc<dyn Fn(&Outcome<'_>, u32, Duration) + Send + Sync>;

/// What went wrong in an attempt.
pub(crate) enum What<R> {
    /// A response worth retrying (a 503).
    Response(R, StatusCode),
    /// The exchange failed before the response was established.
    Error(BoxError),
    /// A response that is the call's answer (not worth retrying), carried as a failure
    /// only so that the loop reports it to the breaker as one: a status the breaker counts
    /// but the classification does not retry.
    Answer(R, StatusCode),
}

impl<R> fmt::Debug for Failure<R> {
    /// The loop's own events print this: short, with the target.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: ", self.target)?;
        match &self.what {
            What::Response(_, status) | What::Answer(_, status) => write!(f, "{status}"),
            What::Error(e) => write!(f, "{}", Chain(open(&**e))),
        }
    }
}

/// An error and its causes, as one line.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_chain(f, self.0)
    }
}

impl Call {
    /// What the attempts of a request with `method` and `headers` (its key applied) judge
    /// by; `replayable` if its body can be sent again.
    #[inline]
    pub(crate) fn new(
        method: &Method,
        headers: &HeaderMap,
        replayable: bool,
        target: Target,
    ) -> Self {
        Call {
            target,
            safety: Safety::of(method, headers),
            replayable,
        }
    }

    /// Judges a response head by its status and headers, borrowed (the answer, the common
    /// case, is then moved once): `Ok` if the response is the answer (not worth retrying),
    /// else what its failure says. Inlined: an answer, without a breaker to weigh it, is told
    /// in two tests; the rest is [`judge_failed_head`](Self::judge_failed_head).
    #[inline]
    pub(crate) fn judge_head<P: Classify, C: Clock>(
        &self,
        shared: &Shared<P, C>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<(), Judged> {
        let outcome = Outcome::new(&self.target.method, Kind::Response(status, headers));
        let retryable = shared.classify.is_retryable(&outcome);
        if !retryable && !shared.protection.has_breaker() {
            return Ok(());
        }
        self.judge_failed_head(shared, &outcome, retryable, headers)
    }

    /// The rest of [`judge_head`](Self::judge_head): a response worth retrying, or an answer
    /// the breaker may count as a failure.
    fn judge_failed_head<P, C: Clock>(
        &self,
        shared: &Shared<P, C>,
        outcome: &Outcome<'_>,
        retryable: bool,
        headers: &HeaderMap,
    ) -> Result<(), Judged> {
        let protection = &shared.protection;
        let (clock, hook) = (shared.policy.clock(), shared.notify.as_ref());
        if !retryable {
            // The answer; unless the breaker counts it, which only a failure can tell it.
            if !protection.counts(outcome) {
                return Ok(());
            }
            return Err(Judged {
                answer: true,
                verdict: Err(StopReason::NotRetryable),
                retry_after: None,
                counts: true,
                hook: None,
            });
        }
        let counts = protection.counts(outcome);
        let verdict = self.verdict(true, false);
        let retry_after = match verdict {
            Ok(()) => response_hint(headers, || clock.wall_now()),
            Err(_) => None,
        };
        Err(Judged {
            answer: false,
            verdict,
            retry_after,
            counts,
            hook: hook.cloned(),
        })
    }

    /// Judges a failure before the response was established.
    pub(crate) fn judge_error<P: Classify, R>(
        &self,
        classify: &P,
        protection: &Protection,
        hook: Option<&Hook>,
        attempt: u32,
        error: Failed,
    ) -> Lost<R> {
        let (kind, sent) = match &error {
            Failed::Transport(e) => (Kind::Transport(open(&**e)), !never_sent(open(&**e))),
            Failed::Stream(e) => (Kind::Stream(open(&**e)), true),
            Failed::TimedOut(t) => (Kind::TimedOut(*t), true),
        };
        let outcome = Outcome::new(&self.target.method, kind);
        let retryable = classify.is_retryable(&outcome);
        let counts = protection.counts(&outcome);
        Box::new(Failure {
            attempt,
            what: What::Error(error.into_box()),
            verdict: self.verdict(retryable, !sent),
            retry_after: None,
            counts,
            target: self.target.clone(),
            hook: hook.cloned(),
        })
    }

    /// The classification first, then the method's safety, then the body.
    fn verdict(&self, retryable: bool, never_sent: bool) -> Result<(), StopReason> {
        self.safety
            .decide(retryable, never_sent, &self.target.uri)?;
        if !self.replayable {
            return Err(StopReason::NotReplayable);
        }
        Ok(())
    }
}

/// A response head that is not simply the answer: worth retrying, or an answer the breaker
/// counts as a failure. What its [`Failure`] carries once the response is wrapped.
pub(crate) struct Judged {
    /// The answer, carried as a failure only for the breaker (`What::Answer`).
    answer: bool,
    verdict: Result<(), StopReason>,
    retry_after: Option<Duration>,
    counts: bool,
    hook: Option<Hook>,
}

impl Judged {
    /// The failure of attempt `attempt` to `target`, which answered `response`.
    pub(crate) fn lost<R: Answer>(self, response: R, attempt: u32, target: Target) -> Lost<R> {
        let status = response.status();
        let what = if self.answer {
            What::Answer(response, status)
        } else {
            What::Response(response, status)
        };
        Box::new(Failure {
            attempt,
            what,
            verdict: self.verdict,
            retry_after: self.retry_after,
            counts: self.counts,
            target,
            hook: self.hook,
        })
    }
}

/// How an attempt failed before its response was established.
pub(crate) enum Failed {
    /// Before the response head.
    Transport(BoxError),
    /// An event stream, after its head, before its first event.
    Stream(BoxError),
    /// The attempt timeout ran out.
    TimedOut(Duration),
}

impl Failed {
    fn into_box(self) -> BoxError {
        match self {
            Failed::Transport(e) | Failed::Stream(e) => e,
            Failed::TimedOut(t) => Box::new(AttemptTimedOut(t)),
        }
    }
}

// ------------------------------------------------------------------ the loop's hooks

/// The loop's `when`: the verdict, decided when the attempt ended.
pub(crate) type WhenFn<R> = fn(&Lost<R>, u32) -> bool;
/// The loop's `notify`: the event of a retry.
pub(crate) type NotifyFn<R> = fn(&Lost<R>, u32, Duration);
/// The loop's `retry_after`: the server's hint.
pub(crate) type HintFn<R> = fn(&Lost<R>) -> Option<Duration>;
/// The loop's shared protection: the policy's budget and breaker, each optional.
pub(crate) type Guard = Chosen<Held<RetryBudget>, Held<CircuitBreaker>, Counted>;

/// What a call's loop is protected by: the budget and the breaker, each only when set (a call
/// without either checks two empty slots per attempt, nothing more).
pub(crate) fn guard(protection: &Protection) -> Guard {
    Protected::of(
        protection.budget.clone(),
        protection.breaker.clone(),
        Counted,
    )
}

/// The loop's `breaker_counts`: the judge's word, decided when the attempt ended. A type of
/// no size, not a function pointer: it lives in every call's future.
pub(crate) struct Counted;

impl<R> Counts<Lost<R>> for Counted {
    #[inline]
    fn counts(&mut self, failure: &Lost<R>) -> bool {
        failure.counts
    }
}

pub(crate) fn may_retry<R>(failure: &Lost<R>, _next_attempt: u32) -> bool {
    failure.verdict.is_ok()
}

pub(crate) fn hint<R>(failure: &Lost<R>) -> Option<Duration> {
    failure.retry_after
}

pub(crate) fn retrying<R: Answer>(failure: &Lost<R>, attempt: u32, delay: Duration) {
    crate::metrics::retried();
    if let Some(hook) = &failure.hook {
        let kind = match &failure.what {
            What::Response(response, status) | What::Answer(response, status) => {
                Kind::Response(*status, response.headers())
            }
            What::Error(e) => match e.downcast_ref::<AttemptTimedOut>() {
                Some(timed_out) => Kind::TimedOut(timed_out.0),
                None => Kind::Transport(open(&**e)),
            },
        };
        hook(&Outcome::new(&failure.target.method, kind), attempt, delay);
    }
    let (method, host) = (&failure.target.method, failure.target.host());
    match &failure.what {
        What::Response(_, status) | What::Answer(_, status) => tracing::warn!(
            target: TARGET,
            %method,
            %host,
            status = status.as_u16(),
            attempt,
            ?delay,
            "http attempt failed; retrying"
        ),
        What::Error(e) => tracing::warn!(
            target: TARGET,
            %method,
            %host,
            attempt,
            ?delay,
            error = %Chain(open(&**e)),
            "http attempt failed; retrying"
        ),
    }
}

// ------------------------------------------------------------------ the loop's end

/// A response as the judge reads it, and where its [`RetryReport`] goes.
pub(crate) trait Answer {
    fn status(&self) -> StatusCode;
    fn headers(&self) -> &HeaderMap;
    fn report(&mut self, report: RetryReport);
}

impl<B> Answer for http::Response<B> {
    fn status(&self) -> StatusCode {
        self.status()
    }

    fn headers(&self) -> &HeaderMap {
        self.headers()
    }

    #[inline]
    fn report(&mut self, report: RetryReport) {
        put(self.extensions_mut(), report);
    }
}

/// Puts `report` in a response's extensions; a first answer's only as the absence that
/// [`RetryReport::of`] reads (no allocation on the success path), so a report an inner
/// retry left there is taken out, not read as this call's.
#[inline]
pub(crate) fn put(extensions: &mut http::Extensions, report: RetryReport) {
    if report.is_first() {
        // An empty map (the common answer) holds no report to take out.
        if !extensions.is_empty() {
            extensions.remove::<RetryReport>();
        }
    } else {
        extensions.insert(report);
    }
}

/// Turns the loop's end into the call's answer: the value; the last response worth retrying
/// with a report of why the retries stopped; or an [`Error`].
pub(crate) fn finish<R: Answer>(
    outcome: Result<R, RetryError<Lost<R>>>,
    target: &Target,
    max_attempts: u32,
    ceiling: Duration,
) -> Result<R, Error> {
    let (failure, reason) = match outcome {
        Ok(response) => return Ok(response),
        Err(RetryError::Operation(failure)) => {
            let reason = stopped(&failure, max_attempts, ceiling);
            (failure, reason)
        }
        Err(RetryError::DeadlineExceeded { attempts, last }) => {
            return Err(limit(target, last, attempts, StopReason::DeadlineExceeded));
        }
        Err(RetryError::Cancelled { attempts, last }) => {
            return Err(limit(target, last, attempts, StopReason::Cancelled));
        }
        // The layer times attempts itself (a timeout is judged like any failure), so the
        // loop has no attempt timeout of its own; should one end it, it is exhaustion.
        Err(RetryError::AttemptTimeout { attempts, last, .. }) => {
            return Err(limit(target, last, attempts, StopReason::Exhausted));
        }
        // The policy's budget or breaker refused a retry: the call ends with its last
        // response or error at once, as when its attempts run out.
        Err(RetryError::BudgetExhausted {
            attempts,
            last,
            exhausted,
        }) => {
            let reason = StopReason::BudgetExhausted(exhausted);
            match last {
                Some(failure) => (failure, reason),
                None => return Err(limit::<R>(target, None, attempts, reason)),
            }
        }
        // Or it refused the first attempt: nothing was sent.
        Err(RetryError::CircuitOpen {
            attempts,
            last,
            open,
        }) => {
            let reason = StopReason::CircuitOpen(open);
            match last {
                Some(failure) => (failure, reason),
                None => return Err(not_sent(target, attempts, reason)),
            }
        }
    };
    let attempts = failure.attempt;
    let status = failure.status();
    match failure.what {
        What::Answer(response, _) => Ok(reported(response, attempts)),
        What::Response(mut response, _) => {
            gave_up(&failure.target, status, attempts, reason);
            response.report(RetryReport::new(attempts, Some(reason)));
            Ok(response)
        }
        What::Error(cause) => {
            gave_up(&failure.target, status, attempts, reason);
            Err(Error::new(Some(failure.target), attempts, reason).with_cause(Some(cause)))
        }
    }
}

/// The error of a call the breaker refused before its first attempt.
fn not_sent(target: &Target, attempts: u32, reason: StopReason) -> Error {
    let (method, host) = (&target.method, target.host());
    tracing::info!(target: TARGET, %method, %host, %reason, "http request refused");
    crate::metrics::gave_up(reason);
    Error::new(Some(target.clone()), attempts, reason)
}

impl<R> Failure<R> {
    /// What a later attempt of this failure's call judges by (only its target is read when
    /// the attempt returns this failure).
    pub(crate) fn call(&self) -> Call {
        Call {
            target: self.target.clone(),
            safety: Safety::Read,
            replayable: false,
        }
    }

    fn status(&self) -> Option<StatusCode> {
        match &self.what {
            What::Response(_, status) | What::Answer(_, status) => Some(*status),
            What::Error(_) => None,
        }
    }
}

/// Why the loop returned this failure: the verdict's refusal, or else which of the loop's
/// own rules ended it (attempts, the hint's ceiling, the deadline against the hint).
fn stopped<R>(failure: &Failure<R>, max_attempts: u32, ceiling: Duration) -> StopReason {
    if let Err(reason) = failure.verdict {
        return reason;
    }
    if failure.attempt >= max_attempts {
        return StopReason::Exhausted;
    }
    match failure.retry_after {
        Some(retry_after) if retry_after > ceiling => StopReason::RetryAfterAboveCeiling {
            retry_after,
            ceiling,
        },
        Some(retry_after) => StopReason::RetryAfterBeyondDeadline { retry_after },
        None => StopReason::Exhausted,
    }
}

/// The error of a call a limit ended, naming the last failure if there was one.
fn limit<R>(target: &Target, last: Option<Lost<R>>, attempts: u32, reason: StopReason) -> Error {
    let Some(failure) = last else {
        gave_up(target, None, attempts, reason);
        return Error::new(Some(target.clone()), attempts, reason);
    };
    gave_up(&failure.target, failure.status(), attempts, reason);
    let status = failure.status();
    let cause = match failure.what {
        What::Error(e) => Some(e),
        What::Response(..) | What::Answer(..) => None,
    };
    Error::new(Some(failure.target), attempts, reason)
        .with_status(status)
        .with_cause(cause)
}

fn gave_up(target: &Target, status: Option<StatusCode>, attempts: u32, reason: StopReason) {
    crate::metrics::gave_up(reason);
    let (method, host) = (&target.method, target.host());
    match status {
        Some(status) => tracing::info!(
            target: TARGET,
            %method,
            %host,
            status = status.as_u16(),
            attempts,
            %reason,
            "http retry gave up"
        ),
        None => {
            tracing::info!(target: TARGET, %method, %host, attempts, %reason, "http retry gave up")
        }
    }
}

/// A call's answer says how many attempts it took (1 when the first answered: by carrying
/// no report).
#[inline]
pub(crate) fn reported<R: Answer>(mut response: R, attempt: u32) -> R {
    response.report(RetryReport::new(attempt, None));
    response
}

/// The failure of a retry that could not be sent: its body gave no copy.
pub(crate) fn refused<R>(call: &Call, attempt: u32) -> Lost<R> {
    Box::new(Failure {
        attempt,
        what: What::Error(Box::new(NotReplayed)),
        verdict: Err(StopReason::NotReplayable),
        retry_after: None,
        // Nothing was sent: the server is not to blame.
        counts: false,
        target: call.target.clone(),
        hook: None,
    })
}

/// The body of a request to send again gave no copy.
#[derive(Debug, thiserror::Error)]
#[error("the request body gave no copy to send again")]
struct NotReplayed;

/// The failure of a first attempt run without the loop whose call's deadline passed while it
/// waited: the call ends there, as the loop ends it (`StopReason::DeadlineExceeded`, no earlier
/// failure to name).
pub(crate) fn deadline_passed<R>(call: &Call, attempt: u32) -> Lost<R> {
    Box::new(Failure {
        attempt,
        what: What::Error(Box::new(DeadlinePassed)),
        verdict: Err(StopReason::DeadlineExceeded),
        retry_after: None,
        counts: false,
        target: call.target.clone(),
        hook: None,
    })
}

/// The call's deadline passed during its first attempt.
#[derive(Debug, thiserror::Error)]
#[error("the call's deadline passed during its first attempt")]
struct DeadlinePassed;

/// Where a call whose first attempt ran without the loop goes from that attempt's failure.
pub(crate) enum After<R> {
    /// To the loop, with the time left before the deadline, if the call has one.
    Loop(Lost<R>, Option<Duration>),
    /// Nowhere: the deadline ended the call with that attempt, as the loop would have ended it.
    Ended(RetryError<Lost<R>>),
}

/// Decides [`After`] for `failure`, the first attempt's, in a call whose deadline passes at
/// `deadline_at`.
pub(crate) fn after_first<R, C: Clock>(
    failure: Lost<R>,
    deadline_at: Option<Instant>,
    clock: &C,
    max_attempts: u32,
) -> After<R> {
    let attempts = failure.attempt;
    // The deadline passed while the attempt waited: nothing earlier to name.
    if failure.verdict == Err(StopReason::DeadlineExceeded) {
        return After::Ended(RetryError::DeadlineExceeded {
            attempts,
            last: None,
        });
    }
    let Some(deadline_at) = deadline_at else {
        return After::Loop(failure, None);
    };
    let left = deadline_at.saturating_duration_since(clock.now());
    if !left.is_zero() {
        return After::Loop(failure, Some(left));
    }
    // It failed at the very instant the deadline passed (its timeout ran out then): a loop
    // started now would stop before its first attempt, so the decision the loop makes after
    // a failure with no time left is made here. A failure it would retry ends the call with
    // the deadline, naming it; one it would not (or one whose server asked to wait) ends it
    // as its own judgement says.
    let retried =
        failure.verdict.is_ok() && attempts < max_attempts && failure.retry_after.is_none();
    After::Ended(if retried {
        RetryError::DeadlineExceeded {
            attempts,
            last: Some(failure),
        }
    } else {
        RetryError::Operation(failure)
    })
}
