//! How the loop's errors compose with the error types users return (R5, R6 outcomes).

use std::time::Duration;

use retry_core::{RetryError, RetryPolicy};

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
