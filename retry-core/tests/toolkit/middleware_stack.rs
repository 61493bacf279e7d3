//! Property: random stacks of retry / timeout / fallback over scripted faults (SPEC M1–M7).
//!
//! 1. The base task is never called more often than the layers' attempt budgets allow:
//!    a retry layer multiplies the budget below it by `1 + retries`, a fallback adds one call
//!    (its fallback is the same base task), a timeout adds nothing.
//! 2. Wrapped in an outer timeout, the stack never outlives that budget by more than one
//!    call's own running time — the time an uncooperative call may take to exit after the
//!    signal; nothing new starts once the signal has fired.
//!
//! Every case runs on its own paused tokio runtime: no wall-clock time passes.

use crate::task_support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use retry_toolkit::middleware::{with_fallback, with_retry, with_timeout};
use retry_toolkit::{Constant, RetryOptions, Task, TaskContext, TaskFailure};
use task_support::{Call, MS, Scripted, fatal, transient};
use tokio::time::Instant;

#[derive(Clone, Debug)]
enum Layer {
    Retry { retries: u32, delay_ms: u64 },
    Timeout { ms: u64 },
    Fallback,
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<u32, TaskFailure>> + Send>>;
type DynTask = Arc<dyn Fn(TaskContext) -> BoxFuture + Send + Sync>;

fn erase<T>(task: T) -> DynTask
where
    T: Task<Output = u32> + Send + Sync + 'static,
    T::Future: Send + 'static,
{
    Arc::new(move |cx| Box::pin(task.call(cx)))
}

fn as_task(task: &DynTask) -> impl Task<Output = u32, Future = BoxFuture> + Send + Sync + 'static {
    let task = Arc::clone(task);
    move |cx: TaskContext| task(cx)
}

/// Applies `layers` innermost first around `base`.
fn stack(base: &Scripted, layers: &[Layer]) -> DynTask {
    let mut task = erase(base.task());
    for layer in layers {
        task = match *layer {
            Layer::Retry { retries, delay_ms } => {
                let policy = RetryOptions::new()
                    .with_max_attempts(retries + 1)
                    .with_max_delay_ms(u64::MAX)
                    .resolve()
                    .expect("valid options");
                erase(with_retry(as_task(&task), policy).backoff(Constant(MS * delay_ms as u32)))
            }
            Layer::Timeout { ms } => {
                erase(with_timeout(as_task(&task), MS * ms as u32).expect("ms > 0"))
            }
            Layer::Fallback => erase(with_fallback(as_task(&task), base.task())),
        };
    }
    task
}

fn call_budget(layers: &[Layer]) -> u64 {
    layers.iter().fold(1, |budget, layer| match layer {
        Layer::Retry { retries, .. } => budget * (1 + u64::from(*retries)),
        Layer::Timeout { .. } => budget,
        Layer::Fallback => budget + 1,
    })
}

fn layer() -> impl Strategy<Value = Layer> {
    prop_oneof![
        (0u32..4, 0u64..30).prop_map(|(retries, delay_ms)| Layer::Retry { retries, delay_ms }),
        (1u64..100).prop_map(|ms| Layer::Timeout { ms }),
        Just(Layer::Fallback),
    ]
}

fn call() -> impl Strategy<Value = Call> {
    let failure = prop_oneof![
        Just(None),
        Just(Some(transient("503"))),
        Just(Some(fatal("400"))),
        Just(Some(TaskFailure::from("reset"))),
    ];
    (0u64..60, any::<bool>(), failure).prop_map(|(ms, cooperative, fails_with)| {
        let call = match fails_with {
            Some(failure) => Call::fail(ms, failure),
            None => Call::ok(ms),
        };
        if cooperative {
            call
        } else {
            call.uncooperative()
        }
    })
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn m_calls_never_exceed_the_product_of_attempt_budgets(
        layers in prop::collection::vec(layer(), 0..5),
        script in prop::collection::vec(call(), 0..12),
    ) {
        let base = Scripted::new(script);
        let task = stack(&base, &layers);
        paused_runtime().block_on(async { drop(task(TaskContext::new()).await) });
        prop_assert!(u64::from(base.calls()) <= call_budget(&layers), "{} calls, budget {}", base.calls(), call_budget(&layers));
    }

    #[test]
    fn m4_the_stack_never_outlives_its_outer_timeout_by_more_than_a_call(
        layers in prop::collection::vec(layer(), 0..5),
        script in prop::collection::vec(call(), 0..12),
        outer_ms in 1u64..150,
    ) {
        let longest_call = script.iter().map(|c| c.takes).max().unwrap_or(Duration::ZERO);
        let base = Scripted::new(script);
        let mut layers = layers;
        layers.push(Layer::Timeout { ms: outer_ms });
        let task = stack(&base, &layers);
        let elapsed = paused_runtime().block_on(async {
            let start = Instant::now();
            drop(task(TaskContext::new()).await);
            Instant::now() - start
        });
        prop_assert!(
            elapsed <= MS * outer_ms as u32 + longest_call,
            "took {elapsed:?}: budget {outer_ms} ms, longest call {longest_call:?}"
        );
    }
}
