//! Wake-ups across processes: the store `NOTIFY`s an owner's channel in the transaction that
//! writes new or newly due work, and a worker `LISTEN`s on it over a connection of its own.
//!
//! `NOTIFY` is delivered at commit, so a worker never wakes before the row is visible, and a
//! rolled-back write wakes nobody. One channel per owner, so that workers of other owners are
//! not disturbed; its name is derived from the owner by a hash (see [`channel`]), never the
//! owner's text, so it is always a valid identifier of at most 63 bytes whatever the owner.
//! A notification carries nothing: it only says "look now". Bursts coalesce: the worker's
//! wake-up holds at most one pending wake however many notifications arrive before it looks.
//!
//! The listener reconnects with backoff when its connection is lost; meanwhile the worker
//! polls, as it always does at its poll interval, and once listening again it wakes the
//! worker once, for what was written while nobody listened.

use std::future::poll_fn;
use std::time::Duration;

use retry_toolkit::{Clock, DefaultClock, ExponentialBackoff, Jitter, JitterRng};
use sha2::{Digest, Sha256};
use tokio_postgres::{AsyncMessage, Config, NoTls};

/// The prefix of every channel: marks the channel as this crate's in `pg_listening_channels()`.
const PREFIX: &str = "retry_durable_";

/// Hex digits of the owner's hash in a channel name: 128 bits, so that two owners share a
/// channel (and wake each other's idle workers, nothing worse) practically never.
const HASH_HEX: usize = 32;

/// The application name of a listener connection whose URL names none, so that an operator
/// can tell it in `pg_stat_activity`.
pub(super) const APPLICATION_NAME: &str = "retry_durable listener";

/// The channel on which `owner`'s work is announced: the prefix and the first 128 bits of the
/// SHA-256 of the owner, in lowercase hex. Only `[a-z0-9_]`, 46 bytes: a valid identifier
/// that needs no quoting (it is quoted anyway) and fits PostgreSQL's 63-byte limit.
/// [`CHANNEL_SQL`] computes the same name in SQL from a row's owner.
pub(crate) fn channel(owner: &str) -> String {
    let digest = Sha256::digest(owner.as_bytes());
    let mut name = String::with_capacity(PREFIX.len() + HASH_HEX);
    name.push_str(PREFIX);
    for byte in &digest[..HASH_HEX / 2] {
        name.push(hex_digit(byte >> 4));
        name.push(hex_digit(byte & 0x0f));
    }
    name
}

fn hex_digit(nibble: u8) -> char {
    char::from_digit(u32::from(nibble), 16).unwrap_or('0')
}

/// [`channel`] in SQL, of the `owner` column of the row at hand (PostgreSQL 11 or newer has
/// `sha256`).
pub(super) const CHANNEL_SQL: &str =
    "'retry_durable_' || left(encode(sha256(convert_to(owner, 'UTF8')), 'hex'), 32)";

/// `name` as a quoted SQL identifier: in double quotes, each double quote doubled.
pub(crate) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The statement that subscribes a session to `owner`'s channel.
pub(crate) fn listen_sql(owner: &str) -> String {
    format!("LISTEN {}", quote_identifier(&channel(owner)))
}

/// The backoff between attempts to get a listener connection back: from 100 ms up to 10 s,
/// jittered, so that many workers that lost the server together do not return together.
fn reconnect_backoff() -> ExponentialBackoff {
    ExponentialBackoff::builder()
        .base(Duration::from_millis(100))
        .cap(Duration::from_secs(10))
        .jitter(Jitter::Full)
        .build()
        .unwrap_or(ExponentialBackoff::DEFAULT)
}

/// Listens for `owner`'s notifications over connections made from `config`, calling `wake`
/// once listening (for what was written before) and on each notification, for as long as it
/// is polled. A lost or refused connection is logged and made again after a backoff.
pub(super) async fn listen(config: &Config, owner: &str, wake: &(dyn Fn() + Send + Sync)) {
    let channel = channel(owner);
    let statement = listen_sql(owner);
    let mut delays = reconnect_backoff().delays(JitterRng::from_entropy());
    loop {
        let error = match session(config, &channel, &statement, wake).await {
            Session::Refused(error) => error,
            Session::Lost(error) => {
                // The connection worked: the next failure starts the backoff again.
                delays = reconnect_backoff().delays(JitterRng::from_entropy());
                error
            }
        };
        let delay = delays.next().unwrap_or(Duration::from_secs(10));
        tracing::warn!(target: "retry_durable", %error, ?delay, "listener connection lost; polling until it is back");
        DefaultClock.sleep(delay).await;
    }
}

/// How a listener session ended.
enum Session {
    /// It never listened: the connection or the `LISTEN` failed.
    Refused(String),
    /// It listened, then its connection ended.
    Lost(String),
}

/// One listener connection: connects, listens on `channel`, wakes once, then wakes on every
/// notification of `channel` until the connection ends.
async fn session(
    config: &Config,
    channel: &str,
    statement: &str,
    wake: &(dyn Fn() + Send + Sync),
) -> Session {
    let (client, mut connection) = match config.connect(NoTls).await {
        Ok(connected) => connected,
        Err(error) => return Session::Refused(super::said(&error)),
    };
    // The connection is driven here, beside the `LISTEN` until it is done, then alone.
    let mut subscribed = std::pin::pin!(client.batch_execute(statement));
    let mut listening = false;
    loop {
        let message = if listening {
            poll_fn(|cx| connection.poll_message(cx)).await
        } else {
            tokio::select! {
                done = &mut subscribed => {
                    if let Err(error) = done {
                        return Session::Refused(super::said(&error));
                    }
                    listening = true;
                    tracing::debug!(target: "retry_durable", channel, "listening for new work");
                    wake();
                    continue;
                }
                message = poll_fn(|cx| connection.poll_message(cx)) => message,
            }
        };
        let ended = |reason: String| {
            if listening {
                Session::Lost(reason)
            } else {
                Session::Refused(reason)
            }
        };
        match message {
            Some(Ok(AsyncMessage::Notification(note))) if note.channel() == channel => wake(),
            Some(Ok(_)) => {}
            Some(Err(error)) => return ended(super::said(&error)),
            None => return ended("the server closed the connection".to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_plain_identifier(name: &str) -> bool {
        name.len() <= 63
            && name.starts_with(|c: char| c.is_ascii_lowercase())
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    }

    #[test]
    fn s17_channel_names_are_plain_identifiers_whatever_the_owner() {
        let long = "x".repeat(10_000);
        for owner in [
            "default",
            "",
            "Billing",
            "a\"; DROP TABLE retry_durable_work; --",
            "ünïcode ✓",
            "with space",
            "nul\0byte",
            long.as_str(),
        ] {
            let name = channel(owner);
            assert!(is_plain_identifier(&name), "{owner:?} gave {name:?}");
            assert_eq!(name.len(), PREFIX.len() + HASH_HEX);
            assert!(!name.contains(owner) || owner.is_empty() || owner == "x");
        }
    }

    #[test]
    fn s17_channel_names_are_stable_and_distinct_per_owner() {
        // Fixed: processes of other builds must agree on it (the first 128 bits of SHA-256).
        assert_eq!(
            channel("default"),
            "retry_durable_37a8eec1ce19687d132fe29051dca629"
        );
        assert_eq!(channel("default"), channel("default"));
        assert_ne!(channel("default"), channel("Default"));
        assert_ne!(channel("a"), channel("b"));
    }

    #[test]
    fn s17_listen_statements_quote_the_channel() {
        assert_eq!(
            listen_sql("default"),
            "LISTEN \"retry_durable_37a8eec1ce19687d132fe29051dca629\""
        );
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
        assert_eq!(quote_identifier("plain"), "\"plain\"");
    }
}
