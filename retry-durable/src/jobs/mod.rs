//! The owner of durable work ([`Jobs`]): its store, its retry defaults, its handlers and
//! predicates by name, its error hook and subscribers; scheduling, inspection and the worker.

mod events;
mod handler;
mod local;
mod pending;
mod protect;
mod schedule;
mod transaction;
mod worker;

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use retry_toolkit::store::{Epoch, Timestamp};
use retry_toolkit::{
    CancelToken, CircuitBreaker, Clock, DefaultClock, JitterRng, OptionsError, RetryBudget,
    RetryOptions, TaskFailure,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

pub use events::{Event, EventKind};
pub use handler::{HandlerResult, JobContext};
pub use schedule::{MAX_ATTEMPT_TIMEOUT, ScheduleError, When, WorkOptions};
pub use worker::RUN_UNTIL_IDLE_LIMIT;

use crate::record::{
    DeadLetter, DeadLetterId, NewDeadLetter, NewWork, QuarantinedWork, Released, WorkId,
    WorkRecord, WorkState,
};
use crate::store::{Batch, Inserted, Listing, Store, StoreError, WorkFilter, other_work};
use crate::timing::Timing;
use events::Subscriber;
use handler::{Predicate, Registry};
use schedule::Request;

/// The error hook: called once per run that ends without success, with the work and its dead
/// letter.
type ErrorHook = Arc<dyn Fn(&WorkRecord, &NewDeadLetter) + Send + Sync>;

/// The owner of durable work: schedules and queue items kept in a [`Store`], run by name with
/// their stored retry options, retried by writing the next due time (no worker sleeps on an
/// item), dead-lettered when they cannot succeed.
///
/// Cloning is cheap and shares everything (the store, the registry, the worker's wake-up).
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::RetryOptions;
/// use retry_durable::{Jobs, MemoryStore, When, WorkOptions};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let jobs = Jobs::builder(MemoryStore::new())
///     .owner("mailer")
///     .defaults(RetryOptions::new().with_max_attempts(5))
///     .handler("send", |to: String, _ctx| async move {
///         println!("sending to {to}");
///         Ok(())
///     })
///     .build()?;
///
/// let work = jobs
///     .schedule(When::after(Duration::ZERO), "send", &"ada@example.com", WorkOptions::new())
///     .await?;
/// assert_eq!(work.options.max_attempts, Some(5));
/// assert_eq!(jobs.run_due().await?, 1);
/// # Ok(()) }
/// ```
pub struct Jobs<S, C = DefaultClock> {
    inner: Arc<Inner<S, C>>,
}

impl<S, C> Clone for Jobs<S, C> {
    fn clone(&self) -> Self {
        Jobs {
            inner: Arc::clone(&self.inner),
        }
    }
}

pub(crate) struct Inner<S, C> {
    pub(crate) store: S,
    pub(crate) owner: String,
    /// The owner's metric keys, built once (empty without the `metrics` feature).
    pub(crate) metrics: crate::metrics::Series,
    pub(crate) defaults: RetryOptions,
    pub(crate) registry: Registry,
    pub(crate) on_error: Option<ErrorHook>,
    pub(crate) subscribers: Vec<Subscriber>,
    pub(crate) clock: C,
    pub(crate) epoch: Epoch,
    pub(crate) settings: Settings,
    pub(crate) rng: Mutex<JitterRng>,
    pub(crate) running: Mutex<HashMap<WorkId, CancelToken>>,
    pub(crate) wake: Notify,
    /// When the worker next purges finished rows whose key retention ended.
    pub(crate) next_purge: Mutex<Timestamp>,
    /// Panics of the error hook and the subscribers, caught.
    pub(crate) hook_panics: AtomicU64,
}

/// The worker's settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Settings {
    pub(crate) lease: Duration,
    pub(crate) concurrency: u32,
    pub(crate) poll_interval: Duration,
    pub(crate) misfire_grace: Duration,
    pub(crate) key_retention: Duration,
    pub(crate) shutdown_grace: Duration,
    pub(crate) history_limit: u32,
    pub(crate) prefetch: u32,
    pub(crate) flush_interval: Duration,
}

/// Why [`JobsBuilder::build`] refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The owner's retry defaults are invalid (checked over the built-in layer).
    #[error("owner defaults: {0}")]
    Defaults(#[from] OptionsError),
    /// Two handlers were registered under one name.
    #[error("handler `{0}` is registered twice")]
    DuplicateHandler(String),
    /// Two predicates were registered under one name.
    #[error("retry predicate `{0}` is registered twice")]
    DuplicatePredicate(String),
    /// A setting out of its range.
    #[error("{0}")]
    Setting(&'static str),
    /// A handler or predicate name that cannot be stored and named back: empty, longer than
    /// [`MAX_NAME_LEN`](Jobs::MAX_NAME_LEN) bytes, or holding a control character.
    #[error("{kind} name {name:?} {problem}")]
    InvalidName {
        /// `handler` or `retry predicate`.
        kind: &'static str,
        /// The name given.
        name: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// A breaker or a budget was given for a handler that is not registered.
    #[error(
        "a breaker or budget is given for handler `{handler}`, which is not registered (registered: {registered})"
    )]
    ProtectionForUnknownHandler {
        /// The name given.
        handler: String,
        /// The handlers registered, listed.
        registered: String,
    },
}

/// Builds a [`Jobs`]: see [`Jobs::builder`].
pub struct JobsBuilder<S, C = DefaultClock> {
    store: S,
    owner: String,
    defaults: RetryOptions,
    registry: Registry,
    on_error: Option<ErrorHook>,
    subscribers: Vec<Subscriber>,
    clock: C,
    anchor: Option<Timestamp>,
    settings: Settings,
    seed: Option<u64>,
    error: Option<BuildError>,
}

impl<S: Store> Jobs<S> {
    /// The longest handler or predicate name [`JobsBuilder`] accepts, in bytes.
    pub const MAX_NAME_LEN: usize = 200;

    /// Starts building the owner of the work in `store`. Defaults: owner `"default"`, the
    /// built-in retry options, a 30 s lease, 16 attempts at a time, a 1 s poll for work
    /// written by other processes, a 60 s misfire grace, keys kept 24 h after their work
    /// finished, the default clock.
    pub fn builder(store: S) -> JobsBuilder<S> {
        JobsBuilder {
            store,
            owner: "default".to_owned(),
            defaults: RetryOptions::new(),
            registry: Registry::default(),
            on_error: None,
            subscribers: Vec::new(),
            clock: DefaultClock,
            anchor: None,
            settings: Settings {
                lease: Duration::from_secs(30),
                concurrency: 16,
                poll_interval: Duration::from_secs(1),
                misfire_grace: Duration::from_secs(60),
                key_retention: DEFAULT_KEY_RETENTION,
                shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
                history_limit: crate::history::DEFAULT_HISTORY_LIMIT,
                prefetch: 0,
                flush_interval: Duration::ZERO,
            },
            seed: None,
            error: None,
        }
    }
}

impl<S: Store, C: Clock> JobsBuilder<S, C> {
    /// Keeps the first bad name for [`build`](Self::build) to refuse: a name that is stored on
    /// every row must read back as itself and print on one line.
    fn check_name(&mut self, kind: &'static str, name: &str) {
        let problem = if name.is_empty() {
            "is empty"
        } else if name.len() > Jobs::<S>::MAX_NAME_LEN {
            "is longer than 200 bytes"
        } else if name.chars().any(char::is_control) {
            "holds a control character"
        } else {
            return;
        };
        if self.error.is_none() {
            self.error = Some(BuildError::InvalidName {
                kind,
                name: name.chars().take(Jobs::<S>::MAX_NAME_LEN).collect(),
                problem,
            });
        }
    }

    /// The owner's name: work is stored under it, and only workers of the same owner run it.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Retry defaults for work scheduled without its own options (checked at
    /// [`build`](Self::build), over the built-in layer).
    pub fn defaults(mut self, defaults: RetryOptions) -> Self {
        self.defaults = defaults;
        self
    }

    /// Registers `handler` under `name`, taking payloads of type `P` (JSON on the row).
    pub fn handler<P, F, Fut>(mut self, name: &str, handler: F) -> Self
    where
        P: DeserializeOwned + Send + 'static,
        F: Fn(P, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        self.check_name("handler", name);
        if !self.registry.add_handler(name, handler) && self.error.is_none() {
            self.error = Some(BuildError::DuplicateHandler(name.to_owned()));
        }
        self
    }

    /// Sends every attempt of handler `handler`'s work through `breaker`, shared with whatever
    /// else calls the same dependency. While the circuit is open, a due item is not run and
    /// its attempt is not spent: it waits until the break is over ([`EventKind::Deferred`]). A
    /// failure counts against the breaker when the work's retry rule would retry it (its
    /// named predicate, or [`retry_toolkit::classify`]); any other failure is the dependency
    /// answering, a success for the breaker.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use retry_toolkit::{CircuitBreaker, TaskError};
    /// use retry_durable::{Jobs, JobContext, MemoryStore, When, WorkOptions};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let breaker = Arc::new(CircuitBreaker::builder().name("mail").consecutive_failures(1).build()?);
    /// let jobs = Jobs::builder(MemoryStore::new())
    ///     .handler("send", |_: (), _: JobContext| async {
    ///         Err(TaskError::new("smtp down").with_retryable(true).into())
    ///     })
    ///     .breaker("send", Arc::clone(&breaker))
    ///     .concurrency(1)
    ///     .build()?;
    /// jobs.schedule(When::Now, "send", &(), WorkOptions::new()).await?;
    /// let second = jobs.schedule(When::Now, "send", &(), WorkOptions::new()).await?;
    /// jobs.run_due().await?; // the first fails and opens the circuit
    /// jobs.run_due().await?; // the second is deferred to the end of the break
    /// assert_eq!(jobs.get(second.id).await?.map(|w| w.attempt), Some(0), "no attempt spent");
    /// # Ok(()) }
    /// ```
    pub fn breaker(mut self, handler: &str, breaker: Arc<CircuitBreaker>) -> Self {
        let entry = self
            .registry
            .protection
            .entry(handler.to_owned())
            .or_default();
        entry.breaker = Some(breaker);
        self
    }

    /// Spends the retries of handler `handler`'s work from `budget`, shared with whatever
    /// else calls the same dependency: each item's first attempt counts as a request, and a
    /// retry the budget refuses is not run and not spent — the item waits until the budget
    /// would admit it ([`EventKind::Deferred`]).
    pub fn budget(mut self, handler: &str, budget: Arc<RetryBudget>) -> Self {
        let entry = self
            .registry
            .protection
            .entry(handler.to_owned())
            .or_default();
        entry.budget = Some(budget);
        self
    }

    /// Registers a retry predicate under `name`, for work scheduled with
    /// [`WorkOptions::retry_if`]. Without one, a failure is retried when
    /// [`retry_toolkit::classify`] says so.
    pub fn predicate<F>(mut self, name: &str, predicate: F) -> Self
    where
        F: Fn(&TaskFailure) -> bool + Send + Sync + 'static,
    {
        self.check_name("retry predicate", name);
        let predicate: Predicate = Arc::new(predicate);
        if self
            .registry
            .predicates
            .insert(name.to_owned(), predicate)
            .is_some()
            && self.error.is_none()
        {
            self.error = Some(BuildError::DuplicatePredicate(name.to_owned()));
        }
        self
    }

    /// Called once for every run that ends without success, with the work and the dead
    /// letter, once the dead letter is written (a worker whose claim was lost meanwhile does
    /// not call it). A panic in the hook is caught, logged at ERROR with the work's id and
    /// counted ([`Jobs::hook_panics`]); the worker goes on, and what was written stays.
    pub fn on_error<F>(mut self, hook: F) -> Self
    where
        F: Fn(&WorkRecord, &NewDeadLetter) + Send + Sync + 'static,
    {
        self.on_error = Some(Arc::new(hook));
        self
    }

    /// Calls `subscriber` with every [`Event`]. A panic in a subscriber is caught, logged at
    /// ERROR with the work's id and counted ([`Jobs::hook_panics`]); the other subscribers
    /// still get the event and the worker goes on.
    pub fn subscribe<F>(mut self, subscriber: F) -> Self
    where
        F: Fn(&Event) + Send + Sync + 'static,
    {
        self.subscribers.push(Arc::new(subscriber));
        self
    }

    /// How long a claimed item stays claimed without news from its worker; extended every
    /// third of it while the handler runs. Must be at least 1 ms.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.settings.lease = lease;
        self
    }

    /// How many attempts run at once in this process. Must be at least 1.
    pub fn concurrency(mut self, concurrency: u32) -> Self {
        self.settings.concurrency = concurrency;
        self
    }

    /// How often an idle worker looks for work written by other processes (work scheduled
    /// through this `Jobs` wakes it at once). Must be at least 1 ms.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.settings.poll_interval = interval;
        self
    }

    /// How late a repeating schedule's tick may start before it counts as missed (for the
    /// misfire policy).
    pub fn misfire_grace(mut self, grace: Duration) -> Self {
        self.settings.misfire_grace = grace;
        self
    }

    /// How long a key outlives its work: keyed one-shot or queue work that finished
    /// (succeeded or dead-lettered) is kept, as [`WorkState::Succeeded`] or
    /// [`WorkState::DeadLettered`], for this long, so that a program that runs twice and
    /// enqueues the same work under the same key gets the finished record back and runs
    /// nothing. After it the key is free (the worker deletes the kept row, a bounded number
    /// per pass). Default 24 hours, how long payment APIs keep an idempotency key;
    /// [`Duration::ZERO`] deletes finished work at once, as work without a key always is. At
    /// most 366 days.
    ///
    /// [`WorkState::Succeeded`]: crate::WorkState::Succeeded
    /// [`WorkState::DeadLettered`]: crate::WorkState::DeadLettered
    pub fn key_retention(mut self, retention: Duration) -> Self {
        self.settings.key_retention = retention;
        self
    }

    /// How long a stopping worker lets its running attempts finish. Past it, each attempt
    /// still running is signalled through its context and abandoned, and its lease released:
    /// the item is due again at once, the abandoned attempt counted, so that a restarted
    /// worker does not wait out the lease. Default 10 seconds, inside the usual 30 seconds
    /// that service managers and Kubernetes wait between SIGTERM and SIGKILL;
    /// [`Duration::ZERO`] abandons at once.
    pub fn shutdown_grace(mut self, grace: Duration) -> Self {
        self.settings.shutdown_grace = grace;
        self
    }

    /// How many of an item's last attempts its row keeps ([`WorkRecord::history`]): each
    /// attempt's start, end, outcome, error and the wait chosen after it, so that an operator
    /// can see why an item waited or died without the worker's logs. The oldest are dropped
    /// first; a dead letter keeps the history its work had. Default
    /// [`DEFAULT_HISTORY_LIMIT`](crate::DEFAULT_HISTORY_LIMIT); 0 keeps none; at most
    /// [`MAX_HISTORY_LIMIT`](crate::MAX_HISTORY_LIMIT).
    ///
    /// [`WorkRecord::history`]: crate::WorkRecord::history
    pub fn history_limit(mut self, attempts: u32) -> Self {
        self.settings.history_limit = attempts;
        self
    }

    /// How many due items a long-running worker ([`Jobs::run`]) claims beyond its free slots,
    /// to keep in a local queue: an attempt that ends is followed by the next queued item at
    /// once, without a round trip to the store, and one claim serves many attempts. Default
    /// 0: a claim takes only the free slots. At most 1,000.
    ///
    /// A queued item is claimed (leased) while it waits: other workers do not take it. Its
    /// lease is renewed before it starts if more than half of it is gone, and an item whose
    /// claim was lost meanwhile is dropped, not run. A stopping worker gives its queued items
    /// back unstarted, due at once and without spending an attempt. Items queued here wait
    /// for this worker's slots while another worker may be idle: keep it small when
    /// attempts are long.
    pub fn prefetch(mut self, items: u32) -> Self {
        self.settings.prefetch = items;
        self
    }

    /// How long a long-running worker ([`Jobs::run`]) may hold the ends of attempts before
    /// writing them, so that ends that come close together are written in one statement and
    /// one commit. Ends are written earlier when a slot is free and a claim goes out anyway,
    /// when 500 are waiting, and when the worker stops. Nothing is announced (events, the
    /// error hook) before its write. Default [`Duration::ZERO`]: each end is written as soon
    /// as the worker sees it. An ended attempt's lease is no longer renewed while it waits,
    /// so this must be at most a quarter of the [`lease`](Self::lease).
    ///
    /// It matters with [`prefetch`](Self::prefetch): without a local queue, every end frees
    /// a slot, and the claim that fills it writes the end.
    pub fn flush_interval(mut self, interval: Duration) -> Self {
        self.settings.flush_interval = interval;
        self
    }

    /// Seeds the jitter of backoffs, for reproducible runs.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Reads time from `clock` (a mock clock in tests), starting at the system's wall-clock
    /// time unless [`starting_at`](Self::starting_at) says otherwise.
    pub fn clock<C2: Clock>(self, clock: C2) -> JobsBuilder<S, C2> {
        JobsBuilder {
            store: self.store,
            owner: self.owner,
            defaults: self.defaults,
            registry: self.registry,
            on_error: self.on_error,
            subscribers: self.subscribers,
            clock,
            anchor: self.anchor,
            settings: self.settings,
            seed: self.seed,
            error: self.error,
        }
    }

    /// The wall-clock time at which the clock starts (epoch milliseconds), instead of the
    /// system's: with a mock clock, a test runs on a calendar it chose.
    pub fn starting_at(mut self, at: Timestamp) -> Self {
        self.anchor = Some(at);
        self
    }

    /// Checks the settings and the defaults.
    ///
    /// # Errors
    /// [`BuildError`]: invalid defaults (the same messages as everywhere options are checked), a name registered twice, an empty
    /// owner, a zero lease, concurrency or poll interval, a handler or predicate name that is
    /// empty, longer than [`Jobs::MAX_NAME_LEN`] bytes or holds a control character, a prefetch
    /// above 1,000, a flush interval above a quarter of the lease.
    pub fn build(self) -> Result<Jobs<S, C>, BuildError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        self.defaults.or(RetryOptions::BUILTIN).resolve()?;
        if self.owner.is_empty() {
            return Err(BuildError::Setting("owner must not be empty"));
        }
        if self.settings.lease < Duration::from_millis(1) {
            return Err(BuildError::Setting("lease must be >= 1 ms"));
        }
        if self.settings.concurrency == 0 {
            return Err(BuildError::Setting("concurrency must be >= 1"));
        }
        if self.settings.poll_interval < Duration::from_millis(1) {
            return Err(BuildError::Setting("poll interval must be >= 1 ms"));
        }
        if self.settings.prefetch > MAX_PREFETCH {
            return Err(BuildError::Setting("prefetch must be <= 1000"));
        }
        if self.settings.flush_interval > self.settings.lease / 4 {
            return Err(BuildError::Setting(
                "flush interval must be at most a quarter of the lease",
            ));
        }
        if self.settings.key_retention > MAX_KEY_RETENTION {
            return Err(BuildError::Setting("key retention must be <= 366 days"));
        }
        if self.settings.history_limit > crate::history::MAX_HISTORY_LIMIT {
            return Err(BuildError::Setting(
                "history limit must be <= 1000 attempts",
            ));
        }
        if let Some(name) = self
            .registry
            .protection
            .keys()
            .find(|name| !self.registry.handlers.contains_key(*name))
        {
            return Err(BuildError::ProtectionForUnknownHandler {
                handler: name.clone(),
                registered: self.registry.handler_names(),
            });
        }
        let epoch = Epoch::anchor(
            &self.clock,
            self.anchor.unwrap_or_else(Timestamp::system_now),
        );
        let rng = self
            .seed
            .map_or_else(JitterRng::from_entropy, JitterRng::seeded);
        Ok(Jobs {
            inner: Arc::new(Inner {
                store: self.store,
                metrics: crate::metrics::Series::new(&self.owner, self.registry.handlers.keys()),
                owner: self.owner,
                defaults: self.defaults,
                registry: self.registry,
                on_error: self.on_error,
                subscribers: self.subscribers,
                clock: self.clock,
                epoch,
                settings: self.settings,
                rng: Mutex::new(rng),
                running: Mutex::new(HashMap::new()),
                wake: Notify::new(),
                next_purge: Mutex::new(Timestamp::from_millis(0)),
                hook_panics: AtomicU64::new(0),
            }),
        })
    }
}

/// Rows per page when a listing reads everything.
const PAGE: u32 = 500;

/// How long a key outlives its work unless [`JobsBuilder::key_retention`] says otherwise.
pub const DEFAULT_KEY_RETENTION: Duration = Duration::from_secs(24 * 60 * 60);

/// How long a stopping worker lets running attempts finish unless
/// [`JobsBuilder::shutdown_grace`] says otherwise.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Most items [`JobsBuilder::prefetch`] may queue: a queue is a batch of claims held by one
/// worker, and a long one starves the others.
const MAX_PREFETCH: u32 = 1_000;

/// The longest key retention: a year and a day.
const MAX_KEY_RETENTION: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// Every page of a listing that pages by the last id it returned.
async fn all_pages<T, K, F, Fut>(id_of: impl Fn(&T) -> K, mut page: F) -> Result<Vec<T>, StoreError>
where
    F: FnMut(Option<K>) -> Fut,
    Fut: Future<Output = Result<Vec<T>, StoreError>>,
{
    let mut all = Vec::new();
    loop {
        let next = page(all.last().map(&id_of)).await?;
        let done = next.len() < PAGE as usize;
        all.extend(next);
        if done {
            return Ok(all);
        }
    }
}

/// Locks a mutex whose data stays valid whatever panicked while it was held (plain maps and a
/// generator).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl<S: Store, C: Clock> Jobs<S, C> {
    /// The owner's name.
    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.inner.store
    }

    /// The wall-clock time now, on the owner's clock.
    pub fn now(&self) -> Timestamp {
        self.inner.now()
    }

    /// How many times the error hook or a subscriber panicked since this owner was built
    /// (each panic caught and logged; nothing was lost to it). For a health check or a test
    /// that no hook is broken.
    pub fn hook_panics(&self) -> u64 {
        self.inner.hook_panics.load(Ordering::Relaxed)
    }

    /// Schedules `handler` with `payload`: as a queue item ([`When::Now`]), once
    /// ([`When::After`], [`When::At`]), on a cron pattern ([`When::cron`]) or at an interval
    /// ([`When::every`]). Returns the stored record, options resolved.
    ///
    /// With a key ([`WorkOptions::key`]) that the same work already holds, nothing is
    /// written and the existing record is returned: while it can still run, as waiting or
    /// running; after it finished and within the key's retention
    /// ([`JobsBuilder::key_retention`]), with its `state`
    /// [`Succeeded`](crate::WorkState::Succeeded) or
    /// [`DeadLettered`](crate::WorkState::DeadLettered) — it finished, and nothing runs again.
    ///
    /// # Errors
    /// [`ScheduleError`]; nothing is written when scheduling fails.
    pub async fn schedule<P: Serialize>(
        &self,
        when: When,
        handler: &str,
        payload: &P,
        options: WorkOptions,
    ) -> Result<WorkRecord, ScheduleError> {
        let work = self.prepare_one(when, handler, payload, options)?;
        let (handler, payload) = (work.handler.clone(), work.payload.clone());
        let inserted = self.inner.store.insert(work).await?;
        let (record, new) = answer_one(inserted, &handler, &payload)?;
        if new {
            self.inner.wake.notify_one();
        }
        Ok(record)
    }

    /// Schedules many items for `handler` in one all-or-nothing write, each as
    /// [`schedule`](Self::schedule) would: every item is checked before anything is written,
    /// and the records come back in the order given. An item with a key already used by the
    /// same work returns that work's record.
    ///
    /// # Errors
    /// [`ScheduleError::Item`] naming the first bad item's position (from 0) and what is
    /// wrong with it, or a store error; either way nothing is written.
    pub async fn schedule_many<P: Serialize>(
        &self,
        handler: &str,
        items: impl IntoIterator<Item = (When, P, WorkOptions)>,
    ) -> Result<Vec<WorkRecord>, ScheduleError> {
        let batch = self.prepare_many(handler, items)?;
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        let (records, new) = answer_many(self.inner.store.insert_many(batch).await?)?;
        if new {
            self.inner.wake.notify_one();
        }
        Ok(records)
    }

    /// Every check of [`schedule`](Self::schedule), and the row it would write: shared by
    /// the store's own writes and the writes in a caller's transaction.
    fn prepare_one<P: Serialize>(
        &self,
        when: When,
        handler: &str,
        payload: &P,
        options: WorkOptions,
    ) -> Result<NewWork, ScheduleError> {
        let now = self.now();
        let payload = schedule::payload_json(handler, payload)?;
        let (timing, due_at) = schedule::timing_of(when, options.misfire, now)?;
        self.prepare(handler, payload, timing, due_at, options, now)
    }

    /// Every check of [`schedule_many`](Self::schedule_many), item by item, and the rows it
    /// would write; the first bad item refuses the batch.
    fn prepare_many<P: Serialize>(
        &self,
        handler: &str,
        items: impl IntoIterator<Item = (When, P, WorkOptions)>,
    ) -> Result<Vec<NewWork>, ScheduleError> {
        let now = self.now();
        let mut batch = Vec::new();
        for (index, (when, payload, options)) in items.into_iter().enumerate() {
            let work = schedule::payload_json(handler, &payload).and_then(|payload| {
                let (timing, due_at) = schedule::timing_of(when, options.misfire, now)?;
                self.prepare(handler, payload, timing, due_at, options, now)
            });
            batch.push(work.map_err(|error| ScheduleError::item(index, error))?);
        }
        Ok(batch)
    }

    /// Every check of scheduling one item, and the row it would write.
    fn prepare(
        &self,
        handler: &str,
        payload: String,
        timing: Timing,
        due_at: Timestamp,
        options: WorkOptions,
        now: Timestamp,
    ) -> Result<NewWork, ScheduleError> {
        let registry = &self.inner.registry;
        let Some(erased) = registry.handlers.get(handler) else {
            return Err(ScheduleError::UnknownHandler {
                name: handler.to_owned(),
                registered: registry.handler_names(),
            });
        };
        erased
            .check(&payload)
            .map_err(|reason| ScheduleError::PayloadMismatch {
                handler: handler.to_owned(),
                reason,
            })?;
        if let Some(name) = &options.retry_if {
            if !registry.predicates.contains_key(name) {
                return Err(ScheduleError::UnknownPredicate {
                    name: name.clone(),
                    registered: registry.predicate_names(),
                });
            }
        }
        schedule::new_work(Request {
            owner: &self.inner.owner,
            handler,
            payload,
            timing,
            due_at,
            options,
            defaults: self.inner.defaults,
            now,
        })
    }

    /// One piece of work by id: `None` once a one-shot or queue item without a key has
    /// succeeded or been dead-lettered; keyed work is kept as finished until its key's
    /// retention ends ([`JobsBuilder::key_retention`]).
    pub async fn get(&self, id: WorkId) -> Result<Option<WorkRecord>, StoreError> {
        let record = self.inner.store.get(id).await?;
        Ok(record.filter(|r| r.owner == self.inner.owner))
    }

    /// All of the owner's work, in id order: the rows that pass their checks, and the ones
    /// that do not (quarantined ones included) by id with what is wrong in
    /// [`Listing::corrupt`] — one bad row does not hide the others.
    pub async fn list(&self) -> Result<Listing, StoreError> {
        let owner = &self.inner.owner;
        let mut all = Listing::default();
        loop {
            let page = self.inner.store.list(owner, all.last_id(), PAGE).await?;
            let done = page.rows() < PAGE as usize;
            all.records.extend(page.records);
            all.corrupt.extend(page.corrupt);
            if done {
                return Ok(all);
            }
        }
    }

    /// A page of the owner's work that matches `filter`, in id order, after `after`, at most
    /// `limit` rows: the filter is applied by the store (in SQL on SQLite and PostgreSQL), so
    /// a page of active work does not read the cancelled and finished rows around it.
    ///
    /// ```
    /// use retry_durable::{Jobs, MemoryStore, When, WorkFilter, WorkOptions, WorkState};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let jobs = Jobs::builder(MemoryStore::new())
    ///     .handler("send", |_: u32, _ctx| async { Ok(()) })
    ///     .build()?;
    /// let first = jobs.schedule(When::Now, "send", &1, WorkOptions::new()).await?;
    /// let second = jobs.schedule(When::Now, "send", &2, WorkOptions::new()).await?;
    /// jobs.cancel(first.id).await?;
    /// let waiting = WorkFilter::new().state(WorkState::Waiting).handler("send");
    /// let page = jobs.list_where(&waiting, None, 100).await?;
    /// assert_eq!(page.iter().map(|w| w.id).collect::<Vec<_>>(), [second.id]);
    /// # Ok(()) }
    /// ```
    pub async fn list_where(
        &self,
        filter: &WorkFilter,
        after: Option<WorkId>,
        limit: u32,
    ) -> Result<Listing, StoreError> {
        self.inner
            .store
            .list_where(&self.inner.owner, filter, after, limit)
            .await
    }

    /// Cancels work. Waiting work is never run; a running attempt is signalled through its
    /// [`JobContext::cancel`] and its result is not recorded. The work stays, as
    /// `cancelled`, and a [`EventKind::Cancelled`] event is emitted.
    ///
    /// `true` only if this call cancelled it: `false` for work that was already cancelled,
    /// has finished, or does not exist.
    pub async fn cancel(&self, id: WorkId) -> Result<bool, StoreError> {
        let Some(record) = self.get(id).await? else {
            return Ok(false);
        };
        if !record.state.can_run() {
            return Ok(false);
        }
        let was = self.inner.store.cancel(id, self.now()).await?;
        if !was.is_some_and(WorkState::can_run) {
            // Finished or cancelled by someone else between the two reads.
            return Ok(false);
        }
        // Taken out of the running set, so that the attempt does not announce it again.
        if let Some(token) = lock(&self.inner.running).remove(&id) {
            token.cancel();
        }
        self.inner.emit(&record, EventKind::Cancelled);
        Ok(true)
    }

    /// When the owner's next work falls due: the earliest due time of waiting work, or the
    /// end of a running attempt's lease. `None` when nothing is waiting or running.
    pub async fn next_due(&self) -> Result<Option<Timestamp>, StoreError> {
        self.inner.store.next_due(&self.inner.owner).await
    }

    /// All of the owner's dead letters, in id order.
    pub async fn dead_letters(&self) -> Result<Vec<DeadLetter>, StoreError> {
        let owner = &self.inner.owner;
        all_pages(
            |d: &DeadLetter| d.id,
            |after| self.inner.store.dead_letters(owner, after, PAGE),
        )
        .await
    }

    /// Re-drives a dead letter: new work (a one-shot due now, fresh attempts, the same handler,
    /// payload and options), and the dead letter marked with its id. `None` if there is no
    /// such dead letter or it was already re-driven.
    pub async fn redrive(&self, id: DeadLetterId) -> Result<Option<WorkRecord>, StoreError> {
        let Some(dead) = self.inner.store.dead_letter(id).await? else {
            return Ok(None);
        };
        if dead.owner != self.inner.owner {
            return Ok(None);
        }
        let work = dead.redrive_work(self.now());
        let record = self.inner.store.redrive(id, work).await?;
        if record.is_some() {
            self.inner.wake.notify_one();
        }
        Ok(record)
    }

    /// The owner's quarantined work, in id order: rows that failed their checks when a worker
    /// claimed them, set apart instead of run. Each says what is wrong; fix the row in the
    /// database and [`repair`](Self::repair) it, or [`purge_quarantined`](Self::purge_quarantined) it.
    pub async fn quarantined(&self) -> Result<Vec<QuarantinedWork>, StoreError> {
        let owner = &self.inner.owner;
        all_pages(
            |q: &QuarantinedWork| q.id,
            |after| self.inner.store.quarantined(owner, after, PAGE),
        )
        .await
    }

    /// Checks a quarantined row again: one that passes now (its values were fixed) waits
    /// again, due at its stored due time with the attempts it had, and a worker runs it;
    /// one that still fails stays quarantined with the new reason.
    pub async fn repair(&self, id: WorkId) -> Result<Released, StoreError> {
        let released = self
            .inner
            .store
            .release(&self.inner.owner, id, self.now())
            .await?;
        if matches!(released, Released::Waiting(_)) {
            self.inner.wake.notify_one();
        }
        Ok(released)
    }

    /// Deletes a quarantined row; `false` if the owner has no quarantined row of that id.
    pub async fn purge_quarantined(&self, id: WorkId) -> Result<bool, StoreError> {
        self.inner
            .store
            .purge_quarantined(&self.inner.owner, id)
            .await
    }

    /// Deletes a dead letter; `false` if there was none.
    pub async fn purge(&self, id: DeadLetterId) -> Result<bool, StoreError> {
        match self.inner.store.dead_letter(id).await? {
            Some(dead) if dead.owner == self.inner.owner => self.inner.store.purge(id).await,
            _ => Ok(false),
        }
    }
}

/// What scheduling one item answers, from what the write did: the record, and whether it is
/// new work (a worker of this process is worth waking); a key held by other work is refused.
fn answer_one(
    inserted: Inserted,
    handler: &str,
    payload: &str,
) -> Result<(WorkRecord, bool), ScheduleError> {
    match inserted {
        Inserted::New(record) => Ok((record, true)),
        Inserted::Existing(existing) if !other_work(&existing, handler, payload) => {
            Ok((existing, false))
        }
        Inserted::Existing(existing) => Err(ScheduleError::KeyConflict {
            key: existing.key.clone().unwrap_or_default(),
            handler: existing.handler,
        }),
    }
}

/// What scheduling a batch answers, from what the write did: the records in order, and
/// whether any is new work; a key held by other work refuses the whole batch.
fn answer_many(batch: Batch) -> Result<(Vec<WorkRecord>, bool), ScheduleError> {
    match batch {
        Batch::Written(written) => {
            let mut new = false;
            let records = written
                .into_iter()
                .map(|inserted| match inserted {
                    Inserted::New(record) => {
                        new = true;
                        record
                    }
                    Inserted::Existing(record) => record,
                })
                .collect();
            Ok((records, new))
        }
        Batch::Conflict { index, existing } => Err(ScheduleError::item(
            index,
            ScheduleError::KeyConflict {
                key: existing.key.unwrap_or_default(),
                handler: existing.handler,
            },
        )),
    }
}

impl<S, C: Clock> Inner<S, C> {
    pub(crate) fn now(&self) -> Timestamp {
        self.epoch.now(&self.clock)
    }

    pub(crate) fn emit(&self, record: &WorkRecord, what: EventKind) {
        crate::metrics::event(&self.metrics, &record.handler, &what);
        if self.subscribers.is_empty() {
            return;
        }
        self.emit_event(Event {
            id: record.id,
            handler: record.handler.clone(),
            kind: record.timing.kind(),
            what,
        });
    }

    pub(crate) fn emit_event(&self, event: Event) {
        for subscriber in &self.subscribers {
            self.contain(event.id, "a subscriber", || subscriber(&event));
        }
    }

    /// Runs a user's hook (the error hook, a subscriber) with its panic caught: logged at
    /// ERROR with the work's id, counted, and otherwise ignored, so that a broken hook costs
    /// its own call and not the worker.
    pub(crate) fn contain(&self, id: WorkId, hook: &str, call: impl FnOnce()) {
        if let Err(payload) = std::panic::catch_unwind(AssertUnwindSafe(call)) {
            self.hook_panics.fetch_add(1, Ordering::Relaxed);
            let label = if hook == "the error hook" {
                "error_hook"
            } else {
                "subscriber"
            };
            crate::metrics::hook_panicked(&self.metrics, label);
            let message = worker::panic_message(payload.as_ref());
            tracing::error!(target: "retry_durable", id = id.0, panic = %message, "{hook} panicked; the worker goes on");
        }
    }
}
