//! A real HTTP/1.1 server on 127.0.0.1 (hyper, a random port) that answers from a script
//! of faults, and a driver that moves the mock clock while the call waits for it.
//!
//! Faults are real: a reset is a TCP RST (SO_LINGER 0), a cut body is a connection closed
//! in the middle of a declared length or an event stream. Time is not: every wait of the
//! loop is on the test's `MockClock`, which [`drive`] advances as soon as a wait begins,
//! so no test sleeps in wall time even though the sockets are real.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use retry_testkit::{InFlight, InFlightGuard, MockClock, SleepRecord, SleepStatus};
use tokio::net::TcpListener;

/// What the server does with the next request.
#[derive(Clone, Debug)]
pub(crate) enum Step {
    /// Answers with this status, headers and body.
    Respond(u16, Vec<(&'static str, String)>, &'static str),
    /// Resets the connection (RST) without answering.
    Reset,
    /// Sends a head declaring `declared` bytes, then `sent`, then closes the connection.
    CutBody { declared: usize, sent: &'static str },
    /// Answers `200 text/event-stream` with `chunks`, then closes the connection mid-stream.
    EventsThenCut(Vec<&'static str>),
    /// Answers `200 text/event-stream` with `chunks` and ends the stream cleanly.
    Events(Vec<&'static str>),
    /// Never answers.
    Hang,
    /// Answers `200 text/event-stream` with `chunks`, then goes quiet without closing.
    EventsThenStall(Vec<&'static str>),
    /// Answers `200` declaring `declared` bytes, sends `sent`, then neither sends more nor
    /// closes: a body that stalls.
    StallBody { declared: usize, sent: &'static str },
}

/// A request as the server saw it.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// The scripted server; stops when dropped.
pub(crate) struct Server {
    pub(crate) addr: SocketAddr,
    script: Arc<Mutex<VecDeque<Step>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    hanging: Arc<AtomicUsize>,
    io: InFlight,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Server {
    /// Starts a server on 127.0.0.1 with a random port that plays `script`, one step per
    /// request. A request after the script's end gets a 500 that names the mistake.
    pub(crate) async fn start(script: Vec<Step>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("local address");
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let hanging = Arc::new(AtomicUsize::new(0));
        let io = InFlight::new();
        let (s, v, h) = (Arc::clone(&script), Arc::clone(&seen), Arc::clone(&hanging));
        let i = io.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                // In flight from the accept to the first request's answer.
                let accepted = i.guard();
                let (script, seen, hanging) = (Arc::clone(&s), Arc::clone(&v), Arc::clone(&h));
                tokio::spawn(connection(
                    stream,
                    script,
                    seen,
                    hanging,
                    i.clone(),
                    accepted,
                ));
            }
        });
        Server {
            addr,
            script,
            seen,
            hanging,
            io,
            task,
        }
    }

    /// `http://127.0.0.1:<port><path>`.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The requests seen so far.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// What the server has in flight: a connection accepted, a request being answered, a
    /// body being sent. A hang or a stall is not in flight (it is meant to wait for the
    /// client's timers). Hand it to `MockClock::run_watching`.
    pub(crate) fn io(&self) -> &InFlight {
        &self.io
    }

    /// Requests the server holds without answering ([`Step::Hang`]).
    pub(crate) fn hanging(&self) -> usize {
        self.hanging.load(Ordering::SeqCst)
    }

    /// The script was played to its end.
    pub(crate) fn assert_script_done(&self) {
        let left = self.script.lock().unwrap().clone();
        assert!(left.is_empty(), "steps the server never played: {left:?}");
    }
}

async fn connection(
    stream: tokio::net::TcpStream,
    script: Arc<Mutex<VecDeque<Step>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
    hanging: Arc<AtomicUsize>,
    io: InFlight,
    accepted: InFlightGuard,
) {
    let accepted = Arc::new(Mutex::new(Some(accepted)));
    // A second handle on the socket, to reset it from inside the service.
    let std = stream.into_std().expect("std stream");
    let handle = Arc::new(Mutex::new(Some(std.try_clone().expect("clone the socket"))));
    let stream = tokio::net::TcpStream::from_std(std).expect("tokio stream");
    let service = service_fn(move |request: Request<Incoming>| {
        let (script, seen, handle) = (Arc::clone(&script), Arc::clone(&seen), Arc::clone(&handle));
        let hanging = Arc::clone(&hanging);
        let busy = io.guard();
        drop(accepted.lock().unwrap().take());
        async move {
            let (head, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            seen.lock().unwrap().push(Seen {
                method: head.method.clone(),
                path: head.uri.path().to_owned(),
                headers: head.headers.clone(),
                body,
            });
            let step = script.lock().unwrap().pop_front();
            answer(step, &handle, &hanging, busy).await
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.auto_date_header(false);
    let _ = builder
        .serve_connection(TokioIo::new(stream), service)
        .await;
}

async fn answer(
    step: Option<Step>,
    handle: &Mutex<Option<std::net::TcpStream>>,
    hanging: &AtomicUsize,
    busy: InFlightGuard,
) -> Result<Response<ScriptBody>, std::io::Error> {
    let step = match step {
        Some(step) => step,
        None => {
            return Ok(
                respond(500, "the test's script has no step for this request")
                    .map(|body| body.busy(busy)),
            );
        }
    };
    match step {
        Step::Respond(status, headers, body) => {
            let mut response = respond(status, body).map(|body| body.busy(busy));
            for (name, value) in headers {
                response.headers_mut().append(name, value.parse().unwrap());
            }
            Ok(response)
        }
        Step::Reset => {
            // SO_LINGER 0: closing the socket sends RST. The other handle is closed when
            // the service's error makes hyper drop the connection.
            if let Some(socket) = handle.lock().unwrap().take() {
                socket2::SockRef::from(&socket)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            }
            Err(std::io::Error::other("scripted reset"))
        }
        Step::CutBody { declared, sent } => {
            let mut response = Response::new(ScriptBody::new(vec![sent], Then::Fail).busy(busy));
            response
                .headers_mut()
                .insert("content-length", declared.to_string().parse().unwrap());
            Ok(response)
        }
        Step::EventsThenCut(chunks) => Ok(events(chunks, Then::Fail).map(|b| b.busy(busy))),
        Step::Events(chunks) => Ok(events(chunks, Then::End).map(|b| b.busy(busy))),
        Step::EventsThenStall(chunks) => Ok(events(chunks, Then::Stall).map(|b| b.busy(busy))),
        Step::Hang => {
            hanging.fetch_add(1, Ordering::SeqCst);
            drop(busy);
            std::future::pending().await
        }
        Step::StallBody { declared, sent } => {
            let mut response = Response::new(ScriptBody::new(vec![sent], Then::Stall).busy(busy));
            response
                .headers_mut()
                .insert("content-length", declared.to_string().parse().unwrap());
            Ok(response)
        }
    }
}

fn respond(status: u16, body: &'static str) -> Response<ScriptBody> {
    let mut response = Response::new(ScriptBody::new(vec![body], Then::End));
    *response.status_mut() = StatusCode::from_u16(status).unwrap();
    response
}

fn events(chunks: Vec<&'static str>, then: Then) -> Response<ScriptBody> {
    let mut response = Response::new(ScriptBody::new(chunks, then));
    response
        .headers_mut()
        .insert("content-type", "text/event-stream".parse().unwrap());
    response
}

/// What a scripted body does after its chunks.
#[derive(Clone, Copy, Debug)]
enum Then {
    End,
    /// Gives hyper one turn to flush what was sent, then fails (hyper closes the connection).
    Fail,
    /// Gives hyper one turn to flush what was sent, then never sends more.
    Stall,
}

/// A body that sends its chunks, then ends or breaks the connection.
pub(crate) struct ScriptBody {
    chunks: VecDeque<Bytes>,
    then: Then,
    flushed: bool,
    /// In flight until the body ends, breaks or stalls.
    busy: Option<InFlightGuard>,
}

impl ScriptBody {
    fn new(chunks: Vec<&'static str>, then: Then) -> Self {
        ScriptBody {
            chunks: chunks
                .into_iter()
                .map(|c| Bytes::from_static(c.as_bytes()))
                .collect(),
            then,
            flushed: false,
            busy: None,
        }
    }

    fn busy(mut self, guard: InFlightGuard) -> Self {
        self.busy = Some(guard);
        self
    }
}

impl Body for ScriptBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        if let Some(chunk) = self.chunks.pop_front() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        match self.then {
            Then::End => {
                self.busy = None;
                Poll::Ready(None)
            }
            Then::Fail | Then::Stall if !self.flushed => {
                self.flushed = true;
                cx.waker().wake_by_ref();
                Poll::Pending
            }
            Then::Fail => {
                self.busy = None;
                Poll::Ready(Some(Err(std::io::Error::other("scripted cut"))))
            }
            Then::Stall => {
                // Quiet from now on: the client's timers may fire.
                self.busy = None;
                Poll::Pending
            }
        }
    }
}

/// Runs `call` while moving `clock`: whenever a sleep is pending whose duration is not one of
/// `keep` (timers the test wants left alone: a deadline it expects not to reach), time moves
/// to it. Real I/O is waited for by yielding to the runtime, never by sleeping.
pub(crate) async fn drive<F: Future>(clock: &MockClock, keep: &[Duration], call: F) -> F::Output {
    drive_if(clock, |sleep| !keep.contains(&sleep.duration), call).await
}

/// Runs `call` while moving `clock` to each pending sleep that `may_fire` allows.
pub(crate) async fn drive_if<F: Future>(
    clock: &MockClock,
    mut may_fire: impl FnMut(&SleepRecord) -> bool,
    call: F,
) -> F::Output {
    let mut call = pin!(call);
    loop {
        if let Poll::Ready(out) =
            std::future::poll_fn(|cx| Poll::Ready(call.as_mut().poll(cx))).await
        {
            return out;
        }
        let next = clock
            .sleep_log()
            .into_iter()
            .filter(|r| r.status == SleepStatus::Pending)
            .min_by_key(|r| r.deadline());
        match next {
            Some(sleep) if may_fire(&sleep) => {
                clock.advance_to_next();
            }
            _ => tokio::task::yield_now().await,
        }
    }
}

/// A reqwest client whose only middleware is `retry`'s, without the system's proxies.
pub(crate) fn reqwest_client<P: retry_http::Classify>(
    retry: &retry_http::HttpRetry<P, MockClock>,
) -> reqwest_middleware::ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest::Client::builder().no_proxy().build().unwrap())
        .with(retry.middleware())
        .build()
}

/// A GET of `server`'s `/` through `client`, on `clock`, time moving only when the server is
/// quiet.
pub(crate) async fn reqwest_get(
    clock: &MockClock,
    server: &Server,
    client: &reqwest_middleware::ClientWithMiddleware,
) -> reqwest_middleware::Result<reqwest::Response> {
    clock
        .run_watching(server.io(), client.get(server.url("/")).send())
        .await
}

/// The retry's error as reqwest-middleware returns it (an `anyhow::Error` that keeps the
/// chain); panics on any other error.
pub(crate) fn middleware_error(error: reqwest_middleware::Error) -> anyhow::Error {
    match error {
        reqwest_middleware::Error::Middleware(error) => error,
        other => panic!("not the retry's error: {other:?}"),
    }
}

/// An error and its sources, `: `-separated, as anyhow's `{:#}` prints them.
pub(crate) fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = Vec::new();
    let mut next = Some(error);
    while let Some(e) = next {
        parts.push(e.to_string());
        next = e.source();
    }
    parts.join(": ")
}

/// Timers of `duration` that have fired on `clock`.
pub(crate) fn fired(clock: &MockClock, duration: Duration) -> usize {
    clock
        .sleep_log()
        .iter()
        .filter(|r| r.duration == duration && r.status == SleepStatus::Fired)
        .count()
}
