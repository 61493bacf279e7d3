//! Scoped (task-local) overrides of the clock and the jitter seed.
//!
//! Some retry loops cannot be handed a clock: the one inside a function expanded from
//! `#[retry]`, or one deep inside a library. A [`Scope`] sets a clock and a seed for every
//! retry loop that runs *inside* a future, without any process-global state, so parallel
//! tests each keep their own.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use super::clock::{Clock, DynClock};

tokio::task_local! {
    static SCOPE: Scope;
}

/// Overrides for every retry loop run inside [`Scope::run`] whose policy and call were not
/// given a clock or seed of their own.
///
/// The override follows the future, not the thread: it holds across `.await`s, and does not
/// reach tasks that the future spawns.
///
/// ```
/// use std::time::{Duration, Instant};
/// use retry_toolkit::{Clock, RetryPolicy, Scope};
///
/// #[derive(Clone)]
/// struct Instantly;
/// impl Clock for Instantly {
///     type Sleep = std::future::Ready<()>;
///     fn now(&self) -> Instant { Instant::now() }
///     fn sleep(&self, _: Duration) -> Self::Sleep { std::future::ready(()) }
/// }
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let result: Result<(), &str> = Scope::new()
///     .clock(Instantly)
///     .seed(42)
///     .run(RetryPolicy::DEFAULT.retry(|_| async { Err("down") }))
///     .await;
/// assert_eq!(result, Err("down")); // three attempts, no real waiting
/// # }
/// ```
#[derive(Clone, Default)]
pub struct Scope {
    clock: Option<Arc<dyn DynClock>>,
    seed: Option<u64>,
}

impl Scope {
    /// A scope that overrides nothing (yet).
    pub fn new() -> Self {
        Self::default()
    }

    /// Runs the retry loops inside this scope on `clock`.
    pub fn clock<C>(mut self, clock: C) -> Self
    where
        C: Clock + Send + Sync + 'static,
        C::Sleep: Send + 'static,
    {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// Seeds the jitter of every retry loop started inside this scope.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// Runs `future` with these overrides. Fields this scope leaves unset are inherited from
    /// an enclosing scope.
    ///
    /// The enclosing scope is looked up when the returned future first runs, not when `run`
    /// is called: `clock.block_on(Scope::new().seed(1).run(op))` still sees `clock`.
    pub async fn run<F: Future>(self, future: F) -> F::Output {
        let merged = SCOPE
            .try_with(|outer| Scope {
                clock: self.clock.clone().or_else(|| outer.clock.clone()),
                seed: self.seed.or(outer.seed),
            })
            .unwrap_or(self);
        SCOPE.scope(merged, future).await
    }

    /// The seed of the surrounding scope, if any.
    pub fn current_seed() -> Option<u64> {
        SCOPE.try_with(|s| s.seed).ok().flatten()
    }

    /// Whether the surrounding scope overrides the clock.
    pub fn has_clock() -> bool {
        scoped_clock().is_some()
    }
}

impl fmt::Debug for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scope")
            .field("clock", &self.clock.as_ref().map(|_| "<clock>"))
            .field("seed", &self.seed)
            .finish()
    }
}

/// The clock of the surrounding scope, if the current task runs inside one that has a clock.
pub(crate) fn scoped_clock() -> Option<Arc<dyn DynClock>> {
    SCOPE.try_with(|s| s.clock.clone()).ok().flatten()
}
