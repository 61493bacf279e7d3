//! V2: the dashboard over HTTP, on a real SQLite file filled through retry-durable's public
//! API and a real server on 127.0.0.1.

use crate::dashboard_support;

use std::net::SocketAddr;

use dashboard_support::*;
use retry_durable::{SqliteStore, Store, WorkState};
use retry_jobs::web::{Config, ConfigError};

struct Setup {
    addr: SocketAddr,
    store: SqliteStore,
    filled: Filled,
    _dir: tempfile::TempDir,
}

async fn setup(config: Config) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("jobs.db")).unwrap();
    let filled = fill(&store).await;
    let addr = start(store.clone(), config).await;
    Setup {
        addr,
        store,
        filled,
        _dir: dir,
    }
}

async fn acting() -> Setup {
    setup(Config::with_token(TOKEN).unwrap()).await
}

fn assert_secure(answer: &Answer) {
    assert_secure_headers(answer);
    assert!(answer.header("content-type").starts_with("text/html"));
}

fn assert_secure_headers(answer: &Answer) {
    let csp = answer.header("content-security-policy");
    assert!(csp.contains("default-src 'none'"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(answer.header("x-frame-options"), "DENY");
    assert_eq!(answer.header("referrer-policy"), "no-referrer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_status_page_counts_by_handler_with_readable_times() {
    let s = acting().await;
    let page = get(s.addr, "/").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_secure(&page);
    let body = &page.body;
    // mail: one waiting, one running; next due is the running lease's end, in 10 min.
    assert!(
        body.contains("<td><a href=\"/work?handler=mail\">mail</a></td><td>1</td><td>1</td><td>0</td><td>0</td><td>0</td>"),
        "{body}"
    );
    assert!(
        body.contains("(in 9 min)") || body.contains("(in 10 min)"),
        "{body}"
    );
    // The failing handler: nothing left in the queue, one dead letter.
    assert!(
        body.contains(&format!("{XSS_ESCAPED}</a></td><td>0</td>")),
        "{body}"
    );
    assert!(body.contains("<td>1</td></tr>"), "{body}");
    assert!(body.contains("Quarantined rows: 0."), "{body}");
    assert!(
        !body.contains("<script"),
        "no script, not even ours: {body}"
    );
    assert!(!body.contains("Timestamp("), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_every_page_shows_its_rows() {
    let s = acting().await;
    let (running, waiting, dead) = (s.filled.running.0, s.filled.waiting.0, s.filled.dead.0);

    let work = get(s.addr, "/work").await;
    assert_eq!(work.status, 200);
    assert_secure(&work);
    assert!(work.body.contains(&format!("<a href=\"/work/{running}\">")));
    assert!(work.body.contains(&format!("<a href=\"/work/{waiting}\">")));
    assert!(
        work.body.contains("&lt;b&gt;key&lt;/b&gt;"),
        "{}",
        work.body
    );

    let only_waiting = get(s.addr, "/work?state=waiting&handler=mail&kind=once").await;
    assert_eq!(only_waiting.status, 200, "{}", only_waiting.body);
    assert!(only_waiting.body.contains(&format!("/work/{waiting}\"")));
    assert!(!only_waiting.body.contains(&format!("/work/{running}\"")));
    assert!(
        only_waiting
            .body
            .contains("<option selected>waiting</option>")
    );
    let none = get(s.addr, "/work?kind=cron").await;
    assert!(none.body.contains("id=\"empty\""), "{}", none.body);

    // Paging: one row a page, a link to the next that keeps the filters.
    let first = get(s.addr, "/work?limit=1&handler=mail").await;
    assert!(first.body.contains(&format!("/work/{running}\"")));
    assert!(
        first.body.contains(&format!(
            "href=\"/work?after={running}&amp;limit=1&amp;handler=mail\""
        )),
        "{}",
        first.body
    );
    let second = get(
        s.addr,
        &format!("/work?after={running}&limit=1&handler=mail"),
    )
    .await;
    assert!(second.body.contains(&format!("/work/{waiting}\"")));
    assert!(!second.body.contains("id=\"next\""));

    let item = get(s.addr, &format!("/work/{running}")).await;
    assert_eq!(item.status, 200);
    for shown in [
        "ops@example.com",
        "1 of 3 in this run",
        "running",
        "max attempts",
        "full",
        "lease until",
    ] {
        assert!(item.body.contains(shown), "{shown}: {}", item.body);
    }

    let in_flight = get(s.addr, "/in-flight").await;
    assert_eq!(in_flight.status, 200);
    assert!(in_flight.body.contains(&format!("/work/{running}\"")));
    assert!(!in_flight.body.contains(&format!("/work/{waiting}\"")));

    let dead_list = get(s.addr, "/dead").await;
    assert_eq!(dead_list.status, 200);
    assert!(
        dead_list
            .body
            .contains(&format!("<a href=\"/dead/{dead}\">"))
    );
    assert!(dead_list.body.contains("exhausted"), "{}", dead_list.body);

    let one = get(s.addr, &format!("/dead/{dead}")).await;
    assert_eq!(one.status, 200);
    assert!(one.body.contains("not yet"));
    // The attempts its work kept, drawn as the library draws them.
    let kept = one
        .body
        .split("<pre id=\"history\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no attempts: {}", one.body));
    assert!(kept.contains("dead-lettered"), "{}", one.body);
    // Not logged in: a link to log in, no action forms.
    assert!(one.body.contains("href=\"/login\""));
    assert!(!one.body.contains("/redrive\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_markup_in_payload_handler_and_error_renders_as_text() {
    let s = acting().await;
    let dead = s.filled.dead.0;
    let (cookie, csrf) = login(s.addr).await;
    let answer = post_form(s.addr, &format!("/dead/{dead}/redrive"), &cookie, &csrf).await;
    assert_eq!(answer.status, 303);
    let work = redriven_as(&s.store, s.filled.dead).await.unwrap().0;
    for path in [
        "/".to_owned(),
        "/work".to_owned(),
        format!("/work/{work}"),
        "/dead".to_owned(),
        format!("/dead/{dead}"),
        format!("/work?handler={}", "%3Cscript%3Ealert(1)%3C%2Fscript%3E"),
        "/work?state=%3Cscript%3Ealert(1)%3C%2Fscript%3E".to_owned(),
    ] {
        let page = request(s.addr, "GET", &path, &[("cookie", &cookie)], "").await;
        assert!(page.body.contains(XSS_ESCAPED), "{path}: {}", page.body);
        assert!(!page.body.contains("<script"), "{path}: {}", page.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_bad_query_parameters_and_paths_are_400() {
    let s = acting().await;
    for path in [
        "/work?state=nope",
        "/work?kind=weekly",
        "/work?after=x",
        "/work?after=-3",
        "/work?limit=0",
        "/work?limit=100000",
        "/work?limit=1&limit=2",
        "/work?bogus=1",
        "/work?done=%3Cb%3E",
        "/in-flight?state=waiting",
        "/dead?after=1.5",
        "/?x=1",
        "/work/abc",
        "/work/0",
        "/dead/-1",
        "/dead/99999999999999999999999",
    ] {
        let answer = get(s.addr, path).await;
        assert_eq!(answer.status, 400, "{path}: {}", answer.body);
        assert_secure(&answer);
        assert!(answer.body.contains("id=\"error\""), "{path}");
        assert!(!answer.body.contains("<b>"), "{path}: {}", answer.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_unknown_ids_and_pages_are_404() {
    let s = acting().await;
    for path in ["/work/999999", "/dead/999999", "/nothing-here"] {
        let answer = get(s.addr, path).await;
        assert_eq!(answer.status, 404, "{path}");
        assert!(answer.body.contains("id=\"error\""), "{path}");
    }
    let bearer = format!("Bearer {TOKEN}");
    for path in [
        "/dead/999999/redrive",
        "/dead/999999/purge",
        "/work/999999/cancel",
    ] {
        let answer = request(s.addr, "POST", path, &[("authorization", &bearer)], "").await;
        assert_eq!(answer.status, 404, "{path}: {}", answer.body);
        assert!(answer.body.contains("There is no"), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_a_dead_letter_is_redriven_once_through_the_form() {
    let s = acting().await;
    let dead = s.filled.dead.0;
    let (cookie, _) = login(s.addr).await;
    let page = request(
        s.addr,
        "GET",
        &format!("/dead/{dead}"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(
        page.body
            .contains(&format!("action=\"/dead/{dead}/redrive\"")),
        "{}",
        page.body
    );
    let csrf = csrf_of(&page.body);
    let answer = request(
        s.addr,
        "POST",
        &format!("/dead/{dead}/redrive"),
        &[
            ("cookie", &cookie),
            // What Chromium sends from the page itself under its no-referrer policy.
            ("origin", "null"),
            ("sec-fetch-site", "same-origin"),
        ],
        &format!("csrf={csrf}"),
    )
    .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(
        answer.header("location"),
        format!("/dead/{dead}?done=redriven")
    );
    let after = request(
        s.addr,
        "GET",
        answer.header("location"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(
        after.body.contains("id=\"message\">Re-driven"),
        "{}",
        after.body
    );
    let work = redriven_as(&s.store, s.filled.dead).await.unwrap();
    assert!(after.body.contains(&format!("work #{}", work.0)));
    assert_eq!(
        s.store.get(work).await.unwrap().unwrap().state,
        WorkState::Waiting
    );

    let again = post_form(s.addr, &format!("/dead/{dead}/redrive"), &cookie, &csrf).await;
    assert_eq!(again.status, 409);
    assert!(
        again.body.contains("already re-driven as work #"),
        "{}",
        again.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_purge_and_cancel_confirm_and_refuse_what_they_cannot() {
    let s = acting().await;
    let (cookie, csrf) = login(s.addr).await;
    let post = |path: String| {
        let (cookie, csrf) = (cookie.clone(), csrf.clone());
        async move { post_form(s.addr, &path, &cookie, &csrf).await }
    };
    let purged = post(format!("/dead/{}/purge", s.filled.dead.0)).await;
    assert_eq!(purged.status, 303);
    assert_eq!(purged.header("location"), "/dead?done=purged");
    assert!(s.store.dead_letter(s.filled.dead).await.unwrap().is_none());
    assert_eq!(
        get(s.addr, &format!("/dead/{}", s.filled.dead.0))
            .await
            .status,
        404
    );
    assert_eq!(
        post(format!("/dead/{}/purge", s.filled.dead.0))
            .await
            .status,
        404
    );

    let page = request(
        s.addr,
        "GET",
        &format!("/work/{}", s.filled.waiting.0),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    assert!(page.body.contains("id=\"cancel\""));
    let cancelled = post(format!("/work/{}/cancel", s.filled.waiting.0)).await;
    assert_eq!(cancelled.status, 303);
    let after = get(s.addr, cancelled.header("location")).await;
    assert!(
        after
            .body
            .contains("Cancelled: the work will not run again.")
    );
    assert_eq!(
        s.store.get(s.filled.waiting).await.unwrap().unwrap().state,
        WorkState::Cancelled
    );
    let again = post(format!("/work/{}/cancel", s.filled.waiting.0)).await;
    assert_eq!(again.status, 409);
    assert!(
        again
            .body
            .contains("is cancelled: only waiting or running work can be cancelled")
    );
    // Running work can be cancelled too.
    assert_eq!(
        post(format!("/work/{}/cancel", s.filled.running.0))
            .await
            .status,
        303
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_posts_without_the_right_csrf_field_are_refused() {
    let s = acting().await;
    let (cookie, csrf) = login(s.addr).await;
    let path = format!("/dead/{}/redrive", s.filled.dead.0);
    let wrong = "0".repeat(64);
    for body in [
        String::new(),
        format!("csrf={wrong}"),
        format!("csrf={}", &csrf[..63]),
    ] {
        let answer = request(s.addr, "POST", &path, &[("cookie", &cookie)], &body).await;
        assert_eq!(answer.status, 403, "{body}");
        assert!(answer.body.contains("CSRF"));
    }
    // Login itself needs the field.
    let answer = request(s.addr, "POST", "/login", &[], &format!("token={TOKEN}")).await;
    assert_eq!(answer.status, 403);
    assert!(answer.header("set-cookie").is_empty());
    assert!(redriven_as(&s.store, s.filled.dead).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_cross_site_posts_are_refused() {
    let s = acting().await;
    let (cookie, csrf) = login(s.addr).await;
    let path = format!("/dead/{}/redrive", s.filled.dead.0);
    let body = format!("csrf={csrf}");
    for headers in [
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("origin", "http://evil.example")],
        vec![("origin", "null")],
        vec![("sec-fetch-site", "cross-site"), ("origin", "null")],
    ] {
        let mut all = headers.clone();
        all.push(("cookie", &cookie));
        let answer = request(s.addr, "POST", &path, &all, &body).await;
        assert_eq!(answer.status, 403, "{headers:?}");
        assert!(answer.body.contains("another site"));
    }
    let login = request(
        s.addr,
        "POST",
        "/login",
        &[("origin", "http://evil.example")],
        &format!("csrf={csrf}&token={TOKEN}"),
    )
    .await;
    assert_eq!(login.status, 403);
    assert!(redriven_as(&s.store, s.filled.dead).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_actions_need_the_token() {
    let s = acting().await;
    let path = format!("/dead/{}/redrive", s.filled.dead.0);
    let csrf = csrf_of(&get(s.addr, "/login").await.body);
    let body = format!("csrf={csrf}");
    let wrong_bearer = format!("Bearer {TOKEN}x");
    let wrong_cookie = format!("retry_jobs_session={}", "a".repeat(64));
    for headers in [
        vec![],
        vec![("authorization", wrong_bearer.as_str())],
        vec![("authorization", TOKEN)],
        vec![("cookie", wrong_cookie.as_str())],
    ] {
        let answer = request(s.addr, "POST", &path, &headers, &body).await;
        assert_eq!(answer.status, 401, "{headers:?}");
        assert!(answer.body.contains("log in first"));
    }
    let wrong = request(
        s.addr,
        "POST",
        "/login",
        &[],
        &format!("csrf={csrf}&token=not-the-token-at-all"),
    )
    .await;
    assert_eq!(wrong.status, 401);
    assert!(wrong.body.contains("That is not the action token."));
    assert!(wrong.header("set-cookie").is_empty());
    assert!(redriven_as(&s.store, s.filled.dead).await.is_none());

    // A script sends the token itself, and needs no CSRF field.
    let bearer = format!("Bearer {TOKEN}");
    let answer = request(s.addr, "POST", &path, &[("authorization", &bearer)], "").await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert!(redriven_as(&s.store, s.filled.dead).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_read_only_shows_no_forms_and_refuses_every_post() {
    let s = setup(Config::read_only()).await;
    for path in [
        "/".to_owned(),
        "/work".to_owned(),
        format!("/work/{}", s.filled.waiting.0),
        "/dead".to_owned(),
        format!("/dead/{}", s.filled.dead.0),
    ] {
        let page = get(s.addr, &path).await;
        assert_eq!(page.status, 200, "{path}");
        assert!(
            !page.body.contains("method=\"post\""),
            "{path}: {}",
            page.body
        );
        assert!(!page.body.contains("/login"), "{path}");
        assert!(page.body.contains("read-only"), "{path}");
    }
    assert_eq!(get(s.addr, "/login").await.status, 404);
    let bearer = format!("Bearer {TOKEN}");
    for path in [
        format!("/dead/{}/redrive", s.filled.dead.0),
        format!("/dead/{}/purge", s.filled.dead.0),
        format!("/work/{}/cancel", s.filled.waiting.0),
        "/login".to_owned(),
    ] {
        let answer = request(
            s.addr,
            "POST",
            &path,
            &[("authorization", &bearer)],
            "token=x",
        )
        .await;
        assert_eq!(answer.status, 403, "{path}");
        assert!(answer.body.contains("read-only"), "{path}");
    }
    let dead = s.store.dead_letter(s.filled.dead).await.unwrap().unwrap();
    assert!(dead.redriven_as.is_none());
    assert_eq!(
        s.store.get(s.filled.waiting).await.unwrap().unwrap().state,
        WorkState::Waiting
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_another_owners_rows_are_not_there() {
    let s = setup(Config::with_token(TOKEN).unwrap().owner("billing").unwrap()).await;
    let page = get(s.addr, "/").await;
    assert!(
        page.body.contains("No work and no dead letters."),
        "{}",
        page.body
    );
    for path in [
        format!("/work/{}", s.filled.waiting.0),
        format!("/dead/{}", s.filled.dead.0),
    ] {
        assert_eq!(get(s.addr, &path).await.status, 404, "{path}");
    }
    let bearer = format!("Bearer {TOKEN}");
    let answer = request(
        s.addr,
        "POST",
        &format!("/dead/{}/redrive", s.filled.dead.0),
        &[("authorization", &bearer)],
        "",
    )
    .await;
    assert_eq!(answer.status, 404);
    assert!(redriven_as(&s.store, s.filled.dead).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_on_loopback_only_loopback_host_names_are_answered() {
    let s = acting().await;
    let port = s.addr.port();
    for host in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "127.0.0.1".to_owned(),
    ] {
        let answer = request(s.addr, "GET", "/", &[("host", &host)], "").await;
        assert_eq!(answer.status, 200, "{host}");
    }
    // A site whose name points at 127.0.0.1 (DNS rebinding) reads nothing.
    for host in [format!("evil.example:{port}"), "<b>x</b>".to_owned()] {
        let answer = request(
            s.addr,
            "GET",
            &format!("/dead/{}", s.filled.dead.0),
            &[("host", &host)],
            "",
        )
        .await;
        assert_eq!(answer.status, 421, "{host}");
        assert!(!answer.body.contains(XSS_ESCAPED));
        assert!(!answer.body.contains("<b>"));
        assert_secure_headers(&answer);
    }
}

#[test]
fn v2_config_listens_on_loopback_and_refuses_a_short_token() {
    let config = Config::with_token(TOKEN).unwrap();
    assert!(config.bind_addr().ip().is_loopback());
    assert!(!config.is_read_only());
    assert!(Config::read_only().is_read_only());
    assert_eq!(
        Config::with_token("short").unwrap_err(),
        ConfigError::ShortToken { len: 5 }
    );
    assert_eq!(
        Config::read_only().owner("").unwrap_err(),
        ConfigError::EmptyOwner
    );
    assert!(!format!("{config:?}").contains(TOKEN));
}
