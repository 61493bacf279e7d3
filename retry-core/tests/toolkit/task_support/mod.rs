//! Scripted tasks for the middleware and scheduler tests: "take 30 ms, then fail with X",
//! cooperative or not, with every call counted and every exit instant recorded on tokio's
//! (paused) clock. Tests that script a non-zero duration run with
//! `#[tokio::test(start_paused = true)]` (or a `Scope` clock for cooperative tasks): no script
//! waits in wall time.

#![allow(dead_code, unreachable_pub)]

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use retry_toolkit::{Task, TaskContext, TaskError, TaskFailure};
use tokio::time::Instant;

pub const MS: Duration = Duration::from_millis(1);

/// What one call does.
#[derive(Clone, Debug)]
pub struct Call {
    pub takes: Duration,
    pub cooperative: bool,
    /// `None` answers with the call number.
    pub fails_with: Option<TaskFailure>,
}

impl Call {
    /// Succeeds after `ms`, watching its cancellation signal.
    pub fn ok(ms: u64) -> Self {
        Self {
            takes: MS * ms as u32,
            cooperative: true,
            fails_with: None,
        }
    }

    /// Fails with `failure` after `ms`, watching its cancellation signal.
    pub fn fail(ms: u64, failure: impl Into<TaskFailure>) -> Self {
        Self {
            takes: MS * ms as u32,
            cooperative: true,
            fails_with: Some(failure.into()),
        }
    }

    /// Ignores its cancellation signal: runs its whole time.
    pub fn uncooperative(mut self) -> Self {
        self.cooperative = false;
        self
    }
}

/// A retryable task error.
pub fn transient(message: &str) -> TaskFailure {
    TaskError::new(message).with_retryable(true).into()
}

/// A non-retryable task error.
pub fn fatal(message: &str) -> TaskFailure {
    TaskError::new(message).into()
}

/// A task that plays a script of calls, then answers every further call at once.
#[derive(Clone)]
pub struct Scripted {
    script: Arc<Mutex<VecDeque<Call>>>,
    calls: Arc<AtomicU32>,
    exits: Arc<Mutex<Vec<Instant>>>,
    /// Whether the signal had fired when each call exited.
    saw_cancel: Arc<Mutex<Vec<bool>>>,
    /// What every call after the script does.
    after: Call,
}

impl Scripted {
    pub fn new(script: impl IntoIterator<Item = Call>) -> Self {
        Self {
            script: Arc::new(Mutex::new(script.into_iter().collect())),
            calls: Arc::default(),
            exits: Arc::default(),
            saw_cancel: Arc::default(),
            after: Call::ok(0),
        }
    }

    /// The same call, forever.
    pub fn always(call: Call) -> Self {
        let mut me = Self::new([]);
        me.after = call;
        me
    }

    pub fn task(
        &self,
    ) -> impl Task<Output = u32, Future: Send + 'static> + Clone + Send + Sync + 'static {
        let me = self.clone();
        move |cx: TaskContext| {
            let call = me.script.lock().unwrap().pop_front();
            me.play(call.unwrap_or_else(|| me.after.clone()), cx)
        }
    }

    fn play(
        &self,
        call: Call,
        cx: TaskContext,
    ) -> impl Future<Output = Result<u32, TaskFailure>> + Send + 'static + use<> {
        let number = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let exits = Arc::clone(&self.exits);
        let saw_cancel = Arc::clone(&self.saw_cancel);
        async move {
            let ran = if call.cooperative {
                cx.sleep(call.takes).await
            } else {
                tokio::time::sleep(call.takes).await;
                Ok(())
            };
            exits.lock().unwrap().push(Instant::now());
            saw_cancel.lock().unwrap().push(cx.is_cancelled());
            ran?;
            match call.fails_with {
                Some(failure) => Err(failure),
                None => Ok(number),
            }
        }
    }

    pub fn calls(&self) -> u32 {
        self.calls.load(Ordering::SeqCst)
    }

    /// Exit instants, as offsets from `start`.
    pub fn exits_since(&self, start: Instant) -> Vec<Duration> {
        self.exits
            .lock()
            .unwrap()
            .iter()
            .map(|t| *t - start)
            .collect()
    }

    pub fn saw_cancel(&self) -> Vec<bool> {
        self.saw_cancel.lock().unwrap().clone()
    }

    /// Calls of the script not played yet.
    pub fn unplayed(&self) -> usize {
        self.script.lock().unwrap().len()
    }
}
