//! What retry-http costs on a request that succeeds at once, beside the bare client and the
//! retry users would otherwise pick (tower's `Retry` with an HTTP policy written for it, and
//! reqwest-retry's middleware).
//!
//! Two groups:
//! - **in process**: a tower `service_fn` that answers 200 at once, so the layer's own cost
//!   is all there is to see (its copy of the request for a retry, its futures; with a shared
//!   circuit breaker, closed, and a retry budget);
//! - **loopback**: a real GET to a hyper server on 127.0.0.1 over a kept-alive connection
//!   (the body read to its end), through hyper-util's client and through reqwest.
//!
//! Each row runs `CALLS` calls `RUNS` times on a current-thread runtime and reports wall time
//! and the client thread's time on CPU per call (the server runs on threads of its own); with
//! valgrind on the `PATH` it also counts instructions and heap allocations per call (the
//! whole process, the server included, by the difference between `FEW` and `MANY` calls).
//! Instructions are the mean over `counted::LAYOUTS` heap layouts: glibc's choice between
//! reusing a freed block at once and walking its bins moves a loopback call by hundreds of
//! instructions with nothing else changed.
//!
//! `cargo bench -p retry-benches --bench http` (add `-- --no-count` to skip valgrind; run the
//! built binary with `--sizes` for the size of a call's future and of its response).

#[allow(dead_code, reason = "shared by the counting benches")]
mod counted;

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use retry_http::HttpRetry;
use retry_toolkit::{CircuitBreaker, RetryBudget};
use tokio::runtime::{Builder, Runtime};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

const RUNS: usize = 7;
const CALLS_IN_PROCESS: u64 = 200_000;
const CALLS_LOOPBACK: u64 = 5_000;
const FEW: u64 = 200;
const MANY: u64 = 1_200;

/// Every row: its key (for `--run`), its label, and calls per run.
const ROWS: &[(&str, &str, u64)] = &[
    (
        "inproc/bare",
        "in process: the bare service",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/retry-http",
        "in process: retry-http's layer",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/retry-http+breaker",
        "in process: retry-http's layer, a closed breaker",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/retry-http+breaker+budget",
        "in process: retry-http's layer, a closed breaker and a budget",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/retry-http+timeout",
        "in process: retry-http's layer, an attempt timeout",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/retry-http+bounded",
        "in process: retry-http's layer, an attempt timeout and a deadline",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/tower",
        "in process: tower's `Retry`",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/tower+timeout",
        "in process: tower's `Retry` over its `Timeout`",
        CALLS_IN_PROCESS,
    ),
    (
        "inproc/tower+bounded",
        "in process: tower's `Timeout` over its `Retry` over its `Timeout`",
        CALLS_IN_PROCESS,
    ),
    ("hyper/bare", "loopback: hyper-util client", CALLS_LOOPBACK),
    (
        "hyper/retry-http",
        "loopback: hyper-util + retry-http's layer",
        CALLS_LOOPBACK,
    ),
    (
        "hyper/tower",
        "loopback: hyper-util + tower's `Retry`",
        CALLS_LOOPBACK,
    ),
    ("reqwest/bare", "loopback: reqwest", CALLS_LOOPBACK),
    (
        "reqwest/chain",
        "loopback: reqwest-middleware, no middleware",
        CALLS_LOOPBACK,
    ),
    (
        "reqwest/retry-http",
        "loopback: reqwest + retry-http's middleware",
        CALLS_LOOPBACK,
    ),
    (
        "reqwest/retry-http+bounded",
        "loopback: reqwest + retry-http's middleware, an attempt timeout and a deadline",
        CALLS_LOOPBACK,
    ),
    (
        "reqwest/reqwest-retry",
        "loopback: reqwest + reqwest-retry",
        CALLS_LOOPBACK,
    ),
];

type Body = Full<Bytes>;

/// tower's `Retry` made an HTTP retry the way its docs suggest: clone the request, retry a
/// 5xx or an error twice, no delay (the success path never asks for one).
#[derive(Clone)]
struct TowerPolicy(u32);

impl<B, E> tower::retry::Policy<Request<Body>, Response<B>, E> for TowerPolicy {
    type Future = Ready<()>;

    fn retry(
        &mut self,
        _: &mut Request<Body>,
        result: &mut Result<Response<B>, E>,
    ) -> Option<Self::Future> {
        let failed = match result {
            Ok(response) => response.status().is_server_error(),
            Err(_) => true,
        };
        (failed && self.0 > 0).then(|| {
            self.0 -= 1;
            ready(())
        })
    }

    fn clone_request(&mut self, request: &Request<Body>) -> Option<Request<Body>> {
        let mut copy = Request::new(request.body().clone());
        *copy.method_mut() = request.method().clone();
        *copy.uri_mut() = request.uri().clone();
        *copy.headers_mut() = request.headers().clone();
        Some(copy)
    }
}

fn request(url: &str) -> Request<Body> {
    let mut request = Request::new(Full::new(Bytes::new()));
    *request.uri_mut() = url.parse().expect("a valid URL");
    request
}

fn ok(_: Request<Body>) -> Ready<Result<Response<Body>, Infallible>> {
    ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
}

/// `calls` calls through `service`, in process, each answer kept from the optimizer.
async fn in_process<S>(mut service: S, url: &str, calls: u64)
where
    S: Service<Request<Body>>,
    S::Error: std::fmt::Debug,
{
    for _ in 0..calls {
        let response = service.ready().await.unwrap().call(request(url)).await;
        black_box(response.unwrap());
    }
}

/// Runs `calls` calls of row `key` on `rt`.
fn run(rt: &Runtime, url: &str, key: &str, calls: u64) {
    rt.block_on(async {
        match key {
            "inproc/bare" => {
                let service = service_fn(ok);
                in_process(service, url, calls).await;
            }
            "inproc/retry-http" => {
                let service = ServiceBuilder::new()
                    .layer(HttpRetry::default().layer())
                    .service(service_fn(ok));
                in_process(service, url, calls).await;
            }
            "inproc/retry-http+breaker"
            | "inproc/retry-http+breaker+budget"
            | "inproc/retry-http+timeout"
            | "inproc/retry-http+bounded" => {
                // Shared as they would be: one breaker (and budget) per host, in an `Arc`.
                let retry = match key {
                    "inproc/retry-http+timeout" => {
                        HttpRetry::builder().attempt_timeout(Duration::from_secs(10))
                    }
                    "inproc/retry-http+bounded" => HttpRetry::builder()
                        .bounded(Duration::from_secs(10), Duration::from_secs(30)),
                    _ => HttpRetry::builder().breaker(Arc::new(CircuitBreaker::new())),
                };
                let retry = if key.ends_with("+budget") {
                    retry.budget(Arc::new(RetryBudget::new()))
                } else {
                    retry
                };
                let retry = retry.build().expect("valid settings");
                let service = ServiceBuilder::new()
                    .layer(retry.layer())
                    .service(service_fn(ok));
                in_process(service, url, calls).await;
            }
            "inproc/tower" => {
                let service = ServiceBuilder::new()
                    .retry(TowerPolicy(2))
                    .service(service_fn(ok));
                in_process(service, url, calls).await;
            }
            // tower's way to the same limits as retry-http's rows above: a `Timeout` per
            // attempt, under `Retry`; for a deadline, one more over the whole call.
            "inproc/tower+timeout" => {
                let service = ServiceBuilder::new()
                    .retry(TowerPolicy(2))
                    .timeout(Duration::from_secs(10))
                    .service(service_fn(ok));
                in_process(service, url, calls).await;
            }
            "inproc/tower+bounded" => {
                let service = ServiceBuilder::new()
                    .timeout(Duration::from_secs(30))
                    .retry(TowerPolicy(2))
                    .timeout(Duration::from_secs(10))
                    .service(service_fn(ok));
                in_process(service, url, calls).await;
            }
            "hyper/bare" => {
                let mut client = hyper_client();
                for _ in 0..calls {
                    let response = client.ready().await.unwrap().call(request(url)).await;
                    black_box(response.unwrap().into_body().collect().await.unwrap());
                }
            }
            "hyper/retry-http" => {
                let mut client = ServiceBuilder::new()
                    .layer(HttpRetry::default().layer())
                    .service(hyper_client());
                for _ in 0..calls {
                    let response = client.ready().await.unwrap().call(request(url)).await;
                    black_box(response.unwrap().into_body().collect().await.unwrap());
                }
            }
            "hyper/tower" => {
                let mut client = ServiceBuilder::new()
                    .retry(TowerPolicy(2))
                    .service(hyper_client());
                for _ in 0..calls {
                    let response = client.ready().await.unwrap().call(request(url)).await;
                    black_box(response.unwrap().into_body().collect().await.unwrap());
                }
            }
            "reqwest/bare" => {
                let client = reqwest_client();
                for _ in 0..calls {
                    let response = client.get(url).send().await.unwrap();
                    black_box(response.bytes().await.unwrap());
                }
            }
            "reqwest/chain"
            | "reqwest/retry-http"
            | "reqwest/retry-http+bounded"
            | "reqwest/reqwest-retry" => {
                let builder = reqwest_middleware::ClientBuilder::new(reqwest_client());
                let client = match key {
                    "reqwest/retry-http" => builder.with(HttpRetry::default().middleware()),
                    "reqwest/retry-http+bounded" => builder.with(
                        HttpRetry::builder()
                            .bounded(Duration::from_secs(10), Duration::from_secs(30))
                            .build()
                            .expect("valid settings")
                            .middleware(),
                    ),
                    "reqwest/reqwest-retry" => {
                        let policy = reqwest_retry::policies::ExponentialBackoff::builder()
                            .build_with_max_retries(2);
                        builder.with(reqwest_retry::RetryTransientMiddleware::new_with_policy(
                            policy,
                        ))
                    }
                    _ => builder,
                }
                .build();
                for _ in 0..calls {
                    let response = client.get(url).send().await.unwrap();
                    black_box(response.bytes().await.unwrap());
                }
            }
            other => panic!("no row {other}"),
        }
    });
}

/// What a call moves (`--sizes`): the future a call returns, and the response it answers,
/// in bytes (`std::mem::size_of_val`), through the layer and through tower's `Retry`.
fn sizes(rt: &Runtime, url: &str) {
    rt.block_on(async {
        let mut ours = ServiceBuilder::new()
            .layer(HttpRetry::default().layer())
            .service(service_fn(ok));
        let future = ours.ready().await.unwrap().call(request(url));
        let future_size = std::mem::size_of_val(&future);
        let response = future.await.unwrap();
        println!(
            "retry-http's layer: future {future_size}, response {}",
            std::mem::size_of_val(&response)
        );
        let mut tower = ServiceBuilder::new()
            .retry(TowerPolicy(2))
            .service(service_fn(ok));
        let future = tower.ready().await.unwrap().call(request(url));
        let future_size = std::mem::size_of_val(&future);
        let response = future.await.unwrap();
        println!(
            "tower's `Retry`: future {future_size}, response {}",
            std::mem::size_of_val(&response)
        );
        // A middleware's `handle` future is boxed by the chain: the one after `Probe` is
        // measured through the box it returns (built, never polled).
        for (name, middleware) in [
            (
                "retry-http's middleware",
                Arc::new(HttpRetry::default().middleware())
                    as Arc<dyn reqwest_middleware::Middleware>,
            ),
            (
                "reqwest-retry",
                Arc::new(reqwest_retry::RetryTransientMiddleware::new_with_policy(
                    reqwest_retry::policies::ExponentialBackoff::builder()
                        .build_with_max_retries(2),
                )),
            ),
        ] {
            let client = reqwest_middleware::ClientBuilder::new(reqwest_client())
                .with(Probe)
                .with_arc(middleware)
                .build();
            let _ = client.get(url).send().await;
            println!("{name}: `handle` future {}", PROBED.load(Ordering::Relaxed));
        }
    });
}

/// The size of the `handle` future of the middleware after it (see `sizes`).
static PROBED: AtomicUsize = AtomicUsize::new(0);

/// Records the size of the next middleware's `handle` future, then lets it run.
struct Probe;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for Probe {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let future = next.run(request, extensions);
        PROBED.store(std::mem::size_of_val(&*future), Ordering::Relaxed);
        future.await
    }
}

fn hyper_client() -> Client<HttpConnector, Body> {
    Client::builder(TokioExecutor::new()).build_http()
}

fn reqwest_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("a reqwest client")
}

/// A hyper server on 127.0.0.1, on a runtime of its own (one worker thread), answering every
/// request `200 ok`; returns its URL.
fn serve() -> String {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = Builder::new_multi_thread()
            .worker_threads(1)
            .enable_io()
            .build()
            .expect("the server's runtime");
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap()).unwrap();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    let addr = rx.recv().expect("the server's address");
    format!("http://{addr}/")
}

fn client_runtime() -> Runtime {
    Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("the client's runtime")
}

/// The calling thread's time on CPU so far, in nanoseconds (Linux).
fn on_cpu_ns() -> Option<u64> {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    stat.split_whitespace().next()?.parse().ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // Held until the end: the layout the parent asked for (see `counted::hold_heap_layout`).
    let _layout = counted::hold_heap_layout();
    let url = serve();
    let rt = client_runtime();
    if args.iter().any(|a| a == "--sizes") {
        sizes(&rt, &url);
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "--run") {
        run(
            &rt,
            &url,
            &args[i + 1],
            args[i + 2].parse().expect("a count"),
        );
        return;
    }
    let count = !args.iter().any(|a| a == "--no-count") && counted::valgrind_available();
    let filter = args.iter().skip(1).find(|a| !a.starts_with('-'));
    let exe = std::env::current_exe().expect("the path of this executable");
    let mut out = String::from(
        "| | µs per call, median (min–max) | on CPU, µs | instructions | allocations |\n\
         |---|---:|---:|---:|---:|\n",
    );
    for &(key, label, calls) in ROWS {
        if filter.is_some_and(|f| !key.contains(f.as_str())) {
            continue;
        }
        run(&rt, &url, key, calls / 10); // warm up: connections, pools, caches
        let (mut wall, mut cpu): (Vec<f64>, Vec<f64>) = (0..RUNS)
            .map(|_| {
                let (start, on_cpu) = (Instant::now(), on_cpu_ns());
                run(&rt, &url, key, calls);
                let wall = start.elapsed().as_secs_f64() * 1e6 / calls as f64;
                let cpu = on_cpu.zip(on_cpu_ns()).map_or(f64::NAN, |(a, b)| {
                    b.saturating_sub(a) as f64 / 1e3 / calls as f64
                });
                (wall, cpu)
            })
            .unzip();
        let (median, min, max) = counted::median_min_max(&mut wall);
        let (c, c_min, c_max) = counted::median_min_max(&mut cpu);
        let (instructions, allocations) = if count {
            let (i, a) = counted::per_unit_over_layouts(&exe, key, FEW, MANY);
            (format!("{i:.0}"), format!("{a:.1}"))
        } else {
            ("not counted".into(), "not counted".into())
        };
        eprintln!(
            "http: {key}: {median:.3} µs, on CPU {c:.3} µs, {instructions} instructions, {allocations} allocations"
        );
        out.push_str(&format!(
            "| {label} | {median:.3} ({min:.3}–{max:.3}) | {c:.3} ({c_min:.3}–{c_max:.3}) | {instructions} | {allocations} |\n"
        ));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\n{out}\nload average (1, 5, 15 min) after the runs: {load}");
}
