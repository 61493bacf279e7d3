//! The worker: claims due work, runs each attempt under a lease, and writes what follows —
//! success, the next due time of a retry (never a sleeping worker), a schedule's next tick,
//! or a dead letter.
//!
//! An attempt's task only runs the handler and decides what follows ([`Ended`]); the worker
//! loop writes the ended attempts together with its next claim, in one store call
//! ([`Store::finish_and_claim`]), and announces each (events, the error hook, `tracing`) only
//! once its write is durable. A worker that dies between an attempt's end and that write
//! loses nothing but the write: the item is still claimed, its lease runs out, and it runs
//! again (at least once).

use std::any::Any;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use retry_core::effects::Timestamp;
use retry_core::{Backoff, CancelToken, Clock, TaskFailure, classify};
use tokio::task::{JoinError, JoinSet};

use super::handler::JobContext;
use super::protect::{self, Admission};
use super::{Event, Inner, Jobs, What, lock};
use crate::record::{DeadReason, NewDeadLetter, WorkRecord, WorkState};
use crate::store::{Finish, Finished, Store, StoreError, Then};
use crate::timing::Misfire;

const TARGET: &str = "retry_durable";

/// An attempt's end, not yet written: what to write, and what to announce once it is.
struct Ended {
    record: WorkRecord,
    finish: Finish,
    /// Events in the order they happened, emitted after the write.
    events: Vec<What>,
}

/// What an attempt's task returns: its end, or nothing to write (the claim was lost while the
/// handler ran, already reported).
type Attempt = Result<Option<Ended>, StoreError>;

impl<S: Store, C> Jobs<S, C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    /// Claims the work due now (up to the concurrency setting), runs it, and returns how many
    /// items were claimed once every attempt has finished and been recorded. For tests,
    /// scripts and cron-like callers; long-running workers use [`run`](Self::run).
    pub async fn run_due(&self) -> Result<usize, StoreError> {
        let claimed = self.claim(self.inner.settings.concurrency).await?;
        let count = claimed.len();
        let mut attempts = JoinSet::new();
        for record in claimed {
            attempts.spawn(process(Arc::clone(&self.inner), record));
        }
        // Each attempt is written as soon as it ends (with those that ended meanwhile), not
        // when the slowest is done: an ended attempt no longer extends its lease.
        while let Some(done) = attempts.join_next().await {
            let mut ended = Vec::new();
            collect(done, &mut ended);
            while let Some(done) = attempts.try_join_next() {
                collect(done, &mut ended);
            }
            self.record_and_claim(ended, 0).await?;
        }
        Ok(count)
    }

    /// Runs work as it falls due until `stop` fires, then lets the running attempts finish and
    /// records them. At most the concurrency setting's attempts run at once; an idle worker
    /// sleeps (on the owner's clock) until the next due time, a poll interval, or new work
    /// scheduled through this `Jobs`. A failing store is logged and retried after a poll
    /// interval.
    pub async fn run(&self, stop: CancelToken) {
        let settings = self.inner.settings;
        let mut attempts = JoinSet::new();
        let mut ended = Vec::new();
        loop {
            while let Some(done) = attempts.try_join_next() {
                collect(done, &mut ended);
            }
            if stop.is_cancelled() {
                break;
            }
            let free = settings.concurrency.saturating_sub(attempts.len() as u32);
            let mut wait = settings.poll_interval;
            if free > 0 || !ended.is_empty() {
                match self
                    .record_and_claim(std::mem::take(&mut ended), free)
                    .await
                {
                    Ok(claimed) => {
                        let full = claimed.len() as u32 == free && free > 0;
                        for record in claimed {
                            attempts.spawn(process(Arc::clone(&self.inner), record));
                        }
                        if full {
                            continue;
                        }
                        wait = self.idle_wait().await;
                    }
                    Err(error) => {
                        tracing::error!(target: TARGET, %error, "could not claim work; trying again");
                    }
                }
            }
            tokio::select! {
                Some(done) = attempts.join_next(), if !attempts.is_empty() => collect(done, &mut ended),
                () = self.inner.clock.sleep(wait) => {}
                () = self.inner.wake.notified() => {}
                () = stop.cancelled() => {}
            }
        }
        while let Some(done) = attempts.join_next().await {
            collect(done, &mut ended);
        }
        // Claims nothing, so it cannot fail: an attempt it could not write is logged.
        let _ = self.record_and_claim(ended, 0).await;
    }

    /// How long an idle worker waits: until the next due time, at most a poll interval.
    async fn idle_wait(&self) -> Duration {
        let poll = self.inner.settings.poll_interval;
        match self.next_due().await {
            Ok(Some(due)) => {
                let now = self.now().as_millis();
                Duration::from_millis(due.as_millis().saturating_sub(now)).min(poll)
            }
            Ok(None) => poll,
            Err(error) => {
                tracing::error!(target: TARGET, %error, "could not read the next due time");
                poll
            }
        }
    }

    /// Claims up to `limit` items.
    async fn claim(&self, limit: u32) -> Result<Vec<WorkRecord>, StoreError> {
        let now = self.now();
        let lease_until = now + self.inner.settings.lease;
        let claim = self
            .inner
            .store
            .claim(&self.inner.owner, now, lease_until, limit)
            .await?;
        Ok(self.set_apart(claim, lease_until).await)
    }

    /// Writes the ended attempts and claims up to `limit` items, in one store call; announces
    /// each attempt whose write the store confirmed, and reports a refused one as a lost claim.
    /// An attempt whose write failed is logged and left to its lease (it runs again). With a
    /// `limit` of 0 it claims nothing and does not fail.
    async fn record_and_claim(
        &self,
        ended: Vec<Ended>,
        limit: u32,
    ) -> Result<Vec<WorkRecord>, StoreError> {
        let inner = &self.inner;
        let now = self.now();
        let lease_until = now + inner.settings.lease;
        let mut batch = Vec::with_capacity(ended.len());
        let mut announced = Vec::with_capacity(ended.len());
        for Ended {
            record,
            finish,
            events,
        } in ended
        {
            batch.push(Finished {
                id: record.id,
                revision: record.revision,
                finish,
            });
            announced.push((record, events));
        }
        let dead: Vec<Option<NewDeadLetter>> = batch
            .iter()
            .map(|item| item.finish.dead_letter.clone())
            .collect();
        let done = inner
            .store
            .finish_and_claim(batch, &inner.owner, now, lease_until, limit)
            .await;
        let mut answers = done.finished.into_iter();
        for ((record, events), dead) in announced.into_iter().zip(dead) {
            match answers.next() {
                Some(Ok(true)) => announce(inner, &record, events, dead.as_ref()),
                Some(Ok(false)) => {
                    if let Err(error) = claim_lost(inner, &record).await {
                        tracing::error!(target: TARGET, id = record.id.0, %error, "could not read back work whose claim was lost");
                    }
                }
                Some(Err(error)) => {
                    tracing::error!(target: TARGET, id = record.id.0, %error, "could not record an attempt; its lease will expire and it will run again");
                }
                None => {
                    tracing::error!(target: TARGET, id = record.id.0, "the store did not answer for an attempt; its lease will expire and it will run again");
                }
            }
        }
        match done.claim {
            Ok(claim) => Ok(self.set_apart(claim, lease_until).await),
            // Nothing was asked for: a failed write is the attempts', logged above.
            Err(_) if limit == 0 => Ok(Vec::new()),
            Err(error) => Err(error),
        }
    }
}

impl<S: Store, C: Clock> Jobs<S, C> {
    /// The claimed work that may run. Each corrupt row of the claim is quarantined (one write
    /// fenced on the claim's lease) and reported once, by id with what is wrong: an ERROR line
    /// and a [`What::Quarantined`] event. One whose write fails stays claimed; its lease ends
    /// and the next claim reports it again.
    async fn set_apart(
        &self,
        claim: crate::store::Claim,
        lease_until: Timestamp,
    ) -> Vec<WorkRecord> {
        let inner = &self.inner;
        for corrupt in claim.corrupt {
            let StoreError::Corrupt { id, reason, .. } = corrupt else {
                tracing::error!(target: TARGET, error = %corrupt, "claimed a row that cannot be read; it is not run");
                continue;
            };
            let work = crate::record::WorkId(id);
            match inner
                .store
                .quarantine(work, lease_until, reason.clone(), self.now())
                .await
            {
                Ok(true) => {
                    tracing::error!(target: TARGET, id, %reason, "corrupt work quarantined: it is not run; repair or purge it");
                    inner.emit_event(Event {
                        id: work,
                        handler: String::new(),
                        kind: "",
                        what: What::Quarantined { reason },
                    });
                }
                // Another worker holds it now (our lease ended first): it reports it.
                Ok(false) => {}
                Err(error) => {
                    tracing::error!(target: TARGET, id, %reason, %error, "claimed a corrupt row and could not quarantine it; it is not run, and is reported again when its lease ends");
                }
            }
        }
        claim.work
    }
}

/// Keeps an attempt's end for the next write; logs an attempt task that failed (a store
/// error) or panicked (a bug of ours: handler panics are caught inside).
fn collect(done: Result<Attempt, JoinError>, into: &mut Vec<Ended>) {
    match done {
        Ok(Ok(Some(ended))) => into.push(ended),
        Ok(Ok(None)) => {}
        Ok(Err(error)) => {
            tracing::error!(target: TARGET, %error, "could not record an attempt; its lease will expire and it will run again");
        }
        Err(error) => tracing::error!(target: TARGET, %error, "an attempt task failed"),
    }
}

/// Tells the owner what a written attempt did: the error hook for a dead letter, the events,
/// `tracing`.
fn announce<S, C: Clock>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    events: Vec<What>,
    dead: Option<&NewDeadLetter>,
) {
    if let (Some(hook), Some(dead)) = (&inner.on_error, dead) {
        hook(record, dead);
    }
    for what in events {
        let (id, handler) = (record.id.0, &record.handler);
        match &what {
            What::Succeeded { attempt } => {
                tracing::debug!(target: TARGET, id, %handler, attempt, "attempt succeeded");
            }
            What::Retrying {
                attempt,
                delay,
                error,
            } => {
                tracing::warn!(target: TARGET, id, %handler, attempt, ?delay, %error, "attempt failed; retrying");
            }
            What::Failed {
                attempts,
                reason,
                error,
            } => {
                tracing::error!(target: TARGET, id, %handler, attempts, %reason, %error, "work failed; dead-lettered");
            }
            _ => {}
        }
        inner.emit(record, what);
    }
}

/// Runs one claimed item and decides what follows.
async fn process<S, C>(inner: Arc<Inner<S, C>>, record: WorkRecord) -> Attempt
where
    S: Store,
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    let now = inner.now();
    let max_attempts = record.options.max_attempts.unwrap_or(1);

    if let Some(misfire) = record.timing.misfire() {
        let late = now.as_millis().saturating_sub(record.fire_at.as_millis());
        if record.attempt == 1
            && misfire == Misfire::Skip
            && Duration::from_millis(late) > inner.settings.misfire_grace
        {
            let skipped = What::Skipped {
                missed: record.fire_at,
            };
            return rearm(record, now, None, vec![skipped]).map(Some);
        }
    }

    if record.attempt > max_attempts {
        // The worker of the last allowed attempt stopped before recording it (its lease
        // expired): that attempt counted, and none is left.
        let error = record.last_error.clone().unwrap_or_else(|| {
            format!("attempt {max_attempts} did not finish: its worker stopped before recording it")
        });
        return dead_letter(record, DeadReason::Exhausted, max_attempts, error, now).map(Some);
    }

    let Some(handler) = inner.registry.handlers.get(&record.handler).cloned() else {
        let error = format!(
            "no handler `{}` is registered (registered: {})",
            record.handler,
            inner.registry.handler_names()
        );
        let attempts = record.attempt.saturating_sub(1);
        return dead_letter(record, DeadReason::UnknownHandler, attempts, error, now).map(Some);
    };
    let predicate = match &record.retry_if {
        None => None,
        Some(name) => match inner.registry.predicates.get(name) {
            Some(predicate) => Some(Arc::clone(predicate)),
            None => {
                let error = format!(
                    "no retry predicate `{name}` is registered (registered: {})",
                    inner.registry.predicate_names()
                );
                let attempts = record.attempt.saturating_sub(1);
                return dead_letter(record, DeadReason::UnknownPredicate, attempts, error, now)
                    .map(Some);
            }
        },
    };

    // An open breaker or an exhausted budget defers the item, its attempt not spent.
    let guard = inner.registry.protection.get(&record.handler);
    let permit = match protect::admit(guard, &record, inner.clock.now(), now) {
        Admission::Run(permit) => permit,
        Admission::Defer { then, what } => {
            // Written with the worker's next claim and announced once written, like any
            // other ended attempt.
            return Ok(Some(ended(record, then, None, now, vec![what])));
        }
    };

    let cancel = CancelToken::new();
    let context = JobContext {
        id: record.id,
        attempt: record.attempt,
        max_attempts,
        fire_at: record.fire_at,
        cancel: cancel.clone(),
    };
    let future = match handler.start(&record.payload, context) {
        Ok(future) => future,
        Err(reason) => {
            let error = format!(
                "payload does not fit handler `{}`: {reason}",
                record.handler
            );
            let attempts = record.attempt.saturating_sub(1);
            return dead_letter(record, DeadReason::BadPayload, attempts, error, now).map(Some);
        }
    };

    lock(&inner.running).insert(record.id, cancel.clone());
    inner.emit(
        &record,
        What::Started {
            attempt: record.attempt,
        },
    );
    tracing::debug!(target: TARGET, id = record.id.0, handler = %record.handler, attempt = record.attempt, "attempt started");
    let outcome = run_leased(&inner, &record, future, &cancel).await;
    lock(&inner.running).remove(&record.id);

    let Some(outcome) = outcome else {
        claim_lost(&inner, &record).await?;
        return Ok(None);
    };
    let counts = |f: &TaskFailure| predicate.as_ref().map_or_else(|| classify(f), |p| p(f));
    protect::settle(permit, &outcome, counts, inner.clock.now());
    let now = inner.now();
    let attempt = record.attempt;
    match outcome {
        Ok(()) => {
            let succeeded = What::Succeeded { attempt };
            if record.timing.repeats() {
                rearm(record, now, None, vec![succeeded]).map(Some)
            } else {
                Ok(Some(ended(
                    record,
                    Then::Remove,
                    None,
                    now,
                    vec![succeeded],
                )))
            }
        }
        Err(failure) => {
            let error = failure.to_string();
            let retryable = !matches!(failure, TaskFailure::Cancelled)
                && predicate
                    .as_ref()
                    .map_or_else(|| classify(&failure), |p| p(&failure));
            if !retryable {
                return dead_letter(record, DeadReason::NotRetryable, attempt, error, now)
                    .map(Some);
            }
            if attempt >= max_attempts {
                return dead_letter(record, DeadReason::Exhausted, attempt, error, now).map(Some);
            }
            let delay = backoff(&inner, &record, &failure);
            let then = Then::Wait {
                due_at: now + delay,
                fire_at: record.fire_at,
                attempt,
                last_error: Some(error.clone()),
                last_delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            };
            let retrying = What::Retrying {
                attempt,
                delay,
                error,
            };
            Ok(Some(ended(record, then, None, now, vec![retrying])))
        }
    }
}

/// The handler's future, with a panic turned into a failed attempt.
type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), TaskFailure>> + Send>>;

/// Runs the handler and extends the lease every third of it. `None` when the claim was lost
/// or the work cancelled: the handler is signalled and dropped, and nothing is recorded.
///
/// The handler runs inside the attempt's task, its panics caught there (a panic is a failed
/// attempt, not a dead worker); one that is done at its first poll starts no lease timer.
async fn run_leased<S, C>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    future: HandlerFuture,
    cancel: &CancelToken,
) -> Option<Result<(), TaskFailure>>
where
    S: Store,
    C: Clock,
{
    let mut handler = catching(future);
    let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut handler).poll(cx))).await;
    if let Poll::Ready(outcome) = first {
        return Some(outcome);
    }
    let lease = inner.settings.lease;
    let every = (lease / 3).max(Duration::from_millis(1));
    loop {
        tokio::select! {
            outcome = &mut handler => return Some(outcome),
            () = cancel.cancelled() => return None,
            () = inner.clock.sleep(every) => {
                let now = inner.now();
                match inner.store.extend_lease(record.id, record.revision, now + lease, now).await {
                    Ok(true) => {}
                    Ok(false) => {
                        cancel.cancel();
                        return None;
                    }
                    Err(error) => {
                        // Keep running: the next extension may succeed, and if the lease
                        // runs out the item is claimed again (at least once).
                        tracing::warn!(target: TARGET, id = record.id.0, %error, "could not extend a lease");
                    }
                }
            }
        }
    }
}

/// `future`, with a panic while it is polled made into a failed attempt. A future that
/// panicked is dropped at once (a panic while dropping it is caught too) and never polled
/// again.
fn catching(future: HandlerFuture) -> impl Future<Output = Result<(), TaskFailure>> + Unpin + Send {
    let mut future = Some(future);
    std::future::poll_fn(move |cx| {
        let Some(running) = future.as_mut() else {
            return Poll::Ready(Err(TaskFailure::from("handler polled after it ended")));
        };
        match std::panic::catch_unwind(AssertUnwindSafe(|| running.as_mut().poll(cx))) {
            Ok(Poll::Pending) => Poll::Pending,
            Ok(Poll::Ready(outcome)) => {
                future = None;
                Poll::Ready(outcome)
            }
            Err(payload) => {
                let dropped = future.take();
                let _ = std::panic::catch_unwind(AssertUnwindSafe(move || drop(dropped)));
                Poll::Ready(Err(TaskFailure::from(format!(
                    "handler panicked: {}",
                    panic_message(payload.as_ref())
                ))))
            }
        }
    })
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".to_owned())
}

/// The delay before the next attempt, in whole milliseconds (rounded up: the row keeps
/// milliseconds, and a wait that was drawn is never cut short): the failure's retry-after hint
/// if it has one, otherwise the stored options' backoff (full jitter by default).
fn backoff<S, C>(inner: &Inner<S, C>, record: &WorkRecord, failure: &TaskFailure) -> Duration {
    let delay = drawn_delay(inner, record, failure);
    let whole = Duration::from_millis(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    if whole < delay {
        whole.saturating_add(Duration::from_millis(1))
    } else {
        whole
    }
}

fn drawn_delay<S, C>(inner: &Inner<S, C>, record: &WorkRecord, failure: &TaskFailure) -> Duration {
    if let TaskFailure::Task(error) = failure {
        if let Some(hint) = error.retry_after() {
            return hint;
        }
    }
    let Ok(policy) = record.options.resolve() else {
        // Unreachable for a validated row; the base delay is still a sane wait.
        return Duration::from_millis(record.options.base_delay_ms.unwrap_or(100));
    };
    let mut schedule = policy.backoff();
    let previous = Duration::from_millis(record.last_delay_ms);
    schedule.delay(record.attempt, previous, &mut lock(&inner.rng))
}

fn ended(
    record: WorkRecord,
    then: Then,
    dead_letter: Option<NewDeadLetter>,
    now: Timestamp,
    events: Vec<What>,
) -> Ended {
    Ended {
        record,
        finish: Finish {
            dead_letter,
            then,
            now,
        },
        events,
    }
}

/// Re-arms a repeating schedule for its next tick (or removes one that has none), writing
/// `dead` first if the run ended there.
fn rearm(
    record: WorkRecord,
    now: Timestamp,
    dead: Option<NewDeadLetter>,
    mut events: Vec<What>,
) -> Result<Ended, StoreError> {
    let from = match record.timing.misfire() {
        Some(Misfire::CatchUp) => record.fire_at,
        _ => record.fire_at.max(now),
    };
    let next = record
        .timing
        .next_after(record.created_at, from)
        .map_err(|e| StoreError::Corrupt {
            table: "work",
            id: record.id.0,
            reason: e.to_string(),
        })?;
    let then = match next {
        Some(next) => {
            events.push(What::Rearmed { next });
            Then::Wait {
                due_at: next,
                fire_at: next,
                attempt: 0,
                last_error: None,
                last_delay_ms: 0,
            }
        }
        None => Then::Remove,
    };
    Ok(ended(record, then, dead, now, events))
}

/// Ends the run without success: a dead letter (announced with the error hook once
/// written); a repeating schedule is re-armed unless it cannot run at all (no handler,
/// payload or predicate).
fn dead_letter(
    record: WorkRecord,
    reason: DeadReason,
    attempts: u32,
    error: String,
    now: Timestamp,
) -> Result<Ended, StoreError> {
    let failed = What::Failed {
        attempts,
        reason,
        error: error.clone(),
    };
    let dead = NewDeadLetter {
        reason,
        attempts,
        last_error: Some(error),
        failed_at: now,
    };
    let can_run_again = matches!(reason, DeadReason::Exhausted | DeadReason::NotRetryable);
    if record.timing.repeats() && can_run_again {
        rearm(record, now, Some(dead), vec![failed])
    } else {
        Ok(ended(record, Then::Remove, Some(dead), now, vec![failed]))
    }
}

/// The claim is gone: cancelled (an event), or taken over after the lease ran out.
async fn claim_lost<S: Store, C: Clock>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
) -> Result<(), StoreError> {
    let now_state = inner.store.get(record.id).await?.map(|r| r.state);
    if now_state == Some(WorkState::Cancelled) {
        inner.emit(record, What::Cancelled);
    } else {
        inner.emit(record, What::ClaimLost);
        tracing::warn!(target: TARGET, id = record.id.0, handler = %record.handler, "the claim was lost before the attempt was recorded");
    }
    Ok(())
}
