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
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use retry_toolkit::store::{Revision, Timestamp};
use retry_toolkit::{
    Backoff, CancelToken, Clock, FailedAttempt, GiveUp, Next, RetryOptions, TaskError, TaskFailure,
    classify,
};
use tokio::task::{JoinError, JoinSet};
use tokio_util::task::AbortOnDropHandle;

use super::handler::JobContext;
use super::local::LocalQueue;
use super::pending::FlushClock;
use super::protect::{self, Admission};
use super::{Event, EventKind, Inner, Jobs, lock};
use crate::history::{AttemptOutcome, AttemptRecord, Wait, WaitReason, cut_error};
use crate::record::{DeadReason, NewDeadLetter, WorkId, WorkRecord, WorkState};
use crate::store::{Finish, Finished, NextStep, Store, StoreError, WorkFilter};
use crate::timing::Misfire;

const TARGET: &str = "retry_durable";

/// Most attempts one [`Jobs::run_until_idle`] call runs: enough for any test's backlog,
/// and an end for a handler that enqueues itself again.
pub const RUN_UNTIL_IDLE_LIMIT: usize = 10_000;

/// Most kept rows one purge deletes: a short write, however many expired at once.
const PURGE_ROWS: u32 = 500;

/// How often a worker purges kept rows whose retention ended (on the owner's clock).
const PURGE_EVERY: Duration = Duration::from_secs(60);

/// An attempt's end, not yet written: what to write, and what to announce once it is.
struct Ended {
    record: WorkRecord,
    finish: Finish,
    /// Events in the order they happened, emitted after the write.
    events: Vec<EventKind>,
    /// Whether a retry's wait is the error's retry-after hint (not the backoff's draw).
    hinted: bool,
}

/// What an attempt's task returns: its end, or nothing to write (the claim was lost while the
/// handler ran, already reported).
type Attempt = Result<Option<Ended>, StoreError>;

/// Most running rows the start-up report reads.
const IN_FLIGHT_PAGE: u32 = 1_000;

/// The attempts a long-running worker runs, each with the claim it runs under, so that a
/// stopping worker knows which leases it abandons.
#[derive(Default)]
struct Attempts {
    set: JoinSet<Attempt>,
    held: HashMap<tokio::task::Id, Held>,
}

/// A claim a running attempt holds, with what its history entry needs if it is abandoned.
struct Held {
    id: WorkId,
    revision: Revision,
    attempt: u32,
    started_at: Timestamp,
    /// The item's history as claimed (empty, and not allocated, for a first attempt).
    history: Vec<AttemptRecord>,
}

impl Attempts {
    fn spawn<S: Store, C>(&mut self, inner: Arc<Inner<S, C>>, record: WorkRecord)
    where
        C: Clock + Clone + Send + Sync + 'static,
        C::Sleep: Send,
    {
        let claim = Held {
            id: record.id,
            revision: record.revision,
            attempt: record.attempt,
            started_at: record.updated_at,
            history: record.history.clone(),
        };
        let handle = self.set.spawn(process(inner, record));
        self.held.insert(handle.id(), claim);
    }

    fn len(&self) -> usize {
        self.set.len()
    }

    fn is_empty(&self) -> bool {
        self.set.is_empty()
    }

    /// Keeps the ends of the attempts that are done.
    fn collect_ready(&mut self, into: &mut Vec<Ended>) {
        while let Some(done) = self.set.try_join_next_with_id() {
            self.settle(done, into);
        }
    }

    /// An attempt's task is done: its claim is no longer held here, unless the task was
    /// aborted (an abandoned attempt, whose lease is released).
    fn settle(
        &mut self,
        done: Result<(tokio::task::Id, Attempt), JoinError>,
        into: &mut Vec<Ended>,
    ) {
        match done {
            Ok((id, attempt)) => {
                self.held.remove(&id);
                collect(Ok(attempt), into);
            }
            Err(error) if error.is_cancelled() => {}
            Err(error) => {
                self.held.remove(&error.id());
                collect(Err(error), into);
            }
        }
    }
}

/// Starts the store's listener for work written by other processes ([`Store::listen`]),
/// beside the worker loop and waking it where work scheduled through the same `Jobs` does;
/// stopped when the handle is dropped, so that it ends with the worker however that ends.
fn listen<S: Store, C>(inner: Arc<Inner<S, C>>) -> AbortOnDropHandle<()>
where
    C: Clock + Clone + Send + Sync + 'static,
{
    AbortOnDropHandle::new(tokio::spawn(async move {
        let wake = || inner.wake.notify_one();
        inner.store.listen(&inner.owner, &wake).await;
    }))
}

impl<S: Store, C> Jobs<S, C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    /// Claims the work due now (up to the concurrency setting), runs it, and returns how many
    /// items were claimed once every attempt has finished and been recorded. For tests,
    /// scripts and cron-like callers; long-running workers use [`run`](Self::run).
    pub async fn run_due(&self) -> Result<usize, StoreError> {
        Ok(self.run_batch().await?.len())
    }

    /// Runs everything due now, batch after batch, until nothing is: retries and schedule
    /// ticks that fall due at the same instant (a backoff of zero, work that a handler
    /// enqueued) run too. Returns the ids of the items it ran, in the order of their claims
    /// (an item retried within the call appears once per attempt). Nothing waits for time to
    /// pass: with a mock clock, advance it and call again. For tests and scripts.
    ///
    /// Stops after [`RUN_UNTIL_IDLE_LIMIT`] attempts, so that a handler that enqueues itself
    /// again cannot keep it running forever; what is left stays due.
    ///
    /// # Errors
    /// A store failure (what ran before it is recorded).
    pub async fn run_until_idle(&self) -> Result<Vec<WorkId>, StoreError> {
        let mut ran = Vec::new();
        while ran.len() < RUN_UNTIL_IDLE_LIMIT {
            let batch = self.run_batch().await?;
            if batch.is_empty() {
                break;
            }
            ran.extend(batch);
        }
        Ok(ran)
    }

    /// One claim batch, run and recorded: the ids claimed.
    async fn run_batch(&self) -> Result<Vec<WorkId>, StoreError> {
        self.purge_kept_keys().await;
        let claimed = self.claim(self.inner.settings.concurrency).await?;
        let ids: Vec<WorkId> = claimed.iter().map(|r| r.id).collect();
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
        Ok(ids)
    }

    /// Runs work as it falls due until `stop` fires. At most the concurrency setting's
    /// attempts run at once; an idle worker sleeps (on the owner's clock) until the next due
    /// time, a poll interval, or new work scheduled through this `Jobs` — or, on a store that
    /// hears of other processes' writes ([`Store::listen`]: PostgreSQL), new work they commit.
    /// A failing store is logged and retried after a poll interval.
    ///
    /// At start it logs what it finds in flight: work leased by other workers (and when the
    /// first lease ends) and work whose lease ran out (claimed at once). Once `stop` fires it
    /// claims nothing more and lets the running attempts finish for the shutdown grace
    /// ([`JobsBuilder::shutdown_grace`](crate::JobsBuilder::shutdown_grace)); each attempt
    /// still running then is signalled, abandoned, and its lease released, so that its item
    /// is due again at once (the abandoned attempt counted) and a restarted worker does not
    /// wait out the lease. The release is fenced on the attempt's claim: work that another
    /// worker holds by now is left alone.
    ///
    /// The worker runs as a task of its own on the current tokio runtime, and ends when this
    /// future is dropped: spawned from a runtime thread, each attempt starts on that thread
    /// as soon as the worker yields, and wakes it when it ends, without a hand-off between
    /// threads. (Run straight from `#[tokio::main]`'s `block_on`, every attempt crossed
    /// threads twice: a no-op job at concurrency 1 took twice as long.)
    pub async fn run(&self, stop: CancelToken) {
        let jobs = self.clone();
        let worker = AbortOnDropHandle::new(tokio::spawn(async move { jobs.work(stop).await }));
        if let Err(error) = worker.await {
            if error.is_panic() {
                std::panic::resume_unwind(error.into_panic());
            }
        }
    }

    /// The worker of [`run`](Self::run), on the task `run` spawns.
    async fn work(&self, stop: CancelToken) {
        self.report_in_flight().await;
        let _listener = listen(Arc::clone(&self.inner));
        let settings = self.inner.settings;
        let mut attempts = Attempts::default();
        let mut queue = LocalQueue::default();
        let mut ended = Vec::new();
        let mut flush = FlushClock::default();
        loop {
            attempts.collect_ready(&mut ended);
            if stop.is_cancelled() {
                break;
            }
            self.purge_kept_keys().await;
            self.start_queued(&mut queue, &mut attempts).await;
            let free = settings.concurrency.saturating_sub(attempts.len() as u32);
            let mut wait = settings.poll_interval;
            let flush_in = flush.due_in(ended.len(), settings.flush_interval, self.now());
            // A free slot claims at once (and writes what ended with it); otherwise the ends
            // wait for the flush interval, so that more share the write.
            if free > 0 || flush_in.is_some_and(|d| d.is_zero()) {
                // Up to the free slots, and the local queue topped up to the prefetch.
                let room = (free + settings.prefetch).saturating_sub(queue.len() as u32);
                flush.written();
                match self
                    .record_and_claim(std::mem::take(&mut ended), room)
                    .await
                {
                    Ok(claimed) => {
                        let full = claimed.len() as u32 == room && room > 0;
                        queue.push(&self.inner, claimed);
                        self.start_queued(&mut queue, &mut attempts).await;
                        if full {
                            continue;
                        }
                        if free > 0 {
                            wait = self.idle_wait().await;
                        }
                    }
                    Err(error) => {
                        tracing::error!(target: TARGET, %error, "could not claim work; trying again");
                    }
                }
            } else if let Some(flush_in) = flush_in {
                wait = wait.min(flush_in);
            }
            tokio::select! {
                Some(done) = attempts.set.join_next_with_id(), if !attempts.is_empty() => attempts.settle(done, &mut ended),
                () = self.inner.clock.sleep(wait) => {}
                () = self.inner.wake.notified() => {}
                () = stop.cancelled() => {}
            }
        }
        self.stop(attempts, ended, queue).await;
    }

    /// Starts queued items while slots are free.
    async fn start_queued(&self, queue: &mut LocalQueue, attempts: &mut Attempts) {
        while attempts.len() < self.inner.settings.concurrency as usize && queue.len() > 0 {
            match queue.next(&self.inner).await {
                Some(record) => attempts.spawn(Arc::clone(&self.inner), record),
                None => break,
            }
        }
    }

    /// Runs work as [`run`](Self::run) does until the process receives SIGINT (Ctrl-C) or
    /// SIGTERM (what service managers and Kubernetes send), then stops as `run` stops: lets
    /// running attempts finish within the shutdown grace and releases the leases of those it
    /// abandons, so that a restarted worker runs them at once. Needs the `signal` feature (on
    /// by default) and a runtime with I/O enabled (`#[tokio::main]` enables it).
    ///
    /// # Errors
    /// The signal handlers could not be installed (no I/O driver on the runtime); nothing ran.
    #[cfg(feature = "signal")]
    pub async fn run_until_signal(&self) -> std::io::Result<()> {
        let signalled = signalled()?;
        let stop = CancelToken::new();
        let run = self.run(stop.clone());
        let mut run = std::pin::pin!(run);
        tokio::select! {
            () = &mut run => return Ok(()),
            name = signalled => {
                tracing::info!(target: TARGET, signal = name, "stopping on a signal");
                stop.cancel();
            }
        }
        run.await;
        Ok(())
    }

    /// The stop path: gives the queued items back unstarted, lets the running attempts finish
    /// within the shutdown grace, records what ended, and releases the leases of the attempts
    /// it abandons.
    async fn stop(&self, mut attempts: Attempts, mut ended: Vec<Ended>, queue: LocalQueue) {
        queue.give_back(&self.inner).await;
        let grace = self.inner.settings.shutdown_grace;
        if !attempts.is_empty() {
            tracing::info!(target: TARGET, running = attempts.len(), ?grace, "stopping: claiming nothing more, letting running attempts finish");
        }
        let mut timer = std::pin::pin!(self.inner.clock.sleep(grace));
        while !attempts.is_empty() {
            tokio::select! {
                Some(done) = attempts.set.join_next_with_id() => attempts.settle(done, &mut ended),
                () = &mut timer => break,
            }
        }
        if !attempts.is_empty() {
            // Signalled first, for handlers that hand work to tasks of their own.
            for held in attempts.held.values() {
                if let Some(token) = lock(&self.inner.running).remove(&held.id) {
                    token.cancel();
                }
            }
            attempts.set.abort_all();
            // One that ended before the abort is recorded like any other.
            while let Some(done) = attempts.set.join_next_with_id().await {
                attempts.settle(done, &mut ended);
            }
        }
        // Claims nothing, so it cannot fail: an attempt it could not write is logged.
        let _ = self.record_and_claim(ended, 0).await;
        for held in attempts.held.into_values() {
            self.release(held).await;
        }
    }

    /// Releases the lease of an abandoned attempt: the item is due at once (its lease ends
    /// now) and the attempt stays counted, written with its history entry. Fenced on the
    /// claim's revision; a failure is logged, and the item waits out its lease instead.
    async fn release(&self, held: Held) {
        let now = self.now();
        let id = held.id;
        let entry = AttemptRecord {
            attempt: held.attempt,
            started_at: held.started_at,
            ended_at: now,
            outcome: AttemptOutcome::Abandoned,
            error: None,
            wait: None,
        };
        let history =
            AttemptRecord::appended(&held.history, entry, self.inner.settings.history_limit);
        match self
            .inner
            .store
            .release_lease(id, held.revision, now, history)
            .await
        {
            Ok(true) => {
                tracing::warn!(target: TARGET, id = id.0, "abandoned an attempt still running after the shutdown grace; its lease is released and it is due again at once");
            }
            Ok(false) => {
                tracing::debug!(target: TARGET, id = id.0, "abandoned an attempt whose claim was already gone; nothing to release");
            }
            Err(error) => {
                tracing::error!(target: TARGET, id = id.0, %error, "could not release the lease of an abandoned attempt; it runs again when the lease ends");
            }
        }
    }

    /// Logs what is in flight as the worker starts: work leased by other workers, with when
    /// the first of them frees up, and work whose lease ran out (a worker that died), which
    /// this worker claims at once.
    async fn report_in_flight(&self) {
        let filter = WorkFilter::new().state(WorkState::Running);
        let running = match self
            .inner
            .store
            .list_where(&self.inner.owner, &filter, None, IN_FLIGHT_PAGE)
            .await
        {
            Ok(listing) => listing.records,
            Err(error) => {
                tracing::error!(target: TARGET, %error, "could not read the work in flight");
                return;
            }
        };
        let now = self.now();
        let (leased, expired): (Vec<_>, Vec<_>) = running
            .iter()
            .filter_map(|r| r.lease_until)
            .partition(|until| *until > now);
        if leased.is_empty() && expired.is_empty() {
            tracing::info!(target: TARGET, "worker started; nothing in flight");
            return;
        }
        let first_end = leased.iter().min().copied();
        let first_free = first_end
            .map(|until| Duration::from_millis(until.as_millis().saturating_sub(now.as_millis())));
        tracing::info!(
            target: TARGET,
            leased_by_others = leased.len(),
            first_lease_ends_in = ?first_free,
            first_lease_ends_at = first_end.map(tracing::field::display),
            expired = expired.len(),
            "worker started; found work in flight: leased work runs here once its lease ends, expired leases are claimed now"
        );
    }

    /// Deletes finished rows whose key retention ended, at most [`PURGE_ROWS`] of them, once
    /// every [`PURGE_EVERY`] on the owner's clock. A failure is logged: the rows are purged on
    /// a later pass, and until then a kept row whose retention ended is replaced by the
    /// first enqueue of its key.
    async fn purge_kept_keys(&self) {
        let now = self.now();
        {
            let mut next = lock(&self.inner.next_purge);
            if now < *next {
                return;
            }
            *next = now + PURGE_EVERY;
        }
        self.sample_queue(now).await;
        match self
            .inner
            .store
            .purge_kept_keys(&self.inner.owner, now, PURGE_ROWS)
            .await
        {
            Ok(0) => {}
            Ok(purged) => {
                tracing::debug!(target: TARGET, purged, "purged finished work whose key retention ended");
                if purged == u64::from(PURGE_ROWS) {
                    // More may be left: the next pass purges again.
                    *lock(&self.inner.next_purge) = now;
                }
            }
            Err(error) => {
                tracing::error!(target: TARGET, %error, "could not purge finished work whose key retention ended");
            }
        }
    }

    /// Samples the queue's depth by state for the metrics (on the purge's tick); a failure is
    /// logged and the gauges keep their last values.
    async fn sample_queue(&self, now: Timestamp) {
        if !crate::metrics::SAMPLES_QUEUE {
            return;
        }
        match self.inner.store.count_work(&self.inner.owner, now).await {
            Ok(counts) => crate::metrics::queue(&self.inner.metrics, &counts),
            Err(error) => {
                tracing::warn!(target: TARGET, %error, "could not count the queue for its metrics");
            }
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
        let retention = inner.settings.key_retention;
        for Ended {
            record,
            mut finish,
            events,
            hinted,
        } in ended
        {
            finish.history = match history_entry(&record, &finish, &events, hinted) {
                Some(entry) => {
                    AttemptRecord::appended(&record.history, entry, inner.settings.history_limit)
                }
                None => record.history.clone(),
            };
            if finish.then == NextStep::Remove
                && record.key.is_some()
                && !record.timing.repeats()
                && !retention.is_zero()
            {
                // Keyed work that finished keeps its key for the retention.
                finish.keep_key_until = Some(finish.now + retention);
            }
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
    /// and a [`EventKind::Quarantined`] event. One whose write fails stays claimed; its lease ends
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
                    let quarantined = EventKind::Quarantined { reason };
                    crate::metrics::event(&inner.metrics, "", &quarantined);
                    inner.emit_event(Event {
                        id: work,
                        handler: String::new(),
                        kind: "",
                        what: quarantined,
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

/// Ends on the first SIGINT or SIGTERM with its name; installed at once, so that a signal
/// that comes before the first poll is not lost.
#[cfg(all(feature = "signal", unix))]
fn signalled() -> std::io::Result<impl Future<Output = &'static str>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
        }
    })
}

/// Ends on the first Ctrl-C (the only stop signal outside Unix).
#[cfg(all(feature = "signal", not(unix)))]
fn signalled() -> std::io::Result<impl Future<Output = &'static str>> {
    Ok(async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(target: TARGET, %error, "could not wait for Ctrl-C");
            std::future::pending::<()>().await;
        }
        "Ctrl-C"
    })
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
    events: Vec<EventKind>,
    dead: Option<&NewDeadLetter>,
) {
    if let (Some(hook), Some(dead)) = (&inner.on_error, dead) {
        inner.contain(record.id, "the error hook", || hook(record, dead));
    }
    for what in events {
        let (id, handler) = (record.id.0, &record.handler);
        match &what {
            EventKind::Succeeded { attempt } => {
                tracing::debug!(target: TARGET, id, %handler, attempt, "attempt succeeded");
            }
            EventKind::Retrying {
                attempt,
                delay,
                error,
            } => {
                tracing::warn!(target: TARGET, id, %handler, attempt, ?delay, %error, "attempt failed; retrying");
            }
            EventKind::Failed {
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

    let mut record = record;
    let mut missed_ticks = 0;
    if let Some(misfire) = record.timing.misfire() {
        let late = now.as_millis().saturating_sub(record.fire_at.as_millis());
        let missed =
            record.attempt == 1 && Duration::from_millis(late) > inner.settings.misfire_grace;
        if missed && misfire == Misfire::Skip {
            let skipped = EventKind::Skipped {
                missed: record.fire_at,
            };
            return rearm(record, now, None, vec![skipped]).map(Some);
        }
        if missed && misfire == Misfire::FireOnce {
            // One run for the most recent missed tick, which its retries keep.
            let (latest, before) = record
                .timing
                .latest_tick(record.created_at, record.fire_at, now)
                .map_err(|e| StoreError::Corrupt {
                    table: "work",
                    id: record.id.0,
                    reason: e.to_string(),
                })?;
            record.fire_at = latest;
            missed_ticks = before;
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
        missed_ticks,
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
        EventKind::Started {
            attempt: record.attempt,
        },
    );
    tracing::debug!(target: TARGET, id = record.id.0, handler = %record.handler, attempt = record.attempt, "attempt started");
    let late = now.as_millis().saturating_sub(record.due_at.as_millis());
    crate::metrics::started(&inner.metrics, &record.handler, Duration::from_millis(late));
    let began = inner.clock.now();
    let leased = run_leased(&inner, &record, future, &cancel).await;
    // Gone from the set: `Jobs::cancel` in this process cancelled it in the store (so no
    // write of this attempt could land) and announced it; whatever the handler returned as
    // it stopped is not recorded and not announced again.
    if lock(&inner.running).remove(&record.id).is_none() {
        return Ok(None);
    }

    let outcome = match leased {
        Leased::Ended(outcome) => {
            let took = inner.clock.now().saturating_duration_since(began);
            crate::metrics::attempt_ended(&inner.metrics, &record.handler, outcome.is_ok(), took);
            outcome
        }
        Leased::Lost => {
            claim_lost(&inner, &record).await?;
            return Ok(None);
        }
        Leased::Abandoned(limit) => {
            tracing::error!(
                target: TARGET,
                id = record.id.0,
                handler = %record.handler,
                attempt = record.attempt,
                timeout = ?limit,
                "attempt ignored the cancellation of its timeout; its lease is no longer extended and the work will be claimed again when it ends"
            );
            return Ok(None);
        }
    };
    let counts = |f: &TaskFailure| predicate.as_ref().map_or_else(|| classify(f), |p| p(f));
    protect::settle(permit, &outcome, counts, inner.clock.now());
    let now = inner.now();
    let attempt = record.attempt;
    match outcome {
        Ok(()) => {
            let succeeded = EventKind::Succeeded { attempt };
            if record.timing.repeats() {
                rearm(record, now, None, vec![succeeded]).map(Some)
            } else {
                Ok(Some(ended(
                    record,
                    NextStep::Remove,
                    None,
                    now,
                    vec![succeeded],
                )))
            }
        }
        Err(failure) => {
            let retryable = !matches!(failure, TaskFailure::Cancelled)
                && predicate
                    .as_ref()
                    .map_or_else(|| classify(&failure), |p| p(&failure));
            let error = failure.to_string();
            let (next, hinted) = decide(&inner, &record, &failure, retryable);
            match next {
                Next::Retry(delay) => {
                    let then = NextStep::Wait {
                        due_at: now + delay,
                        fire_at: record.fire_at,
                        attempt,
                        last_error: Some(error.clone()),
                        last_delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                    };
                    let retrying = EventKind::Retrying {
                        attempt,
                        delay,
                        error,
                    };
                    let mut retry = ended(record, then, None, now, vec![retrying]);
                    retry.hinted = hinted;
                    Ok(Some(retry))
                }
                Next::GiveUp(why) => {
                    let reason = match why {
                        GiveUp::NotRetryable => DeadReason::NotRetryable,
                        GiveUp::HintAboveCeiling { .. } => DeadReason::HintAboveCeiling,
                        // `GiveUp` may grow; every other end is the end of the attempts.
                        _ => DeadReason::Exhausted,
                    };
                    dead_letter(record, reason, attempt, error, now).map(Some)
                }
            }
        }
    }
}

/// The handler's future, with a panic turned into a failed attempt.
type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), TaskFailure>> + Send>>;

/// How an attempt's run under its lease ended.
enum Leased {
    /// The handler returned (a timed-out attempt's outcome is its timeout failure).
    Ended(Result<(), TaskFailure>),
    /// The claim was lost or the work cancelled: the handler was signalled and dropped,
    /// nothing is recorded.
    Lost,
    /// The handler ignored its timeout's cancellation past the grace: it was dropped and its
    /// lease is no longer extended, so the work is claimed again once the lease ends.
    Abandoned(Duration),
}

/// Runs the handler and extends the lease every third of it, until the handler returns,
/// the claim is lost, or — with an attempt timeout — the timeout plus a grace (a third of
/// the lease) has passed. At the timeout the handler is signalled through its context; if
/// it returns within the grace, the attempt failed with a timeout error.
///
/// The handler runs inside the attempt's task, its panics caught there (a panic is a failed
/// attempt, not a dead worker); one that is done at its first poll starts no timer.
async fn run_leased<S, C>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    future: HandlerFuture,
    cancel: &CancelToken,
) -> Leased
where
    S: Store,
    C: Clock,
{
    let mut handler = catching(future);
    let first = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut handler).poll(cx))).await;
    if let Poll::Ready(outcome) = first {
        return Leased::Ended(outcome);
    }
    let lease = inner.settings.lease;
    let every = (lease / 3).max(Duration::from_millis(1));
    let limit = record.attempt_timeout;
    // The attempt's timer: its timeout, then the grace after it.
    let mut timer = std::pin::pin!(after(&inner.clock, limit));
    let mut timed_out = false;
    let mut extension = std::pin::pin!(inner.clock.sleep(every));
    loop {
        tokio::select! {
            outcome = &mut handler => {
                return Leased::Ended(match (timed_out, limit) {
                    (true, Some(limit)) => Err(timed_out_failure(limit)),
                    _ => outcome,
                });
            }
            () = cancel.cancelled(), if !timed_out => return Leased::Lost,
            () = &mut timer => {
                let Some(limit) = limit else { continue };
                if timed_out {
                    return Leased::Abandoned(limit);
                }
                timed_out = true;
                cancel.cancel();
                timer.set(after(&inner.clock, Some(every)));
            }
            () = &mut extension => {
                extension.set(inner.clock.sleep(every));
                let now = inner.now();
                match inner.store.extend_lease(record.id, record.revision, now + lease, now).await {
                    Ok(true) => {}
                    Ok(false) => {
                        cancel.cancel();
                        return Leased::Lost;
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

/// Sleeps `limit` on `clock`; never ends without one.
async fn after<C: Clock>(clock: &C, limit: Option<Duration>) {
    match limit {
        Some(limit) => clock.sleep(limit).await,
        None => std::future::pending().await,
    }
}

/// The failure of an attempt cut off by its timeout: retryable, so the row's rules (its
/// attempts, its backoff, its named predicate if it has one) decide what follows.
fn timed_out_failure(limit: Duration) -> TaskFailure {
    TaskError::new(format!("attempt timed out after {limit:?}"))
        .with_kind("timeout")
        .with_retryable(true)
        .into()
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

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-text panic payload".to_owned())
}

/// What follows a failed attempt, decided as the in-process loop decides
/// ([`retry_toolkit::RetryPolicy::next`]: the row's attempts, the verdict on the error, its retry-after hint
/// against the policy's ceiling, the drawn wait), with the wait in whole milliseconds,
/// rounded up: the row keeps milliseconds, and a wait that was drawn is never cut short.
/// With it, whether a retry waits for the error's hint (which the decision obeys whenever it
/// retries a failure that carries one).
fn decide<S, C>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
    failure: &TaskFailure,
    retryable: bool,
) -> (Next, bool) {
    let policy = match record.options.resolve() {
        Ok(policy) => policy,
        // Unreachable for a validated row: its stored attempts and the built-in rest.
        Err(_) => RetryOptions::new()
            .with_max_attempts(record.options.max_attempts.unwrap_or(1))
            .resolve()
            .unwrap_or_default(),
    };
    let previous = Duration::from_millis(record.last_delay_ms);
    let drawn = policy
        .backoff()
        .delay(record.attempt, previous, &mut lock(&inner.rng));
    let hint = match failure {
        TaskFailure::Task(error) => error.retry_after(),
        _ => None,
    };
    let failed = FailedAttempt::new(record.attempt, drawn)
        .retryable(retryable)
        .retry_after(hint);
    match policy.next(&failed) {
        Next::Retry(delay) => (Next::Retry(whole_millis(delay)), hint.is_some()),
        give_up => (give_up, false),
    }
}

/// `delay` rounded up to whole milliseconds.
fn whole_millis(delay: Duration) -> Duration {
    let whole = Duration::from_millis(u64::try_from(delay.as_millis()).unwrap_or(u64::MAX));
    if whole < delay {
        whole.saturating_add(Duration::from_millis(1))
    } else {
        whole
    }
}

fn ended(
    record: WorkRecord,
    then: NextStep,
    dead_letter: Option<NewDeadLetter>,
    now: Timestamp,
    events: Vec<EventKind>,
) -> Ended {
    Ended {
        record,
        finish: Finish {
            dead_letter,
            then,
            now,
            keep_key_until: None,
            history: Vec::new(),
        },
        events,
        hinted: false,
    }
}

/// The history entry of an ended attempt, read from what it announces: its outcome, its
/// error, and the wait written after it with why (a backoff's draw or a server's hint, a
/// schedule's next tick, a breaker or budget). `None` if the events name no outcome.
fn history_entry(
    record: &WorkRecord,
    finish: &Finish,
    events: &[EventKind],
    hinted: bool,
) -> Option<AttemptRecord> {
    let now = finish.now;
    let until =
        |at: Timestamp| Duration::from_millis(at.as_millis().saturating_sub(now.as_millis()));
    let mut outcome = None;
    let mut error = None;
    let mut wait = None;
    for event in events {
        match event {
            EventKind::Succeeded { .. } => outcome = Some(AttemptOutcome::Succeeded),
            EventKind::Retrying {
                delay, error: e, ..
            } => {
                outcome = Some(AttemptOutcome::Retrying);
                error = Some(e.as_str());
                let why = if hinted {
                    WaitReason::ServerHint
                } else {
                    WaitReason::Backoff
                };
                wait = Some(Wait { delay: *delay, why });
            }
            EventKind::Failed { error: e, .. } => {
                outcome = Some(AttemptOutcome::DeadLettered);
                error = Some(e.as_str());
            }
            EventKind::Deferred {
                until: at, reason, ..
            } => {
                outcome = Some(AttemptOutcome::Deferred);
                error = Some(reason.as_str());
                wait = Some(Wait {
                    delay: until(*at),
                    why: WaitReason::Protection,
                });
            }
            EventKind::Rearmed { next } => {
                wait = wait.or(Some(Wait {
                    delay: until(*next),
                    why: WaitReason::NextTick,
                }));
            }
            _ => {}
        }
    }
    Some(AttemptRecord {
        attempt: record.attempt,
        // The claim set the row's update time: when this attempt started.
        started_at: record.updated_at,
        ended_at: now,
        outcome: outcome?,
        error: error.map(cut_error),
        wait,
    })
}

/// Re-arms a repeating schedule for its next tick (or removes one that has none), writing
/// `dead` first if the run ended there.
fn rearm(
    record: WorkRecord,
    now: Timestamp,
    dead: Option<NewDeadLetter>,
    mut events: Vec<EventKind>,
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
            events.push(EventKind::Rearmed { next });
            NextStep::Wait {
                due_at: next,
                fire_at: next,
                attempt: 0,
                last_error: None,
                last_delay_ms: 0,
            }
        }
        None => NextStep::Remove,
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
    let failed = EventKind::Failed {
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
    let can_run_again = matches!(
        reason,
        DeadReason::Exhausted | DeadReason::NotRetryable | DeadReason::HintAboveCeiling
    );
    if record.timing.repeats() && can_run_again {
        rearm(record, now, Some(dead), vec![failed])
    } else {
        Ok(ended(
            record,
            NextStep::Remove,
            Some(dead),
            now,
            vec![failed],
        ))
    }
}

/// The claim is gone: cancelled (an event), or taken over after the lease ran out.
async fn claim_lost<S: Store, C: Clock>(
    inner: &Inner<S, C>,
    record: &WorkRecord,
) -> Result<(), StoreError> {
    let now_state = inner.store.get(record.id).await?.map(|r| r.state);
    if now_state == Some(WorkState::Cancelled) {
        inner.emit(record, EventKind::Cancelled);
    } else {
        inner.emit(record, EventKind::ClaimLost);
        tracing::warn!(target: TARGET, id = record.id.0, handler = %record.handler, "the claim was lost before the attempt was recorded");
    }
    Ok(())
}
