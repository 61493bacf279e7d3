//! How much a retry loop adds to the future it wraps: issue 7 asks for no more than
//! tokio-retry's future, whose own state beside its sleep is 56 bytes plus the operation.
//! Sizes are deterministic, so this is a plain test (the timings live in `benches/`).

use std::mem::size_of_val;

use std::time::Duration;

use retry_toolkit::{Constant, DefaultSleep, RetryPolicy};

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

// A `Constant` schedule keeps no generator, no previous wait and no base or jitter: the
// policy's limits (16), the constant (16) and the attempt counter (4), packed beside the
// 4-byte closure. With tokio's 112-byte sleep that is 152 bytes, tokio-retry's
// `FixedInterval` future around the same operation.
#[test]
fn a_constant_schedule_keeps_no_generator_and_no_previous_wait() {
    let flag = 1u32;
    let op = move |_: u32| std::future::ready(if flag == 1 { Ok(()) } else { Err(()) });
    let op_size = size_of_val(&op);
    let retry = RetryPolicy::DEFAULT
        .retry(op)
        .backoff(Constant(Duration::ZERO));
    let size = size_of_val(&retry);
    assert!(loop_state(size, op_size) <= 36, "{size} bytes");
    let seeded = RetryPolicy::DEFAULT
        .with_seed(3)
        .retry(op)
        .backoff(Constant(Duration::ZERO));
    assert_eq!(size_of_val(&seeded), size);
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
