//! [`ToolServer`]: one registered tool server and its connection — opened on first use with
//! retry under the server's own options, dropped when it fails, opened again by the next call.
//!
//! A connection round is one retry loop (`retry_toolkit`'s, on the server's clock) of attempts
//! that each open a [`Stream`](crate::Stream) and run the protocol handshake within the
//! connect timeout. Rounds are serialized: callers that arrive while one runs wait for it, and
//! if it fails they share its error instead of each starting a round of their own, so a
//! server that is down is not hammered by every waiting call.

use std::fmt;
use std::future::{Future, poll_fn};
use std::pin::pin;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::Poll;
use std::time::{Duration, Instant};

use retry_toolkit::{Clock, DefaultClock, RetryError};
use rmcp::ServiceExt;
use rmcp::model::{ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::async_rw::{AsyncRwTransport, DEFAULT_MAX_LINE_LENGTH};
use tokio::process::Child;

use crate::connector::{Connector, Stream};
use crate::error::{ConnectError, ConnectFailure, GaveUp, UnreadableMessage};
use crate::frame::{Counted, Fault, FrameGuard};
use crate::options::{ConnectOptions, ConnectOptionsError, ConnectPolicy};

use crate::TARGET;

/// The longest message a server may send by default, in bytes: 16 MiB, the protocol SDK's own
/// limit. A longer one closes the connection and fails the calls waiting on it.
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = DEFAULT_MAX_LINE_LENGTH;

/// How long [`ToolServer::close`] waits for a server process to exit after its input was
/// closed, before it kills the process.
pub const CLOSE_GRACE: Duration = Duration::from_secs(2);

/// A connection attempt that failed and will be retried, as the
/// [`on_retry`](ToolServerBuilder::on_retry) hook sees it.
#[derive(Debug)]
#[non_exhaustive]
pub struct ConnectRetry<'a> {
    /// The server's name.
    pub server: &'a str,
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// How it failed.
    pub failure: &'a ConnectFailure,
    /// The wait before the next attempt.
    pub delay: Duration,
}

type RetryHook = Arc<dyn Fn(&ConnectRetry<'_>) + Send + Sync>;

/// A tool server, by name, and its connection.
///
/// Cheap to clone: clones share the connection. The connection is opened when first needed
/// (or by [`connect`](ToolServer::connect)), retried under the server's [`ConnectOptions`];
/// when a call finds it failed, it is dropped, and the next call opens a new one — a new
/// decision with a fresh set of attempts. A call that was in flight when the connection failed
/// is **never sent again**: it fails with an error that says its outcome is unknown
/// ([`CallError::answer_lost`](crate::CallError::answer_lost)).
///
/// ```
/// use retry_toolkit::RetryOptions;
/// use retry_mcp::{ConnectOptions, Connector, ToolServer};
/// use tokio::process::Command;
///
/// let files = ToolServer::builder("files", Connector::command(Command::new("files-server")))
///     .options(ConnectOptions::new().with_retry(RetryOptions::new().with_max_attempts(5)))
///     .build()?;
/// assert_eq!(files.policy().retry().max_attempts(), 5);
/// assert_eq!(files.policy().retry().base_delay().as_millis(), 500); // the connection default
/// # Ok::<(), retry_mcp::ConnectOptionsError>(())
/// ```
pub struct ToolServer<C = DefaultClock> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for ToolServer<C> {
    fn clone(&self) -> Self {
        ToolServer {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for ToolServer<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolServer")
            .field("name", &self.inner.name)
            .field("connector", &self.inner.connector)
            .field("options", &self.inner.options)
            .field("connected", &self.is_connected())
            .finish_non_exhaustive()
    }
}

struct Inner<C> {
    name: String,
    connector: Connector,
    options: ConnectOptions,
    policy: ConnectPolicy,
    clock: C,
    seed: Option<u64>,
    on_retry: Option<RetryHook>,
    max_message: usize,
    slot: Mutex<Slot>,
    /// Held for the whole of a connection round, so that rounds never overlap.
    connecting: tokio::sync::Mutex<()>,
    /// Connection rounds finished so far.
    rounds: AtomicU64,
    /// Attempts of the round running now (or the last one).
    attempts: AtomicU32,
}

#[derive(Default)]
struct Slot {
    live: Option<Arc<Live>>,
    /// The round that failed last, and how: shared with the callers that waited for it.
    failed: Option<(u64, Arc<ConnectError>)>,
    /// Connections opened so far (the number of the current one).
    opened: u64,
    closed: bool,
}

/// An open connection: the protocol session and the server process behind it, if any.
pub(crate) struct Live {
    pub(crate) service: RunningService<RoleClient, ClientConfig>,
    child: Mutex<Option<Child>>,
    /// Which connection of this server it is, from 1.
    pub(crate) number: u64,
    /// Why the guard closed the server's side, if it did.
    fault: Fault,
    /// Bytes written to the server so far.
    written: Arc<AtomicU64>,
}

impl Live {
    fn is_open(&self) -> bool {
        !self.service.is_closed() && !self.service.is_transport_closed()
    }

    /// The message from the server that closed this connection, if one did.
    pub(crate) fn fault(&self) -> Option<&UnreadableMessage> {
        self.fault.get()
    }

    /// Bytes written to the server so far: a mark taken before a request is handed over, and
    /// still the count when the connection failed, means the request never left.
    pub(crate) fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }
}

/// Builds a [`ToolServer`]; see [`ToolServer::builder`].
pub struct ToolServerBuilder<C = DefaultClock> {
    name: String,
    connector: Connector,
    options: ConnectOptions,
    clock: C,
    seed: Option<u64>,
    on_retry: Option<RetryHook>,
    max_message: usize,
}

impl<C: fmt::Debug> fmt::Debug for ToolServerBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolServerBuilder")
            .field("name", &self.name)
            .field("connector", &self.connector)
            .field("options", &self.options)
            .field("clock", &self.clock)
            .field("max_message", &self.max_message)
            .finish_non_exhaustive()
    }
}

impl ToolServer {
    /// A server called `name` (used in messages and logs), reached through `connector`, with
    /// the connection defaults: 3 attempts, 500 ms base, 5 s ceiling, full jitter, 10 s per
    /// attempt, on the default clock.
    pub fn builder(name: impl Into<String>, connector: Connector) -> ToolServerBuilder {
        ToolServerBuilder {
            name: name.into(),
            connector,
            options: ConnectOptions::new(),
            clock: DefaultClock,
            seed: None,
            on_retry: None,
            max_message: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

impl<C> ToolServerBuilder<C> {
    /// Connects with `options`, layered over the connection defaults (checked by
    /// [`build`](ToolServerBuilder::build)).
    pub fn options(mut self, options: ConnectOptions) -> Self {
        self.options = options;
        self
    }

    /// Waits and times attempts on `clock` — the one the effects runner uses, so that a call's
    /// deadline means the same on both.
    pub fn clock<C2>(self, clock: C2) -> ToolServerBuilder<C2> {
        ToolServerBuilder {
            name: self.name,
            connector: self.connector,
            options: self.options,
            clock,
            seed: self.seed,
            on_retry: self.on_retry,
            max_message: self.max_message,
        }
    }

    /// Seeds the jitter of the waits between attempts, for a reproducible sequence.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = Some(seed);
        self
    }

    /// The longest message the server may send, in bytes, without its newline
    /// ([`DEFAULT_MAX_MESSAGE_SIZE`] unless set). A longer one — or one that has not ended by
    /// then — closes the connection at once: the calls waiting on it fail with the reason
    /// instead of waiting for an answer that was dropped, and the next call connects again.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message = bytes;
        self
    }

    /// Calls `hook` after each failed attempt that will be retried, before the wait (each is
    /// also a `tracing` warning).
    pub fn on_retry(mut self, hook: impl Fn(&ConnectRetry<'_>) + Send + Sync + 'static) -> Self {
        self.on_retry = Some(Arc::new(hook));
        self
    }

    /// Checks the options and builds the server; nothing is connected yet.
    ///
    /// # Errors
    /// [`ConnectOptionsError`]: the options, layered over the connection defaults, break a
    /// rule.
    pub fn build(self) -> Result<ToolServer<C>, ConnectOptionsError> {
        let policy = self.options.resolve()?;
        Ok(ToolServer {
            inner: Arc::new(Inner {
                name: self.name,
                connector: self.connector,
                options: self.options,
                policy,
                clock: self.clock,
                seed: self.seed,
                on_retry: self.on_retry,
                max_message: self.max_message,
                slot: Mutex::new(Slot::default()),
                connecting: tokio::sync::Mutex::new(()),
                rounds: AtomicU64::new(0),
                attempts: AtomicU32::new(0),
            }),
        })
    }
}

impl<C> ToolServer<C> {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The options as given, to persist with the server's registration.
    pub fn options(&self) -> ConnectOptions {
        self.inner.options
    }

    /// The options as resolved: what connection attempts run with.
    pub fn policy(&self) -> ConnectPolicy {
        self.inner.policy
    }

    /// Whether a connection is open now (it may still fail at the next call).
    pub fn is_connected(&self) -> bool {
        self.slot().live.as_ref().is_some_and(|live| live.is_open())
    }

    /// How many connections were opened so far: 1 after the first, 2 after a reconnect …
    pub fn connections(&self) -> u64 {
        self.slot().opened
    }

    pub(crate) fn clock(&self) -> &C {
        &self.inner.clock
    }

    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.inner
            .slot
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The open connection, if it is still open; a connection found closed is dropped here.
    fn open_connection(&self) -> Option<Arc<Live>> {
        let mut slot = self.slot();
        match &slot.live {
            Some(live) if live.is_open() => Some(Arc::clone(live)),
            Some(live) => {
                tracing::info!(
                    target: TARGET, server = %self.inner.name, connection = live.number,
                    "the connection was closed; the next call connects again"
                );
                slot.live = None;
                None
            }
            None => None,
        }
    }

    /// Drops connection `number` after a call found it failed (unless another call already
    /// replaced it).
    pub(crate) fn invalidate(&self, number: u64, why: &str) {
        let dropped = {
            let mut slot = self.slot();
            match &slot.live {
                Some(live) if live.number == number => slot.live.take(),
                _ => None,
            }
        };
        if dropped.is_some() {
            tracing::warn!(
                target: TARGET, server = %self.inner.name, connection = number, %why,
                "connection dropped; the next call connects again"
            );
        }
    }

    fn closed_error(&self) -> Arc<ConnectError> {
        Arc::new(ConnectError {
            server: self.inner.name.clone(),
            attempts: 0,
            gave_up: GaveUp::Closed,
            last: None,
        })
    }
}

impl<C> ToolServer<C>
where
    C: Clock + Clone + Send + Sync + 'static,
    C::Sleep: Send,
{
    /// Connects now, if no connection is open, instead of at the first call.
    ///
    /// # Errors
    /// [`ConnectError`] when no attempt succeeded.
    pub async fn connect(&self) -> Result<(), Arc<ConnectError>> {
        self.connection(None).await.map(drop)
    }

    /// Closes the connection and takes no more calls: the server's input is closed, its process
    /// (if any) is given [`CLOSE_GRACE`] to exit, then killed. Calls after this fail with
    /// [`GaveUp::Closed`].
    pub async fn close(&self) {
        let _round = self.inner.connecting.lock().await;
        let live = {
            let mut slot = self.slot();
            slot.closed = true;
            slot.live.take()
        };
        let Some(live) = live else { return };
        live.service.cancellation_token().cancel();
        let child = live
            .child
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(mut child) = child {
            let exited = race(child.wait(), self.inner.clock.sleep(CLOSE_GRACE)).await;
            if exited.is_none() {
                let _ = child.start_kill();
            }
        }
        tracing::info!(target: TARGET, server = %self.inner.name, "closed");
    }

    /// The open connection, or a new one; `deadline` (on the server's clock) bounds a new one.
    pub(crate) async fn connection(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Arc<Live>, Arc<ConnectError>> {
        let seen = self.inner.rounds.load(Ordering::Acquire);
        if let Some(live) = self.open_connection() {
            return Ok(live);
        }
        let _round = self.inner.connecting.lock().await;
        if let Some(live) = self.open_connection() {
            return Ok(live);
        }
        {
            let slot = self.slot();
            if slot.closed {
                return Err(self.closed_error());
            }
            // A round ran while we waited and failed: its answer is ours, unless it stopped at
            // its own caller's deadline.
            if let Some((round, error)) = &slot.failed
                && *round > seen
                && error.gave_up != GaveUp::Deadline
            {
                return Err(Arc::clone(error));
            }
        }
        let result = self.round(deadline).await;
        let round = self.inner.rounds.fetch_add(1, Ordering::AcqRel) + 1;
        let mut slot = self.slot();
        match result {
            Ok(live) => {
                let live = Arc::new(live);
                slot.live = Some(Arc::clone(&live));
                slot.failed = None;
                Ok(live)
            }
            Err(error) => {
                let error = Arc::new(error);
                slot.failed = Some((round, Arc::clone(&error)));
                Err(error)
            }
        }
    }

    /// The open connection, or a new one, by `deadline` (on the server's clock) if there is one.
    ///
    /// The clock is read before anything else at every turn: once the deadline has passed,
    /// this ends with [`GaveUp::Deadline`] — nothing sent — whatever else is ready in the same
    /// turn. A caller that races its own timer against the call (the effects runner, which
    /// polls the call first) therefore learns "not sent" even when its timer and the connection
    /// round's end at the same instant, or the round started a moment after the deadline was
    /// set, or the call waited for another caller's round.
    pub(crate) async fn connection_by(
        &self,
        deadline: Option<Instant>,
    ) -> Result<Arc<Live>, Arc<ConnectError>> {
        let Some(deadline) = deadline else {
            return self.connection(None).await;
        };
        let clock = &self.inner.clock;
        let timer = clock.sleep(deadline.saturating_duration_since(clock.now()));
        let work = self.connection(Some(deadline));
        let (mut work, mut timer) = (pin!(work), pin!(timer));
        poll_fn(|cx| {
            if clock.now() >= deadline {
                return Poll::Ready(Err(self.past_deadline()));
            }
            if let Poll::Ready(connected) = work.as_mut().poll(cx) {
                return Poll::Ready(connected);
            }
            timer.as_mut().poll(cx).map(|()| Err(self.past_deadline()))
        })
        .await
    }

    /// No connection by the caller's deadline.
    fn past_deadline(&self) -> Arc<ConnectError> {
        let error = ConnectError {
            server: self.inner.name.clone(),
            attempts: self.inner.attempts.load(Ordering::Relaxed),
            gave_up: GaveUp::Deadline,
            last: None,
        };
        tracing::warn!(target: TARGET, server = %self.inner.name, %error, "no connection");
        Arc::new(error)
    }

    /// One connection round: attempts under the retry policy until one succeeds.
    async fn round(&self, deadline: Option<Instant>) -> Result<Live, ConnectError> {
        let inner = &*self.inner;
        let mut policy = inner.policy.retry().with_clock(inner.clock.clone());
        if let Some(seed) = inner.seed {
            policy = policy.with_seed(seed);
        }
        let attempts = &inner.attempts;
        attempts.store(0, Ordering::Relaxed);
        let retry = policy
            .retry(|attempt| {
                attempts.store(attempt, Ordering::Relaxed);
                self.attempt()
            })
            .when(|failure: &ConnectFailure, _| failure.is_retryable())
            .notify(|failure, attempt, delay| {
                tracing::warn!(
                    target: TARGET, server = %inner.name, attempt, ?delay, error = %failure,
                    "connection attempt failed; retrying"
                );
                if let Some(hook) = &inner.on_retry {
                    hook(&ConnectRetry {
                        server: &inner.name,
                        attempt,
                        failure,
                        delay,
                    });
                }
            });
        let outcome = match deadline {
            None => retry.await.map_err(|last| (GaveUp::Exhausted, Some(last))),
            Some(deadline) => {
                let budget = deadline.saturating_duration_since(inner.clock.now());
                retry.deadline(budget).await.map_err(|e| match e {
                    RetryError::Operation(last) => (GaveUp::Exhausted, Some(last)),
                    RetryError::DeadlineExceeded { last, .. }
                    | RetryError::AttemptTimeout { last, .. }
                    | RetryError::Cancelled { last, .. } => (GaveUp::Deadline, last),
                    // This loop is given no retry budget or circuit breaker: should a refusal
                    // end it, the retries stopped as if exhausted.
                    RetryError::BudgetExhausted { last, .. }
                    | RetryError::CircuitOpen { last, .. } => (GaveUp::Exhausted, last),
                })
            }
        };
        let attempts = attempts.load(Ordering::Relaxed);
        match outcome {
            Ok(mut live) => {
                let number = {
                    let mut slot = self.slot();
                    slot.opened += 1;
                    slot.opened
                };
                live.number = number;
                tracing::info!(
                    target: TARGET, server = %inner.name, connection = number, attempts,
                    "connected"
                );
                Ok(live)
            }
            Err((mut gave_up, last)) => {
                if gave_up == GaveUp::Exhausted && last.as_ref().is_some_and(|l| !l.is_retryable())
                {
                    gave_up = GaveUp::NotRetryable;
                }
                let error = ConnectError {
                    server: inner.name.clone(),
                    attempts,
                    gave_up,
                    last,
                };
                tracing::warn!(target: TARGET, server = %inner.name, %error, "no connection");
                Err(error)
            }
        }
    }

    /// One attempt: open the stream and run the handshake, within the connect timeout.
    async fn attempt(&self) -> Result<Live, ConnectFailure> {
        let timeout = self.inner.policy.connect_timeout();
        let attempt = async {
            let Stream { read, write, child } = self
                .inner
                .connector
                .open()
                .await
                .map_err(ConnectFailure::Open)?;
            let fault = Fault::new(OnceLock::new());
            let written = Arc::new(AtomicU64::new(0));
            let limit = self.inner.max_message;
            // The guard cuts a line at `limit`; the SDK's own limit (newline included) is above
            // it, so that the SDK never drops a line the guard let through.
            let transport = AsyncRwTransport::new_client(
                FrameGuard::new(read, limit, Arc::clone(&fault)),
                Counted::new(write, Arc::clone(&written)),
            )
            .with_max_line_length(limit.saturating_add(1));
            // On a failed handshake `child` is dropped here, which kills it.
            let service =
                client_config()
                    .serve(transport)
                    .await
                    .map_err(|e| match fault.get() {
                        Some(message) => ConnectFailure::Unreadable(message.clone()),
                        None => ConnectFailure::Handshake(Box::new(e)),
                    })?;
            Ok(Live {
                service,
                child: Mutex::new(child),
                number: 0,
                fault,
                written,
            })
        };
        race(attempt, self.inner.clock.sleep(timeout))
            .await
            .unwrap_or(Err(ConnectFailure::TimedOut(timeout)))
    }
}

/// Who we say we are in the handshake.
fn client_config() -> ClientConfig {
    ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new(env!("CARGO_PKG_NAME"), env!("CARGO_PKG_VERSION")),
    )
}

/// `work`'s output, or `None` if `timer` finishes first (`work` is then dropped).
pub(crate) async fn race<T>(
    work: impl Future<Output = T>,
    timer: impl Future<Output = ()>,
) -> Option<T> {
    let (mut work, mut timer) = (pin!(work), pin!(timer));
    poll_fn(|cx| {
        if let Poll::Ready(output) = work.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        timer.as_mut().poll(cx).map(|()| None)
    })
    .await
}
