//! The pages and the actions.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::extract::rejection::{FormRejection, PathRejection, QueryRejection};
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use retry_durable::{StoreError, WorkFilter, WorkId, WorkState};
use retry_toolkit::store::Timestamp;

use super::html::{Frame, escape, when, when_opt};
use super::{App, auth};
use crate::action::{self, ActionError};
use crate::view::{self, Item, ListQuery};

type AppState<S> = State<Arc<App<S>>>;
type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;
type Fields = Result<Form<Vec<(String, String)>>, FormRejection>;
type IdPath = Result<Path<String>, PathRejection>;

/// Rows per page of a listing unless `limit` says otherwise.
const DEFAULT_LIMIT: u32 = 50;
/// The most rows a page shows.
const MAX_LIMIT: u32 = 500;
/// The kinds of work, as stored.
const KINDS: [&str; 4] = ["once", "queue", "cron", "every"];

fn frame<'a, S>(app: &'a App<S>, headers: &HeaderMap) -> Frame<'a> {
    Frame {
        owner: &app.owner,
        read_only: app.secrets.token.is_none(),
        logged_in: app.secrets.logged_in(headers),
        csrf: &app.secrets.csrf,
    }
}

fn reply(status: StatusCode, html: String) -> Response {
    (status, Html(html)).into_response()
}

/// A page that says why nothing was shown or done.
fn refusal<S>(
    app: &App<S>,
    headers: &HeaderMap,
    status: StatusCode,
    title: &str,
    why: &str,
) -> Response {
    let body = format!("<p class=\"err\" id=\"error\">{}</p>", escape(why));
    reply(status, frame(app, headers).page(title, &body))
}

fn store_failed<S>(app: &App<S>, headers: &HeaderMap, error: &StoreError) -> Response {
    refusal(
        app,
        headers,
        StatusCode::INTERNAL_SERVER_ERROR,
        "Store error",
        &format!("The store failed: {error}"),
    )
}

fn bad_request<S>(app: &App<S>, headers: &HeaderMap, why: &str) -> Response {
    refusal(app, headers, StatusCode::BAD_REQUEST, "Bad request", why)
}

fn redirect(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_owned())]).into_response()
}

/// The query's parameters, each at most once, each one of `allowed`; an empty value counts
/// as absent (a form's "any" choice).
fn params(query: Params, allowed: &[&str]) -> Result<BTreeMap<String, String>, String> {
    let Query(pairs) = query.map_err(|e| format!("The query does not parse: {e}"))?;
    let mut found = BTreeMap::new();
    for (key, value) in pairs {
        if !allowed.contains(&key.as_str()) {
            return Err(format!("Unknown parameter `{key}`."));
        }
        if found.contains_key(&key) {
            return Err(format!("Parameter `{key}` is given twice."));
        }
        if !value.is_empty() {
            found.insert(key, value);
        }
    }
    Ok(found)
}

/// A positive id from a path or a query.
fn id(text: &str) -> Result<i64, String> {
    match text.parse::<i64>() {
        Ok(id) if id > 0 => Ok(id),
        _ => Err(format!("`{text}` is not an id (a positive whole number).")),
    }
}

fn path_id(path: IdPath) -> Result<i64, String> {
    let Path(text) = path.map_err(|e| format!("The path does not parse: {e}"))?;
    id(&text)
}

fn limit(params: &BTreeMap<String, String>) -> Result<u32, String> {
    match params.get("limit") {
        None => Ok(DEFAULT_LIMIT),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            _ => Err(format!(
                "`limit` must be a whole number from 1 to {MAX_LIMIT}, not `{text}`."
            )),
        },
    }
}

/// The message a redirect after an action asks for (fixed texts: a link cannot make the
/// page say something of its own).
fn done_message(params: &BTreeMap<String, String>) -> Result<String, String> {
    let text = match params.get("done").map(String::as_str) {
        None => return Ok(String::new()),
        Some("redriven") => "Re-driven: the work is waiting again, due now.",
        Some("purged") => "Dead letter purged.",
        Some("cancelled") => "Cancelled: the work will not run again.",
        Some("login") => "Logged in: actions are on.",
        Some("logout") => "Logged out.",
        Some(other) => return Err(format!("Unknown message `{other}`.")),
    };
    Ok(format!("<p class=\"msg\" id=\"message\">{text}</p>"))
}

/// `text` percent-encoded for a query value.
fn url_encode(text: &str) -> String {
    let mut out = String::new();
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Status: per handler, counts by state, how late the queue runs, what is due next.
pub(super) async fn status<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    query: Params,
) -> Response {
    let params = match params(query, &["done"]) {
        Ok(p) => p,
        Err(why) => return bad_request(&app, &headers, &why),
    };
    let message = match done_message(&params) {
        Ok(m) => m,
        Err(why) => return bad_request(&app, &headers, &why),
    };
    let now = Timestamp::system_now();
    let status = match view::status(&app.store, &app.owner, now).await {
        Ok(s) => s,
        Err(e) => return store_failed(&app, &headers, &e),
    };
    let mut body = message;
    body.push_str(
        "<table id=\"status\"><tr><th>handler</th><th>waiting</th><th>running</th>\
         <th>cancelled</th><th>succeeded (kept)</th><th>dead-lettered (kept)</th>\
         <th>oldest waiting since</th><th>next due</th><th>dead letters</th></tr>",
    );
    for line in &status.handlers {
        let _ = write!(
            body,
            "<tr><td><a href=\"/work?handler={link}\">{name}</a></td>",
            link = escape(&url_encode(&line.handler)),
            name = escape(&line.handler),
        );
        for count in [
            line.waiting,
            line.running,
            line.cancelled,
            line.succeeded,
            line.dead_lettered,
        ] {
            let _ = write!(body, "<td>{count}</td>");
        }
        let _ = write!(
            body,
            "<td>{}</td><td>{}</td><td>{}</td></tr>",
            when_opt(line.oldest_waiting_since, now),
            when_opt(line.next_due, now),
            line.dead_letters
        );
    }
    if status.handlers.is_empty() {
        body.push_str("<tr><td colspan=\"9\">No work and no dead letters.</td></tr>");
    }
    let _ = write!(
        body,
        "</table><p id=\"quarantine\">Quarantined rows: {}. Rows failing their checks: {}.</p>\
         <p>As of {}.</p>",
        status.quarantined,
        status.corrupt,
        escape(&when(now, now))
    );
    reply(StatusCode::OK, frame(&app, &headers).page("Status", &body))
}

/// The filter form of the work page, with the current choices.
fn filter_form(filter: &WorkFilter, limit: u32) -> String {
    let mut form = String::from(
        "<form method=\"get\" action=\"/work\" id=\"filter\">State <select name=\"state\">\
         <option value=\"\">any</option>",
    );
    for state in view::STATES {
        let chosen = if filter.state == Some(state) {
            " selected"
        } else {
            ""
        };
        let _ = write!(form, "<option{chosen}>{state}</option>");
    }
    form.push_str("</select> Kind <select name=\"kind\"><option value=\"\">any</option>");
    for kind in KINDS {
        let chosen = if filter.kind.as_deref() == Some(kind) {
            " selected"
        } else {
            ""
        };
        let _ = write!(form, "<option{chosen}>{kind}</option>");
    }
    let _ = write!(
        form,
        "</select> Handler <input name=\"handler\" value=\"{handler}\"> \
         Per page <input name=\"limit\" value=\"{limit}\" size=\"4\"> \
         <button type=\"submit\">Filter</button></form>",
        handler = escape(filter.handler.as_deref().unwrap_or("")),
    );
    form
}

/// One row of a table of work.
fn work_row(item: &Item, now: Timestamp) -> String {
    format!(
        "<tr><td><a href=\"/work/{id}\">{id}</a></td><td>{handler}</td><td>{kind}</td>\
         <td>{state}</td><td>{attempt}</td><td>{due}</td><td>{lease}</td><td>{key}</td>\
         <td>{error}</td></tr>",
        id = item.id,
        handler = escape(&item.handler),
        kind = item.timing.kind,
        state = item.state,
        attempt = item.attempt,
        due = escape(&when(item.due_at, now)),
        lease = when_opt(item.lease_until, now),
        key = escape(item.key.as_deref().unwrap_or("")),
        error = escape(item.last_error.as_deref().unwrap_or("")),
    )
}

const WORK_HEAD: &str = "<tr><th>id</th><th>handler</th><th>kind</th><th>state</th>\
    <th>attempt</th><th>due</th><th>lease until</th><th>key</th><th>last error</th></tr>";

/// The filtered listing of work, shared by the work and in-flight pages.
async fn listing<S: retry_durable::Store>(
    app: &App<S>,
    headers: &HeaderMap,
    query: Params,
    path: &str,
    title: &str,
    fixed_state: Option<WorkState>,
) -> Response {
    let allowed: &[&str] = if fixed_state.is_some() {
        &["after", "limit"]
    } else {
        &["state", "handler", "kind", "after", "limit", "done"]
    };
    let params = match params(query, allowed) {
        Ok(p) => p,
        Err(why) => return bad_request(app, headers, &why),
    };
    let mut filter = WorkFilter::new();
    if let Some(state) = fixed_state {
        filter = filter.state(state);
    }
    let parsed = (|| -> Result<(Option<WorkId>, u32, String), String> {
        if let Some(text) = params.get("state") {
            filter = filter.clone().state(text.parse::<WorkState>().map_err(|_| {
                format!(
                    "Unknown state `{text}`: one of waiting, running, cancelled, succeeded, \
                     dead_lettered."
                )
            })?);
        }
        if let Some(kind) = params.get("kind") {
            if !KINDS.contains(&kind.as_str()) {
                return Err(format!(
                    "Unknown kind `{kind}`: one of once, queue, cron, every."
                ));
            }
            filter = filter.clone().kind(kind.clone());
        }
        if let Some(handler) = params.get("handler") {
            filter = filter.clone().handler(handler.clone());
        }
        let after = params.get("after").map(|t| id(t)).transpose()?.map(WorkId);
        Ok((after, limit(&params)?, done_message(&params)?))
    })();
    let (after, limit, message) = match parsed {
        Ok(p) => p,
        Err(why) => return bad_request(app, headers, &why),
    };
    let now = Timestamp::system_now();
    // One row past the page tells whether a next page has any.
    let query = ListQuery {
        filter: filter.clone(),
        after,
        limit: limit.saturating_add(1),
        ..ListQuery::default()
    };
    let mut page = match view::list(&app.store, &app.owner, &query).await {
        Ok(p) => p,
        Err(e) => return store_failed(app, headers, &e),
    };
    let more = beyond(&mut page.items, limit);
    let mut body = message;
    if fixed_state.is_none() {
        body.push_str(&filter_form(&filter, limit));
    }
    let _ = write!(body, "<table id=\"work\">{WORK_HEAD}");
    for item in &page.items {
        body.push_str(&work_row(item, now));
    }
    body.push_str("</table>");
    if page.items.is_empty() {
        body.push_str("<p id=\"empty\">Nothing here.</p>");
    }
    if !page.corrupt.is_empty() {
        body.push_str(
            "<h2>Rows that fail their checks</h2><table id=\"corrupt\"><tr><th>id</th>\
             <th>what is wrong</th></tr>",
        );
        for row in &page.corrupt {
            let _ = write!(
                body,
                "<tr><td>{}</td><td>{}</td></tr>",
                row.id,
                escape(&row.problem)
            );
        }
        body.push_str("</table>");
    }
    if let (true, Some(last)) = (more, page.items.last()) {
        let mut next = format!("{path}?after={}&limit={limit}", last.id);
        if fixed_state.is_none() {
            for (key, value) in [
                ("state", filter.state.map(WorkState::name)),
                ("kind", filter.kind.as_deref()),
                ("handler", filter.handler.as_deref()),
            ] {
                if let Some(value) = value {
                    let _ = write!(next, "&{key}={}", url_encode(value));
                }
            }
        }
        let _ = write!(
            body,
            "<p><a id=\"next\" href=\"{}\">Next page</a></p>",
            escape(&next)
        );
    }
    reply(StatusCode::OK, frame(app, headers).page(title, &body))
}

/// The work, filtered and paged.
pub(super) async fn list<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    query: Params,
) -> Response {
    listing(&app, &headers, query, "/work", "Work", None).await
}

/// The attempts running now, with their lease.
pub(super) async fn in_flight<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    query: Params,
) -> Response {
    listing(
        &app,
        &headers,
        query,
        "/in-flight",
        "In flight",
        Some(WorkState::Running),
    )
    .await
}

/// Cuts `rows` to `limit`; whether there were more (the one row read past a page).
fn beyond<T>(rows: &mut Vec<T>, limit: u32) -> bool {
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    more
}

/// A two-column table of labels and (escaped) values.
fn fields(id: &str, rows: &[(&str, String)]) -> String {
    let mut out = format!("<table id=\"{id}\">");
    for (label, value) in rows {
        let _ = write!(out, "<tr><th>{label}</th><td>{value}</td></tr>");
    }
    out.push_str("</table>");
    out
}

/// The retry options of a row, as labelled cells.
fn option_rows(
    options: &retry_toolkit::RetryOptions,
    retry_if: Option<&str>,
    timeout_ms: Option<u64>,
) -> Vec<(&'static str, String)> {
    let number = |n: Option<u64>| n.map_or_else(|| "—".to_owned(), |n| n.to_string());
    vec![
        ("max attempts", number(options.max_attempts.map(u64::from))),
        ("base delay (ms)", number(options.base_delay_ms)),
        ("max delay (ms)", number(options.max_delay_ms)),
        (
            "jitter",
            options.jitter.map_or("—", |j| j.name()).to_owned(),
        ),
        ("retry predicate", escape(retry_if.unwrap_or("—"))),
        (
            "attempt timeout",
            timeout_ms.map_or_else(
                || "—".to_owned(),
                |ms| format!("{:?}", std::time::Duration::from_millis(ms)),
            ),
        ),
    ]
}

/// The row a page of one row shows, with its id and the message the query asks for; or the
/// answer when there is none to show (a bad id 400, none of this owner 404).
async fn one<S, T, F, Fut>(
    app: &App<S>,
    headers: &HeaderMap,
    path: IdPath,
    query: Params,
    what: &str,
    fetch: F,
) -> Result<(i64, String, T), Box<Response>>
where
    F: FnOnce(i64) -> Fut,
    Fut: Future<Output = Result<Option<T>, StoreError>>,
{
    let parsed = path_id(path).and_then(|id| {
        let params = params(query, &["done"])?;
        Ok((id, done_message(&params)?))
    });
    let (id, message) = parsed.map_err(|why| Box::new(bad_request(app, headers, &why)))?;
    match fetch(id).await {
        Ok(Some(row)) => Ok((id, message, row)),
        Ok(None) => Err(Box::new(absent(app, headers, what, id))),
        Err(e) => Err(Box::new(store_failed(app, headers, &e))),
    }
}

/// The 404 page of a row that is not there (or is another owner's).
fn absent<S>(app: &App<S>, headers: &HeaderMap, what: &str, id: i64) -> Response {
    refusal(
        app,
        headers,
        StatusCode::NOT_FOUND,
        "Not found",
        &format!("There is no {what} #{id} of this owner."),
    )
}

/// A row's last error and payload, then the heading of its options.
fn error_and_payload(error: Option<&str>, payload: &serde_json::Value) -> String {
    format!(
        "<h2>Last error</h2><pre id=\"last-error\">{}</pre><h2>Payload</h2>\
         <pre id=\"payload\">{}</pre><h2>Options</h2>",
        escape(error.unwrap_or("none")),
        escape(&payload.to_string()),
    )
}

/// A row's kept attempts as the library draws them (escaped), or that none is kept.
fn attempts_kept(timeline: &str) -> String {
    let table = if timeline.is_empty() {
        "none kept".to_owned()
    } else {
        escape(timeline)
    };
    format!("<h2>Attempts</h2><pre id=\"history\">{table}</pre>")
}

/// One item: the record, its options, its attempts and its last error.
pub(super) async fn work<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    path: IdPath,
    query: Params,
) -> Response {
    let fetch = |id| view::item(&app.store, Some(&app.owner), id);
    let (id, message, record) = match one(&app, &headers, path, query, "work", fetch).await {
        Ok(found) => found,
        Err(answer) => return *answer,
    };
    let now = Timestamp::system_now();
    let frame = frame(&app, &headers);
    let t = &record.timing;
    let timing = match (&t.cron, &t.zone, t.every_ms, t.misfire) {
        (Some(pattern), Some(zone), _, Some(misfire)) => {
            format!("cron `{pattern}` in {zone}, misfire {misfire}")
        }
        (_, _, Some(interval_ms), Some(misfire)) => {
            format!("every {interval_ms} ms, misfire {misfire}")
        }
        _ => t.kind.to_owned(),
    };
    let max = record.max_attempts.unwrap_or(0);
    let mut body = message;
    body.push_str(&fields(
        "record",
        &[
            ("id", record.id.to_string()),
            ("handler", escape(&record.handler)),
            ("key", escape(record.key.as_deref().unwrap_or("—"))),
            ("timing", escape(&timing)),
            ("state", record.state.to_owned()),
            (
                "attempts",
                format!("{} of {max} in this run", record.attempt),
            ),
            ("due", escape(&when(record.due_at, now))),
            ("run due since", escape(&when(record.fire_at, now))),
            ("lease until", when_opt(record.lease_until, now)),
            ("last backoff (ms)", record.last_delay_ms.to_string()),
            ("created", escape(&when(record.created_at, now))),
            ("updated", escape(&when(record.updated_at, now))),
            ("revision", record.revision.to_string()),
        ],
    ));
    body.push_str(&error_and_payload(
        record.last_error.as_deref(),
        &record.payload,
    ));
    body.push_str(&attempts_kept(&record.timeline));
    body.push_str(&fields(
        "options",
        &option_rows(
            &record.options,
            record.retry_if.as_deref(),
            record.attempt_timeout_ms,
        ),
    ));
    let can_run = record.state.parse().is_ok_and(WorkState::can_run);
    if can_run && frame.logged_in {
        body.push_str(&frame.form(
            &format!("/work/{id}/cancel"),
            "",
            "Cancel this work",
            "cancel",
        ));
    }
    reply(StatusCode::OK, frame.page(&format!("Work #{id}"), &body))
}

/// The dead letters, paged.
pub(super) async fn dead_list<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    query: Params,
) -> Response {
    let parsed = params(query, &["after", "limit", "done"]).and_then(|params| {
        let after = params.get("after").map(|t| id(t)).transpose()?;
        Ok((after, limit(&params)?, done_message(&params)?))
    });
    let (after, limit, message) = match parsed {
        Ok(p) => p,
        Err(why) => return bad_request(&app, &headers, &why),
    };
    let now = Timestamp::system_now();
    // One past the page tells whether a next page has any.
    let read = view::dead_letters(&app.store, &app.owner, after, limit.saturating_add(1)).await;
    let mut page = match read {
        Ok(p) => p.dead_letters,
        Err(e) => return store_failed(&app, &headers, &e),
    };
    let more = beyond(&mut page, limit);
    let mut body = message;
    body.push_str(
        "<table id=\"dead\"><tr><th>id</th><th>work</th><th>handler</th><th>kind</th>\
         <th>reason</th><th>attempts</th><th>failed</th><th>last error</th>\
         <th>re-driven as</th></tr>",
    );
    for dead in &page {
        let _ = write!(
            body,
            "<tr><td><a href=\"/dead/{id}\">{id}</a></td><td>{work}</td><td>{handler}</td>\
             <td>{kind}</td><td>{reason}</td><td>{attempts}</td><td>{failed}</td>\
             <td>{error}</td><td>{redriven}</td></tr>",
            id = dead.id,
            work = dead.work_id,
            handler = escape(&dead.handler),
            kind = escape(&dead.kind),
            reason = dead.reason,
            attempts = dead.attempts,
            failed = escape(&when(dead.failed_at, now)),
            error = escape(dead.last_error.as_deref().unwrap_or("")),
            redriven = dead
                .redriven_as
                .map_or_else(String::new, |w| format!("<a href=\"/work/{w}\">{w}</a>")),
        );
    }
    body.push_str("</table>");
    if page.is_empty() {
        body.push_str("<p id=\"empty\">No dead letters.</p>");
    }
    if let (true, Some(last)) = (more, page.last()) {
        let _ = write!(
            body,
            "<p><a id=\"next\" href=\"/dead?after={}&amp;limit={limit}\">Next page</a></p>",
            last.id
        );
    }
    reply(
        StatusCode::OK,
        frame(&app, &headers).page("Dead letters", &body),
    )
}

/// One dead letter, with its actions.
pub(super) async fn dead_one<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    path: IdPath,
    query: Params,
) -> Response {
    let fetch = |id| view::dead_letter(&app.store, Some(&app.owner), id);
    let (id, message, dead) = match one(&app, &headers, path, query, "dead letter", fetch).await {
        Ok(found) => found,
        Err(answer) => return *answer,
    };
    let now = Timestamp::system_now();
    let frame = frame(&app, &headers);
    let mut body = message;
    body.push_str(&fields(
        "record",
        &[
            ("id", dead.id.to_string()),
            ("work", dead.work_id.to_string()),
            ("handler", escape(&dead.handler)),
            ("kind", escape(&dead.kind)),
            ("reason", dead.reason.to_string()),
            ("attempts", dead.attempts.to_string()),
            ("scheduled", escape(&when(dead.created_at, now))),
            ("run due since", escape(&when(dead.fire_at, now))),
            ("failed", escape(&when(dead.failed_at, now))),
            (
                "re-driven as",
                dead.redriven_as.map_or_else(
                    || "not yet".to_owned(),
                    |w| format!("<a id=\"redriven-as\" href=\"/work/{w}\">work #{w}</a>"),
                ),
            ),
        ],
    ));
    body.push_str(&error_and_payload(
        dead.last_error.as_deref(),
        &dead.payload,
    ));
    body.push_str(&attempts_kept(&dead.timeline));
    body.push_str(&fields(
        "options",
        &option_rows(
            &dead.options,
            dead.retry_if.as_deref(),
            dead.attempt_timeout_ms,
        ),
    ));
    if frame.logged_in {
        body.push_str("<p>");
        if dead.redriven_as.is_none() {
            body.push_str(&frame.form(&format!("/dead/{id}/redrive"), "", "Re-drive", "redrive"));
            body.push(' ');
        }
        body.push_str(&frame.form(&format!("/dead/{id}/purge"), "", "Purge", "purge"));
        body.push_str("</p>");
    }
    reply(
        StatusCode::OK,
        frame.page(&format!("Dead letter #{id}"), &body),
    )
}

/// Why a POST may not act, if it may not: actions off, another site, no token holder, or no
/// CSRF field of a page (a script's bearer token needs none: a browser never sends one by
/// itself). The login form is checked as an action but needs no login.
fn refused_post<S>(
    app: &App<S>,
    headers: &HeaderMap,
    fields: &[(String, String)],
    logging_in: bool,
) -> Option<(StatusCode, &'static str)> {
    if app.secrets.token.is_none() {
        return Some((
            StatusCode::FORBIDDEN,
            "This dashboard is read-only: actions are off.",
        ));
    }
    if !auth::same_origin(headers) {
        return Some((
            StatusCode::FORBIDDEN,
            "The request came from another site: refused.",
        ));
    }
    if !logging_in {
        if app.secrets.bearer(headers) {
            return None;
        }
        if !app.secrets.logged_in(headers) {
            return Some((
                StatusCode::UNAUTHORIZED,
                "Actions need the action token: log in first.",
            ));
        }
    }
    if !app.secrets.is_csrf(field(fields, "csrf")) {
        return Some((
            StatusCode::FORBIDDEN,
            "The form's CSRF field is missing or wrong: reload the page and try again.",
        ));
    }
    None
}

/// The answer to a POST that may not act, if it may not.
fn may_act<S>(
    app: &App<S>,
    headers: &HeaderMap,
    fields: &[(String, String)],
    logging_in: bool,
) -> Option<Response> {
    refused_post(app, headers, fields, logging_in)
        .map(|(status, why)| refusal(app, headers, status, "Refused", why))
}

fn field<'a>(fields: &'a [(String, String)], name: &str) -> Option<&'a str> {
    fields
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

fn form_fields(form: Fields) -> Vec<(String, String)> {
    // A script's POST may have no body at all: no fields, not an error.
    form.map(|Form(fields)| fields).unwrap_or_default()
}

/// Runs an action on the row at `path` once the request may act; answers with a redirect to
/// `done(id)` or a refusal.
async fn action<S, T, F, Fut>(
    app: &App<S>,
    headers: &HeaderMap,
    path: IdPath,
    form: Fields,
    what: &str,
    run: F,
    done: impl FnOnce(i64) -> String,
) -> Response
where
    F: FnOnce(i64) -> Fut,
    Fut: Future<Output = Result<T, ActionError>>,
{
    if let Some(refused) = may_act(app, headers, &form_fields(form), false) {
        return refused;
    }
    let id = match path_id(path) {
        Ok(id) => id,
        Err(why) => return bad_request(app, headers, &why),
    };
    match run(id).await {
        Ok(_) => redirect(&done(id)),
        Err(ActionError::NotFound(_)) => absent(app, headers, what, id),
        Err(ActionError::Refused(why)) => {
            refusal(app, headers, StatusCode::CONFLICT, "Refused", &why)
        }
        Err(ActionError::Store(e)) => store_failed(app, headers, &e),
    }
}

/// Re-drives a dead letter: its work is scheduled again, due now.
pub(super) async fn redrive<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    path: IdPath,
    form: Fields,
) -> Response {
    let run = |id| action::redrive(&app.store, Some(&app.owner), id, Timestamp::system_now());
    action(&app, &headers, path, form, "dead letter", run, |id| {
        format!("/dead/{id}?done=redriven")
    })
    .await
}

/// Purges a dead letter.
pub(super) async fn purge<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    path: IdPath,
    form: Fields,
) -> Response {
    let run = |id| action::purge(&app.store, Some(&app.owner), id);
    action(&app, &headers, path, form, "dead letter", run, |_| {
        "/dead?done=purged".to_owned()
    })
    .await
}

/// Cancels waiting or running work.
pub(super) async fn cancel<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    path: IdPath,
    form: Fields,
) -> Response {
    let run = |id| action::cancel(&app.store, Some(&app.owner), id, Timestamp::system_now());
    action(&app, &headers, path, form, "work", run, |id| {
        format!("/work/{id}?done=cancelled")
    })
    .await
}

fn login_form<S>(app: &App<S>, headers: &HeaderMap, status: StatusCode, note: &str) -> Response {
    let frame = frame(app, headers);
    let body = format!(
        "{note}<form method=\"post\" action=\"/login\" id=\"login\">\
         <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
         <label>Action token <input type=\"password\" name=\"token\" id=\"token\" \
         autocomplete=\"off\"></label> <button type=\"submit\">Log in</button></form>\
         <p>The token was given to the dashboard at start. Logging in sets a cookie that \
         lets this browser act until the dashboard restarts.</p>",
        csrf = escape(&app.secrets.csrf),
    );
    reply(status, frame.page("Log in", &body))
}

/// The login form.
pub(super) async fn login_page<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
) -> Response {
    if app.secrets.token.is_none() {
        return refusal(
            &app,
            &headers,
            StatusCode::NOT_FOUND,
            "Not found",
            "This dashboard is read-only: there is nothing to log in to.",
        );
    }
    login_form(&app, &headers, StatusCode::OK, "")
}

/// Checks the token typed into the login form and sets the session cookie.
pub(super) async fn login<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    form: Fields,
) -> Response {
    let fields = form_fields(form);
    if let Some(refused) = may_act(&app, &headers, &fields, true) {
        return refused;
    }
    if !app.secrets.is_token(field(&fields, "token").unwrap_or("")) {
        return login_form(
            &app,
            &headers,
            StatusCode::UNAUTHORIZED,
            "<p class=\"err\" id=\"error\">That is not the action token.</p>",
        );
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/?done=login".to_owned()),
            (header::SET_COOKIE, auth::login_cookie(&app.secrets.session)),
        ],
    )
        .into_response()
}

/// Forgets this browser's login.
pub(super) async fn logout<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
    form: Fields,
) -> Response {
    if let Some(refused) = may_act(&app, &headers, &form_fields(form), false) {
        return refused;
    }
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, "/?done=logout".to_owned()),
            (header::SET_COOKIE, auth::logout_cookie()),
        ],
    )
        .into_response()
}

/// Any other path.
pub(super) async fn not_found<S: retry_durable::Store>(
    State(app): AppState<S>,
    headers: HeaderMap,
) -> Response {
    refusal(
        &app,
        &headers,
        StatusCode::NOT_FOUND,
        "Not found",
        "There is no such page.",
    )
}
