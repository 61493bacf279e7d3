//! [`DefaultClock`]: the scope's clock, else tokio's, else the shared timer thread.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use pin_project_lite::pin_project;

use super::clock::{BoxSleep, Clock, TokioClock};
use super::fallback::ThreadSleep;
use super::scope;

/// The clock of the surrounding [`Scope`](crate::Scope) if there is one, tokio's otherwise.
///
/// This is the clock of every policy that was not given one, so a testkit scope reaches
/// retry loops deep inside the code under test. Outside a tokio runtime (another executor, a
/// plain `block_on`) its waits run on one timer thread shared by the whole process, started
/// on the first such wait; a dropped wait leaves nothing behind on it. So do the waits inside
/// a tokio runtime built without `enable_time`, instead of panicking there as tokio's own
/// sleep does (the first wait on such a runtime still runs the panic hook once: tokio offers
/// no other way to find out; where panics abort, every wait uses the timer thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DefaultClock;

impl Clock for DefaultClock {
    type Sleep = DefaultSleep;

    fn now(&self) -> Instant {
        match scope::scoped_clock() {
            Some(clock) => clock.now(),
            None => Clock::now(&TokioClock),
        }
    }

    fn wall_now(&self) -> SystemTime {
        match scope::scoped_clock() {
            Some(clock) => clock.wall_now(),
            None => SystemTime::now(),
        }
    }

    fn sleep(&self, duration: Duration) -> DefaultSleep {
        let inner = match scope::scoped_clock() {
            Some(clock) => SleepInner::Scoped {
                sleep: clock.sleep_boxed(duration),
            },
            None => match tokio::runtime::Handle::try_current() {
                Ok(runtime) => match tokio_sleep(&runtime, duration) {
                    Some(sleep) => SleepInner::Tokio { sleep },
                    None => SleepInner::Thread {
                        sleep: ThreadSleep::new(duration),
                    },
                },
                Err(_) => SleepInner::Thread {
                    sleep: ThreadSleep::new(duration),
                },
            },
        };
        DefaultSleep { inner }
    }

    /// The surrounding scope's clock's blocking sleep if there is one (a
    /// [`Scope`](crate::Scope) reaches blocking code called inside it); else the thread
    /// sleeps, in or out of a tokio runtime.
    fn sleep_blocking(&self, duration: Duration) {
        match scope::scoped_clock() {
            Some(clock) => clock.sleep_blocking(duration),
            None => std::thread::sleep(duration),
        }
    }
}

/// Tokio's sleep on `runtime`, or `None` when that runtime was built without its timer.
///
/// Tokio has no way to ask a runtime whether its timer is enabled: creating a sleep panics
/// when it is not. So the first wait on such a runtime catches that panic (the panic hook
/// still reports it, once) and the runtime is remembered, so its later waits go straight to
/// the shared timer thread. Where panics abort, nothing can be caught: waits always use the
/// timer thread there, never tokio's.
#[cfg(panic = "unwind")]
fn tokio_sleep(runtime: &tokio::runtime::Handle, duration: Duration) -> Option<tokio::time::Sleep> {
    if without_timer::contains(runtime.id()) {
        return None;
    }
    let created = std::panic::catch_unwind(|| tokio::time::sleep(duration));
    match created {
        Ok(sleep) => Some(sleep),
        Err(_) => {
            tracing::warn!(
                target: "retry_toolkit",
                "this tokio runtime has no timer (`enable_time` was not called); waits run on a timer thread"
            );
            without_timer::insert(runtime.id());
            None
        }
    }
}

/// See the `unwind` version: with `panic = "abort"`, the timer thread always.
#[cfg(not(panic = "unwind"))]
fn tokio_sleep(_: &tokio::runtime::Handle, _: Duration) -> Option<tokio::time::Sleep> {
    None
}

/// The tokio runtimes found to have no timer: the most recent few, which is what a process
/// has at a time (their ids are never reused).
#[cfg(panic = "unwind")]
mod without_timer {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Mutex, PoisonError};

    use tokio::runtime::Id;

    const KEPT: usize = 16;

    /// Whether any runtime was ever found without a timer: until then, the check is one
    /// atomic load, without a lock.
    static ANY: AtomicBool = AtomicBool::new(false);
    static IDS: Mutex<Vec<Id>> = Mutex::new(Vec::new());

    pub(super) fn contains(id: Id) -> bool {
        ANY.load(Ordering::Acquire)
            && IDS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&id)
    }

    pub(super) fn insert(id: Id) {
        let mut ids = IDS.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.len() >= KEPT {
            ids.remove(0);
        }
        ids.push(id);
        ANY.store(true, Ordering::Release);
    }
}

pin_project! {
    /// The sleep of [`DefaultClock`]: tokio's timer (no allocation) or the scoped clock's.
    pub struct DefaultSleep {
        #[pin]
        inner: SleepInner,
    }
}

pin_project! {
    #[project = SleepInnerProj]
    enum SleepInner {
        Tokio { #[pin] sleep: tokio::time::Sleep },
        Scoped { sleep: BoxSleep },
        Thread { sleep: ThreadSleep },
    }
}

impl fmt::Debug for DefaultSleep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.inner {
            SleepInner::Tokio { sleep } => f.debug_tuple("Tokio").field(&sleep.deadline()).finish(),
            SleepInner::Scoped { .. } => f.write_str("Scoped"),
            SleepInner::Thread { sleep } => f.debug_tuple("Thread").field(sleep).finish(),
        }
    }
}

impl Future for DefaultSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        match self.project().inner.project() {
            SleepInnerProj::Tokio { sleep } => sleep.poll(cx),
            SleepInnerProj::Scoped { sleep } => sleep.as_mut().poll(cx),
            SleepInnerProj::Thread { sleep } => Pin::new(sleep).poll(cx),
        }
    }
}
