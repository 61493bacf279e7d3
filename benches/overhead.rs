//! What a retry wrapper costs in time, against the crates users would otherwise pick.
//!
//! Groups (numbered as in BENCHMARKS.md):
//! 1. `success`: the first attempt succeeds; ratio to the direct call. Polled once with no
//!    runtime (the wrapper's own cost), then inside `Runtime::block_on` (the cost an
//!    application sees, executor included).
//! 2. `zero_delay`: two failures, then success, waiting `Duration::ZERO`; ratio to a
//!    hand-written three-call loop. Polled once with no runtime (a zero delay must not touch
//!    the timer), then again inside `Runtime::block_on` for the crates that need a timer.
//! 5. `retry_macro`: an `#[retry]` fn against the same policy called by hand in an `async fn`,
//!    on the success path (no runtime, then `block_on`) and on two failures then success
//!    inside a scope whose clock ends every wait at once (the attribute cannot ask for a zero
//!    delay).
//! 6. `jitter_draw`: drawing one jittered delay, per strategy and crate.
//!
//! Criterion prints its usual report; at the end this binary prints the same results as
//! Markdown tables (median and min–max of the per-iteration sample times, and ratios), ready
//! for BENCHMARKS.md. Counts and sizes are in the `facts` bench.

#[allow(
    dead_code,
    reason = "shared with the `facts` bench, which uses other parts"
)]
mod contestants;
mod summary;

use std::cell::Cell;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, SamplingMode};
use retry_toolkit::{Jitter, JitterRng};
use tower::retry::backoff::{Backoff, MakeBackoff};

use contestants::{FIRST, THIRD, poll_once};
use summary::Suite;

fn main() {
    let mut suite = Suite::new(Criterion::default().configure_from_args());
    user_shaped(&mut suite);
    success(&mut suite);
    zero_delay(&mut suite);
    retry_macro(&mut suite);
    jitter_draw(&mut suite);
    suite.finish();
}

/// Groups 1 and 2 (group 0 in BENCHMARKS.md) with the operation users write (an `async fn`,
/// a closure capturing a `&Cell`), polled once and awaited in a running task (criterion's
/// `b.to_async` shape).
fn user_shaped(suite: &mut Suite) {
    use contestants as c;
    let rt = contestants::runtime();
    suite
        .group("success_async", "direct call")
        .bench("direct call", || poll_once(c::direct_async()))
        .bench("retry-toolkit", || poll_once(c::retry_toolkit_async()))
        .bench("#[retry]", || poll_once(c::retry_macro_async()))
        .bench("tokio-retry", || poll_once(c::tokio_retry_async()))
        .bench("tower", || poll_once(c::tower_async(FIRST)));
    suite
        .group("success_async_awaited", "direct call")
        .bench_awaited("direct call", &rt, c::direct_async)
        .bench_awaited("retry-toolkit", &rt, c::retry_toolkit_async)
        .bench_awaited("#[retry]", &rt, c::retry_macro_async)
        .bench_awaited("tokio-retry", &rt, c::tokio_retry_async)
        .bench_awaited("tower", &rt, || c::tower_async(FIRST));
    suite
        .group("success_capturing_awaited", "direct call")
        .bench_awaited("direct call", &rt, || async {
            c::capturing(&Cell::new(0), FIRST).await
        })
        .bench_awaited("retry-toolkit", &rt, || async {
            c::retry_toolkit_capturing(&Cell::new(0), FIRST).await
        })
        .bench_awaited("tokio-retry", &rt, || async {
            c::tokio_retry_capturing(&Cell::new(0), FIRST).await
        })
        .bench_awaited("tower", &rt, || async {
            c::tower_capturing(&Cell::new(0), FIRST).await
        });
    suite
        .group("zero_delay_async", "hand-written loop")
        .bench("hand-written loop", || poll_once(c::hand_loop_async(THIRD)))
        .bench("retry-toolkit", || {
            poll_once(c::retry_toolkit_zero_async(THIRD))
        })
        .bench("tower", || poll_once(c::tower_async(THIRD)));
    suite
        .group("zero_delay_async_awaited", "hand-written loop")
        .bench_awaited("hand-written loop", &rt, || c::hand_loop_async(THIRD))
        .bench_awaited("retry-toolkit", &rt, || c::retry_toolkit_zero_async(THIRD))
        .bench_awaited("tower", &rt, || c::tower_async(THIRD));
}

/// 1. The first attempt succeeds: the whole cost of the wrapper on the hot path.
fn success(suite: &mut Suite) {
    suite
        .group("success", "direct call")
        .bench("direct call", || poll_once(contestants::direct::<1>()))
        .bench("retry-toolkit", || {
            poll_once(contestants::retry_toolkit::<1>(FIRST))
        })
        .bench("backon", || poll_once(contestants::backon::<1>(FIRST)))
        .bench("tokio-retry", || {
            poll_once(contestants::tokio_retry::<1>(FIRST))
        })
        .bench("tower", || {
            poll_once(contestants::tower_no_wait::<1>(FIRST))
        });

    // The same inside `block_on` of a current-thread runtime: what an application pays,
    // executor included.
    let rt = contestants::runtime();
    suite
        .group("success_runtime", "direct call")
        .bench("direct call", || rt.block_on(contestants::direct::<1>()))
        .bench("retry-toolkit", || {
            rt.block_on(contestants::retry_toolkit::<1>(FIRST))
        })
        .bench("backon", || rt.block_on(contestants::backon::<1>(FIRST)))
        .bench("tokio-retry", || {
            rt.block_on(contestants::tokio_retry::<1>(FIRST))
        })
        .bench("tower", || {
            rt.block_on(contestants::tower_no_wait::<1>(FIRST))
        });
}

/// 2. Fail twice, then succeed, with a zero delay.
fn zero_delay(suite: &mut Suite) {
    // Without a runtime: only code that never touches the timer can finish in one poll.
    suite
        .group("zero_delay", "hand-written loop")
        .bench("hand-written loop", || {
            poll_once(contestants::hand_loop::<1>(THIRD))
        })
        .bench("retry-toolkit", || {
            poll_once(contestants::retry_toolkit_zero::<1>(THIRD))
        })
        .bench("tower", || {
            poll_once(contestants::tower_no_wait::<1>(THIRD))
        });

    // Inside a current-thread runtime with a real timer, where backon and tokio-retry sleep.
    // A zero-length tokio sleep still waits for the next millisecond tick, so these take
    // milliseconds: sample flat, fewer samples.
    let rt = contestants::runtime();
    suite
        .group("zero_delay_runtime", "hand-written loop")
        .configure(|g| {
            g.sampling_mode(SamplingMode::Flat).sample_size(20);
        })
        .bench("hand-written loop", || {
            rt.block_on(contestants::hand_loop::<1>(THIRD))
        })
        .bench("retry-toolkit", || {
            rt.block_on(contestants::retry_toolkit_zero::<1>(THIRD))
        })
        .bench("tower", || {
            rt.block_on(contestants::tower_no_wait::<1>(THIRD))
        })
        .bench("backon", || {
            rt.block_on(contestants::backon_zero::<1>(THIRD))
        })
        .bench("tokio-retry", || {
            rt.block_on(contestants::tokio_retry_zero::<1>(THIRD))
        });
}

/// Group 5: an `#[retry]` fn against the same policy called by hand, each called with a
/// fresh call counter.
fn retry_macro(suite: &mut Suite) {
    use contestants::{retry_by_hand, retry_by_hand_zero, retry_macro};

    suite
        .group("retry_macro", "by hand")
        .bench("by hand", || {
            poll_once(retry_by_hand::<1>(&Cell::new(0), FIRST))
        })
        .bench("#[retry]", || {
            poll_once(retry_macro::<1>(&Cell::new(0), FIRST))
        });

    let rt = contestants::runtime();
    suite
        .group("retry_macro_runtime", "by hand")
        .bench("by hand", || {
            rt.block_on(retry_by_hand::<1>(&Cell::new(0), FIRST))
        })
        .bench("#[retry]", || {
            rt.block_on(retry_macro::<1>(&Cell::new(0), FIRST))
        });

    // Two failures, then success. The attribute cannot ask for a zero delay, so every wait
    // goes through the default clock, here a scoped one whose sleeps end at once.
    let scope = contestants::instant_scope();
    suite
        .group("retry_macro_retries", "by hand")
        .bench("by hand", || {
            let calls = Cell::new(0);
            poll_once(scope.clone().run(retry_by_hand::<1>(&calls, THIRD)))
        })
        .bench("#[retry]", || {
            let calls = Cell::new(0);
            poll_once(scope.clone().run(retry_macro::<1>(&calls, THIRD)))
        })
        .bench("by hand, zero delay", || {
            let calls = Cell::new(0);
            poll_once(scope.clone().run(retry_by_hand_zero::<1>(&calls, THIRD)))
        });
}

/// Group 6a: one jittered delay, once the schedule has reached its 1 s cap. Drawn alone,
/// computed by a schedule as the retry loop calls it (failed attempt 5), and as the next
/// item of each crate's endless iterator of delays.
fn jitter_draw(suite: &mut Suite) {
    let cap = Duration::from_secs(1);
    let base = contestants::BASE;
    let previous = Duration::from_millis(500);
    let mut rng = JitterRng::seeded(7);

    // Every schedule is first run up to its cap, where it stays.
    let mut ours = at_cap(contestants::exponential(cap).delays(JitterRng::seeded(7)));
    let mut backon = at_cap(backon::BackoffBuilder::build(
        contestants::backon_builder()
            .with_max_delay(cap)
            .without_max_times(),
    ));
    let mut tokio_retry = at_cap(
        tokio_retry::strategy::ExponentialBackoff::from_millis(2)
            .factor(50)
            .max_delay(cap)
            .map(tokio_retry::strategy::jitter),
    );
    // tower's backoff hands out a tokio `Sleep`, not a duration: its row includes creating
    // one (reading the clock; nothing is registered with the timer), inside a runtime.
    let rt = contestants::runtime();
    let _context = rt.enter();
    let mut tower = contestants::tower_backoff_maker(cap).make_backoff();
    for _ in 0..AT_CAP {
        drop(tower.next_backoff());
    }

    let mut group = suite.group("jitter_draw", "");
    for jitter in Jitter::ALL {
        group.bench(&format!("retry-toolkit Jitter::{jitter:?}.draw"), || {
            black_box(jitter).draw(
                black_box(cap),
                black_box(base),
                black_box(cap),
                black_box(previous),
                &mut rng,
            )
        });
    }
    group
        .bench(
            "retry-toolkit ExponentialBackoff, one retry-loop step",
            contestants::loop_step(contestants::exponential(cap)),
        )
        .bench(
            "retry-toolkit default policy, one retry-loop step",
            contestants::loop_step(contestants::d1_schedule(cap)),
        )
        .bench("retry-toolkit ExponentialBackoff::delays() (full)", || {
            ours.next()
        })
        .bench("backon ExponentialBackoff", || backon.next())
        .bench("tokio-retry ExponentialBackoff + jitter", || {
            tokio_retry.next()
        })
        .bench("tower ExponentialBackoff (creates a Sleep)", || {
            tower.next_backoff()
        });
}

/// Retries after which every schedule here sits at its cap (100 ms · 2^k ≥ 1 s for k ≥ 4).
const AT_CAP: usize = 20;

fn at_cap<I: Iterator>(mut schedule: I) -> I {
    schedule.by_ref().take(AT_CAP).for_each(drop);
    schedule
}
