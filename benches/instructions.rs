//! Instructions per call, counted by valgrind: the same comparisons as `overhead`, in a unit
//! that does not move when other processes share the machine.
//!
//! Run by `cargo bench`, this binary re-runs itself under
//! `valgrind --tool=cachegrind` once per contestant, twice (with `FEW` and `MANY` calls), and
//! reports `(I(MANY) - I(FEW)) / (MANY - FEW)`: start-up and the measuring loop cancel out.
//! Without valgrind on the `PATH` it says so and measures nothing. Without an argument every
//! row is counted (a few minutes); with one (`cargo bench --bench instructions -- async`) only
//! the rows whose `group/name` contain it. Only code that finishes
//! without waiting is counted here: a timer's wait costs time, not instructions.

#[allow(
    dead_code,
    reason = "shared with the other benches, which use other parts"
)]
mod contestants;
#[allow(dead_code, reason = "shared by the counting benches")]
mod counted;

use std::cell::Cell;
use std::hint::black_box;
use std::time::Duration;

use retry_toolkit::{Constant, Jitter, JitterRng, RetryPolicy};

use contestants::{FIRST, THIRD, numbered_op, poll_once};

/// The groups whose rows are compared with their first row.
const WITH_RATIOS: &[&str] = &[
    "success_async",
    "success_async_awaited",
    "success_capturing",
    "success_capturing_awaited",
    "zero_delay_async",
    "zero_delay_async_awaited",
    "success",
    "success_runtime",
    "success_blocking",
    "zero_delay_blocking",
    "zero_delay",
    "retry_macro",
    "retry_macro_runtime",
    "retry_macro_retries",
];

const FEW: u64 = 1_000;
const MANY: u64 = 101_000;

/// A routine polling `twin(&calls, THIRD)` once inside group 5's instant scope, with a fresh
/// call counter each time. (A macro: a generic function cannot name the future's borrow.)
macro_rules! in_scope {
    ($twin:path) => {{
        let scope = contestants::instant_scope();
        move || {
            let calls = Cell::new(0);
            poll_once(scope.clone().run($twin(&calls, THIRD)))
        }
    }};
}

/// `group / name => routine`, where `routine` evaluates to the closure making one call (it
/// may own state, such as a generator, created once). Each arm is monomorphized into its
/// own loop. In the groups of `WITH_RATIOS`, the first entry is the baseline.
macro_rules! contestants {
    ($($group:literal / $name:literal => $routine:expr;)*) => {
        const LIST: &[(&str, &str)] = &[$(($group, $name)),*];

        /// Runs contestant `group/name` `calls` times; `false` if there is no such contestant.
        fn run(key: &str, calls: u64) -> bool {
            match key {
                $(k if k == concat!($group, "/", $name) => {
                    #[allow(unused_mut, reason = "some routines own no state")]
                    let mut routine = $routine;
                    Routine::run(&mut routine, calls);
                    true
                })*
                _ => false,
            }
        }
    };
}

/// What a row runs `calls` times: a closure making one call, or [`Awaited`].
trait Routine {
    fn run(&mut self, calls: u64);
}

impl<F: FnMut() -> O, O> Routine for F {
    fn run(&mut self, calls: u64) {
        for _ in 0..calls {
            let _ = black_box(self());
        }
    }
}

/// `make()`'s future awaited `calls` times in a row inside one `block_on`, as criterion's
/// `b.to_async(&rt)` runs it: the cost of an `.await` in a running task.
struct Awaited<M> {
    rt: tokio::runtime::Runtime,
    make: M,
}

fn awaited<M: FnMut() -> F, F: std::future::Future>(make: M) -> Awaited<M> {
    Awaited {
        rt: contestants::runtime(),
        make,
    }
}

impl<M: FnMut() -> F, F: std::future::Future> Routine for Awaited<M> {
    fn run(&mut self, calls: u64) {
        let make = &mut self.make;
        self.rt.block_on(async {
            for _ in 0..calls {
                black_box(make().await);
            }
        });
    }
}

/// A routine calling `$make(&calls, $at)` with a fresh counter each time (the capturing
/// operation's rows), polled once.
macro_rules! fresh {
    ($make:path, $at:expr) => {
        || {
            let calls = Cell::new(0);
            poll_once($make(&calls, $at))
        }
    };
}

/// The same, awaited in a running task.
macro_rules! fresh_awaited {
    ($make:path, $at:expr) => {
        awaited(|| async {
            let calls = Cell::new(0);
            $make(&calls, $at).await
        })
    };
}

contestants! {
    "success_async" / "direct call" => || poll_once(contestants::direct_async());
    "success_async" / "retry-toolkit" => || poll_once(contestants::retry_toolkit_async());
    "success_async" / "#[retry]" => || poll_once(contestants::retry_macro_async());
    "success_async" / "backon" => || poll_once(contestants::backon_async());
    "success_async" / "tokio-retry" => || poll_once(contestants::tokio_retry_async());
    "success_async" / "tower" => || poll_once(contestants::tower_async(FIRST));

    "success_async_awaited" / "direct call" => awaited(contestants::direct_async);
    "success_async_awaited" / "retry-toolkit" => awaited(contestants::retry_toolkit_async);
    "success_async_awaited" / "#[retry]" => awaited(contestants::retry_macro_async);
    "success_async_awaited" / "backon" => awaited(contestants::backon_async);
    "success_async_awaited" / "tokio-retry" => awaited(contestants::tokio_retry_async);
    "success_async_awaited" / "tower" => awaited(|| contestants::tower_async(FIRST));

    "success_capturing" / "direct call" => fresh!(contestants::capturing, FIRST);
    "success_capturing" / "retry-toolkit" => fresh!(contestants::retry_toolkit_capturing, FIRST);
    "success_capturing" / "tokio-retry" => fresh!(contestants::tokio_retry_capturing, FIRST);
    "success_capturing" / "tower" => fresh!(contestants::tower_capturing, FIRST);

    "success_capturing_awaited" / "direct call" => fresh_awaited!(contestants::capturing, FIRST);
    "success_capturing_awaited" / "retry-toolkit" => fresh_awaited!(contestants::retry_toolkit_capturing, FIRST);
    "success_capturing_awaited" / "tokio-retry" => fresh_awaited!(contestants::tokio_retry_capturing, FIRST);
    "success_capturing_awaited" / "tower" => fresh_awaited!(contestants::tower_capturing, FIRST);

    "zero_delay_async" / "hand-written loop" => || poll_once(contestants::hand_loop_async(THIRD));
    "zero_delay_async" / "retry-toolkit" => || poll_once(contestants::retry_toolkit_zero_async(THIRD));
    "zero_delay_async" / "tower" => || poll_once(contestants::tower_async(THIRD));

    "zero_delay_async_awaited" / "hand-written loop" => awaited(|| contestants::hand_loop_async(THIRD));
    "zero_delay_async_awaited" / "retry-toolkit" => awaited(|| contestants::retry_toolkit_zero_async(THIRD));
    "zero_delay_async_awaited" / "tower" => awaited(|| contestants::tower_async(THIRD));

    "success_blocking" / "direct call" => contestants::direct_blocking;
    "success_blocking" / "retry-toolkit" => || contestants::retry_toolkit_blocking(FIRST);
    "success_blocking" / "backon" => || contestants::backon_blocking(FIRST);

    "zero_delay_blocking" / "hand-written loop" => || contestants::hand_loop_blocking(THIRD);
    "zero_delay_blocking" / "retry-toolkit" => || contestants::retry_toolkit_blocking_zero(THIRD);
    "zero_delay_blocking" / "backon" => || contestants::backon_blocking_zero(THIRD);

    "success" / "direct call" => || poll_once(contestants::direct::<1>());
    "success" / "retry-toolkit" => || poll_once(contestants::retry_toolkit::<1>(FIRST));
    "success" / "backon" => || poll_once(contestants::backon::<1>(FIRST));
    "success" / "tokio-retry" => || poll_once(contestants::tokio_retry::<1>(FIRST));
    "success" / "tower" => || poll_once(contestants::tower_no_wait::<1>(FIRST));

    "success_runtime" / "direct call" => in_runtime(contestants::direct::<1>);
    "success_runtime" / "retry-toolkit" => in_runtime(|| contestants::retry_toolkit::<1>(FIRST));
    "success_runtime" / "backon" => in_runtime(|| contestants::backon::<1>(FIRST));
    "success_runtime" / "tokio-retry" => in_runtime(|| contestants::tokio_retry::<1>(FIRST));
    "success_runtime" / "tower" => in_runtime(|| contestants::tower_no_wait::<1>(FIRST));

    "zero_delay" / "hand-written loop" => || poll_once(contestants::hand_loop::<1>(THIRD));
    "zero_delay" / "retry-toolkit" => || poll_once(contestants::retry_toolkit_zero::<1>(THIRD));
    "zero_delay" / "tower" => || poll_once(contestants::tower_no_wait::<1>(THIRD));

    "retry_macro" / "by hand" => || poll_once(contestants::retry_by_hand::<1>(&Cell::new(0), FIRST));
    "retry_macro" / "#[retry]" => || poll_once(contestants::retry_macro::<1>(&Cell::new(0), FIRST));

    "retry_macro_runtime" / "by hand" => {
        let rt = contestants::runtime();
        move || rt.block_on(contestants::retry_by_hand::<1>(&Cell::new(0), FIRST))
    };
    "retry_macro_runtime" / "#[retry]" => {
        let rt = contestants::runtime();
        move || rt.block_on(contestants::retry_macro::<1>(&Cell::new(0), FIRST))
    };

    "retry_macro_retries" / "by hand" => in_scope!(contestants::retry_by_hand::<1>);
    "retry_macro_retries" / "#[retry]" => in_scope!(contestants::retry_macro::<1>);
    "retry_macro_retries" / "by hand, zero delay" => in_scope!(contestants::retry_by_hand_zero::<1>);

    // The `metrics` feature with no recorder installed: run once without and once with
    // `--features metrics` (this package's feature, which turns on the core's) and compare.
    "metrics" / "success, polled once" => || poll_once(contestants::retry_toolkit_async());
    "metrics" / "success, awaited" => awaited(contestants::retry_toolkit_async);
    "metrics" / "two zero-delay retries, polled once" => || poll_once(contestants::retry_toolkit_zero_async(THIRD));
    "metrics" / "gave up after three zero-delay attempts, polled once" => || poll_once(contestants::retry_toolkit_zero_async(u32::MAX));

    // Where retry-toolkit's instructions go: compare with its rows above (see BENCHMARKS.md).
    "retry-toolkit parts" / "success, clock with a 1-byte sleep" => || poll_once(
        RetryPolicy::DEFAULT.retry(numbered_op::<1>(FIRST)).clock(contestants::ReadyClock)
    );
    "retry-toolkit parts" / "success in a runtime, clock with a 1-byte sleep" => in_runtime(
        || RetryPolicy::DEFAULT.retry(numbered_op::<1>(FIRST)).clock(contestants::ReadyClock)
    );
    "retry-toolkit parts" / "zero delay, seeded" => || poll_once(contestants::retry_toolkit_zero_seeded::<1>(THIRD));
    "retry-toolkit parts" / "zero delay, seeded, clock with a 1-byte sleep" => || poll_once(
        RetryPolicy::DEFAULT
            .with_seed(1)
            .retry(numbered_op::<1>(THIRD))
            .backoff(Constant(Duration::ZERO))
            .clock(contestants::ReadyClock)
    );
    "retry-toolkit parts" / "success, `when_ok` (never retries)" => || poll_once(contestants::retry_toolkit_when_ok());
    "retry-toolkit parts" / "success, `summarize()`" => || poll_once(contestants::retry_toolkit_summarized());
    "retry-toolkit parts" / "JitterRng::from_entropy()" => JitterRng::from_entropy;
    "retry-toolkit parts" / "JitterRng::seeded(1)" => || JitterRng::seeded(black_box(1));
    "retry-toolkit parts" / "JitterRng::below(1 s)" => {
        let mut rng = JitterRng::seeded(7);
        move || rng.below(black_box(CAP))
    };

    "jitter_draw" / "retry-toolkit Jitter::Full.draw" => draw(Jitter::Full);
    "jitter_draw" / "retry-toolkit Jitter::Equal.draw" => draw(Jitter::Equal);
    "jitter_draw" / "retry-toolkit Jitter::Decorrelated.draw" => draw(Jitter::Decorrelated);
    "jitter_draw" / "retry-toolkit Jitter::None.draw" => draw(Jitter::None);
    "jitter_draw" / "retry-toolkit ExponentialBackoff, one retry-loop step" =>
        contestants::loop_step(contestants::exponential(CAP));
    "jitter_draw" / "retry-toolkit Fibonacci, one retry-loop step" =>
        contestants::loop_step(contestants::fibonacci(CAP));
    "jitter_draw" / "retry-toolkit default policy, one retry-loop step" =>
        contestants::loop_step(contestants::d1_schedule(CAP));
    "jitter_draw" / "retry-toolkit ExponentialBackoff::delays() (full)" => {
        let mut delays = at_cap(contestants::exponential(CAP).delays(JitterRng::seeded(7)));
        move || delays.next()
    };
    "jitter_draw" / "backon ExponentialBackoff" => {
        let mut delays = at_cap(backon::BackoffBuilder::build(
            contestants::backon_builder().with_max_delay(CAP).without_max_times(),
        ));
        move || delays.next()
    };
    "jitter_draw" / "backon Fibonacci" => {
        let mut delays = at_cap(backon::BackoffBuilder::build(
            backon::FibonacciBuilder::default().with_jitter().with_min_delay(contestants::BASE)
                .with_max_delay(CAP).without_max_times(),
        ));
        move || delays.next()
    };
    "jitter_draw" / "tokio-retry ExponentialBackoff + jitter" => {
        let mut delays = at_cap(
            tokio_retry::strategy::ExponentialBackoff::from_millis(2)
                .factor(50)
                .max_delay(CAP)
                .map(tokio_retry::strategy::jitter),
        );
        move || delays.next()
    };
}

/// A routine running `make()`'s future to completion with `block_on` of one current-thread
/// runtime, created once.
fn in_runtime<F: std::future::Future>(make: impl Fn() -> F) -> impl FnMut() -> F::Output {
    let rt = contestants::runtime();
    move || rt.block_on(make())
}

/// The cap every schedule of the jitter rows has reached.
const CAP: Duration = Duration::from_secs(1);

/// `schedule` after 20 delays, by when every schedule here sits at its cap.
fn at_cap<I: Iterator>(mut schedule: I) -> I {
    schedule.by_ref().take(20).for_each(drop);
    schedule
}

/// A routine drawing one delay at the 1 s cap with `jitter`.
fn draw(jitter: Jitter) -> impl FnMut() -> Duration {
    let mut rng = JitterRng::seeded(7);
    move || {
        black_box(jitter).draw(
            black_box(CAP),
            black_box(contestants::BASE),
            black_box(CAP),
            black_box(Duration::from_millis(500)),
            &mut rng,
        )
    }
}

fn main() {
    // An optional filter, as criterion takes one: only the rows whose `group/name` contain it.
    let Some((filter, exe)) = counted::child_or_parent("instructions", run) else {
        return;
    };
    let mut out = String::from("### Instructions per call (valgrind)\n");
    let mut current = "";
    let mut baseline = None;
    for (group, name) in LIST {
        let key = format!("{group}/{name}");
        if !key.contains(&filter) {
            continue;
        }
        let per_call = counted::instructions_per_unit(&exe, &key, FEW, MANY);
        eprintln!("instructions: {key}: {per_call:.1}");
        if *group != current {
            current = group;
            baseline = WITH_RATIOS.contains(group).then_some((name, per_call));
            match baseline {
                Some((name, _)) => out.push_str(&format!(
                    "\n#### `{group}`\n\n| | instructions per call | vs {name} |\n|---|---:|---:|\n"
                )),
                None => out.push_str(&format!(
                    "\n#### `{group}`\n\n| | instructions per call |\n|---|---:|\n"
                )),
            }
        }
        match baseline {
            Some((_, base)) => out.push_str(&format!(
                "| {name} | {per_call:.1} | {:.2}× |\n",
                per_call / base
            )),
            None => out.push_str(&format!("| {name} | {per_call:.1} |\n")),
        }
    }
    println!("\n{out}");
}
