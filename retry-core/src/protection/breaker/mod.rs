//! [`CircuitBreaker`]: stop calling a dependency that keeps failing, and find out when it is
//! back.
//!
//! `mod.rs` holds the settings and the calls, `state.rs` the state as one atomic word,
//! `events.rs` what the breaker reports, `error.rs` its errors.

mod error;
mod events;
mod state;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub use error::{BreakerError, CircuitOpen};
pub use events::{ChangeReason, CircuitState, StateChange};

use super::ticks::{Origin, nanos};
use super::window::Window;
use events::Listeners;
use state::{Admit, Event, Rules, State, Step, TIME_MAX};

const NANOS_PER_MS: u64 = 1_000_000;

/// A circuit breaker shared by every caller of one dependency.
///
/// **Closed**, calls pass and their outcomes are counted. When failures cross a threshold —
/// `consecutive_failures` in a row, or a `failure_ratio` of the calls in the
/// `sampling_window` once at least `minimum_throughput` calls were made there — the circuit
/// **opens**: calls are refused at once with [`CircuitOpen`], for the `break_duration`
/// (growing by `break_growth` with each open in a row, up to `max_break_duration`). Then it is
/// **half-open**: up to `half_open_probes` calls pass as probes, the rest are refused. One
/// probe failing opens the circuit again; once that many probes succeeded it closes, and
/// counting starts afresh. By hand, [`isolate`](CircuitBreaker::isolate) opens it until
/// [`reset`](CircuitBreaker::reset) closes it.
///
/// Which outcomes count as failures is the caller's to say: the retry loop asks its
/// [`breaker_counts`](crate::Retry::breaker_counts) predicate (every error, by default), the
/// middleware its own; an error that does not count is a success — the dependency answered.
///
/// Every change of state is an event: a `tracing` event (target `retry_toolkit::breaker`; a
/// warning when the circuit opens or is isolated) and a call of each listener given to
/// [`on_state_change`](CircuitBreaker::on_state_change). The breaker keeps no timer: a
/// change that is due (the end of a break) is made by the first call that looks at the
/// breaker afterwards.
///
/// Time comes from the caller, so the breaker runs on the retry loop's clock, a mock clock in
/// tests. It is `Send + Sync` and `const`-constructible: share it as a `static` (what
/// `#[retry(breaker = …)]` names) or in an `Arc`. While closed, admitting a call is one atomic
/// load and a success one more (plus one atomic add when a failure rate is counted): no lock,
/// no allocation.
///
/// ```
/// use std::time::{Duration, Instant};
/// use retry_toolkit::{CircuitBreaker, CircuitState};
///
/// static PAYMENTS: CircuitBreaker = CircuitBreaker::with_config(
///     match CircuitBreaker::builder()
///         .name("payments")
///         .consecutive_failures(3)
///         .break_duration(Duration::from_secs(5))
///         .validate()
///     {
///         Ok(config) => config,
///         Err(e) => panic!("{}", e.message()), // a compile error: checked in const
///     },
/// );
///
/// let t0 = Instant::now();
/// for _ in 0..3 {
///     PAYMENTS.try_acquire(t0)?.failure(t0);
/// }
/// let refused = PAYMENTS.try_acquire(t0).unwrap_err();
/// assert_eq!(refused.to_string(), "circuit `payments` is open: calls are refused for another 5s");
///
/// let later = t0 + Duration::from_secs(5);
/// let probe = PAYMENTS.try_acquire(later)?; // the break is over: one probe passes
/// assert_eq!(PAYMENTS.state(later), CircuitState::HalfOpen);
/// probe.success(later);
/// assert_eq!(PAYMENTS.state(later), CircuitState::Closed);
/// # Ok::<(), retry_toolkit::CircuitOpen>(())
/// ```
pub struct CircuitBreaker {
    config: BreakerConfig,
    state: AtomicU64,
    origin: Origin,
    /// Calls and failures over the sampling window; used only with a failure ratio.
    window: Window,
    listeners: Listeners,
}

/// A breaker's settings once [validated](BreakerBuilder::validate), ready for
/// [`CircuitBreaker::with_config`]: plain data, so a `static` breaker can be built from them
/// in `const`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BreakerConfig {
    name: &'static str,
    /// Failures in a row that open the circuit; 0: not this rule.
    consecutive: u32,
    /// The failure rate that opens the circuit; 0: not this rule.
    failure_ratio: f64,
    minimum_throughput: u32,
    sampling: Duration,
    break_ms: u64,
    growth: f64,
    max_break_ms: u64,
    probes: u32,
}

/// The settings of a [`CircuitBreaker`], checked by [`validate`](BreakerBuilder::validate) and
/// [`build`](BreakerBuilder::build).
///
/// | setting                | default       | rule                                  |
/// |------------------------|---------------|---------------------------------------|
/// | `name`                 | `"default"`   | shown in messages, events and logs    |
/// | `consecutive_failures` | 5             | `>= 1` (or `without_consecutive_failures`) |
/// | `failure_ratio`        | off           | `> 0` and `<= 1`                      |
/// | `minimum_throughput`   | 10            | `>= 1`                                |
/// | `sampling_window`      | 30 s          | `>= 1 ms`                             |
/// | `break_duration`       | 5 s           | `>= 1 ms`                             |
/// | `break_growth`         | 1 (no growth) | `>= 1`, finite                        |
/// | `max_break_duration`   | none          | `>= break_duration`                   |
/// | `half_open_probes`     | 1             | `>= 1` and `<= 100`                   |
///
/// At least one of the two rules that open the circuit must be on.
#[derive(Clone, Copy, Debug, PartialEq)]
#[must_use = "call `build` to get the breaker"]
pub struct BreakerBuilder {
    name: &'static str,
    consecutive: Option<u32>,
    failure_ratio: Option<f64>,
    minimum_throughput: u32,
    sampling: Duration,
    break_duration: Duration,
    growth: f64,
    max_break: Option<Duration>,
    probes: u32,
}

/// Permission for one call, from [`CircuitBreaker::try_acquire`]: report its outcome with
/// [`success`](Permit::success) or [`failure`](Permit::failure). Dropped without either (the
/// call was cancelled), it reports nothing, and a probe's place is given back.
#[must_use = "report the call's outcome with `success` or `failure`"]
pub struct Permit<'a> {
    breaker: &'a CircuitBreaker,
    ticket: Option<Ticket>,
}

/// What an admitted call holds: whether it was admitted closed or as a probe of the half-open
/// period that began at `since` (ms), so that a late outcome of an older period is ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ticket {
    Closed,
    Probe { since: u64 },
}

impl CircuitBreaker {
    /// A breaker with the defaults: open after 5 failures in a row, for 5 s, then one probe.
    pub const fn new() -> Self {
        // The defaults of `builder`, which pass every rule.
        Self::with_config(BreakerConfig {
            name: "default",
            consecutive: 5,
            failure_ratio: 0.0,
            minimum_throughput: 10,
            sampling: Duration::from_secs(30),
            break_ms: 5_000,
            growth: 1.0,
            max_break_ms: TIME_MAX,
            probes: 1,
        })
    }

    /// Settings to build a breaker from, starting at the defaults.
    pub const fn builder() -> BreakerBuilder {
        BreakerBuilder {
            name: "default",
            consecutive: Some(5),
            failure_ratio: None,
            minimum_throughput: 10,
            sampling: Duration::from_secs(30),
            break_duration: Duration::from_secs(5),
            growth: 1.0,
            max_break: None,
            probes: 1,
        }
    }

    /// A breaker with validated settings: what a `static` breaker is built with.
    pub const fn with_config(config: BreakerConfig) -> Self {
        CircuitBreaker {
            config,
            state: AtomicU64::new(State::Closed { failures: 0 }.encode()),
            origin: Origin::new(),
            window: Window::new(config.sampling),
            listeners: Listeners::new(),
        }
    }

    /// The breaker's settings.
    pub const fn config(&self) -> &BreakerConfig {
        &self.config
    }

    /// The breaker's name, as messages, events and logs show it.
    pub const fn name(&self) -> &'static str {
        self.config.name
    }

    /// The state at `now`. An open circuit whose break is over becomes half-open here (and
    /// reports that change), as it would for the next call.
    pub fn state(&self, now: Instant) -> CircuitState {
        let event = Event::Look { at: self.ms(now) };
        let (from, step) = self.apply(event, &self.judge(0));
        self.report(from, step, now);
        public(step.to.unwrap_or(from))
    }

    /// Asks to make a call at `now`.
    ///
    /// # Errors
    /// [`CircuitOpen`] while the circuit is open or isolated, or half-open with every probe
    /// taken.
    pub fn try_acquire(&self, now: Instant) -> Result<Permit<'_>, CircuitOpen> {
        let ticket = self.admit(|| now)?;
        Ok(Permit {
            breaker: self,
            ticket: Some(ticket),
        })
    }

    /// Opens the circuit by hand, until [`reset`](CircuitBreaker::reset): every call is
    /// refused meanwhile.
    pub fn isolate(&self, now: Instant) {
        let word = self.state.swap(State::Isolated.encode(), Ordering::AcqRel);
        let from = public(State::decode(word));
        if from != CircuitState::Isolated {
            self.changed(from, State::Isolated, ChangeReason::Isolated, now);
        }
    }

    /// Closes the circuit by hand and forgets every failure counted so far.
    pub fn reset(&self, now: Instant) {
        let closed = State::Closed { failures: 0 };
        let word = self.state.swap(closed.encode(), Ordering::AcqRel);
        self.window.reset(self.origin.nanos(now));
        let from = public(State::decode(word));
        if from != CircuitState::Closed {
            self.changed(from, closed, ChangeReason::Reset, now);
        }
    }

    /// Calls `listener` with every later change of state, on the thread of the call that
    /// made the change, after the change.
    pub fn on_state_change<F>(&self, listener: F)
    where
        F: Fn(&StateChange) + Send + Sync + 'static,
    {
        self.listeners.add(Arc::new(listener));
    }

    /// Admits a call or says why not. `now` is read only when the answer depends on it
    /// (never while closed).
    #[inline]
    pub(crate) fn admit(&self, now: impl FnOnce() -> Instant) -> Result<Ticket, CircuitOpen> {
        let word = self.state.load(Ordering::Acquire);
        if let State::Closed { .. } = State::decode(word) {
            return Ok(Ticket::Closed);
        }
        self.admit_slow(word, now())
    }

    #[cold]
    fn admit_slow(&self, word: u64, now: Instant) -> Result<Ticket, CircuitOpen> {
        let event = Event::Admit { at: self.ms(now) };
        let (from, step) = self.apply_from(word, event, &self.judge(0));
        self.report(from, step, now);
        match step.admit {
            Admit::Pass { probe_since: None } => Ok(Ticket::Closed),
            Admit::Pass {
                probe_since: Some(since),
            } => Ok(Ticket::Probe { since }),
            Admit::Renew { since } => {
                tracing::debug!(
                    target: "retry_toolkit::breaker",
                    breaker = self.config.name,
                    "half-open probes did not report; admitting new probes"
                );
                Ok(Ticket::Probe { since })
            }
            Admit::Refuse { state, after_ms } => Err(self.refusal(state, after_ms)),
        }
    }

    /// The call admitted with `ticket` succeeded. `now` is read only when needed.
    #[inline]
    pub(crate) fn succeeded(&self, ticket: Ticket, now: impl FnOnce() -> Instant) {
        match ticket {
            Ticket::Closed => {
                if self.config.failure_ratio > 0.0 {
                    self.window.add(self.origin.nanos(now()), 1, 0);
                }
                let word = self.state.load(Ordering::Acquire);
                if let State::Closed { failures: 0 } = State::decode(word) {
                    return; // the usual case: nothing to write
                }
                self.closed_success(word);
            }
            Ticket::Probe { since } => self.probe_settled(since, true, now()),
        }
    }

    /// A success clears the failures in a row.
    #[cold]
    fn closed_success(&self, word: u64) {
        self.apply_from(word, Event::Success, &self.judge(0));
    }

    /// The call admitted with `ticket` failed at `now`.
    pub(crate) fn failed(&self, ticket: Ticket, now: Instant) {
        let at = match ticket {
            Ticket::Probe { since } => return self.probe_settled(since, false, now),
            Ticket::Closed => {
                let at = self.origin.nanos(now);
                if self.config.failure_ratio > 0.0 {
                    self.window.add(at, 1, 1);
                }
                at
            }
        };
        // Only a closed circuit counts: a late failure of a call admitted before the circuit
        // opened changes nothing.
        let event = Event::Failure {
            at: at / NANOS_PER_MS,
        };
        let (from, step) = self.apply(event, &self.judge(at));
        self.report(from, step, now);
    }

    /// The call admitted with `ticket` ended without an outcome (it was cancelled): a probe
    /// gives its place back.
    pub(crate) fn release(&self, ticket: Ticket) {
        let Ticket::Probe { since } = ticket else {
            return;
        };
        self.apply(Event::Release { since }, &self.judge(0));
    }

    /// Whether the circuit, asked at `now`, will still refuse calls at `at` for sure:
    /// isolated, or open past it. A retry that would wait until `at` and then be refused is
    /// better not waited for.
    pub(crate) fn refuses_until(&self, now: Instant, at: Instant) -> Option<CircuitOpen> {
        match State::decode(self.state.load(Ordering::Acquire)) {
            State::Isolated => Some(self.refusal(CircuitState::Isolated, None)),
            State::Open { until, .. } if self.ms(at) < until => {
                let left = until.saturating_sub(self.ms(now));
                Some(self.refusal(CircuitState::Open, Some(left)))
            }
            _ => None,
        }
    }

    /// A probe of the half-open period that began at `since` ended.
    fn probe_settled(&self, since: u64, success: bool, now: Instant) {
        let event = Event::Probe {
            since,
            success,
            at: self.ms(now),
        };
        let (from, step) = self.apply(event, &self.judge(0));
        if let Some(State::Closed { .. }) = step.to {
            // Counting starts afresh: the failures that opened the circuit are history.
            self.window.reset(self.origin.nanos(now));
        }
        self.report(from, step, now);
    }

    /// [`apply_from`](Self::apply_from) the word as it is now.
    fn apply(&self, event: Event, rules: &Judge<'_>) -> (State, Step) {
        self.apply_from(self.state.load(Ordering::Acquire), event, rules)
    }

    /// The breaker's one compare-and-swap loop: applies `event` to the state `word` holds
    /// by [`State::next`]'s rules and swaps the next state in; if another call swapped first,
    /// applies it again to what that call left. Returns the state the event applied to and
    /// what the rules decided.
    #[inline]
    fn apply_from(&self, mut word: u64, event: Event, rules: &Judge<'_>) -> (State, Step) {
        loop {
            let from = State::decode(word);
            let step = from.next(event, rules);
            let Some(to) = step.to else {
                return (from, step);
            };
            match self.state.compare_exchange(
                word,
                to.encode(),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return (from, step),
                Err(current) => word = current,
            }
        }
    }

    /// Reports the change a step made, if it changed the public state.
    fn report(&self, from: State, step: Step, now: Instant) {
        if let (Some(to), Some(reason)) = (step.to, step.reason) {
            self.changed(public(from), to, reason, now);
        }
    }

    /// The rules as this breaker's settings and failure window give them, for an event at
    /// `at` (ns; read only by the failure rate, so 0 for any event but a closed failure).
    fn judge(&self, at: u64) -> Judge<'_> {
        Judge { breaker: self, at }
    }

    /// Whether the `failures`-th failure in a row, at `at` (ns), opens the circuit.
    fn trips(&self, failures: u32, at: u64) -> Option<ChangeReason> {
        let s = &self.config;
        if s.consecutive > 0 && failures >= s.consecutive {
            return Some(ChangeReason::ConsecutiveFailures { failures });
        }
        if s.failure_ratio > 0.0 {
            let counts = self.window.counts(at);
            if counts.total >= u64::from(s.minimum_throughput)
                && counts.marked as f64 >= s.failure_ratio * counts.total as f64
            {
                return Some(ChangeReason::FailureRate {
                    failures: counts.marked,
                    calls: counts.total,
                });
            }
        }
        None
    }

    /// The break after the `opens`-th open in a row, in milliseconds.
    fn break_ms(&self, opens: u32) -> u64 {
        let s = &self.config;
        if s.growth <= 1.0 || opens <= 1 {
            return s.break_ms.min(s.max_break_ms);
        }
        let grown = s.break_ms as f64 * s.growth.powi(opens as i32 - 1);
        if grown >= s.max_break_ms as f64 {
            s.max_break_ms
        } else {
            grown as u64
        }
    }

    fn ms(&self, now: Instant) -> u64 {
        self.origin.nanos(now) / NANOS_PER_MS
    }

    fn refusal(&self, state: CircuitState, after_ms: Option<u64>) -> CircuitOpen {
        CircuitOpen {
            breaker: self.config.name,
            state,
            retry_after: after_ms.map(Duration::from_millis),
        }
    }

    /// Reports a change that was just made.
    #[cold]
    fn changed(&self, from: CircuitState, to: State, reason: ChangeReason, now: Instant) {
        let open_for = match to {
            State::Open { until, .. } => {
                Some(Duration::from_millis(until.saturating_sub(self.ms(now))))
            }
            _ => None,
        };
        let change = StateChange {
            breaker: self.config.name,
            from,
            to: public(to),
            reason,
            at: now,
            open_for,
        };
        events::trace(&change);
        self.listeners.tell(&change);
    }
}

/// [`Rules`] for [`State::next`]: a breaker's settings, and its failure window at `at` (ns).
struct Judge<'a> {
    breaker: &'a CircuitBreaker,
    at: u64,
}

impl Rules for Judge<'_> {
    fn probes(&self) -> u32 {
        self.breaker.config.probes
    }

    fn break_ms(&self, opens: u32) -> u64 {
        self.breaker.break_ms(opens)
    }

    fn trips(&self, failures: u32) -> Option<ChangeReason> {
        self.breaker.trips(failures, self.at)
    }
}

fn public(state: State) -> CircuitState {
    match state {
        State::Closed { .. } => CircuitState::Closed,
        State::Open { .. } => CircuitState::Open,
        State::HalfOpen { .. } => CircuitState::HalfOpen,
        State::Isolated => CircuitState::Isolated,
    }
}

impl Default for CircuitBreaker {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.config.name)
            .field("state", &State::decode(self.state.load(Ordering::Acquire)))
            .field("listeners", &self.listeners.len())
            .finish_non_exhaustive()
    }
}

impl Permit<'_> {
    /// Whether this call is a probe of a half-open circuit.
    pub fn is_probe(&self) -> bool {
        matches!(self.ticket, Some(Ticket::Probe { .. }))
    }

    /// The call succeeded (or failed in a way that does not count against the dependency).
    pub fn success(mut self, now: Instant) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.succeeded(ticket, || now);
        }
    }

    /// The call failed in a way that counts against the dependency.
    pub fn failure(mut self, now: Instant) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.failed(ticket, now);
        }
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            self.breaker.release(ticket);
        }
    }
}

impl fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("breaker", &self.breaker.config.name)
            .field("probe", &self.is_probe())
            .finish()
    }
}

impl BreakerBuilder {
    /// The name messages, events and logs show.
    pub const fn name(mut self, name: &'static str) -> Self {
        self.name = name;
        self
    }

    /// Opens the circuit after `failures` failures in a row (default 5).
    pub const fn consecutive_failures(mut self, failures: u32) -> Self {
        self.consecutive = Some(failures);
        self
    }

    /// Turns off the rule of failures in a row: only the failure rate opens the circuit.
    pub const fn without_consecutive_failures(mut self) -> Self {
        self.consecutive = None;
        self
    }

    /// Opens the circuit when at least this share of the calls in the sampling window failed
    /// (and the window holds at least `minimum_throughput` calls). Off by default.
    pub const fn failure_ratio(mut self, ratio: f64) -> Self {
        self.failure_ratio = Some(ratio);
        self
    }

    /// The fewest calls in the sampling window for the failure rate to count (default 10).
    pub const fn minimum_throughput(mut self, calls: u32) -> Self {
        self.minimum_throughput = calls;
        self
    }

    /// How far back the failure rate looks (default 30 s).
    pub const fn sampling_window(mut self, window: Duration) -> Self {
        self.sampling = window;
        self
    }

    /// How long the circuit stays open before it lets probes through (default 5 s).
    pub const fn break_duration(mut self, duration: Duration) -> Self {
        self.break_duration = duration;
        self
    }

    /// Multiplies the break by `factor` for each open in a row (a probe that failed), until
    /// the circuit closes again. Default 1: every break as long.
    pub const fn break_growth(mut self, factor: f64) -> Self {
        self.growth = factor;
        self
    }

    /// The longest break a growing one reaches.
    pub const fn max_break_duration(mut self, duration: Duration) -> Self {
        self.max_break = Some(duration);
        self
    }

    /// How many probes a half-open circuit admits, and how many must succeed for it to close
    /// (default 1).
    pub const fn half_open_probes(mut self, probes: u32) -> Self {
        self.probes = probes;
        self
    }

    /// Checks the settings and builds the breaker.
    ///
    /// # Errors
    /// The first [`BreakerError`] the settings break, in the order of the builder's table.
    pub fn build(self) -> Result<CircuitBreaker, BreakerError> {
        self.validate().map(CircuitBreaker::with_config)
    }

    /// Checks the settings. `const`, so that a `static` breaker's settings are checked when
    /// it compiles: see [`CircuitBreaker::with_config`].
    ///
    /// # Errors
    /// The first [`BreakerError`] the settings break, in the order of the builder's table.
    pub const fn validate(self) -> Result<BreakerConfig, BreakerError> {
        let consecutive = match self.consecutive {
            Some(0) => return Err(BreakerError::ConsecutiveFailuresZero),
            Some(n) => n,
            None => 0,
        };
        let failure_ratio = match self.failure_ratio {
            // Written so that NaN fails too.
            Some(r) if !(r > 0.0 && r <= 1.0) => return Err(BreakerError::FailureRatioOutOfRange),
            Some(r) => r,
            None => 0.0,
        };
        if self.minimum_throughput == 0 {
            return Err(BreakerError::MinimumThroughputZero);
        }
        if self.sampling.as_nanos() < NANOS_PER_MS as u128 {
            return Err(BreakerError::SamplingWindowTooShort);
        }
        if self.break_duration.as_nanos() < NANOS_PER_MS as u128 {
            return Err(BreakerError::BreakDurationTooShort);
        }
        if !(self.growth >= 1.0 && self.growth < f64::INFINITY) {
            return Err(BreakerError::BreakGrowthOutOfRange);
        }
        let max_break_ms = match self.max_break {
            Some(max) if max.as_nanos() < self.break_duration.as_nanos() => {
                return Err(BreakerError::MaxBreakBelowBreak);
            }
            Some(max) => ceil_ms(max),
            None => TIME_MAX,
        };
        if self.probes == 0 || self.probes > 100 {
            return Err(BreakerError::HalfOpenProbesOutOfRange);
        }
        if consecutive == 0 && self.failure_ratio.is_none() {
            return Err(BreakerError::NoTrigger);
        }
        Ok(BreakerConfig {
            name: self.name,
            consecutive,
            failure_ratio,
            minimum_throughput: self.minimum_throughput,
            sampling: self.sampling,
            break_ms: ceil_ms(self.break_duration),
            growth: self.growth,
            max_break_ms,
            probes: self.probes,
        })
    }
}

impl BreakerConfig {
    /// The breaker's name.
    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// The first break after the circuit opens.
    pub const fn break_duration(&self) -> Duration {
        Duration::from_millis(self.break_ms)
    }

    /// How many probes a half-open circuit admits.
    pub const fn half_open_probes(&self) -> u32 {
        self.probes
    }
}

/// `d` in whole milliseconds, rounded up (a break is never shorter than asked), at most
/// what the state word holds.
const fn ceil_ms(d: Duration) -> u64 {
    let ms = nanos(d).div_ceil(NANOS_PER_MS);
    if ms > TIME_MAX { TIME_MAX } else { ms }
}
