//! [`Timeline`]: what a retry loop did, attempt by attempt, as text for snapshots and as SVG
//! for docs.
//!
//! Asserting a retry loop field by field (start of attempt 2, its error, the wait after it
//! …) makes long and brittle tests. A timeline records all of it on the mock clock and
//! renders one line per attempt, so a test states the whole expected behaviour as one
//! snapshot — `insta::assert_snapshot!(timeline.to_text())` — and a reviewer reads it like a
//! log.

use std::fmt::{self, Display};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use crate::clock::MockClock;
use crate::format::ms;
use crate::svg::{self, Anchor, Svg};

/// Records a retry loop's attempts: wrap the operation with
/// [`record`](Timeline::record) and pass [`observer`](Timeline::observer) to
/// [`Retry::notify`](retry_toolkit::Retry::notify).
///
/// ```
/// use retry_toolkit::{Jitter, RetryPolicy};
/// use retry_testkit::{Fault, FaultScript, MockClock, Timeline};
///
/// let clock = MockClock::new();
/// let script = FaultScript::new().fail_times(2, Fault::new("503")).succeed(()).on(&clock);
/// let timeline = Timeline::new(&clock);
/// let policy = RetryPolicy::DEFAULT.with_jitter(Jitter::None);
/// clock
///     .block_on(policy.retry(timeline.record(script.operation())).notify(timeline.observer()))
///     .unwrap()
///     .unwrap();
/// assert_eq!(timeline.to_text(), "\
/// attempt  start  end    outcome   then
/// 1        0ms    0ms    err: 503  wait 200ms
/// 2        200ms  200ms  err: 503  wait 400ms
/// 3        600ms  600ms  ok        done
/// ");
/// ```
///
/// One timeline records one loop: attempts are matched to waits by their number.
#[derive(Clone)]
pub struct Timeline {
    clock: MockClock,
    rows: Arc<Mutex<Vec<TimelineRow>>>,
}

/// One attempt on a [`Timeline`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TimelineRow {
    /// The attempt number (1-based).
    pub attempt: u32,
    /// Virtual time when the attempt started.
    pub start: Duration,
    /// Virtual time when it ended, if it did.
    pub end: Option<Duration>,
    /// How it ended.
    pub outcome: RowOutcome,
    /// The wait the loop chose after it, as its observer reported; see [`Timeline::rows`].
    pub wait: Option<Duration>,
}

/// How an attempt on a [`Timeline`] ended.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RowOutcome {
    /// Still running.
    Running,
    /// Returned `Ok`.
    Ok,
    /// Returned `Err`, displayed.
    Err(String),
    /// Dropped before completing: timed out, past the deadline, or cancelled.
    Dropped,
}

impl fmt::Display for RowOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowOutcome::Running => f.write_str("running"),
            RowOutcome::Ok => f.write_str("ok"),
            RowOutcome::Err(e) => write!(f, "err: {e}"),
            RowOutcome::Dropped => f.write_str("dropped"),
        }
    }
}

impl fmt::Debug for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Timeline")
            .field("rows", &*self.lock())
            .finish()
    }
}

impl Timeline {
    /// An empty timeline, timed by `clock`.
    pub fn new(clock: &MockClock) -> Self {
        Timeline {
            clock: clock.clone(),
            rows: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<TimelineRow>> {
        self.rows.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wraps `op` so that each attempt's start, end and outcome are recorded.
    pub fn record<Op, Fut, T, E>(
        &self,
        mut op: Op,
    ) -> impl FnMut(u32) -> Recorded<Fut> + use<Op, Fut, T, E>
    where
        Op: FnMut(u32) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: Display,
    {
        let timeline = self.clone();
        move |attempt| {
            let index = {
                let mut rows = timeline.lock();
                rows.push(TimelineRow {
                    attempt,
                    start: timeline.clock.elapsed(),
                    end: None,
                    outcome: RowOutcome::Running,
                    wait: None,
                });
                rows.len() - 1
            };
            Recorded {
                future: Box::pin(op(attempt)),
                timeline: timeline.clone(),
                index,
                done: false,
            }
        }
    }

    /// An observer for [`Retry::notify`](retry_toolkit::Retry::notify) that records the wait
    /// chosen after each failed attempt.
    pub fn observer<E>(&self) -> impl FnMut(&E, u32, Duration) + use<E> {
        let timeline = self.clone();
        move |_, attempt, wait| {
            let mut rows = timeline.lock();
            if let Some(row) = rows.iter_mut().rev().find(|r| r.attempt == attempt) {
                row.wait = Some(wait);
            }
        }
    }

    fn finish(&self, index: usize, outcome: RowOutcome) {
        let now = self.clock.elapsed();
        if let Some(row) = self.lock().get_mut(index) {
            row.end = Some(now);
            row.outcome = outcome;
        }
    }

    /// The attempts so far. A row's `wait` is what the observer reported; where it reported
    /// nothing — an attempt cut off by a timeout is retried without a notification, since
    /// there is no error to show — and another attempt followed, it is the gap between the
    /// two on the clock, which on virtual time is exactly the wait.
    pub fn rows(&self) -> Vec<TimelineRow> {
        let mut rows = self.lock().clone();
        for i in 1..rows.len() {
            let next_start = rows[i].start;
            let row = &mut rows[i - 1];
            if row.wait.is_none() {
                row.wait = row.end.map(|end| next_start.saturating_sub(end));
            }
        }
        rows
    }

    /// One line per attempt — number, start, end, outcome, and what followed (`wait …`,
    /// `done`, `stop`) — in aligned columns with no trailing spaces: stable for snapshots.
    pub fn to_text(&self) -> String {
        let rows = self.rows();
        let count = rows.len();
        let mut table = vec![[
            "attempt".to_owned(),
            "start".to_owned(),
            "end".to_owned(),
            "outcome".to_owned(),
            "then".to_owned(),
        ]];
        for (i, row) in rows.iter().enumerate() {
            let end = row
                .end
                .map_or_else(|| "-".to_owned(), |e| ms(e).to_string());
            table.push([
                row.attempt.to_string(),
                ms(row.start).to_string(),
                end,
                row.outcome.to_string(),
                then(row, i + 1 == count),
            ]);
        }
        let mut widths = [0usize; 5];
        for line in &table {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in &table {
            let mut text = String::new();
            for (cell, w) in line.iter().zip(widths) {
                text.push_str(&format!("{cell:<w$}  "));
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out
    }

    /// The same timeline as an SVG picture: attempts as bars on a time axis (green ok, red
    /// error, grey dropped), waits as dashed lines between them.
    pub fn to_svg(&self) -> String {
        let rows = self.rows();
        let end_of = |r: &TimelineRow| {
            let end = r.end.unwrap_or(r.start);
            end.saturating_add(r.wait.unwrap_or_default())
        };
        let total = rows.iter().map(end_of).max().unwrap_or_default();
        let total_ms = (total.as_secs_f64() * 1e3).max(1.0);
        let (left, width, lane) = (50.0, 660.0, 60.0);
        let x = |d: Duration| left + d.as_secs_f64() * 1e3 / total_ms * width;
        let mut svg = Svg::new(left + width + 30.0, 150.0);
        svg.text((left, 18.0), Anchor::Start, 13, "retry timeline");
        let legend = [("ok", OK), ("error", ERR), ("dropped", DROPPED)];
        for (i, (name, color)) in legend.into_iter().enumerate() {
            let at = left + width - 210.0 + 75.0 * i as f64;
            svg.rect(at, 9.0, 12.0, 10.0, color, name);
            svg.text((at + 16.0, 18.0), Anchor::Start, 11, name);
        }
        for (i, row) in rows.iter().enumerate() {
            let (start, end) = (x(row.start), x(row.end.unwrap_or(row.start)));
            let fill = match row.outcome {
                RowOutcome::Ok => OK,
                RowOutcome::Err(_) => ERR,
                RowOutcome::Dropped => DROPPED,
                RowOutcome::Running => RUNNING,
            };
            let title = format!(
                "attempt {}: {} ({} to {})",
                row.attempt,
                row.outcome,
                ms(row.start),
                row.end
                    .map_or_else(|| "-".to_owned(), |e| ms(e).to_string())
            );
            svg.rect(
                start,
                lane - 12.0,
                (end - start).max(3.0),
                24.0,
                fill,
                &title,
            );
            svg.text(
                (start, lane - 18.0),
                Anchor::Start,
                11,
                &format!("#{}", row.attempt),
            );
            if let (Some(wait), Some(done)) = (row.wait, row.end) {
                let (from, to) = (x(done), x(done.saturating_add(wait)));
                svg.line((from, lane), (to, lane), "#555555", true);
                let label = format!("wait {}", ms(wait));
                // Alternate two label rows so that labels of short waits do not overlap.
                let y = lane + 26.0 + 12.0 * (i % 2) as f64;
                svg.text(((from + to) / 2.0, y), Anchor::Middle, 10, &label);
            }
        }
        let axis = 120.0;
        svg.line((left, axis), (left + width, axis), "#333333", false);
        for tick in svg::ticks(total_ms, 6) {
            let at = left + tick / total_ms * width;
            svg.line((at, axis), (at, axis + 5.0), "#333333", false);
            svg.text((at, axis + 18.0), Anchor::Middle, 10, &format!("{tick}ms"));
        }
        svg.finish()
    }
}

impl fmt::Display for Timeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_text())
    }
}

// Bar colours of the SVG rendering.
const OK: &str = "#2e7d32";
const ERR: &str = "#c62828";
const DROPPED: &str = "#9e9e9e";
const RUNNING: &str = "#1565c0";

/// What followed an attempt, for the text rendering.
fn then(row: &TimelineRow, last: bool) -> String {
    match (&row.wait, &row.outcome) {
        (_, RowOutcome::Running) => String::new(),
        (_, RowOutcome::Ok) => "done".to_owned(),
        (Some(wait), _) => format!("wait {}", ms(*wait)),
        (None, _) if last => "stop".to_owned(),
        (None, _) => "-".to_owned(),
    }
}

/// An attempt wrapped by [`Timeline::record`].
#[must_use = "futures do nothing unless `.await`ed"]
pub struct Recorded<Fut> {
    future: Pin<Box<Fut>>,
    timeline: Timeline,
    index: usize,
    done: bool,
}

impl<Fut> fmt::Debug for Recorded<Fut> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorded")
            .field("index", &self.index)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}

impl<Fut, T, E> Future for Recorded<Fut>
where
    Fut: Future<Output = Result<T, E>>,
    E: Display,
{
    type Output = Result<T, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T, E>> {
        let this = self.get_mut();
        let output = match this.future.as_mut().poll(cx) {
            Poll::Ready(output) => output,
            Poll::Pending => return Poll::Pending,
        };
        this.done = true;
        let outcome = match &output {
            Ok(_) => RowOutcome::Ok,
            Err(e) => RowOutcome::Err(e.to_string()),
        };
        this.timeline.finish(this.index, outcome);
        Poll::Ready(output)
    }
}

impl<Fut> Drop for Recorded<Fut> {
    fn drop(&mut self) {
        if !self.done {
            self.timeline.finish(self.index, RowOutcome::Dropped);
        }
    }
}
