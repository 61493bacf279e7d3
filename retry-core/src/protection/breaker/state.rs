//! The breaker's state in one word, so that every transition is one compare-and-swap.
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
