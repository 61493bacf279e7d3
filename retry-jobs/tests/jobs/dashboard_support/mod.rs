//! What the dashboard tests share: a store filled through retry-durable's public API, a
//! dashboard on 127.0.0.1 (port 0, bound before the server task starts, so no test waits for
//! it), and a small HTTP client.

#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::HeaderMap;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use retry_durable::{DeadLetterId, Jobs, Store, When, WorkId, WorkOptions};
use retry_jobs::web::{self, Config};
use retry_toolkit::store::Timestamp;
use retry_toolkit::{RetryOptions, TaskFailure};

/// Markup that must come out as text wherever it is shown.
pub const XSS: &str = "<script>alert(1)</script>";
/// The same, as the pages must show it.
pub const XSS_ESCAPED: &str = "&lt;script&gt;alert(1)&lt;/script&gt;";
/// The action token of the tests' dashboards.
pub const TOKEN: &str = "a-test-token-of-enough-length";

/// The rows a filled store holds.
pub struct Filled {
    /// A dead letter of handler [`XSS`], payload [`XSS`], last error [`XSS`].
    pub dead: DeadLetterId,
    /// Work of handler `mail` claimed with a 10-minute lease (in flight).
    pub running: WorkId,
    /// Work of handler `mail` due in an hour, key `<b>key</b>`.
    pub waiting: WorkId,
}

/// Fills `store` (owner `default`): a dead letter, an attempt in flight, waiting work.
pub async fn fill<S: Store + Clone>(store: &S) -> Filled {
    let jobs = Jobs::builder(store.clone())
        .handler("mail", |_to: String, _ctx| async { Ok(()) })
        .handler(XSS, |_p: String, _ctx| async {
            Err(TaskFailure::from(XSS))
        })
        .build()
        .unwrap();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    jobs.schedule(When::Now, XSS, &XSS, once).await.unwrap();
    assert_eq!(jobs.run_due().await.unwrap(), 1);
    let dead = jobs.dead_letters().await.unwrap()[0].id;
    let running = jobs
        .schedule(When::Now, "mail", &"ops@example.com", WorkOptions::new())
        .await
        .unwrap();
    let now = Timestamp::system_now();
    let lease = Timestamp::from_millis(now.as_millis() + 600_000);
    let claim = store.claim("default", now, lease, 10).await.unwrap();
    assert_eq!(claim.work.len(), 1);
    let waiting = jobs
        .schedule(
            When::after(Duration::from_secs(3600)),
            "mail",
            &"later@example.com",
            WorkOptions::new().key("<b>key</b>"),
        )
        .await
        .unwrap();
    Filled {
        dead,
        running: running.id,
        waiting: waiting.id,
    }
}

/// Fills `store` (owner `default`) as a small shop's workers might: e-mails waiting and one
/// being sent, card charges that were declined (dead letters), an inventory sync every 15
/// minutes and a nightly report. Friendly names, for the guide's screenshot; the hostile
/// fixture is [`fill`].
pub async fn showcase<S: Store + Clone>(store: &S) {
    let jobs = Jobs::builder(store.clone())
        .handler("send-welcome-email", |_to: String, _ctx| async { Ok(()) })
        .handler("charge-card", |_order: u32, _ctx| async {
            Err(TaskFailure::from("card declined: insufficient funds"))
        })
        .handler("sync-inventory", |_: (), _ctx| async { Ok(()) })
        .handler("nightly-report", |_: (), _ctx| async { Ok(()) })
        .build()
        .unwrap();
    let once = WorkOptions::new().retry(RetryOptions::new().with_max_attempts(1));
    for order in [1041u32, 1057, 1063] {
        jobs.schedule(When::Now, "charge-card", &order, once.clone())
            .await
            .unwrap();
    }
    assert_eq!(jobs.run_due().await.unwrap(), 3);
    for to in ["ana@example.com", "bo@example.com"] {
        jobs.schedule(When::Now, "send-welcome-email", &to, WorkOptions::new())
            .await
            .unwrap();
    }
    let now = Timestamp::system_now();
    let lease = Timestamp::from_millis(now.as_millis() + 300_000);
    assert_eq!(
        store
            .claim("default", now, lease, 10)
            .await
            .unwrap()
            .work
            .len(),
        2
    );
    for (minutes, to) in [
        (5, "cy@example.com"),
        (12, "di@example.com"),
        (40, "ed@example.com"),
    ] {
        let when = When::after(Duration::from_secs(minutes * 60));
        jobs.schedule(when, "send-welcome-email", &to, WorkOptions::new())
            .await
            .unwrap();
    }
    let every = When::every(Duration::from_secs(15 * 60));
    jobs.schedule(every, "sync-inventory", &(), WorkOptions::new())
        .await
        .unwrap();
    jobs.schedule(
        When::cron("0 2 * * *"),
        "nightly-report",
        &(),
        WorkOptions::new(),
    )
    .await
    .unwrap();
}

/// A dashboard over `store` on a port of its own; its address.
pub async fn start<S: Store>(store: S, config: Config) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(web::serve(listener, store, config));
    addr
}

/// An answer, its body as text.
pub struct Answer {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Answer {
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

/// One request to the dashboard at `addr`.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Answer {
    let client: Client<HttpConnector, Full<Bytes>> =
        Client::builder(TokioExecutor::new()).build_http();
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"));
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    if method == "POST" {
        builder = builder.header("content-type", "application/x-www-form-urlencoded");
    }
    let response = client
        .request(
            builder
                .body(Full::new(Bytes::from(body.to_owned())))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

pub async fn get(addr: SocketAddr, path: &str) -> Answer {
    request(addr, "GET", path, &[], "").await
}

/// The CSRF field's value on a page.
pub fn csrf_of(page: &str) -> String {
    let start = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with a CSRF field")
        + 19;
    page[start..start + 64].to_owned()
}

/// Logs in through the login form; the cookie to send and the CSRF value.
pub async fn login(addr: SocketAddr) -> (String, String) {
    let csrf = csrf_of(&get(addr, "/login").await.body);
    let answer = request(
        addr,
        "POST",
        "/login",
        &[],
        &format!("csrf={csrf}&token={TOKEN}"),
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let cookie = answer.header("set-cookie");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"));
    let cookie = cookie.split(';').next().unwrap().to_owned();
    (cookie, csrf)
}

/// What the dead letter `id` was re-driven as, if it was (it must exist).
pub async fn redriven_as<S: Store>(store: &S, id: DeadLetterId) -> Option<WorkId> {
    store.dead_letter(id).await.unwrap().unwrap().redriven_as
}

/// A form POST from a logged-in browser: its cookie and the page's CSRF value.
pub async fn post_form(addr: SocketAddr, path: &str, cookie: &str, csrf: &str) -> Answer {
    request(
        addr,
        "POST",
        path,
        &[("cookie", cookie)],
        &format!("csrf={csrf}"),
    )
    .await
}
