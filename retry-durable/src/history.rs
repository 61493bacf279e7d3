//! An item's history: what each of its last attempts did and why the wait after it was what
//! it was, kept on the row ([`WorkRecord::history`](crate::WorkRecord::history)) and carried
//! to its dead letter, so that an operator can answer "why did it wait?" from the store alone.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use retry_toolkit::store::Timestamp;

/// Attempts an item keeps in its history unless the owner says otherwise
/// ([`JobsBuilder::history_limit`](crate::JobsBuilder::history_limit)).
pub const DEFAULT_HISTORY_LIMIT: u32 = 20;

/// The most attempts an owner may keep per item: a row's history stays a few hundred KiB at
/// most, however long its errors.
pub const MAX_HISTORY_LIMIT: u32 = 1_000;

/// The most characters of an error a history entry keeps: a handler that returns a megabyte of
/// error text must not make every row it fails on a megabyte per attempt.
pub const MAX_HISTORY_ERROR: usize = 2_000;

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The handler succeeded.
    Succeeded,
    /// The handler failed and the item waits for another attempt.
    Retrying,
    /// The handler failed and the run ended in a dead letter (a repeating schedule still
    /// waits for its next tick).
    DeadLettered,
    /// The attempt did not run: a circuit breaker or a retry budget put it off, the attempt
    /// not spent.
    Deferred,
    /// The worker stopped before the attempt ended (past its shutdown grace): the attempt was
    /// signalled and dropped, counted, and its lease released, so the item is due at once.
    Abandoned,
}

impl AttemptOutcome {
    const ALL: [AttemptOutcome; 5] = [
        AttemptOutcome::Succeeded,
        AttemptOutcome::Retrying,
        AttemptOutcome::DeadLettered,
        AttemptOutcome::Deferred,
        AttemptOutcome::Abandoned,
    ];

    /// The name stored in the history and shown in its rendering.
    pub fn name(self) -> &'static str {
        match self {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Retrying => "retrying",
            AttemptOutcome::DeadLettered => "dead-lettered",
            AttemptOutcome::Deferred => "deferred",
            AttemptOutcome::Abandoned => "abandoned",
        }
    }
}

impl FromStr for AttemptOutcome {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        by_name(&Self::ALL, Self::name, name, "attempt outcome")
    }
}

impl fmt::Display for AttemptOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why the wait after an attempt was what it was: the retry decision's answer, kept so that a
/// long wait can be explained afterwards.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WaitReason {
    /// The retry options' backoff drew it (jittered and capped by the maximum delay).
    Backoff,
    /// The error carried a retry-after hint within the policy's ceiling, and it was obeyed.
    ServerHint,
    /// A repeating schedule waits for its next tick.
    NextTick,
    /// A circuit breaker or a retry budget put the attempt off.
    Protection,
}

impl WaitReason {
    const ALL: [WaitReason; 4] = [
        WaitReason::Backoff,
        WaitReason::ServerHint,
        WaitReason::NextTick,
        WaitReason::Protection,
    ];

    /// The name stored in the history and shown in its rendering.
    pub fn name(self) -> &'static str {
        match self {
            WaitReason::Backoff => "backoff",
            WaitReason::ServerHint => "server hint",
            WaitReason::NextTick => "next tick",
            WaitReason::Protection => "breaker or budget",
        }
    }
}

impl FromStr for WaitReason {
    type Err = String;

    fn from_str(name: &str) -> Result<Self, String> {
        by_name(&Self::ALL, Self::name, name, "wait reason")
    }
}

impl fmt::Display for WaitReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The value of `all` whose stored name is `name`; what is wrong otherwise.
fn by_name<T: Copy>(
    all: &[T],
    name_of: fn(T) -> &'static str,
    name: &str,
    what: &str,
) -> Result<T, String> {
    all.iter()
        .copied()
        .find(|value| name_of(*value) == name)
        .ok_or_else(|| format!("unknown {what} `{name}`"))
}

/// The wait chosen after an attempt, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Wait {
    /// How long the item waited before it was due again.
    pub delay: Duration,
    /// Why that long.
    pub why: WaitReason,
}

/// One attempt of an item, as its history keeps it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AttemptRecord {
    /// The attempt's number in its run (a schedule's tick), from 1.
    pub attempt: u32,
    /// When the worker claimed it.
    pub started_at: Timestamp,
    /// When it ended.
    pub ended_at: Timestamp,
    /// How it ended.
    pub outcome: AttemptOutcome,
    /// Its error, if it failed (cut to [`MAX_HISTORY_ERROR`] characters).
    pub error: Option<String>,
    /// The wait chosen after it, if the item waits again.
    pub wait: Option<Wait>,
}

impl AttemptRecord {
    /// `history` with `entry` appended and only the last `limit` entries kept (the oldest
    /// dropped; none kept with a limit of 0).
    pub fn appended(
        history: &[AttemptRecord],
        entry: AttemptRecord,
        limit: u32,
    ) -> Vec<AttemptRecord> {
        let limit = limit as usize;
        if limit == 0 {
            return Vec::new();
        }
        let keep = history.len().min(limit - 1);
        let mut out = Vec::with_capacity(keep + 1);
        out.extend_from_slice(&history[history.len() - keep..]);
        out.push(entry);
        out
    }
}

/// Error text cut to [`MAX_HISTORY_ERROR`] characters, on a character boundary.
pub(crate) fn cut_error(error: &str) -> String {
    match error.char_indices().nth(MAX_HISTORY_ERROR) {
        Some((at, _)) => format!("{}…", &error[..at]),
        None => error.to_owned(),
    }
}

/// An entry as stored: JSON with plain names and milliseconds, so that a database's own
/// tools can read it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Stored {
    attempt: u32,
    started_at: u64,
    ended_at: u64,
    outcome: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wait_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wait_why: Option<String>,
}

/// The history column's text (the SQL stores write it).
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn to_json(history: &[AttemptRecord]) -> String {
    let stored: Vec<Stored> = history
        .iter()
        .map(|a| Stored {
            attempt: a.attempt,
            started_at: a.started_at.as_millis(),
            ended_at: a.ended_at.as_millis(),
            outcome: a.outcome.name().to_owned(),
            error: a.error.clone(),
            wait_ms: a
                .wait
                .map(|w| u64::try_from(w.delay.as_millis()).unwrap_or(u64::MAX)),
            wait_why: a.wait.map(|w| w.why.name().to_owned()),
        })
        .collect();
    // A Vec of plain structs of strings and integers always serializes.
    serde_json::to_string(&stored).unwrap_or_else(|_| "[]".to_owned())
}

/// The history column read back; what is wrong with it otherwise (a corrupt row).
pub(crate) fn from_json(text: &str) -> Result<Vec<AttemptRecord>, String> {
    let stored: Vec<Stored> = serde_json::from_str(text).map_err(|e| format!("history: {e}"))?;
    stored
        .into_iter()
        .map(|s| {
            let wait = match (s.wait_ms, s.wait_why) {
                (Some(ms), Some(why)) => Some(Wait {
                    delay: Duration::from_millis(ms),
                    why: why.parse().map_err(|e| format!("history: {e}"))?,
                }),
                (None, None) => None,
                _ => return Err("history: a wait without its reason".to_owned()),
            };
            Ok(AttemptRecord {
                attempt: s.attempt,
                started_at: Timestamp::from_millis(s.started_at),
                ended_at: Timestamp::from_millis(s.ended_at),
                outcome: s.outcome.parse().map_err(|e| format!("history: {e}"))?,
                error: s.error,
                wait,
            })
        })
        .collect()
}

/// An item's history drawn as a table, one line per attempt — number, start, end, outcome,
/// and what followed (`wait 200ms (backoff)`, `done`, `stop`) — the columns the testkit's
/// timeline draws for tests, in aligned columns with no trailing spaces.
///
/// Attempts whose end was never written (their worker died, and the lease ran out) have no
/// entry; where the numbers jump, one line says so.
#[derive(Clone, Copy, Debug)]
pub struct Timeline<'a>(pub &'a [AttemptRecord]);

impl fmt::Display for Timeline<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut table = vec![[
            "attempt".to_owned(),
            "start".to_owned(),
            "end".to_owned(),
            "outcome".to_owned(),
            "then".to_owned(),
        ]];
        let mut previous: Option<u32> = None;
        for a in self.0 {
            if let Some(before) = previous {
                let first = before.saturating_add(1);
                if a.attempt > first {
                    let missing = if a.attempt - 1 == first {
                        first.to_string()
                    } else {
                        format!("{first}-{}", a.attempt - 1)
                    };
                    table.push([
                        missing,
                        "-".to_owned(),
                        "-".to_owned(),
                        "not recorded: its worker died".to_owned(),
                        "-".to_owned(),
                    ]);
                }
            }
            previous = Some(a.attempt);
            let outcome = match &a.error {
                Some(error) => format!("{}: {error}", a.outcome),
                None => a.outcome.to_string(),
            };
            let then = match (a.wait, a.outcome) {
                (Some(w), _) => format!("wait {}ms ({})", w.delay.as_millis(), w.why),
                (None, AttemptOutcome::Succeeded) => "done".to_owned(),
                (None, AttemptOutcome::Abandoned) => "due at once".to_owned(),
                (None, _) => "stop".to_owned(),
            };
            table.push([
                a.attempt.to_string(),
                a.started_at.to_string(),
                a.ended_at.to_string(),
                outcome,
                then,
            ]);
        }
        let mut widths = [0usize; 5];
        for line in &table {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        for line in &table {
            let mut text = String::new();
            for (cell, w) in line.iter().zip(widths) {
                text.push_str(&format!("{cell:<w$}  "));
            }
            writeln!(f, "{}", text.trim_end())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(attempt: u32) -> AttemptRecord {
        AttemptRecord {
            attempt,
            started_at: Timestamp::from_millis(u64::from(attempt) * 1_000),
            ended_at: Timestamp::from_millis(u64::from(attempt) * 1_000 + 5),
            outcome: AttemptOutcome::Retrying,
            error: Some("503".to_owned()),
            wait: Some(Wait {
                delay: Duration::from_millis(200),
                why: WaitReason::ServerHint,
            }),
        }
    }

    /// Appending keeps the newest `limit` entries; a limit of 0 keeps none.
    #[test]
    fn appending_keeps_the_last_entries() {
        let mut history = Vec::new();
        for n in 1..=5 {
            history = AttemptRecord::appended(&history, entry(n), 3);
        }
        let kept: Vec<u32> = history.iter().map(|a| a.attempt).collect();
        assert_eq!(kept, [3, 4, 5]);
        assert!(AttemptRecord::appended(&history, entry(6), 0).is_empty());
        assert_eq!(AttemptRecord::appended(&[], entry(1), 1), [entry(1)]);
    }

    /// The column reads back as written; bad text is an error, not a panic.
    #[test]
    fn the_column_reads_back_and_rejects_bad_text() {
        let history = vec![entry(1), {
            let mut last = entry(2);
            last.outcome = AttemptOutcome::Succeeded;
            last.error = None;
            last.wait = None;
            last
        }];
        assert_eq!(from_json(&to_json(&history)), Ok(history));
        assert_eq!(from_json("[]"), Ok(Vec::new()));
        for bad in [
            "{",
            "{}",
            r#"[{"attempt":1,"started_at":0,"ended_at":0,"outcome":"exploded"}]"#,
            r#"[{"attempt":1,"started_at":0,"ended_at":0,"outcome":"retrying","wait_ms":5}]"#,
            r#"[{"attempt":-1,"started_at":0,"ended_at":0,"outcome":"retrying"}]"#,
        ] {
            assert!(from_json(bad).is_err(), "{bad}");
        }
    }

    /// The table: aligned, no trailing spaces, what followed each attempt, and a line where
    /// attempts were never recorded.
    #[test]
    fn the_timeline_draws_one_line_per_attempt_and_names_gaps() {
        let mut last = entry(5);
        last.outcome = AttemptOutcome::DeadLettered;
        last.wait = None;
        let drawn = Timeline(&[entry(1), entry(2), last]).to_string();
        let lines: Vec<&str> = drawn.lines().collect();
        assert_eq!(lines.len(), 5, "{drawn}");
        assert!(lines.iter().all(|l| !l.ends_with(' ')), "{drawn}");
        assert!(lines[0].starts_with("attempt  start"), "{drawn}");
        assert!(
            lines[1].starts_with(
                "1        1970-01-01T00:00:01.000Z  1970-01-01T00:00:01.005Z  retrying: 503"
            ),
            "{drawn}"
        );
        assert!(lines[1].ends_with("wait 200ms (server hint)"), "{drawn}");
        assert!(lines[3].starts_with("3-4      -"), "{drawn}");
        assert!(lines[3].contains("not recorded"), "{drawn}");
        assert!(
            lines[4].contains("dead-lettered: 503") && lines[4].ends_with("stop"),
            "{drawn}"
        );
        // A schedule's next tick starts again at 1: no gap.
        let drawn = Timeline(&[entry(3), entry(1)]).to_string();
        assert_eq!(drawn.lines().count(), 3, "{drawn}");
        assert_eq!(Timeline(&[]).to_string().lines().count(), 1);
    }

    /// A long error is cut on a character boundary.
    #[test]
    fn long_errors_are_cut() {
        let long = "é".repeat(MAX_HISTORY_ERROR + 10);
        let cut = cut_error(&long);
        assert_eq!(cut.chars().count(), MAX_HISTORY_ERROR + 1);
        assert_eq!(cut_error("short"), "short");
    }
}
