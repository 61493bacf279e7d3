//! A sliding window of two counters, lock-free: what the retry budget (requests, retries) and
//! the breaker's failure rate (calls, failures) count in.
//!
//! Time is cut into slots of a tenth of the window. The window at a moment is that moment's
//! slot and the ten before it, so it always covers at least the whole window and at most a
//! tenth more. Each slot is one `AtomicU64` holding the slot's number (its *epoch*, 22 bits)
//! and both counters (21 bits each, saturating at 2,097,151): a slot is reused for a newer
//! epoch by one compare-and-swap that replaces number and counts together, so no update is
//! ever added to the wrong slot and nothing needs a lock.
//!
//! `latest` is the newest epoch any slot was opened for. An operation whose clock reads an
//! older epoch (another thread's slightly older instant) works in `latest` instead, so a slot
//! is never reopened for an older epoch. It is raised before the slot is opened, and read
//! after the slot, so whoever sees a slot's new epoch also sees `latest` at least that high.
//!
//! The 22-bit epoch repeats only after 11 × 2²² slots (46 million: 53 days of 100 ms slots);
//! a slot left untouched for exactly a multiple of that, while its neighbours were in use,
//! would be read as current. That is the only approximation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::ticks::nanos;

/// Slots per window: a slot is a tenth of it.
pub(crate) const DIVISIONS: u64 = 10;
/// Slots kept: the current one and the ten before it.
pub(crate) const SLOTS: usize = 11;

const TAG_BITS: u32 = 22;
const COUNT_BITS: u32 = 21;
const TAG_MASK: u64 = (1 << TAG_BITS) - 1;
/// The most either counter of one slot can hold; more saturates.
pub(crate) const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;

const fn pack(epoch: u64, total: u64, marked: u64) -> u64 {
    ((epoch & TAG_MASK) << (2 * COUNT_BITS)) | (total << COUNT_BITS) | marked
}

const fn tag_of(word: u64) -> u64 {
    word >> (2 * COUNT_BITS)
}

const fn counts_of(word: u64) -> Counts {
    Counts {
        total: (word >> COUNT_BITS) & COUNT_MAX,
        marked: word & COUNT_MAX,
    }
}

/// The two counters: everything counted (`total`) and the part of it that is marked
/// (retries of requests, failures of calls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub(crate) total: u64,
    pub(crate) marked: u64,
}

impl Counts {
    pub(crate) const ZERO: Counts = Counts {
        total: 0,
        marked: 0,
    };

    fn plus(self, other: Counts) -> Counts {
        Counts {
            total: self.total + other.total,
            marked: self.marked + other.marked,
        }
    }
}

/// See the module docs.
#[derive(Debug)]
pub(crate) struct Window {
    slot_nanos: u64,
    slots: [AtomicU64; SLOTS],
    /// The newest epoch a slot was opened for.
    latest: AtomicU64,
    /// Epochs before this one were forgotten by a reset.
    floor: AtomicU64,
}

impl Window {
    /// A window as long as `span` (at least ten nanoseconds; the callers validate more).
    pub(crate) const fn new(span: Duration) -> Self {
        let slot = nanos(span) / DIVISIONS;
        Window {
            slot_nanos: if slot == 0 { 1 } else { slot },
            slots: [const { AtomicU64::new(0) }; SLOTS],
            latest: AtomicU64::new(0),
            floor: AtomicU64::new(0),
        }
    }

    /// The epoch an operation at `nanos` works in: its own, or a newer one already opened.
    #[inline]
    fn epoch(&self, nanos: u64) -> u64 {
        (nanos / self.slot_nanos).max(self.latest.load(Ordering::Acquire))
    }

    /// Adds to the counters of the slot of `nanos`.
    #[inline]
    pub(crate) fn add(&self, nanos: u64, total: u64, marked: u64) {
        let mut epoch = nanos / self.slot_nanos;
        loop {
            let slot = &self.slots[(epoch % SLOTS as u64) as usize];
            let word = slot.load(Ordering::Acquire);
            let latest = self.latest.load(Ordering::Acquire);
            if latest > epoch {
                epoch = latest;
                continue;
            }
            let fresh = tag_of(word) == epoch & TAG_MASK && latest == epoch;
            let base = if fresh { counts_of(word) } else { Counts::ZERO };
            let new = pack(
                epoch,
                base.total.saturating_add(total).min(COUNT_MAX),
                base.marked.saturating_add(marked).min(COUNT_MAX),
            );
            if fresh && new == word {
                return; // saturated: nothing to write
            }
            if !fresh {
                self.latest.fetch_max(epoch, Ordering::AcqRel);
            }
            if slot
                .compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return;
            }
        }
    }

    /// Marks one more in the slot of `nanos` if `admit` says yes to the counts of the window
    /// as they are; else returns those counts. The check and the mark are one
    /// compare-and-swap on the current slot, so two callers cannot both take the last place.
    pub(crate) fn try_mark(
        &self,
        nanos: u64,
        mut admit: impl FnMut(Counts) -> bool,
    ) -> Result<(), Counts> {
        let mut epoch = nanos / self.slot_nanos;
        loop {
            let index = (epoch % SLOTS as u64) as usize;
            let slot = &self.slots[index];
            let word = slot.load(Ordering::Acquire);
            let latest = self.latest.load(Ordering::Acquire);
            if latest > epoch {
                epoch = latest;
                continue;
            }
            let fresh = tag_of(word) == epoch & TAG_MASK && latest == epoch;
            let current = if fresh { counts_of(word) } else { Counts::ZERO };
            let seen = self.sum(epoch, Some(index)).plus(current);
            if current.marked >= COUNT_MAX || !admit(seen) {
                return Err(seen);
            }
            let new = pack(epoch, current.total, current.marked + 1);
            if !fresh {
                self.latest.fetch_max(epoch, Ordering::AcqRel);
            }
            if slot
                .compare_exchange(word, new, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return Ok(());
            }
        }
    }

    /// The counts of the window at `nanos`.
    pub(crate) fn counts(&self, nanos: u64) -> Counts {
        self.sum(self.epoch(nanos), None)
    }

    /// The window at `nanos`, slot by slot from the oldest: each slot's counts and the
    /// moment (in nanoseconds) it leaves the window.
    pub(crate) fn slots(&self, nanos: u64) -> [(u64, Counts); SLOTS] {
        let epoch = self.epoch(nanos);
        let floor = self.floor.load(Ordering::Acquire);
        let mut out = [(0, Counts::ZERO); SLOTS];
        let oldest = epoch.saturating_sub(SLOTS as u64 - 1);
        let mut index = (oldest % SLOTS as u64) as usize;
        for (i, entry) in out.iter_mut().enumerate() {
            let wanted = oldest + i as u64;
            let leaves = wanted
                .saturating_add(SLOTS as u64)
                .saturating_mul(self.slot_nanos);
            let word = self.slots[index].load(Ordering::Acquire);
            let counts = if wanted <= epoch && wanted >= floor && tag_of(word) == wanted & TAG_MASK
            {
                counts_of(word)
            } else {
                Counts::ZERO
            };
            *entry = (leaves, counts);
            index = if index == SLOTS - 1 { 0 } else { index + 1 };
        }
        out
    }

    /// Forgets everything counted up to `nanos`.
    pub(crate) fn reset(&self, nanos: u64) {
        let epoch = self.epoch(nanos);
        self.floor.fetch_max(epoch, Ordering::AcqRel);
        self.latest.fetch_max(epoch, Ordering::AcqRel);
        self.slots[(epoch % SLOTS as u64) as usize].store(pack(epoch, 0, 0), Ordering::Release);
    }

    /// The counts of the window ending in `epoch`, without the slot at `skip`.
    fn sum(&self, epoch: u64, skip: Option<usize>) -> Counts {
        let floor = self.floor.load(Ordering::Acquire);
        let mut sum = Counts::ZERO;
        // From the newest slot back, stepping the index down instead of dividing each time.
        let mut index = (epoch % SLOTS as u64) as usize;
        for back in 0..(SLOTS as u64).min(epoch + 1) {
            let wanted = epoch - back;
            if wanted < floor {
                break; // the older ones were forgotten too
            }
            if Some(index) != skip {
                let word = self.slots[index].load(Ordering::Acquire);
                if tag_of(word) == wanted & TAG_MASK {
                    sum = sum.plus(counts_of(word));
                }
            }
            index = if index == 0 { SLOTS - 1 } else { index - 1 };
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SLOT: u64 = 100_000_000; // a 1 s window: 100 ms slots

    fn window() -> Window {
        Window::new(Duration::from_secs(1))
    }

    #[test]
    fn counts_cover_the_current_slot_and_the_ten_before() {
        let w = window();
        w.add(0, 1, 0);
        w.add(SLOT * 5, 2, 1);
        assert_eq!(
            w.counts(SLOT * 10),
            Counts {
                total: 3,
                marked: 1
            }
        );
        // Eleven slots after the first, it has left the window.
        assert_eq!(
            w.counts(SLOT * 11),
            Counts {
                total: 2,
                marked: 1
            }
        );
        assert_eq!(w.counts(SLOT * 16), Counts::ZERO);
    }

    #[test]
    fn a_slot_is_reopened_for_a_newer_epoch_with_fresh_counts() {
        let w = window();
        w.add(0, 7, 7);
        w.add(SLOT * 11, 1, 0); // same slot, eleven slots later
        assert_eq!(
            w.counts(SLOT * 11),
            Counts {
                total: 1,
                marked: 0
            }
        );
    }

    #[test]
    fn an_older_reading_counts_in_the_newest_epoch() {
        let w = window();
        w.add(SLOT * 20, 1, 0);
        w.add(SLOT * 3, 1, 0); // a thread with an older instant
        assert_eq!(
            w.counts(SLOT * 20),
            Counts {
                total: 2,
                marked: 0
            }
        );
        assert_eq!(w.counts(SLOT * 31), Counts::ZERO);
    }

    #[test]
    fn try_mark_checks_and_marks_in_one_step() {
        let w = window();
        w.add(0, 3, 0);
        let admit = |c: Counts| c.marked < c.total;
        assert_eq!(w.try_mark(SLOT, admit), Ok(()));
        assert_eq!(w.try_mark(SLOT, admit), Ok(()));
        assert_eq!(w.try_mark(SLOT, admit), Ok(()));
        assert_eq!(
            w.try_mark(SLOT, admit),
            Err(Counts {
                total: 3,
                marked: 3
            })
        );
    }

    #[test]
    fn counters_saturate() {
        let w = window();
        w.add(0, COUNT_MAX, COUNT_MAX);
        w.add(0, 5, 5);
        assert_eq!(
            w.counts(0),
            Counts {
                total: COUNT_MAX,
                marked: COUNT_MAX
            }
        );
        assert!(w.try_mark(0, |_| true).is_err());
    }

    #[test]
    fn reset_forgets_what_was_counted() {
        let w = window();
        w.add(0, 4, 4);
        w.add(SLOT * 2, 4, 4);
        w.reset(SLOT * 2);
        assert_eq!(w.counts(SLOT * 2), Counts::ZERO);
        w.add(SLOT * 3, 1, 0);
        assert_eq!(
            w.counts(SLOT * 3),
            Counts {
                total: 1,
                marked: 0
            }
        );
    }

    #[test]
    fn slots_run_oldest_first_with_the_moment_each_leaves() {
        let w = window();
        w.add(SLOT * 12, 2, 1);
        let slots = w.slots(SLOT * 12);
        assert_eq!(
            slots[SLOTS - 1],
            (
                SLOT * 23,
                Counts {
                    total: 2,
                    marked: 1
                }
            )
        );
        assert_eq!(slots[0].0, SLOT * 13);
    }

    #[test]
    fn threads_never_lose_a_count() {
        let w = std::sync::Arc::new(window());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let w = std::sync::Arc::clone(&w);
                std::thread::spawn(move || {
                    for i in 0..10_000u64 {
                        w.add(i % 3 * SLOT, 1, 0);
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert_eq!(w.counts(SLOT * 2).total, 40_000);
    }
}
