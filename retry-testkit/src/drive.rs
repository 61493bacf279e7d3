//! Driving futures on virtual time: the run loop behind [`MockClock::run`] and
//! [`MockClock::block_on`], and the deterministic [`join_all`].
//!
//! Virtual time may move only when the code under test is *stuck*: its future returned
//! `Pending` and nothing has woken it since. The run loop polls the future itself with a
//! waker that raises a flag, so it knows exactly when that is — no wall-clock timeout, no
//! guess. Only then does it move the clock to the next pending deadline, which wakes the
//! sleeps due at that instant, and polls again.
//!
//! [`MockClock::run`]: crate::MockClock::run
//! [`MockClock::block_on`]: crate::MockClock::block_on

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

use crate::clock::MockClock;
use crate::io::InFlight;

/// How many times [`MockClock::run`](crate::MockClock::run) yields to the executor, with no
/// wakeup arriving, before it moves time: each yield lets every ready task run once, so a
/// task the future waits on gets this many turns to answer.
pub(crate) const IDLE_YIELDS: u32 = 16;

/// How many times the run loop re-polls a future that keeps waking itself before it yields
/// to the executor, so a busy future cannot monopolise a thread.
const POLL_BUDGET: u32 = 64;

/// A waker that remembers it was called and passes the call on to the executor's waker.
#[derive(Default)]
struct Flag {
    woken: AtomicBool,
    outer: Mutex<Option<Waker>>,
}

impl Flag {
    fn set_outer(&self, waker: &Waker) {
        let mut outer = self.outer.lock().unwrap_or_else(PoisonError::into_inner);
        if !outer.as_ref().is_some_and(|w| w.will_wake(waker)) {
            *outer = Some(waker.clone());
        }
    }

    fn take(&self) -> bool {
        self.woken.swap(false, Ordering::AcqRel)
    }
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let outer = self.outer.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(waker) = outer.as_ref() {
            waker.wake_by_ref();
        }
    }
}

/// The run loop: polls the future, and moves the clock when the future is stuck.
pub(crate) struct Driver<F> {
    clock: MockClock,
    future: Pin<Box<F>>,
    flag: Arc<Flag>,
    waker: Waker,
    /// Poll the future on the next turn even if no wakeup was seen (first poll, or a wakeup
    /// consumed when the poll budget ran out).
    must_poll: bool,
    /// Consecutive yields to the executor without a wakeup.
    idle: u32,
    /// How many idle yields before time moves.
    yields: u32,
    /// I/O that must be quiet before time moves, if the test gave any.
    io: Option<InFlight>,
}

impl<F: Future> Driver<F> {
    pub(crate) fn new(clock: MockClock, future: F, yields: u32) -> Self {
        let flag = Arc::new(Flag::default());
        Driver {
            clock,
            future: Box::pin(future),
            waker: Waker::from(Arc::clone(&flag)),
            flag,
            must_poll: true,
            idle: 0,
            yields,
            io: None,
        }
    }

    /// Moves time only while `io` has nothing in flight.
    pub(crate) fn watching(mut self, io: InFlight) -> Self {
        self.io = Some(io);
        self
    }
}

impl<F: Future> Future for Driver<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        this.flag.set_outer(cx.waker());
        let mut budget = POLL_BUDGET;
        loop {
            if this.must_poll || this.flag.take() {
                this.idle = 0;
                if budget == 0 {
                    this.must_poll = true;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                budget -= 1;
                this.must_poll = false;
                let mut inner = Context::from_waker(&this.waker);
                if let Poll::Ready(output) = this.future.as_mut().poll(&mut inner) {
                    return Poll::Ready(output);
                }
                // Woken while it was being polled? The flag says so on the next turn.
                continue;
            }
            // Pending, and nothing has woken the future since: let other tasks run first.
            if this.idle < this.yields {
                this.idle += 1;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            this.idle = 0;
            if this.io.as_ref().is_some_and(|io| io.busy(cx.waker())) {
                // Real I/O is under way: time waits for it. The last guard to go wakes us,
                // and the idle yields start over before time moves.
                return Poll::Pending;
            }
            if this.clock.advance_to_next().is_none() {
                // No sleep pending: the future waits for something outside the clock. Our
                // waker passes that wakeup on to the executor.
                return Poll::Pending;
            }
            // Time moved. If it woke the future the flag is up; if it woke another task's
            // sleep, the next turn yields so that task runs before time moves again.
        }
    }
}

/// Polls `future` on this thread until it is ready; `Err` when it is pending and nothing has
/// woken it (the driver has already moved time as far as any sleep asked).
pub(crate) fn block_on<F: Future>(future: F) -> Result<F::Output, ()> {
    let mut future = std::pin::pin!(future);
    let signal = Arc::new(Flag::default());
    let waker = Waker::from(Arc::clone(&signal));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return Ok(output);
        }
        if !signal.take() {
            return Err(());
        }
    }
}

/// Runs every future to completion, concurrently, and returns their outputs in input order.
///
/// Only the futures that were woken are polled, in the order their wakeups arrived — and on a
/// [`MockClock`] sleeps due at the same instant fire in the order they were requested — so a
/// run of many tasks is reproducible. This is how a test interleaves several retry loops on
/// one clock.
///
/// ```
/// use std::time::Duration;
/// use retry_testkit::{join_all, MockClock};
///
/// let clock = MockClock::new();
/// let tasks = [30, 10, 20].map(|ms| {
///     let clock = clock.clone();
///     async move {
///         clock.sleep(Duration::from_millis(ms)).await;
///         clock.elapsed().as_millis()
///     }
/// });
/// assert_eq!(clock.block_on(join_all(tasks)).unwrap(), [30, 10, 20]);
/// assert_eq!(clock.elapsed(), Duration::from_millis(30));
/// ```
pub fn join_all<I>(futures: I) -> JoinAll<I::Item>
where
    I: IntoIterator,
    I::Item: Future,
{
    let children: Vec<Child<I::Item>> = futures
        .into_iter()
        .map(|f| Child::Running(Box::pin(f)))
        .collect();
    let ready = Arc::new(ReadyQueue::new(children.len()));
    let wakers = (0..children.len())
        .map(|index| {
            Waker::from(Arc::new(ChildWaker {
                index,
                ready: Arc::clone(&ready),
            }))
        })
        .collect();
    JoinAll {
        remaining: children.len(),
        children,
        wakers,
        ready,
    }
}

/// The future returned by [`join_all`].
#[must_use = "futures do nothing unless `.await`ed"]
pub struct JoinAll<F: Future> {
    children: Vec<Child<F>>,
    wakers: Vec<Waker>,
    ready: Arc<ReadyQueue>,
    remaining: usize,
}

enum Child<F: Future> {
    Running(Pin<Box<F>>),
    Done(Option<F::Output>),
}

/// Which children were woken, in order, each at most once.
struct ReadyQueue {
    inner: Mutex<ReadyInner>,
}

struct ReadyInner {
    order: VecDeque<usize>,
    queued: Vec<bool>,
    parent: Option<Waker>,
}

impl ReadyQueue {
    fn new(children: usize) -> Self {
        ReadyQueue {
            inner: Mutex::new(ReadyInner {
                order: (0..children).collect(),
                queued: vec![true; children],
                parent: None,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReadyInner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

struct ChildWaker {
    index: usize,
    ready: Arc<ReadyQueue>,
}

impl Wake for ChildWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let parent = {
            let mut inner = self.ready.lock();
            match inner.queued.get_mut(self.index) {
                Some(queued) if !*queued => {
                    *queued = true;
                    inner.order.push_back(self.index);
                    inner.parent.clone()
                }
                _ => None,
            }
        };
        if let Some(parent) = parent {
            parent.wake();
        }
    }
}

impl<F: Future> Future for JoinAll<F> {
    type Output = Vec<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Vec<F::Output>> {
        let this = self.get_mut();
        // Poll the children queued now; ones woken meanwhile wait for the next turn, so a
        // child that keeps waking itself cannot starve the others.
        let batch: Vec<usize> = {
            let mut inner = this.ready.lock();
            if !inner
                .parent
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                inner.parent = Some(cx.waker().clone());
            }
            let batch: Vec<usize> = inner.order.drain(..).collect();
            for &index in &batch {
                if let Some(queued) = inner.queued.get_mut(index) {
                    *queued = false;
                }
            }
            batch
        };
        for index in batch {
            let (Some(child), Some(waker)) = (this.children.get_mut(index), this.wakers.get(index))
            else {
                continue;
            };
            if let Child::Running(future) = child {
                if let Poll::Ready(output) = future.as_mut().poll(&mut Context::from_waker(waker)) {
                    *child = Child::Done(Some(output));
                    this.remaining -= 1;
                }
            }
        }
        if this.remaining > 0 {
            return Poll::Pending;
        }
        let outputs = this
            .children
            .iter_mut()
            .filter_map(|child| match child {
                Child::Done(output) => output.take(),
                Child::Running(_) => None,
            })
            .collect();
        Poll::Ready(outputs)
    }
}

impl<F: Future> Unpin for JoinAll<F> {}
