//! The task scheduler: runs [`Task`]s with a concurrency limit, a bounded pending queue and
//! an on-error policy, and tells subscribers about each task's life.
//!
//! Unbounded concurrency turns a slow dependency into a pile-up, and an unbounded queue
//! turns it into memory exhaustion; so both are bounded, and a task that does not fit is
//! refused at once with [`QueueFull`](TaskFailure::QueueFull) — backpressure the submitter
//! can act on. Whether one failure should halt the rest depends on the batch: independent
//! jobs go on ([`OnError::Continue`]), steps of one procedure stop ([`OnError::Stop`]).
//!
//! Every task ends in exactly one way, and its three witnesses agree: the error hook, the
//! task's [`TaskState`], and the result its [`TaskHandle`] resolves to. A task that never
//! ran because the scheduler stopped is not silently skipped: it fails with
//! [`QueueStopped`](TaskFailure::QueueStopped). Nor can a bug elsewhere break that:
//! a task that panics fails, a hook or subscriber that panics is contained and reported
//! through `tracing`, and a task dropped unfinished with its runtime fails with
//! [`Cancelled`](TaskFailure::Cancelled) — its slot is freed in every case.
//!
//! ```
//! use std::sync::{Arc, Mutex};
//! use retry_toolkit::{OnError, Scheduler, SchedulerOptions, TaskContext, TaskFailure, TaskState};
//!
//! # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let failed = Arc::new(Mutex::new(Vec::new()));
//! let hook = Arc::clone(&failed);
//! let scheduler = Scheduler::builder()
//!     .options(SchedulerOptions::new().with_concurrency(1).with_on_error(OnError::Stop))
//!     .on_task_error(move |id, error| hook.lock().unwrap().push((id, error.to_string())))
//!     .build()?;
//!
//! let ok = scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(1) });
//! let bad = scheduler.submit(|_: TaskContext| async { Err::<i32, _>(TaskFailure::from("boom")) });
//! let never = scheduler.submit(|_: TaskContext| async { Ok::<_, TaskFailure>(3) });
//!
//! assert_eq!(ok.await?, 1);
//! assert_eq!(bad.await.unwrap_err().to_string(), "boom");
//! assert_eq!(never.state(), TaskState::Error);
//! assert!(matches!(never.await, Err(TaskFailure::QueueStopped)));
//! assert_eq!(failed.lock().unwrap().len(), 2);
//! # Ok(()) }
//! ```

mod completion;
mod events;
mod handle;
mod hooks;
mod idle;
mod job;
mod lanes;
mod options;
mod queue;
mod runner;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

#[cfg(feature = "serde")]
use serde::{Deserialize, Serialize};
use tokio::runtime::{Handle, Id};
use tokio::sync::Notify;

use crate::error::{TaskError, TaskFailure};
use crate::middleware::{CancelToken, Task};

pub use events::{TaskEvent, TaskId, TaskOutcome, TaskState};
pub use handle::TaskHandle;
pub use options::{
    DEFAULT_CONCURRENCY, DEFAULT_MAX_PENDING, OnError, SchedulerError, SchedulerOptions,
};

use completion::Completion;
use hooks::{ErrorHook, Subscriber};
use idle::{Handoff, Mailbox};
use job::{Job, TypedJob};
use lanes::{Arrival, Lanes, Start};
use queue::{MemoryQueue, PendingQueue};
use runner::Run;

const TARGET: &str = "retry_toolkit::scheduler";

/// Whether a scheduler still accepts tasks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(Serialize, Deserialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "lowercase"))]
pub enum SchedulerState {
    /// Accepting and running tasks.
    Running,
    /// Terminal: after [`OnError::Stop`] saw a failure, or after
    /// [`shutdown`](Scheduler::shutdown). Every submission fails with
    /// [`QueueStopped`](TaskFailure::QueueStopped).
    Stopped,
}

/// A subscription made with [`Scheduler::subscribe`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SubscriptionId(u64);

/// Runs tasks with a concurrency limit, a bounded queue and an on-error policy.
///
/// Cheap to clone: clones share one scheduler. Tasks run in tokio tasks, on the runtime they
/// are submitted from — or, submitted from outside any, on the one the scheduler was built
/// in; a task that waited in the queue runs where the slot it takes was freed. Each inherits
/// the submitter's [`Scope`](crate::Scope) (its clock and seed).
///
/// Starting a task seldom spawns one: the tokio task a task ran in goes on with the next one
/// in the queue, and, with nothing queued, a few of them (at most 64 per scheduler and runtime)
/// stay parked on their runtime for the next submission, until the scheduler stops or is
/// dropped.
#[derive(Clone)]
pub struct Scheduler {
    shared: Arc<Shared>,
}

struct Shared {
    options: SchedulerOptions,
    core: Mutex<Core>,
    /// The runners not running a task; locked after `core`, never before.
    lanes: Mutex<Lanes>,
    on_error: Option<ErrorHook>,
    subscribers: Mutex<Subscribers>,
    /// Whether `subscribers` has any: three events per task need not take its lock to find
    /// out that nobody listens.
    subscribed: AtomicBool,
    /// Woken whenever the scheduler may have become idle.
    idle: Notify,
    /// The runtime the scheduler was built in, if any: where tasks submitted from outside
    /// any runtime run.
    runtime: Option<Handle>,
    /// Parent of every task's cancellation signal.
    token: CancelToken,
    /// The last task id handed out.
    next_id: AtomicU64,
}

struct Core {
    state: SchedulerState,
    running: usize,
    queue: Box<dyn PendingQueue<Queued>>,
}

#[derive(Default)]
struct Subscribers {
    next: u64,
    /// Replaced, never changed in place, so that an event takes a snapshot without copying.
    list: Arc<Vec<(SubscriptionId, Subscriber)>>,
}

/// A task in the queue: its id and its one allocation.
struct Queued {
    id: TaskId,
    job: Arc<dyn Job>,
}

/// Builds a [`Scheduler`]: options, error hook, subscribers.
#[must_use = "call `build()` to get the scheduler"]
pub struct SchedulerBuilder {
    options: SchedulerOptions,
    on_error: Option<ErrorHook>,
    subscribers: Vec<Subscriber>,
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl SchedulerBuilder {
    /// Uses `options` (concurrency, queue bound, on-error policy).
    pub fn options(mut self, options: SchedulerOptions) -> Self {
        self.options = options;
        self
    }

    /// Calls `hook(id, &failure)` for every task that ends in the error state — failed,
    /// refused or drained — before its handle resolves.
    ///
    /// A panic in the hook is caught and reported as a `tracing` error; the scheduler
    /// carries on as if the hook had returned.
    pub fn on_task_error<H>(mut self, hook: H) -> Self
    where
        H: Fn(TaskId, &TaskFailure) + Send + Sync + 'static,
    {
        self.on_error = Some(Arc::new(hook));
        self
    }

    /// Calls `subscriber` with every [`TaskEvent`], from the first task on. A panic in it is
    /// caught and reported as a `tracing` error.
    pub fn subscribe<S>(mut self, subscriber: S) -> Self
    where
        S: Fn(&TaskEvent) + Send + Sync + 'static,
    {
        self.subscribers.push(Arc::new(subscriber));
        self
    }

    /// Checks the options and builds the scheduler.
    ///
    /// # Errors
    /// [`SchedulerError`] when the options break a rule (a concurrency of 0).
    pub fn build(self) -> Result<Scheduler, SchedulerError> {
        self.options.validate()?;
        let mut subscribers = Subscribers::default();
        for subscriber in self.subscribers {
            subscribers.add(subscriber);
        }
        let core = Core {
            state: SchedulerState::Running,
            running: 0,
            queue: Box::new(MemoryQueue::new(self.options.max_pending)),
        };
        Ok(Scheduler {
            shared: Arc::new(Shared {
                options: self.options,
                core: Mutex::new(core),
                lanes: Mutex::default(),
                on_error: self.on_error,
                subscribed: AtomicBool::new(!subscribers.list.is_empty()),
                subscribers: Mutex::new(subscribers),
                idle: Notify::new(),
                runtime: Handle::try_current().ok(),
                token: CancelToken::new(),
                next_id: AtomicU64::new(0),
            }),
        })
    }
}

impl Subscribers {
    fn add(&mut self, subscriber: Subscriber) -> SubscriptionId {
        self.next += 1;
        let id = SubscriptionId(self.next);
        let mut list = Vec::clone(&self.list);
        list.push((id, subscriber));
        self.list = Arc::new(list);
        id
    }
}

/// What to do once the lock is released, beyond the one task a submission or an ending
/// decides about: empty unless a stop drains the queue, so cheap to make, move and drop.
#[derive(Default)]
struct Actions {
    start: Vec<Queued>,
    reject: Vec<(Queued, TaskFailure)>,
    /// Parked runners to release: the scheduler stopped.
    release: Vec<Arc<Mailbox>>,
    /// Whether nothing was running or pending when the actions were decided.
    idle: bool,
}

/// What a submission decided about its task, under the lock.
enum Admission {
    /// Start it, on this runtime.
    Start(Queued, Id),
    /// It waits in the queue.
    Queued,
    Refuse(Queued, TaskFailure),
}

/// A list that holds its first item inline: one task starts or is refused at a time, in the
/// common case, and that must not cost an allocation.
pub(crate) struct Batch<T> {
    first: Option<T>,
    rest: Vec<T>,
}

impl<T> Default for Batch<T> {
    fn default() -> Self {
        Self {
            first: None,
            rest: Vec::new(),
        }
    }
}

impl<T> Batch<T> {
    fn one(item: T) -> Self {
        Self {
            first: Some(item),
            rest: Vec::new(),
        }
    }

    fn push(&mut self, item: T) {
        if self.first.is_none() && self.rest.is_empty() {
            self.first = Some(item);
        } else {
            self.rest.push(item);
        }
    }

    fn is_empty(&self) -> bool {
        self.first.is_none() && self.rest.is_empty()
    }
}

impl<T> Extend<T> for Batch<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, items: I) {
        items.into_iter().for_each(|item| self.push(item));
    }
}

impl<T> IntoIterator for Batch<T> {
    type Item = T;
    type IntoIter = std::iter::Chain<std::option::IntoIter<T>, std::vec::IntoIter<T>>;

    fn into_iter(self) -> Self::IntoIter {
        self.first.into_iter().chain(self.rest)
    }
}

impl Scheduler {
    /// A builder with the default options, no hook and no subscriber.
    pub fn builder() -> SchedulerBuilder {
        SchedulerBuilder {
            options: SchedulerOptions::new(),
            on_error: None,
            subscribers: Vec::new(),
        }
    }

    /// A scheduler with `options`, no hook and no subscriber.
    ///
    /// # Errors
    /// [`SchedulerError`] when the options break a rule.
    ///
    /// ```
    /// use retry_toolkit::{Scheduler, SchedulerOptions};
    ///
    /// let err = Scheduler::new(SchedulerOptions::new().with_concurrency(0)).unwrap_err();
    /// assert_eq!(err.to_string(), "scheduler.concurrency must be >= 1");
    /// ```
    pub fn new(options: SchedulerOptions) -> Result<Self, SchedulerError> {
        Self::builder().options(options).build()
    }

    /// The options.
    pub fn options(&self) -> SchedulerOptions {
        self.shared.options
    }

    /// Whether the scheduler still accepts tasks.
    pub fn state(&self) -> SchedulerState {
        self.shared.core().state
    }

    /// Tasks running now.
    pub fn running(&self) -> usize {
        self.shared.core().running
    }

    /// Tasks waiting for a slot.
    pub fn pending(&self) -> usize {
        self.shared.core().queue.len()
    }

    /// Calls `subscriber` with every later [`TaskEvent`], until
    /// [`unsubscribe`](Scheduler::unsubscribe)d. Subscribers are called in the order they
    /// subscribed, outside the scheduler's lock (they may call the scheduler). A panic in one
    /// is caught and reported as a `tracing` error; the others are still called.
    pub fn subscribe<S>(&self, subscriber: S) -> SubscriptionId
    where
        S: Fn(&TaskEvent) + Send + Sync + 'static,
    {
        let mut subscribers = self.shared.subscribers();
        let id = subscribers.add(Arc::new(subscriber));
        self.shared.subscribed.store(true, Ordering::SeqCst);
        id
    }

    /// Ends a subscription; `false` if it had already ended.
    pub fn unsubscribe(&self, id: SubscriptionId) -> bool {
        let mut subscribers = self.shared.subscribers();
        if !subscribers.list.iter().any(|(s, _)| *s == id) {
            return false;
        }
        let list = subscribers
            .list
            .iter()
            .filter(|(s, _)| *s != id)
            .cloned()
            .collect();
        subscribers.list = Arc::new(list);
        self.shared
            .subscribed
            .store(!subscribers.list.is_empty(), Ordering::SeqCst);
        true
    }

    /// Submits `task`: it starts at once if a slot is free, waits in the queue otherwise,
    /// and is refused — its handle already in the error state — when the queue is full
    /// ([`QueueFull`](TaskFailure::QueueFull)) or the scheduler has stopped
    /// ([`QueueStopped`](TaskFailure::QueueStopped)).
    ///
    /// The task is called with a context whose signal fires on
    /// [`shutdown_now`](Scheduler::shutdown_now).
    pub fn submit<F>(&self, task: F) -> TaskHandle<F::Output>
    where
        F: Task + Send + 'static,
        F::Future: Send + 'static,
        F::Output: Send + 'static,
    {
        // The task's one allocation: task, scope, state and result slot.
        let job = TypedJob::new(task);
        let id = TaskId(self.shared.next_id.fetch_add(1, Ordering::Relaxed) + 1);
        let handle = TaskHandle::new(id, Arc::clone(&job) as _);
        // Registered comes first, before anything can start or refuse the task.
        self.shared.emit(&TaskEvent::Registered { id });
        let queued = Queued { id, job };

        let (admission, idle) = match self.shared.runtime() {
            Some(runtime) => {
                let mut core = self.shared.core();
                let admission = if core.state == SchedulerState::Stopped {
                    Admission::Refuse(queued, TaskFailure::QueueStopped)
                } else if core.running < self.shared.options.concurrency && core.queue.len() == 0 {
                    core.running += 1;
                    Admission::Start(queued, runtime.id())
                } else {
                    match core.queue.push(queued) {
                        Ok(()) => Admission::Queued,
                        Err(queued) => {
                            let capacity = core.queue.capacity();
                            Admission::Refuse(queued, TaskFailure::QueueFull { capacity })
                        }
                    }
                };
                (admission, core.is_idle())
            }
            None => (Admission::Refuse(queued, no_runtime()), false),
        };
        let shared = &self.shared;
        match admission {
            Admission::Start(queued, runtime) => shared.start_submitted(runtime, queued),
            Admission::Queued => {}
            Admission::Refuse(queued, failure) => shared.refuse(queued, failure),
        }
        shared.notify_if_idle(idle);
        handle
    }

    /// Waits until no task is running or pending.
    pub async fn idle(&self) {
        loop {
            let notified = self.shared.idle.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            {
                if self.shared.core().is_idle() {
                    return;
                }
            }
            notified.await;
        }
    }

    /// Graceful shutdown: stops accepting tasks, fails every pending task with
    /// [`QueueStopped`](TaskFailure::QueueStopped) (it is not dropped), and waits for the
    /// running ones to finish.
    pub async fn shutdown(&self) {
        self.shared.stop();
        self.idle().await;
    }

    /// Like [`shutdown`](Scheduler::shutdown), and also fires the cancellation signal of
    /// every running task; waits for them to exit.
    pub async fn shutdown_now(&self) {
        self.shared.stop();
        self.shared.token.cancel();
        self.idle().await;
    }
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = self.shared.core();
        f.debug_struct("Scheduler")
            .field("options", &self.shared.options)
            .field("state", &core.state)
            .field("running", &core.running)
            .field("pending", &core.queue.len())
            .finish()
    }
}

/// The failure of a task submitted outside a tokio runtime, to a scheduler built outside one:
/// an ordinary, non-retryable [`TaskError`] of kind `no-runtime`, because trying again from
/// the same place fails the same way.
fn no_runtime() -> TaskFailure {
    TaskError::new("build the scheduler or submit the task inside a tokio runtime")
        .with_kind("no-runtime")
        .into()
}

impl Shared {
    fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lanes(&self) -> MutexGuard<'_, Lanes> {
        self.lanes.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn subscribers(&self) -> MutexGuard<'_, Subscribers> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Where to spawn a task: the current runtime — the build-time one may be long gone, and
    /// a task spawned there would be dropped unpolled — else the one the scheduler was built
    /// in.
    fn runtime(&self) -> Option<Handle> {
        Handle::try_current().ok().or_else(|| self.runtime.clone())
    }

    fn emit(&self, event: &TaskEvent) {
        tracing::trace!(target: TARGET, ?event, "task event");
        if !self.subscribed.load(Ordering::SeqCst) {
            return;
        }
        let subscribers = Arc::clone(&self.subscribers().list);
        for (_, subscriber) in subscribers.iter() {
            hooks::call_subscriber(subscriber, event);
        }
    }

    /// Enters the terminal state and fails the pending tasks.
    fn stop(self: &Arc<Self>) {
        let mut actions = Actions::default();
        {
            let mut core = self.core();
            self.stop_locked(&mut core, &mut actions);
            actions.idle = core.is_idle();
        }
        self.perform(actions);
    }

    fn stop_locked(&self, core: &mut Core, actions: &mut Actions) {
        if core.state != SchedulerState::Stopped {
            tracing::debug!(target: TARGET, pending = core.queue.len(), "scheduler stopped");
        }
        core.state = SchedulerState::Stopped;
        actions.release.extend(self.lanes().close());
        actions.reject.extend(
            core.queue
                .drain()
                .into_iter()
                .map(|q| (q, TaskFailure::QueueStopped)),
        );
    }

    /// Starts and refuses tasks, outside the lock.
    fn perform(self: &Arc<Self>, actions: Actions) {
        let Actions {
            start,
            reject,
            release,
            idle,
        } = actions;
        // Each empty in the common case: skipped without making an iterator.
        if !reject.is_empty() {
            for (queued, failure) in reject {
                self.refuse(queued, failure);
            }
        }
        if !release.is_empty() {
            for mailbox in release {
                drop(mailbox.close());
            }
        }
        if !start.is_empty() {
            let mut batch = Batch::default();
            batch.extend(start);
            completion::start_all(self, batch);
        }
        self.notify_if_idle(idle);
    }

    /// Starts `queued`, submitted on `runtime`: see [`lanes`].
    fn start_submitted(self: &Arc<Self>, runtime: Id, queued: Queued) {
        self.mark_started(&queued);
        let start = self.lanes().start(runtime, queued);
        self.dispatch(runtime, start);
    }

    /// A runner on its way on `runtime` arrived (or was dropped): hands out the tasks that
    /// waited for it.
    fn arrived(self: &Arc<Self>, runtime: Id) {
        let mut starts = Vec::new();
        self.lanes().arrived(runtime, &mut starts);
        for start in starts {
            self.dispatch(runtime, start);
        }
    }

    /// Carries out where a started task goes.
    fn dispatch(self: &Arc<Self>, runtime: Id, start: Start) {
        let (queued, mailbox) = match start {
            Start::Waits => return,
            Start::Hand(queued, mailbox) => (queued, Some(mailbox)),
            Start::Spawn(queued) => (queued, None),
        };
        let arrival = Arrival::new(Arc::clone(self), runtime);
        let Some(mailbox) = mailbox else {
            return self.spawn_started(queued, Some(arrival));
        };
        // The runner went away since it was taken (its runtime shut down): a runner of the
        // task's own, then.
        if let Err(handoff) = mailbox.deliver(Handoff { queued, arrival }) {
            self.spawn_started(handoff.queued, Some(handoff.arrival));
        }
    }

    /// Like [`perform`](Shared::perform), from the runner of a task that just ended: `next`,
    /// the task its slot went to, is handed back to run there, not spawned.
    ///
    /// `token` is the ended task's: the next one gets it if nothing else holds it.
    fn perform_inline(
        self: &Arc<Self>,
        next: Option<Queued>,
        token: Option<CancelToken>,
        actions: Actions,
    ) -> Option<Run> {
        let run = next.map(|queued| {
            self.mark_started(&queued);
            let done = self.completion(&queued);
            queued.job.run(done, token)
        });
        self.perform(actions);
        run
    }

    /// Fails `queued` without running it.
    fn refuse(self: &Arc<Self>, queued: Queued, failure: TaskFailure) {
        let done = Completion::new(Arc::clone(self), queued.id, Arc::clone(&queued.job), false);
        queued.job.reject(failure, done);
    }

    /// `idle` was decided under the lock: a task that starts or ends after it notifies on
    /// its own, and `idle()` checks again before it returns.
    fn notify_if_idle(&self, idle: bool) {
        if idle {
            self.idle.notify_waiters();
        }
    }

    /// Records that `queued` started: its state, its event.
    fn mark_started(&self, queued: &Queued) {
        queued.job.set_status(TaskState::Running, None);
        self.emit(&TaskEvent::Started { id: queued.id });
    }

    /// The completion of a task marked started.
    fn completion(self: &Arc<Self>, queued: &Queued) -> Completion {
        Completion::new(Arc::clone(self), queued.id, Arc::clone(&queued.job), true)
    }

    /// Starts `queued` in a runner of its own.
    fn start(self: &Arc<Self>, queued: Queued) {
        self.mark_started(&queued);
        self.spawn_started(queued, None);
    }

    /// Spawns a runner for `queued`, marked started; `arrival` if the runner counts as on
    /// its way.
    fn spawn_started(self: &Arc<Self>, queued: Queued, arrival: Option<Arrival>) {
        let done = self.completion(&queued);
        match self.runtime() {
            Some(runtime) => queued
                .job
                .spawn(&runtime, Arc::downgrade(self), arrival, done),
            // Only reachable if the runtime went away between submission and start.
            None => {
                drop(arrival);
                queued.job.reject(no_runtime(), done);
            }
        }
    }

    /// The run of `queued`, marked started, for the runner that is to run it.
    fn run_started(self: &Arc<Self>, queued: Queued) -> Run {
        let done = self.completion(&queued);
        queued.job.run(done, None)
    }
}

impl Core {
    fn is_idle(&self) -> bool {
        self.running == 0 && self.queue.len() == 0
    }

    /// Whether tasks may still start.
    fn accepts(&self) -> bool {
        self.state == SchedulerState::Running
    }
}

impl Drop for Shared {
    /// Tasks still queued when the scheduler goes away (their runtime is gone too: a queued
    /// task keeps its scheduler alive through the running ones) resolve as cancelled.
    fn drop(&mut self) {
        let core = self.core.get_mut().unwrap_or_else(PoisonError::into_inner);
        for queued in core.queue.drain() {
            queued.job.abandon();
        }
        // Parked runners hold the scheduler weakly: released, they exit.
        let lanes = self.lanes.get_mut().unwrap_or_else(PoisonError::into_inner);
        for mailbox in lanes.close() {
            drop(mailbox.close());
        }
        for queued in lanes.drain_waiting() {
            queued.job.abandon();
        }
    }
}
