//! R7: the success path costs no heap allocation, and neither does a zero-delay retry.
//! (Speed is measured in benches/, never asserted here.)

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use retry_toolkit::{Constant, RetryPolicy};

/// Polls `future` once on this thread; the operations used here finish on the first poll.
fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    pin!(future).poll(&mut cx)
}

#[test]
fn r7_success_path_does_not_allocate() {
    let policy = RetryPolicy::DEFAULT;
    let info = allocation_counter::measure(|| {
        let result = poll_once(policy.retry(|attempt| async move { Ok::<_, ()>(attempt) }));
        assert!(matches!(result, Poll::Ready(Ok(1))));
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn r7_success_path_with_hooks_and_limits_does_not_allocate() {
    let policy = RetryPolicy::DEFAULT;
    let info = allocation_counter::measure(|| {
        let retry = policy
            .retry(|attempt| async move { Ok::<_, ()>(attempt) })
            .when(|_, _| true)
            .notify(|_, _, _| {})
            .retry_after(|_| None)
            .cancel_on(std::future::pending::<()>());
        assert!(matches!(poll_once(retry), Poll::Ready(Ok(1))));
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn r7_zero_delay_retries_do_not_allocate() {
    // A zero delay skips the timer entirely; a seeded loop needs no entropy source.
    let policy = RetryPolicy::DEFAULT.with_seed(1);
    let run = || {
        poll_once(
            policy
                .retry(|attempt| async move { if attempt < 3 { Err(()) } else { Ok(attempt) } })
                .backoff(Constant(Duration::ZERO)),
        )
    };
    let info = allocation_counter::measure(|| assert!(matches!(run(), Poll::Ready(Ok(3)))));
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[test]
fn r7_a_schedule_without_randomness_never_seeds_a_generator() {
    // On a fresh thread the first entropy-seeded generator would allocate (rand's thread-local
    // source); a constant schedule draws nothing, so nothing is seeded and nothing allocates.
    let info = std::thread::spawn(|| {
        let policy = RetryPolicy::DEFAULT;
        allocation_counter::measure(|| {
            let retry = policy
                .retry(|attempt| async move { if attempt < 3 { Err(()) } else { Ok(attempt) } })
                .backoff(Constant(Duration::ZERO));
            assert!(matches!(poll_once(retry), Poll::Ready(Ok(3))));
        })
    })
    .join()
    .unwrap();
    assert_eq!(info.count_total, 0, "{info:?}");
}
