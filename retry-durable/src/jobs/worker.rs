//! The worker: claims due work, runs each attempt under a lease, and writes what follows —
//! success, the next due time of a retry (never a sleeping worker), a schedule's next tick,
//! or a dead letter.

use std::sync::Arc;
use std::time::Duration;

use retry_core::effects::Timestamp;
use retry_core::{Backoff, CancelToken, Clock, TaskFailure, classify};
use tokio::task::JoinSet;

use super::handler::JobContext;
use super::protect::{self, Admission};
use super::{Inner, Jobs, What, lock};
use crate::record::{DeadReason, NewDeadLetter, WorkRecord, WorkState};
use crate::store::{Finish, Store, StoreError, Then};
use crate::timing::Misfire;

const TARGET: &str = "retry_durable";

impl<S: Store, C> Jobs<S, C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    /// Claims the work due now (up to the concurrency setting), runs it, and returns how many
    /// items were claimed once every attempt has finished. For tests, scripts and cron-like
    /// callers; long-running workers use [`run`](Self::run).
    pub async fn run_due(&self) -> Result<usize, StoreError> {
        let claimed = self.claim(self.inner.settings.concurrency).await?;
        let count = claimed.len();
        let mut attempts = JoinSet::new();
        for record in claimed {
            attempts.spawn(process(Arc::clone(&self.inner), record));
        }
        while let Some(done) = attempts.join_next().await {
            report(done);
        }
        Ok(count)
    }

    /// Runs work as it falls due until `stop` fires, then lets the running attempts finish.
    /// At most the concurrency setting's attempts run at once; an idle worker sleeps (on the
    /// owner's clock) until the next due time, a poll interval, or new work scheduled through
    /// this `Jobs`. A failing store is logged and retried after a poll interval.
    pub async fn run(&self, stop: CancelToken) {
        let settings = self.inner.settings;
        let mut attempts = JoinSet::new();
        loop {
            while let Some(done) = attempts.try_join_next() {
                report(done);
            }
            if stop.is_cancelled() {
                break;
            }
            let free = settings.concurrency.saturating_sub(attempts.len() as u32);
            let mut wait = settings.poll_interval;
            if free > 0 {
                match self.claim(free).await {
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
                Some(done) = attempts.join_next(), if !attempts.is_empty() => report(done),
                () = self.inner.clock.sleep(wait) => {}
                () = self.inner.wake.notified() => {}
                () = stop.cancelled() => {}
            }
        }
        while let Some(done) = attempts.join_next().await {
            report(done);
        }
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

    /// Claims up to `limit` items; corrupt rows among them are logged by name and left alone
    /// (they stay claimed until their lease ends, and are reported again then).
    async fn claim(&self, limit: u32) -> Result<Vec<WorkRecord>, StoreError> {
        let now = self.now();
        let lease_until = now + self.inner.settings.lease;
        let claim = self
            .inner
            .store
            .claim(&self.inner.owner, now, lease_until, limit)
            .await?;
        for corrupt in &claim.corrupt {
            tracing::error!(target: TARGET, error = %corrupt, "claimed a corrupt row; it is not run");
        }
        Ok(claim.work)
    }
}

/// Logs an attempt task that failed (a store error) or panicked (a bug of ours: handler
/// panics are caught inside).
fn report(done: Result<Result<(), StoreError>, tokio::task::JoinError>) {
    match done {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            tracing::error!(target: TARGET, %error, "could not record an attempt; its lease will expire and it will run again");
        }
        Err(error) => tracing::error!(target: TARGET, %error, "an attempt task failed"),
    }
}

/// Runs one claimed item and records what follows.
async fn process<S, C>(inner: Arc<Inner<S, C>>, record: WorkRecord) -> Result<(), StoreError>
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
            inner.emit(
                &record,
                What::Skipped {
                    missed: record.fire_at,
                },
            );
            return rearm(&inner, &record, now, None).await;
        }
    }

    if record.attempt > max_attempts {
        // The worker of the last allowed attempt stopped before recording it (its lease
        // expired): that attempt counted, and none is left.
        let error = record.last_error.clone().unwrap_or_else(|| {
            format!("attempt {max_attempts} did not finish: its worker stopped before recording it")
        });
        return dead_letter(
            &inner,
            &record,
            DeadReason::Exhausted,
            max_attempts,
            error,
            now,
        )
        .await;
    }

    let Some(handler) = inner.registry.handlers.get(&record.handler).cloned() else {
        let error = format!(
            "no handler `{}` is registered (registered: {})",
            record.handler,
            inner.registry.handler_names()
        );
        return dead_letter(
            &inner,
            &record,
            DeadReason::UnknownHandler,
            record.attempt.saturating_sub(1),
            error,
            now,
        )
        .await;
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
                return dead_letter(
                    &inner,
                    &record,
                    DeadReason::UnknownPredicate,
                    record.attempt.saturating_sub(1),
                    error,
                    now,
                )
                .await;
            }
        },
    };

    // An open breaker or an exhausted budget defers the item, its attempt not spent.
    let guard = inner.registry.protection.get(&record.handler);
    let permit = match protect::admit(guard, &record, inner.clock.now(), now) {
        Admission::Run(permit) => permit,
        Admission::Defer { then, what } => {
            inner.emit(&record, what);
            return finish(&inner, &record, then, None, now).await;
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
            return dead_letter(
                &inner,
                &record,
                DeadReason::BadPayload,
                record.attempt.saturating_sub(1),
                error,
                now,
            )
            .await;
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
        return claim_lost(&inner, &record).await;
    };
    let counts = |f: &TaskFailure| predicate.as_ref().map_or_else(|| classify(f), |p| p(f));
    protect::settle(permit, &outcome, counts, inner.clock.now());
    let now = inner.now();
    match outcome {
        Ok(()) => {
            inner.emit(
                &record,
                What::Succeeded {
                    attempt: record.attempt,
                },
            );
            tracing::debug!(target: TARGET, id = record.id.0, handler = %record.handler, attempt = record.attempt, "attempt succeeded");
            if record.timing.repeats() {
                rearm(&inner, &record, now, None).await
            } else {
                finish(&inner, &record, Then::Remove, None, now).await
            }
        }
        Err(failure) => {
            let error = failure.to_string();
            let retryable = !matches!(failure, TaskFailure::Cancelled)
                && predicate
                    .as_ref()
                    .map_or_else(|| classify(&failure), |p| p(&failure));
            if !retryable {
                return dead_letter(
                    &inner,
                    &record,
                    DeadReason::NotRetryable,
                    record.attempt,
                    error,
                    now,
                )
                .await;
            }
            if record.attempt >= max_attempts {
                return dead_letter(
                    &inner,
                    &record,
                    DeadReason::Exhausted,
                    record.attempt,
                    error,
                    now,
                )
                .await;
            }
            let delay = backoff(&inner, &record, &failure);
            inner.emit(
                &record,
                What::Retrying {
                    attempt: record.attempt,
                    delay,
                    error: error.clone(),
                },
            );
            tracing::warn!(target: TARGET, id = record.id.0, handler = %record.handler, attempt = record.attempt, ?delay, %error, "attempt failed; retrying");
            let then = Then::Wait {
                due_at: now + delay,
                fire_at: record.fire_at,
                attempt: record.attempt,
                last_error: Some(error),
                last_delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            };
            finish(&inner, &record, then, None, now).await
        }
    }
}

/// Runs the handler in its own task (a panic is a failed attempt, not a dead worker) and
/// extends the lease every third of it. `None` when the claim was lost or the work
/// cancelled: the handler is signalled and stopped, and nothing is recorded.
async fn run_leased<S, C>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    future: std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), TaskFailure>> + Send>>,
    cancel: &CancelToken,
) -> Option<Result<(), TaskFailure>>
where
    S: Store,
    C: Clock,
{
    let mut task = tokio::spawn(future);
    let lease = inner.settings.lease;
    let every = (lease / 3).max(Duration::from_millis(1));
    loop {
        tokio::select! {
            joined = &mut task => {
                return Some(joined.unwrap_or_else(|error| {
                    Err(TaskFailure::from(if error.is_panic() {
                        format!("handler panicked: {}", panic_message(error))
                    } else {
                        "handler task was stopped".to_owned()
                    }))
                }));
            }
            () = cancel.cancelled() => {
                task.abort();
                return None;
            }
            () = inner.clock.sleep(every) => {
                let now = inner.now();
                match inner.store.extend_lease(record.id, record.revision, now + lease, now).await {
                    Ok(true) => {}
                    Ok(false) => {
                        cancel.cancel();
                        task.abort();
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

fn panic_message(error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic payload".to_owned()),
        Err(error) => error.to_string(),
    }
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

/// Re-arms a repeating schedule for its next tick (or removes one that has none), writing
/// `dead` first if the run ended there.
async fn rearm<S: Store, C: Clock>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    now: Timestamp,
    dead: Option<NewDeadLetter>,
) -> Result<(), StoreError> {
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
            inner.emit(record, What::Rearmed { next });
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
    finish(inner, record, then, dead, now).await
}

/// Ends the run without success: the error hook, the event, the dead letter; a repeating
/// schedule is re-armed unless it cannot run at all (no handler, payload or predicate).
async fn dead_letter<S: Store, C: Clock>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    reason: DeadReason,
    attempts: u32,
    error: String,
    now: Timestamp,
) -> Result<(), StoreError> {
    let dead = NewDeadLetter {
        reason,
        attempts,
        last_error: Some(error.clone()),
        failed_at: now,
    };
    if let Some(hook) = &inner.on_error {
        hook(record, &dead);
    }
    inner.emit(
        record,
        What::Failed {
            attempts,
            reason,
            error: error.clone(),
        },
    );
    tracing::error!(target: TARGET, id = record.id.0, handler = %record.handler, attempts, %reason, %error, "work failed; dead-lettered");
    let can_run_again = matches!(reason, DeadReason::Exhausted | DeadReason::NotRetryable);
    if record.timing.repeats() && can_run_again {
        rearm(inner, record, now, Some(dead)).await
    } else {
        finish(inner, record, Then::Remove, Some(dead), now).await
    }
}

async fn finish<S: Store, C: Clock>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    then: Then,
    dead_letter: Option<NewDeadLetter>,
    now: Timestamp,
) -> Result<(), StoreError> {
    let finished = inner
        .store
        .finish(
            record.id,
            record.revision,
            Finish {
                dead_letter,
                then,
                now,
            },
        )
        .await?;
    if !finished {
        claim_lost(inner, record).await?;
    }
    Ok(())
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
