//! A load simulator: many callers of one dependency that is down, or overloaded, and how much
//! traffic each way of retrying sends it.
//!
//! Retrying is a bet that the next attempt will succeed. When the dependency is down for
//! good, every retry is wasted load; when it is overloaded, every retry makes it more so.
//! This simulator measures the bet. `clients` callers in one service each start a call every
//! `interval` (open loop: a new call does not wait for the previous one), for
//! `calls_per_client` calls. Every call is a real [`Retry`](retry_toolkit::Retry) loop on one
//! [`MockClock`], set up one of five ways ([`Setup`]): no retry, retry, retry with a shared
//! [`RetryBudget`], retry through a shared [`CircuitBreaker`], or both. One seed fixes
//! everything (start times, jitter, which calls the dependency fails), so a run is
//! reproducible, and virtual time makes a minute of traffic take a fraction of a second.
//!
//! The dependency is one of two ([`Dependency`]):
//! - **down**: every call fails, after the dependency's latency;
//! - **overloaded**: it has a capacity (calls per second); a call succeeds with probability
//!   `min(1, (capacity / load)²)`, where `load` is the calls it received in the last second.
//!   Past its capacity it does less useful work the more it is sent — `capacity² / load`
//!   successes per second — as a service thrashing on queues, locks or garbage collection
//!   does.
//!
//! The number that matters is **load**: attempts the dependency received, relative to the
//! calls made (which is what it receives without retries).
//!
//! ```
//! use retry_testkit::sim::outage::{Dependency, Outage, Setup};
//!
//! use retry_toolkit::RetryBudget;
//!
//! let budget = RetryBudget::builder().ratio(0.2).min_per_sec(0).validate()?;
//! let sim = Outage::new(Dependency::Down)
//!     .with_clients(10)
//!     .with_calls_per_client(20)
//!     .with_budget(budget);
//! let retry = sim.run(Setup::Retry)?;
//! let budgeted = sim.run(Setup::RetryBudget)?;
//! assert_eq!(retry.load(), 3.0); // three attempts per call, every one wasted
//! assert!(budgeted.load() <= 1.2); // retries add at most a fifth
//! assert_eq!(budgeted, sim.run(Setup::RetryBudget)?); // same seed, same run
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::VecDeque;
use std::fmt::{self, Write as _};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use retry_toolkit::{
    BreakerConfig, BudgetConfig, CircuitBreaker, Jitter, JitterRng, RetryBudget, RetryError,
    RetryOptions, RetryPolicy,
};

use super::{SimError, mix};
use crate::clock::MockClock;
use crate::drive::join_all;
use crate::svg::{self, Anchor, Svg};

/// The dependency every call goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dependency {
    /// Every call fails.
    Down,
    /// Serves up to `capacity` calls per second; above that, a call succeeds with probability
    /// `(capacity / load)²`, `load` being the calls received in the last second.
    Overloaded {
        /// Calls per second it serves without failing.
        capacity: u32,
    },
}

impl Dependency {
    /// How tables and charts name it.
    pub fn describe(self) -> String {
        match self {
            Dependency::Down => "down for good".to_owned(),
            Dependency::Overloaded { capacity } => {
                format!("overloaded (capacity {capacity} calls/s)")
            }
        }
    }
}

/// How every call of a run retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Setup {
    /// One attempt per call.
    NoRetry,
    /// The retry loop alone: up to `max_attempts` attempts, full jitter.
    Retry,
    /// The same loop, spending from one [`RetryBudget`] shared by every call.
    RetryBudget,
    /// The same loop, every attempt through one [`CircuitBreaker`] shared by every call.
    RetryBreaker,
    /// The loop with both.
    RetryBudgetBreaker,
}

impl Setup {
    /// Every setup, in the order tables list them.
    pub const ALL: [Setup; 5] = [
        Setup::NoRetry,
        Setup::Retry,
        Setup::RetryBudget,
        Setup::RetryBreaker,
        Setup::RetryBudgetBreaker,
    ];

    /// The name tables and charts use.
    pub const fn name(self) -> &'static str {
        match self {
            Setup::NoRetry => "no retry",
            Setup::Retry => "retry",
            Setup::RetryBudget => "retry + budget",
            Setup::RetryBreaker => "retry + breaker",
            Setup::RetryBudgetBreaker => "retry + budget + breaker",
        }
    }

    const fn budget(self) -> bool {
        matches!(self, Setup::RetryBudget | Setup::RetryBudgetBreaker)
    }

    const fn breaker(self) -> bool {
        matches!(self, Setup::RetryBreaker | Setup::RetryBudgetBreaker)
    }

    const fn color(self) -> &'static str {
        match self {
            Setup::NoRetry => "#9e9e9e",
            Setup::Retry => "#c62828",
            Setup::RetryBudget => "#ef6c00",
            Setup::RetryBreaker => "#1565c0",
            Setup::RetryBudgetBreaker => "#2e7d32",
        }
    }
}

impl fmt::Display for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The experiment's settings.
///
/// Defaults: 100 clients, 60 calls each, one a second (100 calls per second for a minute),
/// 20 ms latency; 3 attempts with full jitter from 100 ms up to 3 s; the budget's defaults
/// (a ratio of 0.2, 10 retries per second, a 10 s window); a breaker that opens after 5
/// failures in a row or half the calls of 10 s (at least 20), for 5 s, with one probe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Outage {
    /// The dependency.
    pub dependency: Dependency,
    /// Callers.
    pub clients: usize,
    /// Calls each caller makes.
    pub calls_per_client: u32,
    /// Time between one caller's calls.
    pub interval: Duration,
    /// How long the dependency takes to answer, success or failure.
    pub latency: Duration,
    /// Attempts per call of the retrying setups.
    pub max_attempts: u32,
    /// The budget of the budget setups, shared by every call.
    pub budget: BudgetConfig,
    /// The breaker of the breaker setups, shared by every call.
    pub breaker: BreakerConfig,
    /// Seeds start times, jitter and the dependency's failures.
    pub seed: u64,
}

/// One simulated run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LoadRun {
    /// How the calls retried.
    pub setup: Setup,
    /// The dependency.
    pub dependency: Dependency,
    /// Calls made.
    pub calls: u64,
    /// Attempts the dependency received.
    pub attempts: u64,
    /// Calls that succeeded.
    pub succeeded: u64,
    /// Calls the breaker refused before their first attempt.
    pub refused: u64,
}

impl LoadRun {
    /// Attempts per call: the load on the dependency relative to calling it without retries.
    pub fn load(&self) -> f64 {
        self.attempts as f64 / self.calls.max(1) as f64
    }

    /// The share of calls that succeeded.
    pub fn success(&self) -> f64 {
        self.succeeded as f64 / self.calls.max(1) as f64
    }
}

impl Outage {
    /// The default experiment (see [`Outage`]) against `dependency`, seed 0.
    pub fn new(dependency: Dependency) -> Self {
        Outage {
            dependency,
            clients: 100,
            calls_per_client: 60,
            interval: Duration::from_secs(1),
            latency: Duration::from_millis(20),
            max_attempts: 3,
            budget: *RetryBudget::new().config(),
            breaker: *outage_breaker().config(),
            seed: 0,
        }
    }

    /// The same experiment with another budget.
    pub const fn with_budget(mut self, budget: BudgetConfig) -> Self {
        self.budget = budget;
        self
    }

    /// The same experiment with another breaker.
    pub const fn with_breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// The same experiment with `clients` callers.
    pub const fn with_clients(mut self, clients: usize) -> Self {
        self.clients = clients;
        self
    }

    /// The same experiment with `calls` calls per caller.
    pub const fn with_calls_per_client(mut self, calls: u32) -> Self {
        self.calls_per_client = calls;
        self
    }

    /// The same experiment with another seed.
    pub const fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Runs the experiment once, every call set up as `setup`.
    ///
    /// # Errors
    /// [`SimError::Options`] when `max_attempts` is zero; [`SimError::Stalled`] if the
    /// simulation stops making progress.
    pub fn run(&self, setup: Setup) -> Result<LoadRun, SimError> {
        let clock = MockClock::new();
        let attempts = if setup == Setup::NoRetry {
            1
        } else {
            self.max_attempts
        };
        let policy = RetryOptions::new()
            .with_max_attempts(attempts)
            .with_jitter(Jitter::Full)
            .resolve()?
            .with_clock(clock.clone());
        let budget = setup
            .budget()
            .then(|| Arc::new(RetryBudget::with_config(self.budget)));
        let breaker = setup
            .breaker()
            .then(|| Arc::new(CircuitBreaker::with_config(self.breaker)));
        let dependency = Arc::new(Mutex::new(Server::new(self.dependency, self.seed)));
        let mut starts = JitterRng::seeded(mix(self.seed, u64::MAX));
        let mut calls: Vec<Call> = Vec::new();
        for client in 0..self.clients {
            // Each caller's phase within the interval, then one call per interval.
            let phase = starts.below(self.interval);
            for i in 0..self.calls_per_client {
                let at = phase + self.interval * i;
                let seed = mix(self.seed, (client as u64) << 32 | u64::from(i));
                calls.push(call(
                    &clock,
                    at,
                    CallSetup {
                        policy: policy.clone(),
                        seed,
                        latency: self.latency,
                        dependency: Arc::clone(&dependency),
                        budget: budget.clone(),
                        breaker: breaker.clone(),
                    },
                ));
            }
        }
        let outcomes = clock.block_on(join_all(calls))?;
        let server = dependency.lock().unwrap_or_else(PoisonError::into_inner);
        Ok(LoadRun {
            setup,
            dependency: self.dependency,
            calls: outcomes.len() as u64,
            attempts: server.received,
            succeeded: outcomes.iter().filter(|o| **o == Ended::Succeeded).count() as u64,
            refused: outcomes.iter().filter(|o| **o == Ended::Refused).count() as u64,
        })
    }

    /// Runs every [`Setup`] once.
    ///
    /// # Errors
    /// As [`run`](Outage::run).
    pub fn run_all(&self) -> Result<Vec<LoadRun>, SimError> {
        Setup::ALL
            .into_iter()
            .map(|setup| self.run(setup))
            .collect()
    }
}

/// The default breaker of the breaker setups.
fn outage_breaker() -> CircuitBreaker {
    CircuitBreaker::builder()
        .name("dependency")
        .consecutive_failures(5)
        .failure_ratio(0.5)
        .minimum_throughput(20)
        .sampling_window(Duration::from_secs(10))
        .break_duration(Duration::from_secs(5))
        .build()
        .unwrap_or_default()
}

/// The dependency's side: what it received, and whether each call fails.
struct Server {
    kind: Dependency,
    rng: JitterRng,
    /// When the calls of the last second arrived.
    recent: VecDeque<Duration>,
    received: u64,
}

impl Server {
    fn new(kind: Dependency, seed: u64) -> Self {
        Server {
            kind,
            rng: JitterRng::seeded(mix(seed, u64::MAX - 1)),
            recent: VecDeque::new(),
            received: 0,
        }
    }

    /// A call arrives at `now`: whether it will succeed.
    fn receive(&mut self, now: Duration) -> bool {
        self.received += 1;
        let capacity = match self.kind {
            Dependency::Down => return false,
            Dependency::Overloaded { capacity } => f64::from(capacity),
        };
        while self
            .recent
            .front()
            .is_some_and(|t| *t + Duration::from_secs(1) <= now)
        {
            self.recent.pop_front();
        }
        self.recent.push_back(now);
        let load = self.recent.len() as f64;
        let p = (capacity / load).min(1.0).powi(2);
        let draw = self.rng.below(Duration::from_secs(1)).as_secs_f64();
        draw < p
    }
}

/// How a call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ended {
    Succeeded,
    Failed,
    Refused,
}

/// What one call needs.
struct CallSetup {
    policy: RetryPolicy<MockClock>,
    seed: u64,
    latency: Duration,
    dependency: Arc<Mutex<Server>>,
    budget: Option<Arc<RetryBudget>>,
    breaker: Option<Arc<CircuitBreaker>>,
}

/// The dependency did not serve the call.
#[derive(Clone, Copy, Debug)]
struct Unavailable;

type Call = Pin<Box<dyn Future<Output = Ended>>>;

/// One call, starting at `at`: a retry loop set up as `setup` says.
fn call(clock: &MockClock, at: Duration, setup: CallSetup) -> Call {
    let clock = clock.clone();
    Box::pin(async move {
        clock.sleep(at).await;
        let (server, latency, op_clock) = (Arc::clone(&setup.dependency), setup.latency, clock);
        let op = move |_| {
            let (server, clock) = (Arc::clone(&server), op_clock.clone());
            async move {
                let now = clock.elapsed();
                let served = server
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .receive(now);
                clock.sleep(latency).await;
                if served { Ok(()) } else { Err(Unavailable) }
            }
        };
        let retry = setup.policy.retry(op).seed(setup.seed);
        let outcome = match (setup.budget, setup.breaker) {
            (None, None) => retry.await.map_err(RetryError::Operation),
            (Some(budget), None) => retry.budget(budget).await,
            (None, Some(breaker)) => retry.breaker(breaker).await,
            (Some(budget), Some(breaker)) => retry.budget(budget).breaker(breaker).await,
        };
        match outcome {
            Ok(()) => Ended::Succeeded,
            Err(RetryError::CircuitOpen { attempts: 0, .. }) => Ended::Refused,
            Err(_) => Ended::Failed,
        }
    })
}

/// A Markdown table of runs: setup, attempts sent, load relative to no retry, calls that
/// succeeded.
///
/// ```
/// use retry_testkit::sim::outage::{markdown_table, Dependency, LoadRun, Setup};
///
/// let run = LoadRun { setup: Setup::Retry, dependency: Dependency::Down, calls: 100, attempts: 300, succeeded: 0, refused: 0 };
/// assert_eq!(markdown_table(&[run]), "\
/// | setup | attempts sent | load vs no retry | calls that succeeded |
/// |---|---:|---:|---:|
/// | retry | 300 | 3.00× | 0.0 % |
/// ");
/// ```
pub fn markdown_table(runs: &[LoadRun]) -> String {
    let mut out = String::from(
        "| setup | attempts sent | load vs no retry | calls that succeeded |\n|---|---:|---:|---:|\n",
    );
    for run in runs {
        let _ = writeln!(
            out,
            "| {} | {} | {}× | {:.1} % |",
            run.setup,
            run.attempts,
            Load(run.load()),
            100.0 * run.success()
        );
    }
    out
}

/// A load factor: two decimals, three below a tenth (so a breaker's trickle is not `0.00`).
struct Load(f64);

impl fmt::Display for Load {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 < 0.1 {
            write!(f, "{:.3}", self.0)
        } else {
            write!(f, "{:.2}", self.0)
        }
    }
}

/// An SVG bar chart: for each dependency (a panel), the load each setup sends it relative to
/// no retry, with the share of calls that succeeded written on each bar.
pub fn chart_svg(runs: &[LoadRun]) -> String {
    let mut dependencies: Vec<Dependency> = Vec::new();
    for run in runs {
        if !dependencies.contains(&run.dependency) {
            dependencies.push(run.dependency);
        }
    }
    let panels = dependencies.len().max(1) as f64;
    let (panel_w, panel_h, top, left, gap) = (330.0, 240.0, 44.0, 60.0, 70.0);
    let width = left + panels * panel_w + (panels - 1.0) * gap + 20.0;
    let mut svg = Svg::new(width, top + panel_h + 80.0);
    let max_load = runs.iter().map(LoadRun::load).fold(1.0, f64::max);
    let ticks = svg::ticks(max_load, 4);
    let top_y = ticks.last().copied().unwrap_or(max_load).max(max_load);
    for (p, dependency) in dependencies.iter().enumerate() {
        let x0 = left + p as f64 * (panel_w + gap);
        let y = |load: f64| top + panel_h - load / top_y * panel_h;
        svg.text(
            (x0 + panel_w / 2.0, top - 16.0),
            Anchor::Middle,
            13,
            &format!("dependency {}", dependency.describe()),
        );
        for &tick in &ticks {
            svg.line(
                (x0 - 4.0, y(tick)),
                (x0 + panel_w, y(tick)),
                "#e0e0e0",
                false,
            );
            svg.text(
                (x0 - 6.0, y(tick) + 4.0),
                Anchor::End,
                10,
                &format!("{tick}×"),
            );
        }
        // The no-retry baseline.
        svg.line((x0, y(1.0)), (x0 + panel_w, y(1.0)), "#616161", true);
        svg.line(
            (x0, top + panel_h),
            (x0 + panel_w, top + panel_h),
            "#333333",
            false,
        );
        svg.line((x0, top), (x0, top + panel_h), "#333333", false);
        let bars: Vec<&LoadRun> = runs
            .iter()
            .filter(|r| r.dependency == *dependency)
            .collect();
        let slot = panel_w / bars.len().max(1) as f64;
        for (i, run) in bars.iter().enumerate() {
            let (bar_w, load) = (slot * 0.7, run.load());
            let x = x0 + slot * i as f64 + (slot - bar_w) / 2.0;
            let label = format!(
                "{}: load {}× of no retry, {:.1} % of calls succeeded",
                run.setup,
                Load(load),
                100.0 * run.success()
            );
            svg.rect(
                x,
                y(load),
                bar_w,
                top + panel_h - y(load),
                run.setup.color(),
                &label,
            );
            svg.text(
                (x + bar_w / 2.0, y(load) - 4.0),
                Anchor::Middle,
                10,
                &format!("{}×", Load(load)),
            );
            svg.text(
                (x + bar_w / 2.0, top + panel_h + 14.0),
                Anchor::Middle,
                9,
                &format!("{:.0} % ok", 100.0 * run.success()),
            );
        }
        svg.text((x0 - 44.0, top + panel_h / 2.0), Anchor::Middle, 11, "load");
    }
    // One legend row, centred; about 7 px per character at font size 11.
    let legend_y = top + panel_h + 46.0;
    let item_width = |s: Setup| 30.0 + 7.0 * s.name().len() as f64;
    let total: f64 = Setup::ALL.into_iter().map(item_width).sum();
    let mut x = (width - total) / 2.0;
    for setup in Setup::ALL {
        svg.rect(x, legend_y - 9.0, 14.0, 10.0, setup.color(), setup.name());
        svg.text((x + 18.0, legend_y), Anchor::Start, 11, setup.name());
        x += item_width(setup);
    }
    svg.finish()
}
