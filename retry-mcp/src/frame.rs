//! What sits between a [`Stream`](crate::Stream) and the protocol SDK: a guard on what the
//! server writes, so that a message the SDK would drop without a word (one over its size limit,
//! one that is not JSON-RPC) closes the connection instead, with the reason kept; and a count of
//! what we write, so that a call knows whether its request could have left.
//!
//! The SDK reads newline-delimited JSON. It skips a line above its limit and a line it cannot
//! parse, and keeps reading: the call waiting for that answer then waits for its deadline, or
//! forever. Worse, a line with no newline in sight is skipped up to the next newline — the
//! next, good, message with it. The guard sees every byte before the SDK does; the moment a
//! line grows past the limit, or a whole line turns out not to be a message, it hands the SDK
//! only what came before, then an I/O error, and the SDK closes the connection: every pending
//! call fails at once.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, ready};

use serde::Deserialize;
use serde::de::IgnoredAny;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::UnreadableMessage;

/// Why a connection's input was cut: set once, by the guard, read by whoever finds the
/// connection closed.
pub(crate) type Fault = Arc<OnceLock<UnreadableMessage>>;

/// The server's side of a connection, line by line: passes bytes through, unchanged, until a
/// line is too long or not a message.
pub(crate) struct FrameGuard<R> {
    inner: R,
    /// The longest message, in bytes, without its newline.
    limit: usize,
    /// The current line so far (for the check once it ends); never longer than `limit`.
    line: Vec<u8>,
    fault: Fault,
}

impl<R> FrameGuard<R> {
    pub(crate) fn new(inner: R, limit: usize, fault: Fault) -> Self {
        FrameGuard {
            inner,
            limit,
            line: Vec::new(),
            fault,
        }
    }

    /// Looks at `new`, the bytes just read after `line`: how many of them may go on, and the
    /// fault found, if any. Lines that end in `new` are checked and forgotten.
    fn scan(&mut self, new: &[u8]) -> (usize, Option<UnreadableMessage>) {
        let mut at = 0;
        while at < new.len() {
            let rest = &new[at..];
            let end = rest.iter().position(|&b| b == b'\n');
            let body = end.unwrap_or(rest.len());
            let room = self.limit.saturating_sub(self.line.len());
            if body > room {
                // Only what fits goes on: the SDK never holds more than the limit of it.
                let limit = self.limit;
                return (at + room, Some(UnreadableMessage::TooLarge { limit }));
            }
            let Some(end) = end else {
                self.line.extend_from_slice(rest);
                return (new.len(), None);
            };
            // A line read whole (the usual case) is checked where it lies, without a copy.
            let checked = if self.line.is_empty() {
                check(&rest[..end])
            } else {
                self.line.extend_from_slice(&rest[..end]);
                check(&self.line)
            };
            if let Err(detail) = checked {
                // The line goes on without its newline: the SDK never sees it whole.
                return (at + end, Some(UnreadableMessage::Malformed { detail }));
            }
            self.line.clear();
            at += end + 1;
        }
        (new.len(), None)
    }

    fn error(fault: &UnreadableMessage) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidData, fault.clone())
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for FrameGuard<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(fault) = this.fault.get() {
            return Poll::Ready(Err(Self::error(fault)));
        }
        let start = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let filled = buf.filled().len();
        if filled == start {
            return Poll::Ready(Ok(())); // the end of the stream
        }
        let (pass, fault) = this.scan(&buf.filled()[start..filled]);
        let Some(fault) = fault else {
            return Poll::Ready(Ok(()));
        };
        tracing::warn!(
            target: crate::TARGET, %fault,
            "the tool server sent a message that cannot be delivered; closing the connection"
        );
        let error = Self::error(&fault);
        let _ = this.fault.set(fault);
        if pass == 0 {
            return Poll::Ready(Err(error));
        }
        // What came before the bad line goes on now (zero bytes would read as the end of the
        // stream); the error comes with the next read.
        buf.set_filled(start + pass);
        Poll::Ready(Ok(()))
    }
}

/// What a line must look like to be left to the SDK: a JSON object; and if it is an answer
/// (no `method`), one of JSON-RPC 2.0 with a `result` or an `error` — else the call it answers
/// would never hear of it. Requests and notifications the SDK cannot read are its business (it
/// answers or skips them, and no call of ours waits on them).
fn check(line: &[u8]) -> Result<(), String> {
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
    let Some(first) = line.iter().position(|b| !b.is_ascii_whitespace()) else {
        return Ok(()); // a blank line, which the SDK skips harmlessly
    };
    if line[first] != b'{' {
        return Err("not a JSON object".to_owned());
    }
    let shape: Shape<'_> = serde_json::from_slice(line).map_err(|e| e.to_string())?;
    if shape.method.0 {
        return Ok(());
    }
    if shape.jsonrpc.as_deref() != Some("2.0") {
        return Err("an answer without `\"jsonrpc\": \"2.0\"`".to_owned());
    }
    match (shape.result.0, shape.error.0) {
        (true, false) | (false, true) => Ok(()),
        (false, false) => Err("an answer with neither a result nor an error".to_owned()),
        (true, true) => Err("an answer with both a result and an error".to_owned()),
    }
}

/// The fields of a message that say what it is; the values are skipped, not kept.
#[derive(Deserialize)]
struct Shape<'a> {
    #[serde(borrow, default)]
    jsonrpc: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    method: Seen,
    #[serde(default)]
    result: Seen,
    #[serde(default)]
    error: Seen,
}

/// Whether a field is there, whatever its value (`null` included).
#[derive(Default)]
struct Seen(bool);

impl<'de> Deserialize<'de> for Seen {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        IgnoredAny::deserialize(d).map(|_| Seen(true))
    }
}

/// Our side of a connection, counting the bytes the operating system took: a call whose
/// connection failed before the count moved past its mark was never written.
pub(crate) struct Counted<W> {
    inner: W,
    written: Arc<AtomicU64>,
}

impl<W> Counted<W> {
    pub(crate) fn new(inner: W, written: Arc<AtomicU64>) -> Self {
        Counted { inner, written }
    }

    fn count(&self, poll: Poll<io::Result<usize>>) -> Poll<io::Result<usize>> {
        if let Poll::Ready(Ok(n)) = &poll {
            self.written.fetch_add(*n as u64, Ordering::AcqRel);
        }
        poll
    }
}

impl<W: AsyncWrite + Unpin> AsyncWrite for Counted<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.count(poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.count(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(limit: usize) -> FrameGuard<()> {
        FrameGuard::new((), limit, Fault::default())
    }

    #[test]
    fn good_lines_pass_whole_across_reads() {
        let mut g = guard(64);
        let message = br#"{"jsonrpc":"2.0","id":1,"result":{}}"#;
        assert_eq!(g.scan(&message[..10]), (10, None));
        let mut rest = message[10..].to_vec();
        rest.extend_from_slice(b"\n{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n");
        assert_eq!(g.scan(&rest), (rest.len(), None));
        assert!(g.line.is_empty());
    }

    #[test]
    fn a_line_past_the_limit_is_cut_where_it_crosses_it() {
        let mut g = guard(40);
        let first = b"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n";
        let mut read = first.to_vec();
        read.extend_from_slice(&[b'x'; 50]);
        let (pass, fault) = g.scan(&read);
        assert_eq!(pass, first.len() + 40);
        assert_eq!(fault, Some(UnreadableMessage::TooLarge { limit: 40 }));
        // Exactly the limit, then the newline: fine.
        let line = br#"{"jsonrpc":"2.0","method":"x"}"#;
        let mut g = guard(line.len());
        assert_eq!(g.scan(line), (line.len(), None));
        assert_eq!(g.scan(b"\n").1, None);
    }

    #[test]
    fn what_is_not_a_message_is_malformed() {
        for (line, why) in [
            (&b"hello\n"[..], "not a JSON object"),
            (b"[1,2]\n", "not a JSON object"),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1\n", "EOF while parsing"),
            (b"{\"id\":1,\"result\":{}}\n", "without"),
            (b"{\"jsonrpc\":\"2.0\",\"id\":1}\n", "neither"),
        ] {
            let mut g = guard(64);
            let (pass, fault) = g.scan(line);
            assert_eq!(pass, line.len() - 1, "{line:?}");
            let Some(UnreadableMessage::Malformed { detail }) = fault else {
                panic!("{line:?}: {fault:?}")
            };
            assert!(detail.contains(why), "{detail}");
        }
        // Split across reads, the same.
        let mut g = guard(64);
        assert_eq!(g.scan(b"hel"), (3, None));
        let (pass, fault) = g.scan(b"lo\n");
        assert_eq!(pass, 2);
        assert!(matches!(fault, Some(UnreadableMessage::Malformed { .. })));
        // Blank lines, a BOM and a carriage return are not faults.
        let mut g = guard(64);
        let fine = b"\n  \r\n\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{}}\r\n{\"jsonrpc\":\"2.0\",\"id\":2,\"result\":null}\n";
        assert_eq!(g.scan(fine), (fine.len(), None));
    }
}
