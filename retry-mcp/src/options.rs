//! [`ConnectOptions`]: how a tool server is connected to — plain data, persisted with the
//! server's registration and validated when given.

use std::fmt;
use std::time::Duration;

use retry_toolkit::{OptionsError, RetryOptions, RetryPolicy};
use serde::{Deserialize, Serialize};

/// The retry layer under a server's own options: 3 attempts, 500 ms base, 5 s ceiling, full
/// jitter. Connecting is slower and rarer than a request, so it waits longer than the built-in
/// retry defaults (100 ms, 3 s).
pub const CONNECT_RETRY_DEFAULTS: RetryOptions = RetryOptions::new()
    .with_max_attempts(3)
    .with_base_delay_ms(500)
    .with_max_delay_ms(5_000);

/// How long one connection attempt may take by default — opening the transport (starting the
/// server process, say) and the protocol handshake: 10 s.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How to connect to one tool server: the retry options of the connection attempts and the
/// time one attempt may take.
///
/// Plain data, so that it can live with the server's registration — a config file, a database
/// row — and read back exactly as it was validated. Fields left unset take the connection
/// defaults ([`CONNECT_RETRY_DEFAULTS`], [`DEFAULT_CONNECT_TIMEOUT`]), and the merged result is
/// checked, both when a [`ToolServer`](crate::ToolServer) is built and when the options are
/// deserialized, with the same messages as every other retry option.
///
/// ```
/// use retry_toolkit::RetryOptions;
/// use retry_mcp::ConnectOptions;
///
/// let options = ConnectOptions::new().with_retry(RetryOptions::new().with_max_attempts(5));
/// let stored = serde_json::to_string(&options)?;
/// assert_eq!(stored, r#"{"retry":{"max_attempts":5}}"#);
/// assert_eq!(serde_json::from_str::<ConnectOptions>(&stored)?, options);
///
/// // Checked against the connection defaults: the ceiling is 5 s.
/// let bad = serde_json::from_str::<ConnectOptions>(r#"{"retry":{"base_delay_ms":6000}}"#);
/// assert!(bad.unwrap_err().to_string().contains("retry.base_delay_ms must be <= retry.max_delay_ms"));
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "RawConnectOptions")]
pub struct ConnectOptions {
    /// Retry options of the connection attempts, layered over [`CONNECT_RETRY_DEFAULTS`].
    #[serde(skip_serializing_if = "is_unset")]
    pub retry: RetryOptions,
    /// How long one attempt may take, in milliseconds (`> 0`); [`DEFAULT_CONNECT_TIMEOUT`]
    /// when unset.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub connect_timeout_ms: Option<u64>,
}

fn is_unset(options: &RetryOptions) -> bool {
    *options == RetryOptions::new()
}

/// Why a set of [`ConnectOptions`] was refused. `Display` is the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum ConnectOptionsError {
    /// The retry options, once layered over the connection defaults, break a rule.
    #[error(transparent)]
    Retry(#[from] OptionsError),
    /// `connect_timeout_ms` is zero.
    #[error("connect_timeout_ms must be > 0")]
    ConnectTimeoutNotPositive,
}

impl ConnectOptions {
    /// No options of its own: every field takes the connection defaults.
    pub const fn new() -> Self {
        ConnectOptions {
            retry: RetryOptions::new(),
            connect_timeout_ms: None,
        }
    }

    /// Sets the retry options (layered over [`CONNECT_RETRY_DEFAULTS`], field by field).
    pub const fn with_retry(mut self, retry: RetryOptions) -> Self {
        self.retry = retry;
        self
    }

    /// Sets how long one attempt may take, in whole milliseconds (a part of one rounds up).
    pub const fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        let nanos = timeout.as_nanos();
        let ms = nanos / 1_000_000
            + if nanos.is_multiple_of(1_000_000) {
                0
            } else {
                1
            };
        self.connect_timeout_ms = Some(if ms > u64::MAX as u128 {
            u64::MAX
        } else {
            ms as u64
        });
        self
    }

    /// Layers these options over the connection defaults and checks the result.
    ///
    /// # Errors
    /// The first rule the merged options break: the retry options' rules in their usual order,
    /// then `connect_timeout_ms`.
    pub const fn resolve(&self) -> Result<ConnectPolicy, ConnectOptionsError> {
        let retry = match self.retry.or(CONNECT_RETRY_DEFAULTS).resolve() {
            Ok(policy) => policy,
            Err(e) => return Err(ConnectOptionsError::Retry(e)),
        };
        let connect_timeout = match self.connect_timeout_ms {
            Some(0) => return Err(ConnectOptionsError::ConnectTimeoutNotPositive),
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_CONNECT_TIMEOUT,
        };
        Ok(ConnectPolicy {
            retry,
            connect_timeout,
        })
    }
}

impl fmt::Display for ConnectOptions {
    /// The set fields as `key=value` pairs, e.g. `max_attempts=5 connect_timeout_ms=2000`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let retry = self.retry.to_string();
        f.write_str(&retry)?;
        if let Some(ms) = self.connect_timeout_ms {
            let sep = if retry.is_empty() { "" } else { " " };
            write!(f, "{sep}connect_timeout_ms={ms}")?;
        }
        Ok(())
    }
}

/// Validated [`ConnectOptions`]: what a [`ToolServer`](crate::ToolServer) connects with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnectPolicy {
    retry: RetryPolicy,
    connect_timeout: Duration,
}

impl ConnectPolicy {
    /// The retry policy of the connection attempts.
    pub const fn retry(&self) -> RetryPolicy {
        self.retry
    }

    /// How long one attempt may take.
    pub const fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The options this policy was resolved from, every field set: for persisting it.
    pub const fn to_options(&self) -> ConnectOptions {
        ConnectOptions::new()
            .with_retry(self.retry.to_options())
            .with_connect_timeout(self.connect_timeout)
    }
}

impl Default for ConnectPolicy {
    fn default() -> Self {
        match ConnectOptions::new().resolve() {
            Ok(policy) => policy,
            // Unreachable: the defaults are valid (a test resolves them).
            Err(_) => ConnectPolicy {
                retry: RetryPolicy::DEFAULT,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            },
        }
    }
}

/// The document's shape; `retry` validates its own fields as it is read.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConnectOptions {
    #[serde(default)]
    retry: RetryOptions,
    #[serde(default)]
    connect_timeout_ms: Option<u64>,
}

impl TryFrom<RawConnectOptions> for ConnectOptions {
    type Error = ConnectOptionsError;

    fn try_from(raw: RawConnectOptions) -> Result<Self, ConnectOptionsError> {
        let options = ConnectOptions {
            retry: raw.retry,
            connect_timeout_ms: raw.connect_timeout_ms,
        };
        options.resolve()?;
        Ok(options)
    }
}
