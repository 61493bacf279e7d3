//! A sleep that needs no async runtime: the fallback of [`DefaultClock`](crate::DefaultClock)
//! when a retry loop runs outside tokio (under another executor, or `block_on` of a small
//! executor). One short-lived thread per wait; tokio's timer is used whenever it is there.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// Completes once `duration` has passed on the wall clock.
#[derive(Debug)]
pub(crate) struct ThreadSleep {
    duration: Duration,
    shared: Option<Arc<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    done: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl ThreadSleep {
    pub(crate) fn new(duration: Duration) -> Self {
        Self {
            duration,
            shared: None,
        }
    }
}

impl Shared {
    fn set_waker(&self, waker: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(PoisonError::into_inner);
        match slot.as_ref() {
            Some(current) if current.will_wake(waker) => {}
            _ => *slot = Some(waker.clone()),
        }
    }

    fn finish(&self) {
        self.done.store(true, Ordering::Release);
        let waker = self
            .waker
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Future for ThreadSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let duration = self.duration;
        let shared = match &self.shared {
            Some(shared) => Arc::clone(shared),
            None => {
                let shared = Arc::new(Shared::default());
                shared.set_waker(cx.waker());
                let timer = Arc::clone(&shared);
                let spawned = std::thread::Builder::new()
                    .name("retry-core-sleep".into())
                    .spawn(move || {
                        std::thread::sleep(duration);
                        timer.finish();
                    });
                if spawned.is_err() {
                    // No thread, no timer: retrying at once beats failing the caller's loop.
                    tracing::warn!(target: "retry_core", "could not start a timer thread; not waiting");
                    return Poll::Ready(());
                }
                self.shared = Some(Arc::clone(&shared));
                shared
            }
        };
        if shared.done.load(Ordering::Acquire) {
            return Poll::Ready(());
        }
        shared.set_waker(cx.waker());
        // The timer may have finished between the check and storing the waker.
        if shared.done.load(Ordering::Acquire) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}
