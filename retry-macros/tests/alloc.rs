//! R7 through the attribute: a `#[retry]` function's success path allocates nothing, like the
//! hand-written `RetryPolicy::retry` loop it stands for. (Speed: `benches/expansion.rs`.)

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use retry_toolkit::{LimitExceeded, retry};

/// Polls `future` once on this thread; the functions used here finish on the first poll.
fn poll_once<F: Future>(future: F) -> Poll<F::Output> {
    let mut cx = Context::from_waker(Waker::noop());
    pin!(future).poll(&mut cx)
}

#[retry(max_attempts = 5, base_delay_ms = 500)]
async fn plain(n: u32) -> Result<u32, String> {
    Ok(n + 1)
}

fn never(_: &LimitExceeded, _: u32) -> bool {
    false
}

struct Counter(u32);

impl Counter {
    #[retry(when = never, deadline_ms = 1_000, attempt_timeout_ms = 100)]
    async fn bump(&mut self, by: u32) -> Result<u32, LimitExceeded> {
        self.0 += by;
        Ok(self.0)
    }
}

#[test]
fn r7_success_path_of_a_retry_fn_does_not_allocate() {
    let info = allocation_counter::measure(|| {
        assert_eq!(poll_once(plain(1)), Poll::Ready(Ok(2)));
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}

#[tokio::test(start_paused = true)]
async fn r7_success_path_with_hooks_and_limits_does_not_allocate() {
    // The limits arm a tokio timer (no heap allocation once the runtime is running).
    let mut counter = Counter(0);
    let _ = counter.bump(1).await; // warm the timer wheel
    let info = allocation_counter::measure(|| {
        assert_eq!(poll_once(counter.bump(2)), Poll::Ready(Ok(3)));
    });
    assert_eq!(info.count_total, 0, "{info:?}");
}
