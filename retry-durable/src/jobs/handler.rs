//! Handlers registered by name with a typed payload, and named retry predicates:
//! closures do not serialize, names do, so stored work refers to both by name.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use retry_toolkit::store::Timestamp;
use retry_toolkit::{CancelToken, TaskFailure};
use serde::de::DeserializeOwned;

use super::protect::Protection;
use crate::record::WorkId;

/// What a handler knows about the attempt it runs.
#[derive(Clone, Debug)]
pub struct JobContext {
    /// The work being run.
    pub id: WorkId,
    /// This attempt's number within the current run, from 1.
    pub attempt: u32,
    /// The attempts the work's options allow.
    pub max_attempts: u32,
    /// The tick (or due time) this run belongs to. After ticks were missed under the
    /// fire-once policy, the most recent of them: a handler that processes "the period
    /// ending at `fire_at`" processes the latest period.
    pub fire_at: Timestamp,
    /// How many ticks of a repeating schedule fell due before `fire_at` and are not run
    /// (folded into this run by the fire-once policy): 0 for a run on time, under the other
    /// policies, for retries, one-shots and queue items. Counted up to 100,000.
    pub missed_ticks: u64,
    /// Fires when the work is cancelled or its lease is lost — stop, the result will not be
    /// recorded — or when the attempt's timeout passes: stop, the attempt has failed.
    pub cancel: CancelToken,
}

/// What a handler returns: `Ok` or a failure, classified by the work's retry rule.
pub type HandlerResult = Result<(), TaskFailure>;

type BoxFuture = Pin<Box<dyn Future<Output = HandlerResult> + Send + 'static>>;

/// A handler with its payload type erased: checks and runs JSON payloads.
pub(crate) trait Erased: Send + Sync {
    /// Whether `payload` deserializes into the handler's type; the reason if not.
    fn check(&self, payload: &str) -> Result<(), String>;
    /// Deserializes `payload` and starts the handler.
    fn start(&self, payload: &str, context: JobContext) -> Result<BoxFuture, String>;
}

struct Typed<P, F> {
    handler: F,
    payload: std::marker::PhantomData<fn() -> P>,
}

impl<P, F, Fut> Erased for Typed<P, F>
where
    P: DeserializeOwned + Send + 'static,
    F: Fn(P, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = HandlerResult> + Send + 'static,
{
    fn check(&self, payload: &str) -> Result<(), String> {
        serde_json::from_str::<P>(payload)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn start(&self, payload: &str, context: JobContext) -> Result<BoxFuture, String> {
        let payload: P = serde_json::from_str(payload).map_err(|e| e.to_string())?;
        Ok(Box::pin((self.handler)(payload, context)))
    }
}

/// A retry predicate: whether a failure is worth another attempt.
pub(crate) type Predicate = Arc<dyn Fn(&TaskFailure) -> bool + Send + Sync>;

/// The registered handlers and predicates, by name.
#[derive(Clone, Default)]
pub(crate) struct Registry {
    pub(crate) handlers: BTreeMap<String, Arc<dyn Erased>>,
    pub(crate) predicates: BTreeMap<String, Predicate>,
    /// The breakers and budgets of handlers that have one.
    pub(crate) protection: BTreeMap<String, Protection>,
}

impl Registry {
    pub(crate) fn add_handler<P, F, Fut>(&mut self, name: &str, handler: F) -> bool
    where
        P: DeserializeOwned + Send + 'static,
        F: Fn(P, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = HandlerResult> + Send + 'static,
    {
        let typed = Typed {
            handler,
            payload: std::marker::PhantomData,
        };
        self.handlers
            .insert(name.to_owned(), Arc::new(typed))
            .is_none()
    }

    /// The names, for messages that list what is registered.
    pub(crate) fn handler_names(&self) -> String {
        names(self.handlers.keys())
    }

    pub(crate) fn predicate_names(&self) -> String {
        names(self.predicates.keys())
    }
}

fn names<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let list: Vec<String> = names.map(|n| format!("`{n}`")).collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}
