//! Connecting to a real rmcp server in process, over an in-memory pipe, with faults (SPEC C1,
//! C2). Time is tokio's paused clock: every wait is virtual and exact.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::{Answer, Event, InProcess, order};
use retry_mcp::{
    CallError, ConnectFailure, ConnectOptions, ConnectOptionsError, GaveUp, ListError,
    MAX_TOOL_PAGES, ToolHints, ToolServer,
};
use retry_toolkit::{OptionsError, RetryOptions};
use tokio::time::Instant;

/// A server over `shop`, recording the waits between connection attempts.
fn server(
    shop: &Arc<InProcess>,
    options: ConnectOptions,
) -> (ToolServer, Arc<Mutex<Vec<Duration>>>) {
    let waits = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&waits);
    let server = ToolServer::builder("shop", shop.connector())
        .options(options)
        .seed(7)
        .on_retry(move |retry| crate::support::lock(&seen).push(retry.delay))
        .build()
        .unwrap();
    (server, waits)
}

/// `elapsed` is `expected` on tokio's clock, whose timers round each sleep up to a whole
/// millisecond: nothing else waited.
fn assert_about(elapsed: Duration, expected: Duration) {
    assert!(
        elapsed >= expected && elapsed - expected < Duration::from_millis(3),
        "{elapsed:?} vs {expected:?}"
    );
}

fn waits(waits: &Mutex<Vec<Duration>>) -> Vec<Duration> {
    crate::support::lock(waits).clone()
}

#[tokio::test(start_paused = true)]
async fn c1_a_server_unreachable_for_two_connects_is_reached_on_the_third() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse, Answer::Refuse]);
    let (server, seen) = server(&shop, ConnectOptions::new());
    let start = Instant::now();

    let result = server.call("lookup_order", order(7)).await.unwrap();

    assert_eq!(
        result.structured_content,
        Some(serde_json::json!({ "order": 7, "status": "shipped" }))
    );
    assert_eq!(shop.connects(), 3);
    let waits = waits(&seen);
    assert_eq!(waits.len(), 2, "one wait between two attempts");
    // Full jitter under the connection defaults: below 2 x 500 ms, then below 4 x 500 ms.
    assert!(waits[0] < Duration::from_millis(1_000), "{waits:?}");
    assert!(waits[1] < Duration::from_millis(2_000), "{waits:?}");
    assert_about(start.elapsed(), waits[0] + waits[1]);
    assert_eq!(shop.journal.calls("lookup_order"), 1);
    assert_eq!(server.connections(), 1);
    assert!(shop.script_consumed());
}

#[tokio::test(start_paused = true)]
async fn c1_three_refused_connects_fail_the_call_without_sending_it() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse; 5]);
    let (server, seen) = server(&shop, ConnectOptions::new());

    let error = server.call("refund", order(7)).await.unwrap_err();

    let CallError::Unreachable(connect) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(
        (connect.attempts(), connect.gave_up()),
        (3, GaveUp::Exhausted)
    );
    assert!(matches!(
        connect.last_failure(),
        Some(ConnectFailure::Open(_))
    ));
    assert_eq!(
        error.to_string(),
        "could not connect to tool server `shop` after 3 attempts: could not open the connection: connection refused"
    );
    assert!(!error.was_sent() && !error.answer_lost() && error.is_retryable());
    assert_eq!(shop.connects(), 3);
    assert_eq!(waits(&seen).len(), 2);
    assert!(
        shop.journal.events().is_empty(),
        "nothing reached the server"
    );
}

#[tokio::test(start_paused = true)]
async fn c1_the_servers_own_options_decide_the_attempts_and_waits() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse; 10]);
    let options = ConnectOptions::new().with_retry(
        RetryOptions::new()
            .with_max_attempts(5)
            .with_base_delay_ms(10)
            .with_max_delay_ms(40),
    );
    let (server, seen) = server(&shop, options);
    assert!(server.call("refund", order(1)).await.is_err());
    assert_eq!(shop.connects(), 5);
    let waits = waits(&seen);
    assert_eq!(waits.len(), 4);
    assert!(
        waits.iter().all(|w| *w < Duration::from_millis(40)),
        "{waits:?}"
    );
    assert_eq!(server.options(), options, "kept as given, to persist");
}

#[tokio::test(start_paused = true)]
async fn c1_one_attempt_means_no_wait() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse]);
    let one = ConnectOptions::new().with_retry(RetryOptions::new().with_max_attempts(1));
    let (server, seen) = server(&shop, one);
    let start = Instant::now();
    assert!(server.call("refund", order(1)).await.is_err());
    assert_eq!((shop.connects(), waits(&seen).len()), (1, 0));
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn c1_a_handshake_that_never_comes_times_out_and_is_retried() {
    let shop = InProcess::new();
    shop.then(&[Answer::Silent]);
    let options = ConnectOptions::new().with_connect_timeout(Duration::from_secs(2));
    let (server, seen) = server(&shop, options);
    let start = Instant::now();

    server.connect().await.unwrap();

    assert_eq!(shop.connects(), 2);
    let waits = waits(&seen);
    assert_about(start.elapsed(), Duration::from_secs(2) + waits[0]);
    assert!(server.is_connected());
}

#[test]
fn c1_bad_options_are_refused_when_the_server_is_built() {
    let shop = InProcess::new();
    let build = |options: ConnectOptions| {
        ToolServer::builder("shop", shop.connector())
            .options(options)
            .build()
            .map(drop)
            .unwrap_err()
    };
    let retry = |r: RetryOptions| ConnectOptions::new().with_retry(r);
    assert_eq!(
        build(retry(RetryOptions::new().with_max_attempts(0))),
        ConnectOptionsError::Retry(OptionsError::MaxAttemptsBelowOne)
    );
    // The connection ceiling is 5 s: a base above it is refused, as for any retry options.
    let above = build(retry(RetryOptions::new().with_base_delay_ms(6_000)));
    assert_eq!(
        above.to_string(),
        "retry.base_delay_ms must be <= retry.max_delay_ms"
    );
    assert_eq!(
        build(ConnectOptions::new().with_connect_timeout(Duration::ZERO)).to_string(),
        "connect_timeout_ms must be > 0"
    );
}

#[test]
fn c1_options_are_persisted_with_the_registration_and_checked_when_read_back() {
    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Registration {
        name: String,
        command: Vec<String>,
        #[serde(default)]
        connect: ConnectOptions,
    }

    let registration = Registration {
        name: "shop".into(),
        command: vec!["shop-server".into(), "--stdio".into()],
        connect: ConnectOptions::new()
            .with_retry(
                RetryOptions::new()
                    .with_max_attempts(5)
                    .with_base_delay_ms(250),
            )
            .with_connect_timeout(Duration::from_secs(30)),
    };
    let toml_text = toml::to_string(&registration).unwrap();
    assert_eq!(
        toml::from_str::<Registration>(&toml_text).unwrap(),
        registration
    );
    let json_text = serde_json::to_string(&registration.connect).unwrap();
    assert_eq!(
        json_text,
        r#"{"retry":{"max_attempts":5,"base_delay_ms":250},"connect_timeout_ms":30000}"#
    );
    assert_eq!(
        serde_json::from_str::<ConnectOptions>(&json_text).unwrap(),
        registration.connect
    );

    // Nothing set: the defaults, written as nothing.
    assert_eq!(serde_json::to_string(&ConnectOptions::new()).unwrap(), "{}");
    let defaults = serde_json::from_str::<ConnectOptions>("{}")
        .unwrap()
        .resolve()
        .unwrap();
    assert_eq!(defaults.retry().max_attempts(), 3);
    assert_eq!(defaults.retry().base_delay(), Duration::from_millis(500));
    assert_eq!(defaults.retry().max_delay(), Duration::from_secs(5));
    assert_eq!(defaults.connect_timeout(), Duration::from_secs(10));
    // A resolved policy persists with every field set, and reads back to itself.
    assert_eq!(defaults.to_options().resolve(), Ok(defaults));

    // Read back, the rules apply with their usual messages.
    let refused = |text: &str| {
        serde_json::from_str::<ConnectOptions>(text)
            .unwrap_err()
            .to_string()
    };
    assert!(refused(r#"{"retry":{"max_attempts":0}}"#).contains("retry.max_attempts must be >= 1"));
    assert!(
        refused(r#"{"retry":{"max_attempts":2.5}}"#)
            .contains("retry.max_attempts must be an integer")
    );
    assert!(
        refused(r#"{"retry":{"base_delay_ms":6000}}"#)
            .contains("retry.base_delay_ms must be <= retry.max_delay_ms")
    );
    assert!(refused(r#"{"connect_timeout_ms":0}"#).contains("connect_timeout_ms must be > 0"));
    assert!(refused(r#"{"retries":3}"#).contains("unknown field `retries`"));
    assert!(
        toml::from_str::<Registration>(
            "name = \"s\"\ncommand = []\n[connect.retry]\nmax_delay_ms = -1\n"
        )
        .unwrap_err()
        .to_string()
        .contains("retry.max_delay_ms must be > 0")
    );
}

#[tokio::test(start_paused = true)]
async fn c2_a_call_in_flight_when_the_connection_fails_is_not_sent_again() {
    let shop = InProcess::new();
    let (server, _) = server(&shop, ConnectOptions::new());
    shop.journal.hang_next("refund");
    let call = tokio::spawn({
        let server = server.clone();
        async move { server.call("refund", order(7)).await }
    });
    shop.journal.wait_hanging().await;
    shop.cut();

    let error = call.await.unwrap().unwrap_err();
    assert!(
        matches!(error, CallError::ConnectionLost { .. }),
        "{error:?}"
    );
    assert!(error.answer_lost() && error.was_sent());
    assert!(
        error
            .to_string()
            .contains("whether the call acted is unknown, and it was not sent again"),
        "{error}"
    );
    assert!(!server.is_connected(), "the failed connection is dropped");

    // The next call connects again — one connection more, and the refund is not among what
    // the new connection carries.
    server.call("lookup_order", order(7)).await.unwrap();
    assert_eq!((shop.connects(), server.connections()), (2, 2));
    let tools: Vec<String> = shop
        .journal
        .events()
        .into_iter()
        .filter_map(|e| match e {
            Event::Called { tool, .. } => Some(tool),
            Event::Cancelled { .. } => None,
        })
        .collect();
    assert_eq!(tools, ["refund", "lookup_order"]);
}

#[tokio::test(start_paused = true)]
async fn c2_the_reconnect_after_a_failure_is_a_new_decision_with_fresh_attempts() {
    let shop = InProcess::new();
    let (server, seen) = server(&shop, ConnectOptions::new());
    server.connect().await.unwrap();
    shop.journal.hang_next("charge");
    let call = tokio::spawn({
        let server = server.clone();
        async move { server.call("charge", order(1)).await }
    });
    shop.journal.wait_hanging().await;
    shop.then(&[Answer::Refuse, Answer::Refuse]);
    shop.cut();
    assert!(call.await.unwrap().unwrap_err().answer_lost());

    // Two refusals, then the third attempt of the new round connects.
    server.call("lookup_order", order(1)).await.unwrap();
    assert_eq!(shop.connects(), 4);
    assert_eq!(waits(&seen).len(), 2);
    assert_eq!(shop.journal.calls("charge"), 1);
}

#[tokio::test(start_paused = true)]
async fn c2_a_server_gone_between_calls_is_reconnected_before_the_next_call_is_sent() {
    let shop = InProcess::new();
    let (server, _) = server(&shop, ConnectOptions::new());
    server.connect().await.unwrap();
    shop.cut();
    for _ in 0..1_000 {
        if !server.is_connected() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert!(
        !server.is_connected(),
        "the client saw the connection close"
    );

    // Not a failed call: nothing was in flight, so the call connects first and goes through.
    server.call("refund", order(3)).await.unwrap();
    assert_eq!(server.connections(), 2);
    assert_eq!(shop.journal.calls("refund"), 1);
}

#[tokio::test(start_paused = true)]
async fn c2_an_answer_slower_than_the_timeout_is_cancelled_on_the_server() {
    let shop = InProcess::new();
    let (server, _) = server(&shop, ConnectOptions::new());
    shop.journal.hang_next("refund");
    let start = Instant::now();

    let error = server
        .call_within("refund", order(7), Duration::from_secs(3))
        .await
        .unwrap_err();

    assert!(matches!(error, CallError::TimedOut { .. }), "{error:?}");
    assert!(error.answer_lost());
    assert_eq!(start.elapsed(), Duration::from_secs(3));
    // The server hears of it; the connection is fine and stays.
    for _ in 0..1_000 {
        if shop.journal.cancelled("refund") == 1 {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(shop.journal.cancelled("refund"), 1);
    server.call("lookup_order", order(7)).await.unwrap();
    assert_eq!(server.connections(), 1);
    assert_eq!(shop.journal.calls("refund"), 1);
}

#[tokio::test(start_paused = true)]
async fn c1_calls_waiting_for_a_failing_connect_share_its_failure() {
    let shop = InProcess::new();
    shop.then(&[Answer::Refuse; 20]);
    let (server, _) = server(&shop, ConnectOptions::new());
    let calls: Vec<_> = (0..4)
        .map(|n| {
            let server = server.clone();
            tokio::spawn(async move { server.call("refund", order(n)).await })
        })
        .collect();
    for call in calls {
        let error = call.await.unwrap().unwrap_err();
        assert!(matches!(error, CallError::Unreachable(_)), "{error:?}");
    }
    assert_eq!(
        shop.connects(),
        3,
        "one round of attempts, not one per waiting call"
    );

    // A call made afterwards is a new decision: a round of its own.
    assert!(server.call("refund", order(9)).await.is_err());
    assert_eq!(shop.connects(), 6);
}

#[tokio::test(start_paused = true)]
async fn the_servers_answers_are_failures_that_say_so() {
    let shop = InProcess::new();
    let (server, _) = server(&shop, ConnectOptions::new());

    let declined = server.call("decline", order(1)).await.unwrap_err();
    assert!(
        matches!(&declined, CallError::ToolFailed { message, .. } if message == "card declined")
    );
    assert!(!declined.answer_lost() && !declined.is_retryable());

    let crashed = server.call("crash", order(1)).await.unwrap_err();
    assert_eq!(
        crashed.to_string(),
        "tool server `shop` refused the call of `crash`: the database is down (error -32603)"
    );
    let unknown = server.call("nope", order(1)).await.unwrap_err();
    assert!(
        matches!(unknown, CallError::Refused { code: -32602, .. }),
        "{unknown:?}"
    );
    assert!(!unknown.answer_lost());
    assert_eq!(
        server.connections(),
        1,
        "answers do not cost the connection"
    );
}

#[tokio::test(start_paused = true)]
async fn listing_gives_the_servers_hints_untrusted() {
    let shop = InProcess::new();
    let (server, _) = server(&shop, ConnectOptions::new());
    let tools = server.list_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "lookup_order",
            "tag_order",
            "refund",
            "charge",
            "decline",
            "crash"
        ]
    );
    assert_eq!(tools[0].hints, ToolHints::new(Some(true), None, None, None));
    assert_eq!(tools[0].description.as_deref(), Some("Looks an order up"));
    assert_eq!(tools[2].hints, ToolHints::default());
}

/// SPEC C4: a listing has a call's bounds — connecting included — when given one.
#[tokio::test(start_paused = true)]
async fn c4_a_listing_within_a_bound_lists_or_ends_at_it() {
    let shop = InProcess::new();
    let (listed, _) = server(&shop, ConnectOptions::new());
    let tools = listed
        .list_tools_within(Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(tools.len(), 6);

    // A handshake that never comes: the listing ends at its bound, not at the connect
    // timeout (10 s) or after the attempts.
    let shop = InProcess::new();
    shop.then(&[Answer::Silent]);
    let (server, _) = server(&shop, ConnectOptions::new());
    let start = Instant::now();
    let error = server
        .list_tools_within(Duration::from_secs(2))
        .await
        .unwrap_err();
    let ListError::Unreachable(connect) = &error else {
        panic!("{error:?}")
    };
    assert_eq!(connect.gave_up(), GaveUp::Deadline);
    assert_about(start.elapsed(), Duration::from_secs(2));
    assert_eq!(shop.connects(), 1);
}

#[tokio::test(start_paused = true)]
async fn listing_stops_at_a_server_that_pages_forever() {
    let shop = InProcess::with_pages(true);
    let (server, _) = server(&shop, ConnectOptions::new());
    let error = server.list_tools().await.unwrap_err();
    assert!(
        matches!(
            error,
            ListError::TooManyPages {
                pages: MAX_TOOL_PAGES,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        format!(
            "tool server `shop` listed more than {MAX_TOOL_PAGES} pages of tools; stopped there"
        )
    );
}

#[tokio::test(start_paused = true)]
async fn a_closed_server_takes_no_more_calls() {
    let shop = InProcess::new();
    let (server, _) = server(&shop, ConnectOptions::new());
    server.connect().await.unwrap();
    server.close().await;
    assert!(!server.is_connected());
    let error = server.call("refund", order(1)).await.unwrap_err();
    assert_eq!(error.to_string(), "tool server `shop` was closed");
    assert!(!error.is_retryable());
    assert_eq!(shop.connects(), 1);
    assert!(shop.journal.events().is_empty());
}
