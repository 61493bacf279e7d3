//! A small cancellation token: a flag that can be watched, and that cascades to child tokens.
//!
//! Timeouts nest (`with_timeout(retry(with_timeout(f)))`), so each timeout layer hands its
//! task a *child* of the token it was given: cancelling the outer one reaches every task
//! below, while an inner timeout cancels only its own subtree.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::task::{Context, Poll};

use pin_project_lite::pin_project;
use tokio::sync::{Notify, futures::OwnedNotified};

/// A cancellation signal: cloned handles share one flag; [`child`](CancelToken::child)
/// tokens are cancelled with their parent (never the other way round).
///
/// ```
/// use retry_core::CancelToken;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let parent = CancelToken::new();
/// let child = parent.child();
/// parent.cancel();
/// child.cancelled().await; // completes at once
/// assert!(child.is_cancelled());
/// # }
/// ```
#[derive(Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Default)]
struct Inner {
    cancelled: AtomicBool,
    notify: Arc<Notify>,
    /// Children still alive; guarded so that a child added during `cancel` is not missed.
    children: Mutex<Vec<Weak<Inner>>>,
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Cancels this token and all its children. Idempotent.
    pub fn cancel(&self) {
        cancel(&self.inner);
    }

    /// Whether [`cancel`](CancelToken::cancel) was called on this token or an ancestor.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// A new token cancelled together with this one (and on its own).
    pub fn child(&self) -> Self {
        let child = Self::new();
        let mut children = self
            .inner
            .children
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.is_cancelled() {
            drop(children);
            child.cancel();
        } else {
            children.retain(|c| c.strong_count() > 0);
            children.push(Arc::downgrade(&child.inner));
        }
        child
    }

    /// A future that completes once the token is cancelled. It owns what it needs, so it
    /// can be stored in a struct or moved into a spawned task.
    pub fn cancelled(&self) -> WaitForCancellation {
        WaitForCancellation {
            token: self.clone(),
            notified: Arc::clone(&self.inner.notify).notified_owned(),
        }
    }
}

fn cancel(inner: &Inner) {
    let children = {
        let mut children = inner
            .children
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if inner.cancelled.swap(true, Ordering::SeqCst) {
            return;
        }
        std::mem::take(&mut *children)
    };
    inner.notify.notify_waiters();
    for child in children.iter().filter_map(Weak::upgrade) {
        cancel(&child);
    }
}

impl fmt::Debug for CancelToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CancelToken")
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

pin_project! {
    /// The future returned by [`CancelToken::cancelled`].
    #[must_use = "futures do nothing unless polled"]
    pub struct WaitForCancellation {
        token: CancelToken,
        #[pin]
        notified: OwnedNotified,
    }
}

impl fmt::Debug for WaitForCancellation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitForCancellation")
            .field("token", &self.token)
            .finish()
    }
}

impl Future for WaitForCancellation {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        // Register interest before reading the flag: `cancel` sets the flag and then wakes
        // every registered waiter, so no wake-up can fall between the two.
        this.notified.as_mut().enable();
        if this.token.is_cancelled() {
            return Poll::Ready(());
        }
        this.notified.poll(cx)
    }
}
