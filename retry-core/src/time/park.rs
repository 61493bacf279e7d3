//! Running a future to its end on the calling thread, parking it while the future waits: how
//! blocking code waits on a clock's sleep, and how a blocking retry loop is driven.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};

/// Wakes the thread it was made on.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    /// This thread's waker, made once: a blocking call allocates nothing after the first.
    static WAKER: Waker = Waker::from(Arc::new(Unpark(thread::current())));
}

/// Polls `future` on this thread until it is ready, parking the thread while it is pending.
///
/// A wake-up that comes before the park is not lost (`unpark` leaves a token that the next
/// `park` consumes), and a spurious return from `park` only polls once more.
pub(crate) fn block_here<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    // Borrowed in place: no reference count to move on the way in and out.
    match WAKER.try_with(|waker| poll_until_ready(future.as_mut(), waker)) {
        Ok(output) => output,
        // A thread being destroyed has no thread-locals left: a waker of its own then.
        Err(_) => poll_until_ready(future, &Waker::from(Arc::new(Unpark(thread::current())))),
    }
}

fn poll_until_ready<F: Future>(mut future: Pin<&mut F>, waker: &Waker) -> F::Output {
    let mut cx = Context::from_waker(waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        thread::park();
    }
}
