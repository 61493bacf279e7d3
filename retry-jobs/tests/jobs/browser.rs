//! V2: the dashboard in a real headless browser (Debian's Chromium, driven through
//! ChromeDriver over WebDriver): every page loads, a dead letter is re-driven through the
//! login and re-drive forms, and the page after says so.
//!
//! With `RETRY_JOBS_SCREENSHOT=path`, the status page of a second dashboard, over a store of
//! friendly work ([`showcase`]), is written there as a screenshot (the guide's
//! `docs/images/dashboard-status.png` is made that way; CI never rewrites it): the hostile
//! fixture's script-named handler stays out of the picture.
//!
//! Chromium missing fails the test with what to install: nothing is skipped.

use crate::dashboard_support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use dashboard_support::*;
use fantoccini::{ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use retry_durable::SqliteStore;
use retry_jobs::web::Config;

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver of this test's own, killed when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts chromedriver on a free port and waits for its "started" line (no sleep).
fn chromedriver() -> Driver {
    for needed in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(needed).exists(),
            "{needed} is missing: the browser test needs Debian's Chromium and ChromeDriver \
             (`apt-get install -y chromium chromium-driver`; .ci/run installs them)"
        );
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut child = Command::new(CHROMEDRIVER)
        .arg(format!("--port={port}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let driver = Driver {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    loop {
        match lines.next() {
            Some(Ok(line)) if line.contains("started successfully") => break,
            Some(Ok(_)) => {}
            other => panic!("chromedriver stopped before it was ready: {other:?}"),
        }
    }
    // Keep reading its output so that it never blocks on a full pipe.
    std::thread::spawn(move || lines.for_each(drop));
    driver
}

/// Clicks the button at `css` and reads the message of the page the form leads to.
async fn submit(browser: &fantoccini::Client, css: &str) -> String {
    browser
        .find(Locator::Css(css))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let message = browser
        .wait()
        .for_element(Locator::Id("message"))
        .await
        .unwrap();
    message.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_every_page_loads_and_a_dead_letter_is_redriven_in_a_browser() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("jobs.db")).unwrap();
    let filled = fill(&store).await;
    let addr = start(store.clone(), Config::with_token(TOKEN).unwrap()).await;
    let base = format!("http://{addr}");

    let driver = chromedriver();
    let profile = tempfile::tempdir().unwrap();
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": CHROMIUM,
            "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,900",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    let browser = ClientBuilder::new(HttpConnector::new())
        .capabilities(capabilities)
        .connect(&driver.url)
        .await
        .expect("a Chromium session through chromedriver");

    // Every page loads, with its title, and no script runs on any of them.
    let dead = filled.dead.0;
    for (path, title) in [
        ("/".to_owned(), "Status"),
        ("/work".to_owned(), "Work"),
        (format!("/work/{}", filled.waiting.0), "Work #"),
        ("/in-flight".to_owned(), "In flight"),
        ("/dead".to_owned(), "Dead letters"),
        (format!("/dead/{dead}"), "Dead letter #"),
    ] {
        browser.goto(&format!("{base}{path}")).await.unwrap();
        let shown = browser.title().await.unwrap();
        assert!(shown.starts_with(title), "{path}: {shown}");
        assert!(
            browser
                .find_all(Locator::Css("script"))
                .await
                .unwrap()
                .is_empty(),
            "{path}"
        );
    }
    // The handler named like a script is text in the status table.
    browser.goto(&base).await.unwrap();
    let table = browser.find(Locator::Id("status")).await.unwrap();
    let text = table.text().await.unwrap();
    assert!(text.contains(XSS), "{text}");
    assert!(text.contains("mail"), "{text}");

    // Log in through the page, then re-drive through the dead letter's form.
    browser.goto(&format!("{base}/login")).await.unwrap();
    let token = browser.find(Locator::Id("token")).await.unwrap();
    token.send_keys(TOKEN).await.unwrap();
    let message = submit(&browser, "#login button").await;
    assert_eq!(message, "Logged in: actions are on.");

    browser.goto(&format!("{base}/dead/{dead}")).await.unwrap();
    let message = submit(&browser, "#redrive button").await;
    assert!(message.starts_with("Re-driven"), "{message}");
    let url = browser.current_url().await.unwrap();
    assert_eq!(url.path(), format!("/dead/{dead}"));
    let link = browser.find(Locator::Id("redriven-as")).await.unwrap();
    let work = redriven_as(&store, filled.dead).await.expect("re-driven");
    assert_eq!(link.text().await.unwrap(), format!("work #{}", work.0));
    // The form is gone: a dead letter is re-driven once.
    assert!(
        browser
            .find_all(Locator::Id("redrive"))
            .await
            .unwrap()
            .is_empty()
    );
    // The new work's page, by the link.
    link.click().await.unwrap();
    let title = browser.title().await.unwrap();
    assert_eq!(title, format!("Work #{} · retry-jobs", work.0));

    // The screenshot's dashboard: friendly names, dead letters, work in every state shown.
    let shown = tempfile::tempdir().unwrap();
    let friendly = SqliteStore::open(shown.path().join("jobs.db")).unwrap();
    showcase(&friendly).await;
    let addr = start(friendly, Config::read_only()).await;
    browser.goto(&format!("http://{addr}/")).await.unwrap();
    let table = browser.find(Locator::Id("status")).await.unwrap();
    let text = table.text().await.unwrap();
    for handler in [
        "charge-card",
        "nightly-report",
        "send-welcome-email",
        "sync-inventory",
    ] {
        assert!(text.contains(handler), "{handler}: {text}");
    }
    if let Ok(path) = std::env::var("RETRY_JOBS_SCREENSHOT") {
        let png = browser.screenshot().await.unwrap();
        std::fs::write(&path, png).unwrap();
    }

    browser.close().await.unwrap();
}
