//! Server-sent events: a stream counts as established once its first event has arrived.
//!
//! A provider that answers `200 text/event-stream` and then drops the connection has sent
//! nothing the caller could act on; a stream that has delivered an event has. So for an
//! event stream the attempt lasts until the first event (an event with data, ended by a
//! blank line, as the HTML standard's parser dispatches it): a failure before that is a
//! failure of the attempt, after it a failure of the stream, never replayed. The frames read
//! meanwhile are handed on unchanged. When in doubt — more than [`MAX_HELD`] bytes without an
//! event, data that cannot be scanned, trailers — the stream counts as established: the
//! careful side, since an established stream is never sent again.

use std::collections::VecDeque;
use std::future::Future;
use std::io::IoSlice;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Buf;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Response};
use http_body::{Body, Frame};

use crate::body::ResponseBody;
use crate::target::Target;

/// The most bytes held while waiting for the first event.
pub(crate) const MAX_HELD: usize = 64 * 1024;

/// Whether a response's `Content-Type` is `text/event-stream` (parameters and case aside).
/// Read as bytes, not checked as text first: every response is asked, and a parameter that is
/// not visible ASCII does not hide an event stream.
pub(crate) fn is_event_stream(headers: &HeaderMap) -> bool {
    let Some(value) = content_type(headers) else {
        return false;
    };
    let essence = value.as_bytes().split(|&b| b == b';').next();
    essence.is_some_and(|essence| {
        essence
            .trim_ascii()
            .eq_ignore_ascii_case(b"text/event-stream")
    })
}

/// The first `Content-Type` value of `headers`. Every response is asked and most carry a few
/// headers: comparing their names costs less than hashing one, so only a long head is looked
/// up by hash.
fn content_type(headers: &HeaderMap) -> Option<&HeaderValue> {
    if headers.keys_len() > SCANNED {
        return headers.get(CONTENT_TYPE);
    }
    headers
        .iter()
        .find_map(|(name, value)| (name == CONTENT_TYPE).then_some(value))
}

/// The most header names [`content_type`] compares one by one.
const SCANNED: usize = 8;

/// Finds the end of the first event in a stream of bytes: a blank line after at least one
/// `data` field. Lines end with CR, LF or CRLF; a line is a `data` field when it is `data`
/// or starts with `data:`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct EventScan {
    /// The current line's first bytes (enough to recognise `data:`).
    prefix: [u8; 5],
    /// Bytes in the current line, saturating.
    line_len: usize,
    /// The event being read has a data field.
    has_data: bool,
    /// The last byte was a CR: an LF now ends no second line.
    after_cr: bool,
}

impl EventScan {
    /// Feeds `bytes`; `true` once the first event is complete.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> bool {
        for &byte in bytes {
            if std::mem::take(&mut self.after_cr) && byte == b'\n' {
                continue;
            }
            match byte {
                b'\r' | b'\n' => {
                    self.after_cr = byte == b'\r';
                    if self.end_of_line() {
                        return true;
                    }
                }
                _ => {
                    if let Some(slot) = self.prefix.get_mut(self.line_len) {
                        *slot = byte;
                    }
                    self.line_len = self.line_len.saturating_add(1);
                }
            }
        }
        false
    }

    /// A line ended; `true` if it was the blank line that dispatches an event with data.
    fn end_of_line(&mut self) -> bool {
        let line = &self.prefix[..self.line_len.min(self.prefix.len())];
        let dispatched = if self.line_len == 0 {
            // A blank line dispatches the event, if it has data (a comment or an id alone
            // dispatches nothing).
            std::mem::take(&mut self.has_data)
        } else {
            if line == b"data:" || (self.line_len == 4 && line == b"data") {
                self.has_data = true;
            }
            false
        };
        self.line_len = 0;
        dispatched
    }
}

/// Reads an event stream's body up to its first event, then hands back the response with
/// what was read in front of the rest.
pub(crate) struct FirstEvent<B: Body> {
    /// The head and the body, until the future finishes.
    parts: Option<(http::response::Parts, Pin<Box<B>>)>,
    held: VecDeque<Frame<B::Data>>,
    held_bytes: usize,
    scan: EventScan,
    target: Target,
    attempts: u32,
}

// No field is structurally pinned (the body is boxed), so moving the future is fine whatever
// the body's data type.
impl<B: Body> Unpin for FirstEvent<B> {}

impl<B: Body> FirstEvent<B> {
    pub(crate) fn new(response: Response<B>, target: Target, attempts: u32) -> Self {
        let (head, body) = response.into_parts();
        FirstEvent {
            parts: Some((head, Box::pin(body))),
            held: VecDeque::new(),
            held_bytes: 0,
            scan: EventScan::default(),
            target,
            attempts,
        }
    }
}

impl<B: Body> Future for FirstEvent<B> {
    type Output = Result<Response<ResponseBody<B>>, B::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // No field is pinned: the body is boxed.
        let this = self.get_mut();
        let Some((_, body)) = this.parts.as_mut() else {
            // Polled after it finished: stays pending, as a finished future may.
            return Poll::Pending;
        };
        let event_delivered = loop {
            let frame = match body.as_mut().poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(None) => break false,
                Poll::Ready(Some(Err(e))) => {
                    this.parts = None;
                    return Poll::Ready(Err(e));
                }
                Poll::Ready(Some(Ok(frame))) => frame,
            };
            let seen = match frame.data_ref() {
                Some(data) => {
                    this.held_bytes = this.held_bytes.saturating_add(data.remaining());
                    scan_buf(&mut this.scan, data)
                }
                // Trailers end the data: whatever came, the stream is established.
                None => Seen::Unsure,
            };
            this.held.push_back(frame);
            match seen {
                Seen::Event => break true,
                Seen::Unsure => break false,
                Seen::More if this.held_bytes > MAX_HELD => break false,
                Seen::More => {}
            }
        };
        let Some((head, body)) = this.parts.take() else {
            return Poll::Pending;
        };
        let held = std::mem::take(&mut this.held);
        let body = ResponseBody::resumed(
            held,
            body,
            this.target.clone(),
            this.attempts,
            event_delivered,
        );
        Poll::Ready(Ok(Response::from_parts(head, body)))
    }
}

/// What a frame showed.
enum Seen {
    /// The first event is complete.
    Event,
    /// Not yet.
    More,
    /// The frame could not be scanned whole: count the stream as established.
    Unsure,
}

/// Scans every chunk of `data` (a `Buf` may be several slices).
fn scan_buf<D: Buf>(scan: &mut EventScan, data: &D) -> Seen {
    let mut slices = [IoSlice::new(&[]); 64];
    let filled = data.chunks_vectored(&mut slices);
    let mut scanned = 0;
    for slice in &slices[..filled] {
        if scan.feed(slice) {
            return Seen::Event;
        }
        scanned += slice.len();
    }
    if scanned < data.remaining() {
        Seen::Unsure
    } else {
        Seen::More
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn first_event_at(stream: &[u8]) -> Option<usize> {
        let mut scan = EventScan::default();
        (0..stream.len())
            .find(|&i| scan.feed(&stream[i..=i]))
            .map(|i| i + 1)
    }

    #[test]
    fn h4_the_first_event_ends_at_the_blank_line_after_data() {
        assert_eq!(first_event_at(b"data: one\n\n"), Some(11));
        assert_eq!(first_event_at(b"data: one\r\n\r\ndata: two\n\n"), Some(12));
        assert_eq!(first_event_at(b"data: one\r\rrest"), Some(11));
        assert_eq!(first_event_at(b"event: x\ndata\n\n"), Some(15));
        assert_eq!(first_event_at(b"data:\n\n"), Some(7));
    }

    #[test]
    fn h4_comments_and_ids_alone_are_no_event() {
        assert_eq!(first_event_at(b": keep-alive\n\n"), None);
        assert_eq!(first_event_at(b"id: 7\nretry: 10\n\n"), None);
        assert_eq!(first_event_at(b"dat: x\n\ndatum: y\n\n"), None);
        assert_eq!(first_event_at(b": ping\n\ndata: late\n\n"), Some(20));
        // Split across feeds, a CRLF is one line end, not two.
        let mut scan = EventScan::default();
        assert!(!scan.feed(b"data: x\r"));
        assert!(!scan.feed(b"\n"));
        assert!(scan.feed(b"\r\n"));
    }

    #[test]
    fn h4_event_stream_content_types() {
        let mut headers = HeaderMap::new();
        for (value, expected) in [
            ("text/event-stream", true),
            ("Text/Event-Stream; charset=utf-8", true),
            ("text/plain", false),
            ("text/event-streams", false),
            (" text/event-stream ;charset=utf-8", true),
            ("text/event-stream-x", false),
            ("", false),
        ] {
            headers.insert(CONTENT_TYPE, value.parse().unwrap());
            assert_eq!(is_event_stream(&headers), expected, "{value}");
        }
        // Bytes that are not visible ASCII, in a parameter and in the type itself.
        let odd = |bytes: &[u8]| http::HeaderValue::from_bytes(bytes).unwrap();
        headers.insert(CONTENT_TYPE, odd(b"text/event-stream; name=\xe9"));
        assert!(is_event_stream(&headers));
        headers.insert(CONTENT_TYPE, odd(b"text/event-str\xe9am"));
        assert!(!is_event_stream(&headers));
        headers.clear();
        assert!(!is_event_stream(&headers));
    }

    #[test]
    fn h4_the_content_type_is_found_in_short_and_long_heads() {
        for others in [0, 1, SCANNED - 1, SCANNED, SCANNED + 1, 40] {
            let mut headers = HeaderMap::new();
            for n in 0..others {
                let name = http::HeaderName::try_from(format!("x-other-{n}")).unwrap();
                headers.insert(name, "text/event-stream".parse().unwrap());
            }
            assert!(!is_event_stream(&headers), "{others} other headers");
            // The first value counts, as with `HeaderMap::get`.
            headers.append(CONTENT_TYPE, "text/event-stream".parse().unwrap());
            headers.append(CONTENT_TYPE, "text/plain".parse().unwrap());
            assert!(is_event_stream(&headers), "{others} other headers");
            headers.remove(CONTENT_TYPE);
            headers.append(CONTENT_TYPE, "text/plain".parse().unwrap());
            headers.append(CONTENT_TYPE, "text/event-stream".parse().unwrap());
            assert!(!is_event_stream(&headers), "{others} other headers");
        }
    }
}
