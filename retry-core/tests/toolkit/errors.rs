//! How the loop's errors compose with the error types users return (R5, R6 outcomes).

use std::time::Duration;

use retry_toolkit::{RetryError, RetryPolicy};

fn policy() -> RetryPolicy {
    RetryPolicy::DEFAULT.with_seed(7)
}

/// An operation over `anyhow::Result`, given a deadline, still composes with `?` into
/// `anyhow::Result`.
async fn fetch_with_anyhow() -> anyhow::Result<String> {
    let body = policy()
        .retry(|attempt| async move {
            if attempt > 1 {
                std::future::pending::<()>().await; // hangs until the deadline
            }
            Err::<String, _>(anyhow::anyhow!("HTTP 503"))
        })
        .deadline(Duration::from_millis(150))
        .await?;
    Ok(body)
}

/// The same with `Box<dyn Error + Send + Sync>`.
async fn fetch_with_box() -> Result<String, Box<dyn std::error::Error + Send + Sync>> {
    let body = policy()
        .retry(|attempt| async move {
            if attempt > 1 {
                std::future::pending::<()>().await;
            }
            Err::<String, Box<dyn std::error::Error + Send + Sync>>("HTTP 503".into())
        })
        .deadline(Duration::from_millis(150))
        .await?;
    Ok(body)
}

#[tokio::test(start_paused = true)]
async fn r5_a_retry_over_anyhow_composes_with_the_question_mark_and_says_its_error_once() {
    let report = format!("{:?}", fetch_with_anyhow().await.unwrap_err());
    assert!(
        report.starts_with("retry deadline exceeded after "),
        "{report}"
    );
    assert_eq!(report.matches("HTTP 503").count(), 1, "{report}");
}

#[tokio::test(start_paused = true)]
async fn r5_a_retry_over_a_boxed_error_composes_with_the_question_mark() {
    let error = fetch_with_box().await.unwrap_err();
    assert!(
        error
            .to_string()
            .starts_with("retry deadline exceeded after 2 attempts"),
        "{error}"
    );
    assert_eq!(error.to_string().matches("HTTP 503").count(), 1, "{error}");
    assert!(error.source().is_none());
}

#[test]
fn r5_an_operation_error_reads_as_itself_and_a_limit_names_the_last_error_once() {
    let io = std::io::Error::other("connection reset");
    let e: RetryError<std::io::Error> = RetryError::Operation(io);
    assert_eq!(e.to_string(), "connection reset");
    let e: RetryError<&str> = RetryError::Cancelled {
        attempts: 1,
        last: Some("503"),
    };
    assert_eq!(
        e.to_string(),
        "retry cancelled after 1 attempt; last error: 503"
    );
    // The message carries the last error, so there is no source to print it a second time.
    assert!(std::error::Error::source(&e).is_none());
}

#[test]
fn h7_a_chained_retry_error_puts_the_last_error_in_its_source_not_its_message() {
    let io = || std::io::Error::new(std::io::ErrorKind::ConnectionReset, "connection reset");
    let e = RetryError::DeadlineExceeded {
        attempts: 3,
        last: Some(io()),
    }
    .chained();
    assert_eq!(e.to_string(), "retry deadline exceeded after 3 attempts");
    // The chain is walkable down to the I/O error's kind.
    let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(
        source.map(std::io::Error::kind),
        Some(std::io::ErrorKind::ConnectionReset)
    );
    assert!(matches!(
        e.get_ref(),
        RetryError::DeadlineExceeded { attempts: 3, .. }
    ));
    // anyhow prints each line once.
    let report = format!("{:#}", anyhow::Error::new(e));
    assert_eq!(
        report,
        "retry deadline exceeded after 3 attempts: connection reset"
    );

    // The operation's own error: the message says the loop gave up, the error is the source.
    let e = RetryError::Operation(io()).chained();
    assert_eq!(e.to_string(), "retry gave up");
    assert!(std::error::Error::source(&e).is_some());
    // A limit before any error has no source.
    let e = RetryError::<std::io::Error>::Cancelled {
        attempts: 0,
        last: None,
    }
    .chained();
    assert_eq!(e.to_string(), "retry cancelled after 0 attempts");
    assert!(std::error::Error::source(&e).is_none());
    assert!(e.into_inner().is_limit());
}
