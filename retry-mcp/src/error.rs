//! What can go wrong talking to a tool server, told apart by what it means for the call:
//! not sent ([`CallError::Unreachable`]), answered ([`CallError::Refused`],
//! [`CallError::ToolFailed`]), or sent with its answer lost ([`CallError::answer_lost`]).

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::CallToolResult;
use rmcp::service::ClientInitializeError;

/// Why one connection attempt failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectFailure {
    /// The transport could not be opened: the server process did not start, a socket was
    /// refused.
    #[error("could not open the connection: {0}")]
    Open(#[source] io::Error),
    /// The stream opened, but the protocol handshake failed: the server closed it (a process
    /// that exited at once), answered something else, or speaks no common protocol version.
    #[error("the handshake failed: {0}")]
    Handshake(#[source] Box<ClientInitializeError>),
    /// Opening and the handshake together took longer than the connect timeout.
    #[error("no connection within {0:?}")]
    TimedOut(Duration),
    /// The server's answer to the handshake could not be read: too large, or not a message.
    #[error("the handshake failed: the server sent {0}")]
    Unreadable(UnreadableMessage),
}

impl ConnectFailure {
    /// Whether another attempt might succeed. A program that does not exist or may not be run
    /// will not appear by waiting; everything else — a refused socket, a server that exited,
    /// a handshake that failed or timed out — is retried.
    pub fn is_retryable(&self) -> bool {
        match self {
            ConnectFailure::Open(e) => !matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied
            ),
            ConnectFailure::Handshake(_)
            | ConnectFailure::TimedOut(_)
            | ConnectFailure::Unreadable(_) => true,
        }
    }
}

/// A message from the server that the connection cannot deliver. The connection is closed
/// when one arrives, so that the calls waiting on it fail at once instead of waiting for an
/// answer that will never come.
#[derive(Clone, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum UnreadableMessage {
    /// A message longer than the limit (see
    /// [`max_message_size`](crate::ToolServerBuilder::max_message_size)); also a message that
    /// never ends, cut where it crossed the limit.
    #[error("a message longer than the limit of {limit} bytes")]
    TooLarge {
        /// The limit, in bytes.
        limit: usize,
    },
    /// A line that is not a JSON-RPC message: not JSON, not an object, or an answer with
    /// neither a result nor an error. The protocol allows nothing else on a server's output;
    /// a server that logs to its standard output (a banner, a stack trace) is refused here —
    /// its logs belong on standard error.
    #[error("a line that is not a protocol message ({detail})")]
    Malformed {
        /// What is wrong with it.
        detail: String,
    },
}

/// Why the connection attempts stopped without a connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GaveUp {
    /// Every attempt the options allow failed.
    Exhausted,
    /// An attempt failed in a way that another one would not fix.
    NotRetryable,
    /// The call's deadline came before a connection did.
    Deadline,
    /// The server was [closed](crate::ToolServer::close): it takes no more calls.
    Closed,
}

/// No connection to a tool server: every attempt failed, or a limit stopped them. A call that
/// fails with this was not sent.
#[derive(Debug)]
pub struct ConnectError {
    pub(crate) server: String,
    pub(crate) attempts: u32,
    pub(crate) gave_up: GaveUp,
    pub(crate) last: Option<ConnectFailure>,
}

impl ConnectError {
    /// The server's name.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// How many attempts were made.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Why the attempts stopped.
    pub fn gave_up(&self) -> GaveUp {
        self.gave_up
    }

    /// How the last attempt failed, if one was made.
    pub fn last_failure(&self) -> Option<&ConnectFailure> {
        self.last.as_ref()
    }
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (server, n) = (&self.server, self.attempts);
        let attempts = if n == 1 { "attempt" } else { "attempts" };
        match (self.gave_up, &self.last) {
            (GaveUp::Closed, _) => write!(f, "tool server `{server}` was closed"),
            (GaveUp::Deadline, Some(last)) => write!(
                f,
                "could not connect to tool server `{server}` before the deadline ({n} {attempts}; the last: {last})"
            ),
            (GaveUp::Deadline, None) => write!(
                f,
                "could not connect to tool server `{server}` before the deadline"
            ),
            (GaveUp::NotRetryable, Some(last)) => write!(
                f,
                "could not connect to tool server `{server}`: {last} (not retried: waiting would not fix it)"
            ),
            (_, Some(last)) => write!(
                f,
                "could not connect to tool server `{server}` after {n} {attempts}: {last}"
            ),
            (_, None) => write!(f, "could not connect to tool server `{server}`"),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.last.as_ref().map(|e| e as _)
    }
}

/// Why a tool call on a remote server has no result.
///
/// Three kinds, and what each means for the call:
/// - **not sent** — [`Unreachable`](CallError::Unreachable),
///   [`NotSent`](CallError::NotSent), [`InvalidArguments`](CallError::InvalidArguments):
///   nothing happened on the server;
/// - **answered** — [`Refused`](CallError::Refused), [`ToolFailed`](CallError::ToolFailed):
///   the server says how the call ended;
/// - **answer lost** — [`ConnectionLost`](CallError::ConnectionLost),
///   [`Unreadable`](CallError::Unreadable), [`TimedOut`](CallError::TimedOut),
///   [`Unanswered`](CallError::Unanswered): the request
///   went out and no result came back, so the tool may have acted
///   ([`answer_lost`](CallError::answer_lost)). Such a call is never sent again.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// No connection could be made; the call was not sent.
    #[error(transparent)]
    Unreachable(Arc<ConnectError>),
    /// The arguments are not a JSON object, which the protocol requires; the call was not sent.
    #[error("the arguments of `{tool}` must be a JSON object, not {found}")]
    InvalidArguments {
        /// The tool's name on the server.
        tool: String,
        /// What was given instead (`"an array"`, `"a string"` …).
        found: &'static str,
    },
    /// The connection failed after the call was sent. The connection was dropped; the next
    /// call connects again.
    #[error(
        "the connection to tool server `{server}` was lost during the call of `{tool}` ({cause}): whether the call acted is unknown, and it was not sent again"
    )]
    ConnectionLost {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// What the transport said.
        cause: String,
    },
    /// The connection failed before a byte of the call was written: the call was not sent.
    /// The connection was dropped; the next call connects again.
    #[error(
        "the call of `{tool}` was not sent: the connection to tool server `{server}` failed first ({cause})"
    )]
    NotSent {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// Why the connection failed.
        cause: String,
    },
    /// The call was sent, and the server then wrote a message the connection cannot deliver
    /// (too large, not a protocol message). The connection was closed at once and dropped;
    /// the next call connects again.
    #[error(
        "tool server `{server}` sent {message} during the call of `{tool}`: the connection was closed, whether the call acted is unknown, and it was not sent again"
    )]
    Unreadable {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// What could not be delivered.
        message: UnreadableMessage,
    },
    /// No answer within the call's timeout; the server was told to cancel the call.
    #[error(
        "`{tool}` on tool server `{server}` did not answer within {timeout:?}: whether it acted is unknown, and the server was asked to cancel it"
    )]
    TimedOut {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The server answered with something other than a tool result — a request for more input,
    /// a task to poll — which this client does not take.
    #[error(
        "tool server `{server}` answered the call of `{tool}` with {what}, which this client does not take: whether the call acted is unknown"
    )]
    Unanswered {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// What came back instead.
        what: &'static str,
    },
    /// The server refused the call with a protocol error (an unknown tool, invalid arguments).
    #[error("tool server `{server}` refused the call of `{tool}`: {message} (error {code})")]
    Refused {
        /// The server's name.
        server: String,
        /// The tool's name on the server.
        tool: String,
        /// The JSON-RPC error code.
        code: i32,
        /// The server's message.
        message: String,
    },
    /// The tool ran and reported an error; `message` is its text, as the model should read it.
    #[error("{message}")]
    ToolFailed {
        /// The tool's name on the server.
        tool: String,
        /// The text of the result's content.
        message: String,
        /// The whole result.
        result: Box<CallToolResult>,
    },
}

impl CallError {
    /// Whether the request went out and its answer was lost, so that the tool may have acted:
    /// the connection failed mid-call, the call timed out, or the answer was not a result.
    pub fn answer_lost(&self) -> bool {
        matches!(
            self,
            CallError::ConnectionLost { .. }
                | CallError::Unreadable { .. }
                | CallError::TimedOut { .. }
                | CallError::Unanswered { .. }
        )
    }

    /// Whether the request reached (or may have reached) the server.
    pub fn was_sent(&self) -> bool {
        !matches!(
            self,
            CallError::Unreachable(_)
                | CallError::NotSent { .. }
                | CallError::InvalidArguments { .. }
        )
    }

    /// A diagnosis, not a permission: might a new call succeed? Yes after a connection that
    /// could not be made or was lost, or a timeout; no after an answer. Whether a call whose
    /// answer was lost may be made again is the effects runner's decision, not this one.
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::Unreachable(e) => {
                e.gave_up != GaveUp::Closed && e.last.as_ref().is_none_or(|l| l.is_retryable())
            }
            CallError::NotSent { .. }
            | CallError::ConnectionLost { .. }
            | CallError::Unreadable { .. }
            | CallError::TimedOut { .. } => true,
            _ => false,
        }
    }
}

/// Why the tools of a server could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ListError {
    /// No connection could be made.
    #[error(transparent)]
    Unreachable(Arc<ConnectError>),
    /// The connection failed while listing; it was dropped, and the next request connects
    /// again.
    #[error("the connection to tool server `{server}` was lost while listing its tools ({cause})")]
    ConnectionLost {
        /// The server's name.
        server: String,
        /// What the transport said.
        cause: String,
    },
    /// The server wrote a message the connection cannot deliver (too large, not a protocol
    /// message) while listing; the connection was closed at once and dropped, and the next
    /// request connects again.
    #[error(
        "tool server `{server}` sent {message} while listing its tools: the connection was closed"
    )]
    Unreadable {
        /// The server's name.
        server: String,
        /// What could not be delivered.
        message: UnreadableMessage,
    },
    /// The listing did not finish within its timeout.
    #[error("tool server `{server}` did not list its tools within {timeout:?}")]
    TimedOut {
        /// The server's name.
        server: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The server refused to list its tools, or answered with something else.
    #[error("tool server `{server}` did not list its tools: {message}")]
    Refused {
        /// The server's name.
        server: String,
        /// The server's message.
        message: String,
    },
    /// The server kept handing out further pages.
    #[error("tool server `{server}` listed more than {pages} pages of tools; stopped there")]
    TooManyPages {
        /// The server's name.
        server: String,
        /// The limit, [`MAX_TOOL_PAGES`](crate::MAX_TOOL_PAGES).
        pages: usize,
    },
}
