//! Bodies: which request bodies can be sent again ([`ReplayBody`]), and the response body
//! that says, when it fails, that it was not retried ([`ResponseBody`]).

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{Either, Empty, Full};
use pin_project_lite::pin_project;

use crate::bound::{BodyTimedOut, Bound, Timing, Watch};
use crate::error::{BoxError, Error, StopReason};
use crate::target::Target;

/// A request body that may be sent again: `replay` returns a copy that sends the same bytes,
/// or `None` for a body that can be read once (a stream).
///
/// A request whose body cannot be replayed gets one attempt; if that attempt fails in a way
/// worth retrying, the call ends with [`StopReason::NotReplayable`], which says so.
/// Implemented for the bodies that hold their bytes ([`Full`], [`Empty`], `String`,
/// `Vec<u8>`, [`Bytes`], `&'static str`) and, as `None`, for the streaming ones
/// ([`BoxBody`], [`UnsyncBoxBody`], hyper's `Incoming`); implement it for a body of your own.
///
/// ```
/// use bytes::Bytes;
/// use http_body_util::Full;
/// use retry_http::ReplayBody;
///
/// let body = Full::new(Bytes::from_static(b"{\"amount\":42}"));
/// assert!(body.replay().is_some());
/// ```
pub trait ReplayBody: Sized {
    /// A copy that sends the same bytes again, if this body can be sent again.
    fn replay(&self) -> Option<Self>;
}

impl<D: Clone> ReplayBody for Full<D> {
    fn replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl<D> ReplayBody for Empty<D> {
    fn replay(&self) -> Option<Self> {
        Some(Empty::new())
    }
}

impl ReplayBody for String {
    fn replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for Vec<u8> {
    fn replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for Bytes {
    fn replay(&self) -> Option<Self> {
        Some(self.clone())
    }
}

impl ReplayBody for &'static str {
    fn replay(&self) -> Option<Self> {
        Some(self)
    }
}

impl<L: ReplayBody, R: ReplayBody> ReplayBody for Either<L, R> {
    fn replay(&self) -> Option<Self> {
        match self {
            Either::Left(l) => l.replay().map(Either::Left),
            Either::Right(r) => r.replay().map(Either::Right),
        }
    }
}

impl<D, E> ReplayBody for BoxBody<D, E> {
    fn replay(&self) -> Option<Self> {
        None
    }
}

impl<D, E> ReplayBody for UnsyncBoxBody<D, E> {
    fn replay(&self) -> Option<Self> {
        None
    }
}

impl ReplayBody for hyper::body::Incoming {
    fn replay(&self) -> Option<Self> {
        None
    }
}

pin_project! {
    /// The body of a response returned by the retry layer: the wrapped service's body,
    /// whose failure is an [`Error`] saying that the response was already established and is
    /// not retried ([`StopReason::AfterHead`], or [`StopReason::AfterEvent`] for an event
    /// stream).
    ///
    /// For a server-sent-event stream the layer reads up to the first event before it
    /// returns the response (a stream that breaks before its first event may still be
    /// retried); the frames it read come first, unchanged.
    ///
    /// With an attempt timeout or a deadline set, reading the body counts against them
    /// (an event stream excepted: it lasts as long as it lasts); with an idle timeout set,
    /// every body fails when no byte arrives for that long. Either ends the body with an
    /// [`Error`] whose cause is a [`BodyTimedOut`] naming the limit. Without any of these
    /// limits, reading the body is not timed at all.
    pub struct ResponseBody<B: Body> {
        #[pin]
        source: Source<B>,
        // What its errors name: given by the layer when the call returns the response, so
        // that a call's success path clones its target once.
        target: Option<Target>,
        attempts: u32,
        // An event stream whose first event was delivered: its errors say so.
        event_delivered: bool,
        // The body's time limits, if the policy sets any; the limit that ended it, once one
        // did.
        timing: Timing,
        // The frames an event stream's first event was read with, to come first: boxed, so
        // that the common body, which holds none, moves a word instead of a queue.
        held: Option<Box<VecDeque<Frame<B::Data>>>>,
    }
}

pin_project! {
    /// Where the frames come from: the body as the service returned it, or, for an event
    /// stream whose first event was awaited, the box it was read through.
    #[project = SourceProj]
    enum Source<B> {
        Direct { #[pin] body: B },
        Boxed { body: Pin<Box<B>> },
    }
}

impl<B: Body> ResponseBody<B> {
    /// The service's body as it came, timed as `timing` says. Built in one step: the common
    /// answer is moved once, not rebuilt for its timers.
    #[inline]
    pub(crate) fn direct(body: B, target: Option<Target>, attempts: u32, timing: Timing) -> Self {
        ResponseBody {
            source: Source::Direct { body },
            target,
            attempts,
            event_delivered: false,
            timing,
            held: None,
        }
    }

    /// Names the call's target in the body's errors, unless it names one already.
    pub(crate) fn name(&mut self, target: Target) {
        self.target.get_or_insert(target);
    }

    /// Times the body with `watch` (from [`watch`](crate::bound::watch)).
    pub(crate) fn with_watch(mut self, watch: Option<Watch>) -> Self {
        self.timing = Timing::from(watch);
        self
    }

    /// An event stream whose first frames, `held`, were read already.
    pub(crate) fn resumed(
        held: VecDeque<Frame<B::Data>>,
        body: Pin<Box<B>>,
        target: Target,
        attempts: u32,
        event_delivered: bool,
    ) -> Self {
        ResponseBody {
            source: Source::Boxed { body },
            target: Some(target),
            attempts,
            event_delivered,
            timing: Timing::Untimed,
            held: (!held.is_empty()).then(|| Box::new(held)),
        }
    }
}

impl<B> Body for ResponseBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Some(frame) = this.held.as_mut().and_then(|held| held.pop_front()) {
            return Poll::Ready(Some(Ok(frame)));
        }
        let after = if *this.event_delivered {
            StopReason::AfterEvent
        } else {
            StopReason::AfterHead
        };
        if let Some(bound) = this.timing.expired() {
            return Poll::Ready(Some(Err(timed_out(
                this.target.as_ref(),
                *this.attempts,
                after,
                bound,
            ))));
        }
        let polled = match this.source.project() {
            SourceProj::Direct { body } => body.poll_frame(cx),
            SourceProj::Boxed { body } => body.as_mut().poll_frame(cx),
        };
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                this.timing.activity();
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(Error::new(
                this.target.clone(),
                *this.attempts,
                after,
            )
            .with_cause(Some(e.into()))))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match this.timing.poll_expired(cx) {
                Poll::Ready(bound) => Poll::Ready(Some(Err(timed_out(
                    this.target.as_ref(),
                    *this.attempts,
                    after,
                    bound,
                )))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.held.as_ref().is_none_or(|held| held.is_empty())
            && match &self.source {
                Source::Direct { body } => body.is_end_stream(),
                Source::Boxed { body } => body.is_end_stream(),
            }
    }

    fn size_hint(&self) -> SizeHint {
        let inner = match &self.source {
            Source::Direct { body } => body.size_hint(),
            Source::Boxed { body } => body.size_hint(),
        };
        let held: u64 = self
            .held
            .iter()
            .flat_map(|held| held.iter())
            .filter_map(Frame::data_ref)
            .map(|d| d.remaining() as u64)
            .sum();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(held));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(held));
        }
        hint
    }
}

/// The error of a body that ran out of time: never replayed, whichever limit fired.
fn timed_out(target: Option<&Target>, attempts: u32, after: StopReason, bound: Bound) -> Error {
    Error::new(target.cloned(), attempts, after).with_cause(Some(Box::new(BodyTimedOut(bound))))
}

impl<B: Body> std::fmt::Debug for ResponseBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody")
            .field(
                "held_frames",
                &self.held.as_ref().map_or(0, |held| held.len()),
            )
            .field("attempts", &self.attempts)
            .finish_non_exhaustive()
    }
}
