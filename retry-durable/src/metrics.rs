//! The worker's metrics through the `metrics` facade (feature `metrics`): the exporter is the
//! application's choice. Labels are the owner, the handler's name and small fixed sets
//! (outcome, reason, state, hook) — never payloads, keys or error texts, so that the number of
//! series stays bounded. Without the feature every function here is empty.
//!
//! Attempt outcomes are counted from the events, which are announced only once their write is
//! durable: a count never runs ahead of the store.
//!
//! The keys of the per-attempt series are built once, when the owner is built ([`Series`]):
//! the facade builds a key before it looks for a recorder, so a key built per event would
//! allocate on every attempt even when no recorder is installed.

use std::time::Duration;

use crate::jobs::EventKind;
use crate::store::WorkCounts;

#[cfg(feature = "metrics")]
mod on {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use metrics::{Key, Label, Level, Metadata, counter, gauge, with_recorder};

    use crate::jobs::EventKind;
    use crate::record::DeadReason;
    use crate::store::WorkCounts;

    /// What the facade's macros would attach: this module, at `INFO`.
    static METADATA: Metadata<'static> =
        Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

    /// The owner's series keys, built once with the owner: the facade builds a key (a label
    /// list and a copy of each label value) before it knows whether a recorder is installed,
    /// so keys built per event cost allocations on every attempt even with no recorder. A
    /// retained key is cloned by reference counts instead.
    pub(crate) struct Series {
        owner: String,
        handlers: BTreeMap<String, Handler>,
    }

    /// One handler's per-attempt series.
    struct Handler {
        started: Key,
        start_delay: Key,
        /// The attempt's duration, `[failure, success]`.
        took: [Key; 2],
        succeeded: Key,
        failed: Key,
        retried: Key,
        deferred: Key,
        claims_lost: Key,
        /// One per reason.
        dead_lettered: [(DeadReason, Key); 6],
    }

    impl Handler {
        fn new(owner: &str, handler: &str) -> Self {
            let key = |name: &'static str, extra: Option<(&'static str, &'static str)>| {
                let mut labels = vec![
                    Label::new("owner", owner.to_owned()),
                    Label::new("handler", handler.to_owned()),
                ];
                labels.extend(extra.map(|(k, v)| Label::from_static_parts(k, v)));
                Key::from_parts(name, labels).to_retained()
            };
            let plain = |name| key(name, None);
            let took = |outcome| {
                key(
                    "retry_jobs_attempt_duration_seconds",
                    Some(("outcome", outcome)),
                )
            };
            Handler {
                started: plain("retry_jobs_attempts_started_total"),
                start_delay: plain("retry_jobs_start_delay_seconds"),
                took: [took("failure"), took("success")],
                succeeded: plain("retry_jobs_attempts_succeeded_total"),
                failed: plain("retry_jobs_attempts_failed_total"),
                retried: plain("retry_jobs_attempts_retried_total"),
                deferred: plain("retry_jobs_attempts_deferred_total"),
                claims_lost: plain("retry_jobs_claims_lost_total"),
                dead_lettered: DeadReason::ALL.map(|reason| {
                    let name = "retry_jobs_dead_lettered_total";
                    (reason, key(name, Some(("reason", reason.name()))))
                }),
            }
        }
    }

    impl Series {
        pub(crate) fn new<'a>(owner: &str, handlers: impl IntoIterator<Item = &'a String>) -> Self {
            Series {
                owner: owner.to_owned(),
                handlers: handlers
                    .into_iter()
                    .map(|name| (name.clone(), Handler::new(owner, name)))
                    .collect(),
            }
        }

        /// Calls `record` with `handler`'s keys; a name no handler is registered under (work
        /// dead-lettered for that reason) gets keys built for this call.
        fn of(&self, handler: &str, record: impl FnOnce(&Handler)) {
            match self.handlers.get(handler) {
                Some(keys) => record(keys),
                None => record(&Handler::new(&self.owner, handler)),
            }
        }
    }

    fn count(key: &Key) {
        with_recorder(|recorder| recorder.register_counter(key, &METADATA)).increment(1);
    }

    fn observe(key: &Key, value: Duration) {
        with_recorder(|recorder| recorder.register_histogram(key, &METADATA))
            .record(value.as_secs_f64());
    }

    pub(super) fn started(series: &Series, handler: &str, late: Duration) {
        series.of(handler, |keys| {
            count(&keys.started);
            observe(&keys.start_delay, late);
        });
    }

    pub(super) fn attempt_ended(series: &Series, handler: &str, ok: bool, took: Duration) {
        series.of(handler, |keys| observe(&keys.took[usize::from(ok)], took));
    }

    pub(super) fn event(series: &Series, handler: &str, what: &EventKind) {
        match what {
            EventKind::Succeeded { .. } => series.of(handler, |keys| count(&keys.succeeded)),
            EventKind::Retrying { .. } => series.of(handler, |keys| {
                count(&keys.failed);
                count(&keys.retried);
            }),
            EventKind::Failed { reason, .. } => series.of(handler, |keys| {
                // An end that follows a failed attempt; the others (no handler, payload or
                // predicate) ran nothing.
                if matches!(
                    reason,
                    DeadReason::Exhausted | DeadReason::NotRetryable | DeadReason::HintAboveCeiling
                ) {
                    count(&keys.failed);
                }
                if let Some((_, key)) = keys.dead_lettered.iter().find(|(r, _)| r == reason) {
                    count(key);
                }
            }),
            EventKind::Deferred { .. } => series.of(handler, |keys| count(&keys.deferred)),
            EventKind::ClaimLost => series.of(handler, |keys| count(&keys.claims_lost)),
            EventKind::Quarantined { .. } => {
                counter!("retry_jobs_quarantined_total", "owner" => series.owner.clone())
                    .increment(1);
            }
            _ => {}
        }
    }

    pub(super) fn hook_panicked(series: &Series, hook: &'static str) {
        counter!("retry_jobs_hook_panics_total", "owner" => series.owner.clone(), "hook" => hook)
            .increment(1);
    }

    pub(super) fn queue(series: &Series, counts: &WorkCounts) {
        for (state, rows) in counts.by_state() {
            gauge!("retry_jobs_queue_depth", "owner" => series.owner.clone(), "state" => state)
                .set(rows as f64);
        }
        gauge!("retry_jobs_expired_leases", "owner" => series.owner.clone())
            .set(counts.expired_leases as f64);
    }
}

/// Whether the worker samples the queue (a count query) on its maintenance tick: only with
/// the feature.
pub(crate) const SAMPLES_QUEUE: bool = cfg!(feature = "metrics");

#[cfg(feature = "metrics")]
pub(crate) use on::Series;

/// Without the feature: nothing to keep.
#[cfg(not(feature = "metrics"))]
pub(crate) struct Series;

#[cfg(not(feature = "metrics"))]
impl Series {
    pub(crate) fn new<'a>(owner: &str, handlers: impl IntoIterator<Item = &'a String>) -> Self {
        let _ = (owner, handlers);
        Series
    }
}

/// An attempt started, `late` after its due time.
pub(crate) fn started(series: &Series, handler: &str, late: Duration) {
    #[cfg(feature = "metrics")]
    on::started(series, handler, late);
    #[cfg(not(feature = "metrics"))]
    let _ = (series, handler, late);
}

/// A handler returned (or panicked, or timed out) after `took` on the owner's clock.
pub(crate) fn attempt_ended(series: &Series, handler: &str, ok: bool, took: Duration) {
    #[cfg(feature = "metrics")]
    on::attempt_ended(series, handler, ok, took);
    #[cfg(not(feature = "metrics"))]
    let _ = (series, handler, ok, took);
}

/// An event was announced: counts its outcome.
pub(crate) fn event(series: &Series, handler: &str, what: &EventKind) {
    #[cfg(feature = "metrics")]
    on::event(series, handler, what);
    #[cfg(not(feature = "metrics"))]
    let _ = (series, handler, what);
}

/// A user's hook panicked: `error_hook` or `subscriber`.
pub(crate) fn hook_panicked(series: &Series, hook: &'static str) {
    #[cfg(feature = "metrics")]
    on::hook_panicked(series, hook);
    #[cfg(not(feature = "metrics"))]
    let _ = (series, hook);
}

/// The queue as the worker sampled it.
pub(crate) fn queue(series: &Series, counts: &WorkCounts) {
    #[cfg(feature = "metrics")]
    on::queue(series, counts);
    #[cfg(not(feature = "metrics"))]
    let _ = (series, counts);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use std::time::Duration;

    use retry_toolkit::store::Timestamp;

    use super::{Series, attempt_ended, event, started};
    use crate::jobs::EventKind;
    use crate::record::DeadReason;

    /// Issue 28: with no recorder installed, counting an attempt allocates nothing once the
    /// owner is built (the keys were built per event before: the owner's and the handler's
    /// names copied, and a label list, for each series).
    #[test]
    fn v3_counting_an_attempt_does_not_allocate_without_a_recorder() {
        let handlers = ["send".to_owned(), "report".to_owned()];
        let series = Series::new("shop", &handlers);
        let mut events = vec![
            EventKind::Succeeded { attempt: 1 },
            EventKind::Retrying {
                attempt: 1,
                delay: Duration::from_secs(1),
                error: "down".to_owned(),
            },
            EventKind::Deferred {
                attempt: 2,
                until: Timestamp::from_millis(0),
                reason: "open".to_owned(),
            },
            EventKind::ClaimLost,
        ];
        events.extend(DeadReason::ALL.map(|reason| EventKind::Failed {
            attempts: 2,
            reason,
            error: "down".to_owned(),
        }));
        let info = allocation_counter::measure(|| {
            for handler in &handlers {
                started(&series, handler, Duration::from_millis(3));
                attempt_ended(&series, handler, true, Duration::from_millis(5));
                attempt_ended(&series, handler, false, Duration::from_millis(5));
                for what in &events {
                    event(&series, handler, what);
                }
            }
        });
        assert_eq!(info.count_total, 0, "{info:?}");
        // The counter sees this thread's allocations: a name no handler is registered under
        // (work dead-lettered for that reason) gets keys built for the call.
        let info = allocation_counter::measure(|| {
            event(
                &series,
                "gone",
                &EventKind::Failed {
                    attempts: 0,
                    reason: DeadReason::UnknownHandler,
                    error: String::new(),
                },
            );
        });
        assert!(info.count_total > 0, "{info:?}");
    }
}
