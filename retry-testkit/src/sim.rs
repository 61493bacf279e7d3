//! A contention simulator: many clients, one row, optimistic concurrency, and the retry
//! strategy deciding how much work the crowd wastes.
//!
//! This repeats the experiment of the AWS Architecture Blog post "Exponential Backoff And
//! Jitter" on our own retry loop. `N` clients each want to update one row once. A client
//! reads the row's version, then writes back conditionally on that version; if another
//! client wrote in between, the write fails and the client retries — read, then write
//! again — after a wait chosen by its strategy. Every message crosses a network whose delay
//! is about normal (mean 10 ms, standard deviation 2 ms by default), so clients that retry
//! at the same moment collide again.
//!
//! Each client is a real [`Retry`](retry_toolkit::Retry) loop running on one [`MockClock`]:
//! the delays come from retry-toolkit's own jitter and backoff code, virtual time makes a run
//! of thousands of calls take milliseconds, and one seed fixes everything (network delays
//! and jitter), so a run is reproducible.
//!
//! Two numbers come out, as in the blog: **calls** (conditional writes sent — the work the
//! row's server does) and **time** (virtual time until the last client is done).
//!
//! [`outage`] is its sibling for a dependency that is down or overloaded: how much load
//! retries add, and how much a retry budget and a circuit breaker take away.
//!
//! ```
//! use retry_testkit::sim::{Contention, Strategy};
//!
//! let sim = Contention::new(10).with_seed(1);
//! let none = sim.run(Strategy::NoBackoff)?;
//! let full = sim.run(Strategy::FullJitter)?;
//! assert!(none.calls >= 10 && full.calls >= 10); // every client wrote at least once
//! assert_eq!(full, sim.run(Strategy::FullJitter)?); // same seed, same run
//! # Ok::<(), retry_testkit::sim::SimError>(())
//! ```

pub mod outage;

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use retry_toolkit::{Constant, Jitter, JitterRng, OptionsError, RetryOptions, RetryPolicy};

use crate::clock::{MockClock, Stalled};
use crate::drive::join_all;
use crate::svg::{self, Anchor, Svg};

/// How a simulated client waits between attempts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Retry at once.
    NoBackoff,
    /// Wait exactly `cap(k) = min(2^k · base, max)`: [`Jitter::None`].
    Exponential,
    /// Uniform in `[0, cap(k))`: [`Jitter::Full`].
    FullJitter,
    /// Uniform in `[cap(k)/2, cap(k))`: [`Jitter::Equal`].
    EqualJitter,
    /// `min(max, uniform[base, 3 · previous))`: [`Jitter::Decorrelated`].
    Decorrelated,
}

impl Strategy {
    /// Every strategy, in the order tables list them.
    pub const ALL: [Strategy; 5] = [
        Strategy::NoBackoff,
        Strategy::Exponential,
        Strategy::FullJitter,
        Strategy::EqualJitter,
        Strategy::Decorrelated,
    ];

    /// The name tables and charts use.
    pub const fn name(self) -> &'static str {
        match self {
            Strategy::NoBackoff => "no backoff",
            Strategy::Exponential => "exponential, no jitter",
            Strategy::FullJitter => "full jitter",
            Strategy::EqualJitter => "equal jitter",
            Strategy::Decorrelated => "decorrelated jitter",
        }
    }

    /// The retry-toolkit jitter behind the strategy; `None` for [`Strategy::NoBackoff`], which
    /// replaces the schedule with a zero [`Constant`].
    pub const fn jitter(self) -> Option<Jitter> {
        match self {
            Strategy::NoBackoff => None,
            Strategy::Exponential => Some(Jitter::None),
            Strategy::FullJitter => Some(Jitter::Full),
            Strategy::EqualJitter => Some(Jitter::Equal),
            Strategy::Decorrelated => Some(Jitter::Decorrelated),
        }
    }

    const fn color(self) -> &'static str {
        match self {
            Strategy::NoBackoff => "#6a1b9a",
            Strategy::Exponential => "#c62828",
            Strategy::FullJitter => "#2e7d32",
            Strategy::EqualJitter => "#ef6c00",
            Strategy::Decorrelated => "#1565c0",
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a simulation could not run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The base and maximum delays break a retry option rule.
    #[error("invalid simulation delays: {0}")]
    Options(#[from] OptionsError),
    /// The simulation stopped making progress (a bug in the simulator or the loop).
    #[error(transparent)]
    Stalled(#[from] Stalled),
}

/// The experiment's settings. Defaults follow the blog: base 5 ms, cap 2 s, network delay
/// 10 ms ± 2 ms.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Contention {
    /// Clients competing for the row.
    pub clients: usize,
    /// The backoff base, in milliseconds.
    pub base_delay_ms: u64,
    /// The backoff cap, in milliseconds.
    pub max_delay_ms: u64,
    /// Mean one-way network delay.
    pub latency_mean: Duration,
    /// Standard deviation of the one-way network delay.
    pub latency_sd: Duration,
    /// Seeds the network and every client's jitter.
    pub seed: u64,
}

/// One simulated run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    /// The strategy every client used.
    pub strategy: Strategy,
    /// Clients in the run.
    pub clients: usize,
    /// Conditional writes sent (successful or not): the work.
    pub calls: u64,
    /// Virtual time until the last client succeeded.
    pub time: Duration,
}

/// The mean of several runs with different seeds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// The strategy every client used.
    pub strategy: Strategy,
    /// Clients in each run.
    pub clients: usize,
    /// Runs averaged.
    pub runs: u32,
    /// Mean conditional writes per run.
    pub calls: f64,
    /// Mean time to finish, in milliseconds.
    pub time_ms: f64,
}

impl Contention {
    /// `clients` clients with the blog's settings and seed 0.
    pub const fn new(clients: usize) -> Self {
        Contention {
            clients,
            base_delay_ms: 5,
            max_delay_ms: 2_000,
            latency_mean: Duration::from_millis(10),
            latency_sd: Duration::from_millis(2),
            seed: 0,
        }
    }

    /// The same experiment with another seed.
    pub const fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Runs the experiment once, every client using `strategy`.
    ///
    /// # Errors
    /// [`SimError::Options`] when the delays break an option rule (zero, or base above max).
    pub fn run(&self, strategy: Strategy) -> Result<Run, SimError> {
        let clock = MockClock::new();
        let policy = RetryOptions::new()
            .with_max_attempts(u32::MAX)
            .with_base_delay_ms(self.base_delay_ms)
            .with_max_delay_ms(self.max_delay_ms)
            .with_jitter(strategy.jitter().unwrap_or_default())
            .resolve()?
            .with_clock(clock.clone());
        let row = Arc::new(Mutex::new(RowState::default()));
        let clients = (0..self.clients).map(|i| {
            let i = i as u64;
            let network = Network {
                clock: clock.clone(),
                rng: Arc::new(Mutex::new(JitterRng::seeded(mix(self.seed, 2 * i + 1)))),
                mean: self.latency_mean,
                sd: self.latency_sd,
            };
            client(
                policy.clone(),
                strategy,
                mix(self.seed, 2 * i),
                Arc::clone(&row),
                network,
            )
        });
        clock.block_on(join_all(clients))?;
        let calls = row.lock().unwrap_or_else(PoisonError::into_inner).writes;
        Ok(Run {
            strategy,
            clients: self.clients,
            calls,
            time: clock.elapsed(),
        })
    }

    /// Runs the experiment `runs` times (seeds `seed`, `seed + 1`, …) and averages.
    ///
    /// # Errors
    /// As [`run`](Contention::run).
    pub fn average(&self, strategy: Strategy, runs: u32) -> Result<Summary, SimError> {
        let runs = runs.max(1);
        let (mut calls, mut time_ms) = (0.0, 0.0);
        for r in 0..runs {
            let run = self
                .with_seed(self.seed.wrapping_add(u64::from(r)))
                .run(strategy)?;
            calls += run.calls as f64;
            time_ms += run.time.as_secs_f64() * 1e3;
        }
        Ok(Summary {
            strategy,
            clients: self.clients,
            runs,
            calls: calls / f64::from(runs),
            time_ms: time_ms / f64::from(runs),
        })
    }
}

/// The contended row: a version number, and how many conditional writes it received.
#[derive(Default)]
struct RowState {
    version: u64,
    writes: u64,
}

/// Network delays for one client, drawn on the simulation's clock.
struct Network {
    clock: MockClock,
    rng: Arc<Mutex<JitterRng>>,
    mean: Duration,
    sd: Duration,
}

impl Network {
    /// One message's trip: `|mean + sd · z|` with `z` about standard normal (the sum of
    /// twelve uniform draws, less six — integer arithmetic only, so runs are reproducible
    /// on every platform).
    async fn trip(&self) {
        let delay = {
            let mut rng = self.rng.lock().unwrap_or_else(PoisonError::into_inner);
            let sum: i128 = (0..12).map(|_| rng.below(self.sd).as_nanos() as i128).sum();
            let nanos = self.mean.as_nanos() as i128 + sum - 6 * self.sd.as_nanos() as i128;
            Duration::from_nanos(u64::try_from(nanos.unsigned_abs()).unwrap_or(u64::MAX))
        };
        self.clock.sleep(delay).await;
    }
}

/// A write that lost the race: another client changed the row after this one read it.
#[derive(Clone, Copy, Debug)]
struct Conflict;

/// One client: read the version, write conditionally on it, retry on conflict.
async fn client(
    policy: RetryPolicy<MockClock>,
    strategy: Strategy,
    seed: u64,
    row: Arc<Mutex<RowState>>,
    network: Network,
) {
    let network = Arc::new(network);
    let attempt = |_| {
        let (row, network) = (Arc::clone(&row), Arc::clone(&network));
        async move {
            network.trip().await; // read request
            let seen = row.lock().unwrap_or_else(PoisonError::into_inner).version;
            network.trip().await; // read response
            network.trip().await; // conditional write request
            let written = {
                let mut row = row.lock().unwrap_or_else(PoisonError::into_inner);
                row.writes += 1;
                let fresh = row.version == seen;
                if fresh {
                    row.version += 1;
                }
                fresh
            };
            network.trip().await; // write response
            if written { Ok(()) } else { Err(Conflict) }
        }
    };
    let retry = policy.retry(attempt).seed(seed);
    // With u32::MAX attempts a client only stops once its write went through.
    let _ = match strategy {
        Strategy::NoBackoff => retry.backoff(Constant(Duration::ZERO)).await,
        _ => retry.await,
    };
}

/// SplitMix64: independent-looking seeds from one seed and a stream number.
fn mix(seed: u64, stream: u64) -> u64 {
    let mut z = seed
        .wrapping_add(stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
        .wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A Markdown table of summaries: strategy, calls, time to finish.
///
/// ```
/// use retry_testkit::sim::{markdown_table, Strategy, Summary};
///
/// let row = Summary { strategy: Strategy::FullJitter, clients: 10, runs: 1, calls: 24.0, time_ms: 151.25 };
/// assert_eq!(markdown_table(&[row]), "\
/// | strategy | clients | calls (work) | time to finish |
/// |---|---:|---:|---:|
/// | full jitter | 10 | 24 | 151 ms |
/// ");
/// ```
pub fn markdown_table(summaries: &[Summary]) -> String {
    let mut out = String::from(
        "| strategy | clients | calls (work) | time to finish |\n|---|---:|---:|---:|\n",
    );
    for s in summaries {
        let _ = writeln!(
            out,
            "| {} | {} | {:.0} | {:.0} ms |",
            s.strategy, s.clients, s.calls, s.time_ms
        );
    }
    out
}

/// Reads one number out of a summary, for a chart panel.
type Metric = fn(&Summary) -> f64;

/// An SVG chart of summaries over client counts: calls (left) and time to finish (right),
/// one line per strategy.
pub fn chart_svg(summaries: &[Summary]) -> String {
    let (panel_w, panel_h, top, left, gap) = (360.0, 240.0, 40.0, 60.0, 90.0);
    let mut svg = Svg::new(left + 2.0 * panel_w + gap + 20.0, top + panel_h + 110.0);
    let max_clients = summaries
        .iter()
        .map(|s| s.clients)
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let panels: [(&str, Metric); 2] = [
        ("calls (work)", |s| s.calls),
        ("time to finish (ms)", |s| s.time_ms),
    ];
    for (p, (title, value)) in panels.into_iter().enumerate() {
        let x0 = left + p as f64 * (panel_w + gap);
        let max_y = summaries.iter().map(value).fold(0.0, f64::max).max(1.0);
        let ticks = svg::ticks(max_y, 5);
        let top_y = ticks.last().copied().unwrap_or(max_y).max(max_y);
        let at = |clients: usize, y: f64| {
            (
                x0 + clients as f64 / max_clients * panel_w,
                top + panel_h - y / top_y * panel_h,
            )
        };
        svg.text((x0 + panel_w / 2.0, top - 14.0), Anchor::Middle, 13, title);
        svg.line(
            (x0, top + panel_h),
            (x0 + panel_w, top + panel_h),
            "#333333",
            false,
        );
        svg.line((x0, top), (x0, top + panel_h), "#333333", false);
        for tick in ticks {
            let (_, y) = at(0, tick);
            svg.line((x0 - 4.0, y), (x0 + panel_w, y), "#e0e0e0", false);
            svg.text((x0 - 6.0, y + 4.0), Anchor::End, 10, &format!("{tick}"));
        }
        for tick in svg::ticks(max_clients, 5) {
            let (x, _) = at(tick as usize, 0.0);
            svg.text(
                (x, top + panel_h + 16.0),
                Anchor::Middle,
                10,
                &format!("{tick}"),
            );
        }
        svg.text(
            (x0 + panel_w / 2.0, top + panel_h + 34.0),
            Anchor::Middle,
            11,
            "clients",
        );
        for strategy in Strategy::ALL {
            let points: Vec<(f64, f64)> = summaries
                .iter()
                .filter(|s| s.strategy == strategy)
                .map(|s| at(s.clients, value(s)))
                .collect();
            svg.polyline(&points, strategy.color(), strategy.name());
            for (point, s) in points
                .iter()
                .zip(summaries.iter().filter(|s| s.strategy == strategy))
            {
                let label = format!("{}: {} clients, {:.0}", strategy, s.clients, value(s));
                svg.circle(*point, strategy.color(), &label);
            }
        }
    }
    // One legend row, centred; about 7 px per character at font size 11.
    let legend_y = top + panel_h + 62.0;
    let item_width = |s: Strategy| 30.0 + 7.0 * s.name().len() as f64;
    let total: f64 = Strategy::ALL.into_iter().map(item_width).sum();
    let mut x = (left + 2.0 * panel_w + gap + 20.0 - total) / 2.0;
    for strategy in Strategy::ALL {
        svg.rect(
            x,
            legend_y - 9.0,
            14.0,
            10.0,
            strategy.color(),
            strategy.name(),
        );
        svg.text((x + 18.0, legend_y), Anchor::Start, 11, strategy.name());
        x += item_width(strategy);
    }
    svg.finish()
}
