//! How much a retry loop adds to the future it wraps: issue 7 asks for no more than
//! tokio-retry's future, whose own state beside its sleep is 56 bytes plus the operation.
//! Sizes are deterministic, so this is a plain test (the timings live in `benches/`).

use std::mem::size_of_val;

use retry_core::{DefaultSleep, RetryPolicy};

/// The loop's own bytes: everything but the sleep it waits in and the operation's closure.
fn loop_state(future_size: usize, op_size: usize) -> usize {
    future_size - size_of::<DefaultSleep>() - op_size
}

#[test]
fn the_loop_keeps_at_most_56_bytes_beside_its_sleep_and_operation() {
    let flag = 1u32;
    let op = move |_: u32| std::future::ready(if flag == 1 { Ok(()) } else { Err(()) });
    let op_size = size_of_val(&op);
    let retry = RetryPolicy::DEFAULT.retry(op);
    let size = size_of_val(&retry);
    // 96-byte sleep + 4-byte closure + 56 = 156, rounded to 160: tokio-retry's size.
    assert!(loop_state(size, op_size) <= 60, "{size} bytes");

    let capture_free = RetryPolicy::DEFAULT.retry(|_| std::future::ready(Ok::<(), ()>(())));
    assert!(loop_state(size_of_val(&capture_free), 0) <= 56);
}

#[test]
fn a_seed_adds_nothing() {
    let plain = RetryPolicy::DEFAULT.retry(|_| std::future::ready(Ok::<(), ()>(())));
    let seeded = RetryPolicy::DEFAULT
        .with_seed(7)
        .retry(|_| std::future::ready(Ok::<(), ()>(())))
        .seed(9);
    assert_eq!(size_of_val(&plain), size_of_val(&seeded));
}
