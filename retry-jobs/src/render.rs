//! The views as text for people: aligned columns, times as RFC 3339 and relative.

use std::fmt::Write;

use retry_toolkit::store::Timestamp;

use crate::time;
use crate::view::{Dead, DeadPage, Item, Page, Status};

/// Columns padded to their widest cell, two spaces apart, no trailing spaces.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let headers: Vec<String> = headers.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&headers).chain(rows) {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn opt_time(at: Option<Timestamp>, now: Timestamp) -> String {
    at.map_or_else(|| "-".to_owned(), |at| time::human(at, now))
}

/// An error's first line, at most 60 characters, for a column.
fn short(error: Option<&str>) -> String {
    let Some(error) = error else {
        return "-".to_owned();
    };
    let line = error.lines().next().unwrap_or_default();
    if line.chars().count() > 60 || error.lines().nth(1).is_some() {
        let cut: String = line.chars().take(59).collect();
        format!("{cut}…")
    } else {
        line.to_owned()
    }
}

pub(crate) fn status(s: &Status) -> String {
    let now = s.now;
    let mut text = format!("owner `{}` at {}\n\n", s.owner, time::rfc3339(now));
    if s.handlers.is_empty() {
        text.push_str("no work and no dead letters\n\n");
    } else {
        let rows: Vec<Vec<String>> = s
            .handlers
            .iter()
            .map(|h| {
                vec![
                    h.handler.clone(),
                    h.waiting.to_string(),
                    h.running.to_string(),
                    h.dead_letters.to_string(),
                    h.cancelled.to_string(),
                    h.succeeded.to_string(),
                    h.oldest_waiting_age_ms
                        .map_or_else(|| "-".to_owned(), time::age),
                    opt_time(h.next_due, now),
                ]
            })
            .collect();
        text.push_str(&table(
            &[
                "HANDLER",
                "WAITING",
                "RUNNING",
                "DEAD",
                "CANCELLED",
                "SUCCEEDED",
                "OLDEST WAITING",
                "NEXT DUE",
            ],
            &rows,
        ));
        text.push('\n');
    }
    let _ = writeln!(text, "next due:      {}", opt_time(s.next_due, now));
    let _ = writeln!(text, "dead letters:  {} (not re-driven)", s.dead_letters);
    let _ = writeln!(text, "quarantined:   {}", s.quarantined);
    if s.corrupt > 0 {
        let _ = writeln!(text, "corrupt rows:  {} (see `list`)", s.corrupt);
    }
    text
}

fn work_rows(items: &[Item], now: Timestamp) -> Vec<Vec<String>> {
    items
        .iter()
        .map(|i| {
            vec![
                i.id.to_string(),
                i.state.to_owned(),
                i.handler.clone(),
                i.timing.kind.to_owned(),
                attempts(i),
                time::human(i.due_at, now),
                short(i.last_error.as_deref()),
            ]
        })
        .collect()
}

fn attempts(i: &Item) -> String {
    match i.max_attempts {
        Some(max) => format!("{}/{max}", i.attempt),
        None => i.attempt.to_string(),
    }
}

fn page_footer(text: &mut String, page: &Page) {
    for bad in &page.corrupt {
        let _ = writeln!(text, "corrupt row #{}: {}", bad.id, bad.problem);
    }
    if let Some(next) = page.next_after {
        let _ = writeln!(text, "more: --after {next}");
    }
}

pub(crate) fn list(page: &Page, now: Timestamp) -> String {
    let mut text = if page.items.is_empty() {
        "no work matches\n".to_owned()
    } else {
        table(
            &[
                "ID",
                "STATE",
                "HANDLER",
                "KIND",
                "ATTEMPT",
                "DUE",
                "LAST ERROR",
            ],
            &work_rows(&page.items, now),
        )
    };
    page_footer(&mut text, page);
    text
}

pub(crate) fn in_flight(page: &Page, now: Timestamp) -> String {
    let mut text = if page.items.is_empty() {
        "nothing in flight\n".to_owned()
    } else {
        let rows: Vec<Vec<String>> = page
            .items
            .iter()
            .map(|i| {
                let lease = match i.lease_until {
                    Some(until) if until <= now => {
                        format!(
                            "{} (expired: the next claim takes it)",
                            time::human(until, now)
                        )
                    }
                    other => opt_time(other, now),
                };
                vec![i.id.to_string(), i.handler.clone(), attempts(i), lease]
            })
            .collect();
        table(&["ID", "HANDLER", "ATTEMPT", "LEASE UNTIL"], &rows)
    };
    page_footer(&mut text, page);
    text
}

fn field(text: &mut String, name: &str, value: impl std::fmt::Display) {
    let _ = writeln!(text, "{:<14}{value}", format!("{name}:"));
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn options_text(options: &retry_toolkit::RetryOptions) -> String {
    serde_json::to_string(options).unwrap_or_else(|e| format!("({e})"))
}

/// What an item and a dead letter both end with: how the work runs, and its payload.
fn how_it_runs(
    text: &mut String,
    options: &retry_toolkit::RetryOptions,
    retry_if: Option<&str>,
    timeout_ms: Option<u64>,
    payload: &serde_json::Value,
) {
    field(text, "options", options_text(options));
    field(text, "retry if", or_dash(retry_if));
    field(
        text,
        "timeout",
        or_dash(timeout_ms.map(|ms| format!("{ms} ms"))),
    );
    field(text, "payload", payload);
}

pub(crate) fn item(i: &Item, now: Timestamp) -> String {
    let mut text = String::new();
    field(&mut text, "work", format!("#{}", i.id));
    field(&mut text, "owner", &i.owner);
    field(&mut text, "handler", &i.handler);
    field(&mut text, "state", i.state);
    let mut timing = i.timing.kind.to_owned();
    if let (Some(cron), Some(zone)) = (&i.timing.cron, &i.timing.zone) {
        let _ = write!(timing, " `{cron}` in {zone}");
    }
    if let Some(every) = i.timing.every_ms {
        let _ = write!(timing, " every {}", time::age(every));
    }
    if let Some(misfire) = i.timing.misfire {
        let _ = write!(timing, " (misfire: {misfire})");
    }
    field(&mut text, "timing", timing);
    field(&mut text, "key", or_dash(i.key.as_ref()));
    field(&mut text, "attempts", attempts(i));
    field(&mut text, "due", time::human(i.due_at, now));
    field(&mut text, "run due", time::human(i.fire_at, now));
    field(&mut text, "lease until", opt_time(i.lease_until, now));
    field(&mut text, "last error", or_dash(i.last_error.as_ref()));
    field(&mut text, "last backoff", format!("{} ms", i.last_delay_ms));
    field(&mut text, "created", time::human(i.created_at, now));
    field(&mut text, "updated", time::human(i.updated_at, now));
    field(&mut text, "revision", i.revision);
    how_it_runs(
        &mut text,
        &i.options,
        i.retry_if.as_deref(),
        i.attempt_timeout_ms,
        &i.payload,
    );
    attempts_kept(&mut text, &i.timeline);
    text
}

/// The history's table under its own heading, or that none is kept.
fn attempts_kept(text: &mut String, timeline: &str) {
    text.push_str("\nattempts kept:\n");
    if timeline.trim().is_empty() {
        text.push_str("  none\n");
    } else {
        for line in timeline.lines() {
            let _ = writeln!(text, "  {line}");
        }
    }
}

pub(crate) fn dead_letters(page: &DeadPage, now: Timestamp) -> String {
    let mut text = if page.dead_letters.is_empty() {
        "no dead letters\n".to_owned()
    } else {
        let rows: Vec<Vec<String>> = page
            .dead_letters
            .iter()
            .map(|d| {
                vec![
                    d.id.to_string(),
                    d.work_id.to_string(),
                    d.handler.clone(),
                    d.reason.to_owned(),
                    d.attempts.to_string(),
                    time::human(d.failed_at, now),
                    or_dash(d.redriven_as.map(|w| format!("#{w}"))),
                    short(d.last_error.as_deref()),
                ]
            })
            .collect();
        table(
            &[
                "ID",
                "WORK",
                "HANDLER",
                "REASON",
                "ATTEMPTS",
                "FAILED",
                "RE-DRIVEN AS",
                "LAST ERROR",
            ],
            &rows,
        )
    };
    if let Some(next) = page.next_after {
        let _ = writeln!(text, "more: --after {next}");
    }
    text
}

pub(crate) fn dead_letter(d: &Dead, now: Timestamp) -> String {
    let mut text = String::new();
    field(&mut text, "dead letter", format!("#{}", d.id));
    field(&mut text, "work", format!("#{}", d.work_id));
    field(&mut text, "owner", &d.owner);
    field(&mut text, "handler", &d.handler);
    field(&mut text, "kind", &d.kind);
    field(&mut text, "reason", d.reason);
    field(&mut text, "attempts", d.attempts);
    field(&mut text, "last error", or_dash(d.last_error.as_ref()));
    field(&mut text, "created", time::human(d.created_at, now));
    field(&mut text, "run due", time::human(d.fire_at, now));
    field(&mut text, "failed", time::human(d.failed_at, now));
    field(
        &mut text,
        "re-driven as",
        or_dash(d.redriven_as.map(|w| format!("work #{w}"))),
    );
    how_it_runs(
        &mut text,
        &d.options,
        d.retry_if.as_deref(),
        d.attempt_timeout_ms,
        &d.payload,
    );
    attempts_kept(&mut text, &d.timeline);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_align_on_the_widest_cell() {
        let text = table(
            &["ID", "NAME"],
            &[
                vec!["1".into(), "a".into()],
                vec!["100".into(), "bb".into()],
            ],
        );
        assert_eq!(text, "ID   NAME\n1    a\n100  bb\n");
    }

    #[test]
    fn long_and_multi_line_errors_are_cut_for_columns() {
        assert_eq!(short(None), "-");
        assert_eq!(short(Some("refused")), "refused");
        assert_eq!(short(Some("first\nsecond")), "first…");
        let long = "x".repeat(80);
        assert_eq!(short(Some(&long)).chars().count(), 60);
    }
}
