//! A tiny virtual clock for retry-toolkit's own tests: every sleep completes at once and moves
//! virtual time forward, and every sleep is recorded. (The full-featured mock clock lives in
//! retry-testkit; retry-toolkit's tests stay free of it.)

#![allow(dead_code, unreachable_pub)]

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use retry_toolkit::Clock;

#[derive(Clone, Debug)]
pub struct InstantClock {
    inner: Arc<Mutex<State>>,
}

#[derive(Debug)]
struct State {
    origin: Instant,
    elapsed: Duration,
    sleeps: Vec<Duration>,
}

impl InstantClock {
    pub fn new() -> Self {
        let state = State {
            origin: Instant::now(),
            elapsed: Duration::ZERO,
            sleeps: Vec::new(),
        };
        Self {
            inner: Arc::new(Mutex::new(state)),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner))
    }

    pub fn sleeps(&self) -> Vec<Duration> {
        self.with(|s| s.sleeps.clone())
    }

    pub fn elapsed(&self) -> Duration {
        self.with(|s| s.elapsed)
    }
}

impl Clock for InstantClock {
    type Sleep = std::future::Ready<()>;

    fn now(&self) -> Instant {
        self.with(|s| s.origin + s.elapsed)
    }

    fn sleep(&self, duration: Duration) -> Self::Sleep {
        self.with(|s| {
            s.elapsed += duration;
            s.sleeps.push(duration);
        });
        std::future::ready(())
    }
}

/// An operation that fails `failures` times, then succeeds with the attempt number.
pub fn fail_times(failures: u32) -> impl FnMut(u32) -> std::future::Ready<Result<u32, String>> {
    move |attempt| {
        std::future::ready(if attempt <= failures {
            Err(format!("failure {attempt}"))
        } else {
            Ok(attempt)
        })
    }
}
