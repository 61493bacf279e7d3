//! [`Connector`]: how a connection attempt opens a byte stream to a tool server — a child
//! process over its standard input and output, or any stream you open yourself — and the
//! [`Stream`] it opens.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::process::{Child, Command};

/// A boxed future, as a connector hands it out.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// One open byte stream to a tool server: what the server writes (its messages to us) and
/// what it reads (ours to it), newline-delimited JSON-RPC both ways, plus the child process
/// behind them if there is one.
pub struct Stream {
    pub(crate) read: Pin<Box<dyn AsyncRead + Send>>,
    pub(crate) write: Pin<Box<dyn AsyncWrite + Send>>,
    pub(crate) child: Option<Child>,
}

impl fmt::Debug for Stream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Stream")
            .field("child", &self.child.as_ref().and_then(Child::id))
            .finish_non_exhaustive()
    }
}

impl Stream {
    /// A stream over `read` (the server's messages) and `write` (ours): a socket's two
    /// halves, one end of `tokio::io::duplex`, …
    pub fn new(
        read: impl AsyncRead + Send + 'static,
        write: impl AsyncWrite + Send + 'static,
    ) -> Self {
        Stream {
            read: Box::pin(read),
            write: Box::pin(write),
            child: None,
        }
    }

    /// The standard output and input of `child`, which must have been spawned with both
    /// piped. The child is kept as long as the connection and dropped with it (a connection
    /// that failed, a closed server): spawn it with `kill_on_drop(true)` so that dropping it
    /// ends the process, as [`Connector::command`] does.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] if the child's stdout or stdin is not piped.
    pub fn child(mut child: Child) -> io::Result<Self> {
        let (Some(read), Some(write)) = (child.stdout.take(), child.stdin.take()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the tool server's process needs a piped stdin and stdout",
            ));
        };
        Ok(Stream {
            read: Box::pin(read),
            write: Box::pin(write),
            child: Some(child),
        })
    }
}

/// Opens a [`Stream`] for each connection attempt.
///
/// ```
/// use retry_mcp::Connector;
/// use tokio::process::Command;
///
/// // A server run as a child process, spoken to over its stdin and stdout.
/// let mut command = Command::new("my-tool-server");
/// command.arg("--stdio");
/// let connector = Connector::command(command);
///
/// // Or any stream: here one end of an in-memory pipe.
/// let connector = Connector::new(|| async {
///     let (ours, theirs) = tokio::io::duplex(64 * 1024);
///     drop(theirs); // a real server would serve on this end
///     let (read, write) = tokio::io::split(ours);
///     Ok(retry_mcp::Stream::new(read, write))
/// });
/// # drop(connector);
/// ```
#[derive(Clone)]
pub struct Connector {
    open: Arc<dyn Open>,
}

impl fmt::Debug for Connector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.open.describe(f)
    }
}

/// What a connector does; one implementation per kind.
trait Open: Send + Sync + 'static {
    fn open(&self) -> BoxFuture<'_, io::Result<Stream>>;
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
}

impl Connector {
    /// Calls `open` for every attempt.
    pub fn new<F, Fut>(open: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<Stream>> + Send + 'static,
    {
        Connector {
            open: Arc::new(FnOpen(open)),
        }
    }

    /// Spawns `command` for every attempt and speaks to it over its stdin and stdout; stdin and
    /// stdout are piped whatever `command` says, stderr is left as `command` set it (inherited
    /// by default, so the server's logs show). The process is killed when its connection is
    /// dropped.
    pub fn command(command: Command) -> Self {
        Connector {
            open: Arc::new(Spawn(Mutex::new(command))),
        }
    }

    pub(crate) fn open(&self) -> BoxFuture<'_, io::Result<Stream>> {
        self.open.open()
    }
}

struct FnOpen<F>(F);

impl<F, Fut> Open for FnOpen<F>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: Future<Output = io::Result<Stream>> + Send + 'static,
{
    fn open(&self) -> BoxFuture<'_, io::Result<Stream>> {
        Box::pin((self.0)())
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Connector(fn)")
    }
}

/// A command spawned anew for every attempt (tokio's `Command` can spawn many times).
struct Spawn(Mutex<Command>);

impl Open for Spawn {
    fn open(&self) -> BoxFuture<'_, io::Result<Stream>> {
        let spawned = {
            let mut command = self.0.lock().unwrap_or_else(PoisonError::into_inner);
            command
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .kill_on_drop(true)
                .spawn()
        };
        Box::pin(async move { Stream::child(spawned?) })
    }

    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let command = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        write!(f, "Connector({:?})", command.as_std().get_program())
    }
}
