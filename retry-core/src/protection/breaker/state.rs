//! The breaker's state in one word, so that every transition is one compare-and-swap, and
//! its rules as one pure function ([`State::next`]): what an event does to a state, with no
//! atomics and no clock. `mod.rs` only loads the word, asks `next`, and swaps.
//!
//! ```text
//!                 failure: a rule trips (failures in a row, or the failure rate)
//!  ──▶ closed ────────────────────────────────────────────────────▶ open
//!       ▲  │ success: failures in a row back to 0                  │ ▲
//!       │  └ failure: one more in a row                            │ │ a probe fails
//!       │                                       the break is over  │ │ (a longer break
//!       │       enough probes succeeded                            ▼ │  when it grows)
//!       └───────────────────────────────────────────────────── half-open
//!                                                                  │ ▲
//!            admit: one more probe in flight, while fewer than the ┘ │
//!            probes are taken; all taken and a break's length gone: ─┘
//!            a new period (probes that never reported give their places back)
//!
//!  isolate (any state) ──▶ isolated ── reset ──▶ closed   (reset from any state)
//! ```
//!
//! A refusal (open before its end, isolated, half-open with every probe taken) changes
//! nothing. An outcome that arrives late — a failure of a call admitted closed after the
//! circuit opened, a probe of an earlier half-open period — changes nothing either.
//!
//! | bits  | closed            | open              | half-open                       | isolated |
//! |-------|-------------------|-------------------|---------------------------------|----------|
//! | 62–63 | 0                 | 1                 | 2                               | 3        |
//! | 56–61 | —                 | opens in a row    | opens in a row                  | —        |
//! | 49–55 | —                 | —                 | probes that succeeded           | —        |
//! | 42–48 | —                 | —                 | probes in flight                | —        |
//! | 0–41  | failures in a row | open until (ms)   | half-open since (ms)            | —        |
//!
//! Times are milliseconds since the breaker's zero (42 bits: 139 years, saturating). "Opens in
//! a row" counts the opens since the circuit last closed, for a break that grows; it
//! saturates at 63. Probe counts fit because a breaker admits at most 100 probes.

const KIND_SHIFT: u32 = 62;
const OPENS_SHIFT: u32 = 56;
const SUCCEEDED_SHIFT: u32 = 49;
const IN_FLIGHT_SHIFT: u32 = 42;
const SEVEN_BITS: u64 = 0x7f;
const OPENS_MASK: u64 = 0x3f;
/// The latest time the word can hold, in milliseconds.
pub(super) const TIME_MAX: u64 = (1 << 42) - 1;
/// The most opens in a row the word counts.
pub(super) const OPENS_MAX: u32 = 63;
const FAILURES_MAX: u64 = u32::MAX as u64;

use super::events::{ChangeReason, CircuitState};

/// One decoded state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Calls pass; `failures` failed in a row.
    Closed { failures: u32 },
    /// Calls are refused until `until` (ms); the `opens`-th open since the circuit closed.
    Open { until: u64, opens: u32 },
    /// Probes are admitted, since `since` (ms).
    HalfOpen {
        since: u64,
        in_flight: u32,
        succeeded: u32,
        opens: u32,
    },
    /// Opened by hand: calls are refused until a reset.
    Isolated,
}

impl State {
    pub(super) const fn encode(self) -> u64 {
        match self {
            State::Closed { failures } => {
                let f = failures as u64;
                if f > FAILURES_MAX { FAILURES_MAX } else { f }
            }
            State::Open { until, opens } => {
                (1 << KIND_SHIFT) | opens_bits(opens) | time_bits(until)
            }
            State::HalfOpen {
                since,
                in_flight,
                succeeded,
                opens,
            } => {
                (2 << KIND_SHIFT)
                    | opens_bits(opens)
                    | ((succeeded as u64 & SEVEN_BITS) << SUCCEEDED_SHIFT)
                    | ((in_flight as u64 & SEVEN_BITS) << IN_FLIGHT_SHIFT)
                    | time_bits(since)
            }
            State::Isolated => 3 << KIND_SHIFT,
        }
    }

    pub(super) const fn decode(word: u64) -> State {
        let opens = ((word >> OPENS_SHIFT) & OPENS_MASK) as u32;
        let time = word & TIME_MAX;
        match word >> KIND_SHIFT {
            0 => State::Closed {
                failures: (word & FAILURES_MAX) as u32,
            },
            1 => State::Open { until: time, opens },
            2 => State::HalfOpen {
                since: time,
                in_flight: ((word >> IN_FLIGHT_SHIFT) & SEVEN_BITS) as u32,
                succeeded: ((word >> SUCCEEDED_SHIFT) & SEVEN_BITS) as u32,
                opens,
            },
            _ => State::Isolated,
        }
    }
}

/// What happens to a breaker, as [`State::next`] takes it. Times are milliseconds since the
/// breaker's zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// Someone looks at the state (`CircuitBreaker::state`): an open circuit whose break is
    /// over becomes half-open, with no probe taken.
    Look { at: u64 },
    /// A call asks to pass.
    Admit { at: u64 },
    /// A call admitted closed succeeded.
    Success,
    /// A call admitted closed failed.
    Failure { at: u64 },
    /// A probe of the half-open period that began at `since` ended at `at`.
    Probe { since: u64, success: bool, at: u64 },
    /// A probe of the period that began at `since` ended without an outcome (cancelled).
    Release { since: u64 },
}

/// What [`State::next`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Step {
    /// The state to swap in; `None`: nothing to write.
    pub(super) to: Option<State>,
    /// Why the public state changed, if it did: what listeners are told.
    pub(super) reason: Option<ChangeReason>,
    /// For [`Event::Admit`]: the call passes or is refused. Other events always "pass".
    pub(super) admit: Admit,
}

/// The answer to [`Event::Admit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// The call passes: closed, or as a probe of the period that began at `since`.
    Pass { probe_since: Option<u64> },
    /// The call is refused, in `state`, for `after_ms` more if that is known.
    Refuse {
        state: CircuitState,
        after_ms: Option<u64>,
    },
    /// Half-open with every probe taken for a break's length: a new period begins (the
    /// caller logs it), and the call passes as its first probe.
    Renew { since: u64 },
}

/// The settings [`State::next`] follows, taken from the breaker's config.
pub(super) trait Rules {
    /// Probes a half-open circuit admits, and how many must succeed to close it.
    fn probes(&self) -> u32;
    /// The break after the `opens`-th open in a row, in milliseconds.
    fn break_ms(&self, opens: u32) -> u64;
    /// Whether the `failures`-th failure in a row opens the circuit, and why. Asked only on
    /// a failure of a closed circuit; may read the failure window, which is why it is asked.
    fn trips(&self, failures: u32) -> Option<ChangeReason>;
}

impl Step {
    const fn stay() -> Step {
        Step {
            to: None,
            reason: None,
            admit: Admit::Pass { probe_since: None },
        }
    }

    const fn to(state: State, reason: Option<ChangeReason>) -> Step {
        Step {
            to: Some(state),
            reason,
            admit: Admit::Pass { probe_since: None },
        }
    }

    const fn refuse(state: CircuitState, after_ms: Option<u64>) -> Step {
        Step {
            to: None,
            reason: None,
            admit: Admit::Refuse { state, after_ms },
        }
    }
}

impl State {
    /// The breaker's rules: what `event` does to this state. Pure: the caller swaps
    /// [`Step::to`] in (retrying with the state it finds if another call swapped first) and
    /// then reports [`Step::reason`].
    #[inline]
    pub(super) fn next(self, event: Event, rules: &impl Rules) -> Step {
        use Event as E;
        use State as S;
        match (self, event) {
            // Looking: only an open circuit whose break is over changes.
            (S::Open { until, opens }, E::Look { at }) if at >= until => Step::to(
                S::HalfOpen {
                    since: at,
                    in_flight: 0,
                    succeeded: 0,
                    opens,
                },
                Some(ChangeReason::BreakElapsed),
            ),
            (_, E::Look { .. }) => Step::stay(),

            // Admitting.
            (S::Closed { .. }, E::Admit { .. }) => Step::stay(),
            (S::Isolated, E::Admit { .. }) => Step::refuse(CircuitState::Isolated, None),
            (S::Open { until, .. }, E::Admit { at }) if at < until => {
                Step::refuse(CircuitState::Open, Some(until - at))
            }
            (S::Open { opens, .. }, E::Admit { at }) => Step {
                admit: Admit::Pass {
                    probe_since: Some(at),
                },
                ..Step::to(
                    S::HalfOpen {
                        since: at,
                        in_flight: 1,
                        succeeded: 0,
                        opens,
                    },
                    Some(ChangeReason::BreakElapsed),
                )
            },
            (
                S::HalfOpen {
                    since,
                    in_flight,
                    succeeded,
                    opens,
                },
                E::Admit { at },
            ) => {
                if in_flight + succeeded < rules.probes() {
                    let next = S::HalfOpen {
                        since,
                        in_flight: in_flight + 1,
                        succeeded,
                        opens,
                    };
                    return Step {
                        admit: Admit::Pass {
                            probe_since: Some(since),
                        },
                        ..Step::to(next, None)
                    };
                }
                // Probes that never report (their caller vanished) give their places back
                // after a break's length: a new half-open period begins.
                let deadline = since.saturating_add(rules.break_ms(opens));
                if at < deadline {
                    return Step::refuse(CircuitState::HalfOpen, Some(deadline - at));
                }
                let next = S::HalfOpen {
                    since: at,
                    in_flight: 1,
                    succeeded: 0,
                    opens,
                };
                Step {
                    admit: Admit::Renew { since: at },
                    ..Step::to(next, None)
                }
            }

            // Outcomes of calls admitted closed: only a closed circuit counts them.
            (S::Closed { failures: 0 }, E::Success) => Step::stay(),
            (S::Closed { .. }, E::Success) => Step::to(S::Closed { failures: 0 }, None),
            (S::Closed { failures }, E::Failure { at }) => {
                let failures = failures.saturating_add(1);
                match rules.trips(failures) {
                    Some(reason) => Step::to(
                        S::Open {
                            until: at.saturating_add(rules.break_ms(1)),
                            opens: 1,
                        },
                        Some(reason),
                    ),
                    None => Step::to(S::Closed { failures }, None),
                }
            }

            // Outcomes of probes: only a probe of the current period counts.
            (
                S::HalfOpen {
                    since,
                    in_flight,
                    succeeded,
                    opens,
                },
                E::Probe {
                    since: ticket,
                    success,
                    at,
                },
            ) if since == ticket => {
                if !success {
                    let opens = (opens + 1).min(OPENS_MAX);
                    let next = S::Open {
                        until: at.saturating_add(rules.break_ms(opens)),
                        opens,
                    };
                    Step::to(next, Some(ChangeReason::ProbeFailed))
                } else if succeeded + 1 >= rules.probes() {
                    let probes = succeeded + 1;
                    Step::to(
                        S::Closed { failures: 0 },
                        Some(ChangeReason::ProbesSucceeded { probes }),
                    )
                } else {
                    let next = S::HalfOpen {
                        since,
                        in_flight: in_flight.saturating_sub(1),
                        succeeded: succeeded + 1,
                        opens,
                    };
                    Step::to(next, None)
                }
            }
            (
                S::HalfOpen {
                    since,
                    in_flight,
                    succeeded,
                    opens,
                },
                E::Release { since: ticket },
            ) if since == ticket && in_flight > 0 => Step::to(
                S::HalfOpen {
                    since,
                    in_flight: in_flight - 1,
                    succeeded,
                    opens,
                },
                None,
            ),

            // Late outcomes, and outcomes of another state's calls: nothing changes.
            (_, E::Success | E::Failure { .. } | E::Probe { .. } | E::Release { .. }) => {
                Step::stay()
            }
        }
    }
}

const fn opens_bits(opens: u32) -> u64 {
    let o = if opens > OPENS_MAX { OPENS_MAX } else { opens };
    (o as u64) << OPENS_SHIFT
}

const fn time_bits(ms: u64) -> u64 {
    if ms > TIME_MAX { TIME_MAX } else { ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips() {
        let states = [
            State::Closed { failures: 0 },
            State::Closed { failures: u32::MAX },
            State::Open {
                until: 5_000,
                opens: 1,
            },
            State::Open {
                until: TIME_MAX,
                opens: OPENS_MAX,
            },
            State::HalfOpen {
                since: 12,
                in_flight: 100,
                succeeded: 99,
                opens: 7,
            },
            State::Isolated,
        ];
        for state in states {
            assert_eq!(State::decode(state.encode()), state, "{state:?}");
        }
    }

    /// Rules for the table: 2 probes, a break of 1 s growing ×2 per open in a row, and the
    /// third failure in a row trips.
    struct Table;

    impl Rules for Table {
        fn probes(&self) -> u32 {
            2
        }
        fn break_ms(&self, opens: u32) -> u64 {
            1_000u64.saturating_mul(1 << (opens.max(1) - 1))
        }
        fn trips(&self, failures: u32) -> Option<ChangeReason> {
            (failures >= 3).then_some(ChangeReason::ConsecutiveFailures { failures })
        }
    }

    const fn half(since: u64, in_flight: u32, succeeded: u32, opens: u32) -> State {
        State::HalfOpen {
            since,
            in_flight,
            succeeded,
            opens,
        }
    }

    const fn pass(probe_since: Option<u64>) -> Admit {
        Admit::Pass { probe_since }
    }

    /// `(from, event, to, reason, admit)`: one row of the table below.
    type Row = (State, Event, Option<State>, Option<ChangeReason>, Admit);

    /// Every edge of the diagram in the module docs, and every event that must change
    /// nothing: `(from, event, to, reason, admit)`, with `to: None` for no write.
    #[test]
    fn the_rules_as_a_table() {
        use ChangeReason as R;
        use Event as E;
        use State as S;
        let closed = |failures| S::Closed { failures };
        let open = |until, opens| S::Open { until, opens };
        let refuse = |state, after_ms| Admit::Refuse { state, after_ms };
        #[rustfmt::skip]
        let table: &[Row] = &[
            // closed
            (closed(0), E::Admit { at: 5 },                    None,                     None,                  pass(None)),
            (closed(2), E::Look { at: 5 },                     None,                     None,                  pass(None)),
            (closed(0), E::Success,                            None,                     None,                  pass(None)),
            (closed(2), E::Success,                            Some(closed(0)),          None,                  pass(None)),
            (closed(0), E::Failure { at: 5 },                  Some(closed(1)),          None,                  pass(None)),
            (closed(2), E::Failure { at: 5 },                  Some(open(1_005, 1)),     Some(R::ConsecutiveFailures { failures: 3 }), pass(None)),
            (closed(u32::MAX), E::Failure { at: 5 },           Some(open(1_005, 1)),     Some(R::ConsecutiveFailures { failures: u32::MAX }), pass(None)),
            (closed(1), E::Probe { since: 0, success: false, at: 5 }, None,              None,                  pass(None)),
            (closed(1), E::Release { since: 0 },               None,                     None,                  pass(None)),
            // open
            (open(1_000, 1), E::Admit { at: 400 },             None,                     None,                  refuse(CircuitState::Open, Some(600))),
            (open(1_000, 1), E::Look { at: 999 },              None,                     None,                  pass(None)),
            (open(1_000, 1), E::Look { at: 1_000 },            Some(half(1_000, 0, 0, 1)), Some(R::BreakElapsed), pass(None)),
            (open(1_000, 3), E::Admit { at: 1_200 },           Some(half(1_200, 1, 0, 3)), Some(R::BreakElapsed), pass(Some(1_200))),
            (open(1_000, 1), E::Success,                       None,                     None,                  pass(None)),
            (open(1_000, 1), E::Failure { at: 5 },             None,                     None,                  pass(None)),
            (open(1_000, 1), E::Probe { since: 0, success: true, at: 5 }, None,          None,                  pass(None)),
            // half-open: admitting
            (half(100, 0, 0, 1), E::Admit { at: 150 },         Some(half(100, 1, 0, 1)), None,                  pass(Some(100))),
            (half(100, 1, 0, 1), E::Admit { at: 150 },         Some(half(100, 2, 0, 1)), None,                  pass(Some(100))),
            (half(100, 1, 1, 1), E::Admit { at: 150 },         None,                     None,                  refuse(CircuitState::HalfOpen, Some(950))),
            (half(100, 2, 0, 2), E::Admit { at: 2_099 },       None,                     None,                  refuse(CircuitState::HalfOpen, Some(1))),
            (half(100, 2, 0, 2), E::Admit { at: 2_100 },       Some(half(2_100, 1, 0, 2)), None,                Admit::Renew { since: 2_100 }),
            (half(100, 0, 0, 1), E::Look { at: 9_999 },        None,                     None,                  pass(None)),
            // half-open: probes of this period
            (half(100, 2, 0, 1), E::Probe { since: 100, success: true, at: 200 },  Some(half(100, 1, 1, 1)), None, pass(None)),
            (half(100, 1, 1, 1), E::Probe { since: 100, success: true, at: 200 },  Some(closed(0)), Some(R::ProbesSucceeded { probes: 2 }), pass(None)),
            (half(100, 1, 1, 2), E::Probe { since: 100, success: false, at: 200 }, Some(open(4_200, 3)), Some(R::ProbeFailed), pass(None)),
            (half(100, 1, 0, OPENS_MAX), E::Probe { since: 100, success: false, at: 0 }, Some(open(u64::MAX, OPENS_MAX)), Some(R::ProbeFailed), pass(None)),
            (half(100, 2, 0, 1), E::Release { since: 100 },    Some(half(100, 1, 0, 1)), None,                  pass(None)),
            (half(100, 0, 1, 1), E::Release { since: 100 },    None,                     None,                  pass(None)),
            // half-open: late outcomes (another period, or calls admitted closed)
            (half(100, 1, 0, 1), E::Probe { since: 50, success: false, at: 200 },  None, None,                  pass(None)),
            (half(100, 1, 0, 1), E::Release { since: 50 },     None,                     None,                  pass(None)),
            (half(100, 1, 0, 1), E::Success,                   None,                     None,                  pass(None)),
            (half(100, 1, 0, 1), E::Failure { at: 200 },       None,                     None,                  pass(None)),
            // isolated
            (S::Isolated, E::Admit { at: 5 },                  None,                     None,                  refuse(CircuitState::Isolated, None)),
            (S::Isolated, E::Look { at: 5 },                   None,                     None,                  pass(None)),
            (S::Isolated, E::Failure { at: 5 },                None,                     None,                  pass(None)),
            (S::Isolated, E::Success,                          None,                     None,                  pass(None)),
            (S::Isolated, E::Probe { since: 0, success: true, at: 5 }, None,             None,                  pass(None)),
            (S::Isolated, E::Release { since: 0 },             None,                     None,                  pass(None)),
        ];
        for &(from, event, to, reason, admit) in table {
            let step = from.next(event, &Table);
            assert_eq!(step, Step { to, reason, admit }, "{from:?} + {event:?}");
        }
    }

    #[test]
    fn times_and_opens_saturate() {
        let open = State::Open {
            until: u64::MAX,
            opens: 1000,
        };
        assert_eq!(
            State::decode(open.encode()),
            State::Open {
                until: TIME_MAX,
                opens: OPENS_MAX
            }
        );
    }
}
