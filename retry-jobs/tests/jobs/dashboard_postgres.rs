//! V2 on PostgreSQL: the status page and a re-drive through the form, on a database of the
//! throwaway test cluster (or `DATABASE_URL`).

use crate::dashboard_support;
use crate::pg;

use dashboard_support::*;
use retry_durable::{Store, WorkState};
use retry_jobs::web::Config;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_status_and_redrive_on_postgres() {
    let (store, ()) = pg::fresh().await;
    let filled = fill(&store).await;
    let addr = start(store.clone(), Config::with_token(TOKEN).unwrap()).await;

    let status = get(addr, "/").await;
    assert_eq!(status.status, 200, "{}", status.body);
    assert!(
        status.body.contains(
            "<td><a href=\"/work?handler=mail\">mail</a></td><td>1</td><td>1</td><td>0</td>"
        ),
        "{}",
        status.body
    );
    assert!(status.body.contains(XSS_ESCAPED));
    assert!(!status.body.contains("<script"));
    let in_flight = get(addr, "/in-flight").await;
    assert!(
        in_flight
            .body
            .contains(&format!("/work/{}\"", filled.running.0))
    );

    let (cookie, _) = login(addr).await;
    let dead = filled.dead.0;
    let page = request(
        addr,
        "GET",
        &format!("/dead/{dead}"),
        &[("cookie", &cookie)],
        "",
    )
    .await;
    let csrf = csrf_of(&page.body);
    let answer = post_form(addr, &format!("/dead/{dead}/redrive"), &cookie, &csrf).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let work = redriven_as(&store, filled.dead).await.expect("re-driven");
    assert_eq!(
        store.get(work).await.unwrap().unwrap().state,
        WorkState::Waiting
    );
    let again = post_form(addr, &format!("/dead/{dead}/redrive"), &cookie, &csrf).await;
    assert_eq!(again.status, 409);
}
