//! The dashboard: durable work seen and steered in a browser.
//!
//! Server-rendered HTML (no JavaScript, nothing fetched from elsewhere) over any
//! `retry_durable::Store`: a status page per handler, the work with filters and
//! paging, one item, the attempts in flight, and the dead letters. Actions (re-drive or purge
//! a dead letter, cancel work) are POST forms that need the action token given at start
//! (typed once into the login page, or sent by a script as `Authorization: Bearer …`), carry a
//! CSRF field, and are refused from other sites; with [`Config::read_only`] there are none.
//!
//! ```no_run
//! use retry_durable::SqliteStore;
//! use retry_jobs::web::{self, Config};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let store = SqliteStore::open("jobs.db")?;
//! let config = Config::with_token("a long random token")?;
//! let listener = tokio::net::TcpListener::bind(config.bind_addr()).await?;
//! web::serve(listener, store, config).await?;
//! # Ok(()) }
//! ```

mod auth;
mod html;
mod views;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use retry_durable::Store;

pub use html::escape;

/// The port the dashboard listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 8640;

/// The shortest action token accepted, in bytes: a token is all that stands between the
/// port and the power to cancel work.
pub const MIN_TOKEN_LEN: usize = 16;

/// How a dashboard is served: where it listens, whose work it shows, and whether it acts.
#[derive(Clone)]
pub struct Config {
    bind: SocketAddr,
    owner: String,
    token: Option<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Config")
            .field("bind", &self.bind)
            .field("owner", &self.owner)
            .field("read_only", &self.token.is_none())
            .finish_non_exhaustive()
    }
}

/// A setting [`Config`] refuses.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConfigError {
    /// The action token is shorter than [`MIN_TOKEN_LEN`] bytes.
    ShortToken {
        /// Its length.
        len: usize,
    },
    /// The owner's name is empty.
    EmptyOwner,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::ShortToken { len } => write!(
                f,
                "the action token has {len} bytes; it needs at least {MIN_TOKEN_LEN}"
            ),
            ConfigError::EmptyOwner => f.write_str("the owner's name is empty"),
        }
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Actions on, for whoever gives `token`; listens on 127.0.0.1:[`DEFAULT_PORT`] and
    /// shows owner `default`.
    pub fn with_token(token: impl Into<String>) -> Result<Self, ConfigError> {
        let token = token.into();
        if token.len() < MIN_TOKEN_LEN {
            return Err(ConfigError::ShortToken { len: token.len() });
        }
        Ok(Config {
            token: Some(token),
            ..Config::read_only()
        })
    }

    /// No actions: pages only, no forms, every POST refused.
    pub fn read_only() -> Self {
        Config {
            bind: SocketAddr::from((Ipv4Addr::LOCALHOST, DEFAULT_PORT)),
            owner: "default".to_owned(),
            token: None,
        }
    }

    /// Shows the work of `owner` (as given to `JobsBuilder::owner`).
    pub fn owner(mut self, owner: impl Into<String>) -> Result<Self, ConfigError> {
        let owner = owner.into();
        if owner.is_empty() {
            return Err(ConfigError::EmptyOwner);
        }
        self.owner = owner;
        Ok(self)
    }

    /// Listens on `addr` instead of the loopback address. Anything but loopback exposes the
    /// pages (and, with the token, the actions) to the network: use it only behind a proxy
    /// that adds TLS.
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.bind = addr;
        self
    }

    /// Where [`serve`]'s caller should bind its listener.
    pub fn bind_addr(&self) -> SocketAddr {
        self.bind
    }

    /// Whether actions are off.
    pub fn is_read_only(&self) -> bool {
        self.token.is_none()
    }
}

/// What every handler shares.
struct App<S> {
    store: S,
    owner: String,
    secrets: auth::Secrets,
}

/// The dashboard's routes over `store`, for embedding in an application of your own (serve
/// it on loopback, or behind authentication of your own: reading needs no token).
pub fn router<S: Store>(store: S, config: Config) -> Router {
    let loopback = config.bind.ip().is_loopback();
    let app = Arc::new(App {
        store,
        owner: config.owner,
        secrets: auth::Secrets::new(config.token),
    });
    Router::new()
        .route("/", get(views::status::<S>))
        .route("/work", get(views::list::<S>))
        .route("/work/{id}", get(views::work::<S>))
        .route("/work/{id}/cancel", post(views::cancel::<S>))
        .route("/in-flight", get(views::in_flight::<S>))
        .route("/dead", get(views::dead_list::<S>))
        .route("/dead/{id}", get(views::dead_one::<S>))
        .route("/dead/{id}/redrive", post(views::redrive::<S>))
        .route("/dead/{id}/purge", post(views::purge::<S>))
        .route(
            "/login",
            get(views::login_page::<S>).post(views::login::<S>),
        )
        .route("/logout", post(views::logout::<S>))
        .fallback(views::not_found::<S>)
        .with_state(app)
        .layer(axum::middleware::from_fn(move |request, next| {
            loopback_host(loopback, request, next)
        }))
        .layer(axum::middleware::map_response(secure))
}

/// On a loopback address, answers only requests for a loopback host name: a page of another
/// site whose name was pointed at 127.0.0.1 (DNS rebinding) reads nothing.
async fn loopback_host(loopback: bool, request: Request, next: Next) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    let name = match host.rsplit_once(':') {
        Some((name, port)) if !port.contains(']') => name,
        _ => host,
    };
    if loopback && !matches!(name, "127.0.0.1" | "localhost" | "[::1]") {
        let text = format!(
            "This dashboard answers on 127.0.0.1, localhost or [::1] only, not `{}`.",
            escape(host)
        );
        return (StatusCode::MISDIRECTED_REQUEST, Html(text)).into_response();
    }
    next.run(request).await
}

/// A fresh random action token: 24 bytes from the OS's generator, as hex.
pub fn new_token() -> String {
    use rand::Rng;
    let mut bytes = [0u8; 24];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Serves the dashboard on `listener` until the listener fails.
pub async fn serve<S: Store>(
    listener: tokio::net::TcpListener,
    store: S,
    config: Config,
) -> std::io::Result<()> {
    axum::serve(listener, router(store, config)).await
}

/// Headers on every answer: no script, no frame, nothing fetched, no referrer, no cache.
async fn secure(mut response: Response) -> Response {
    let headers = response.headers_mut();
    for (name, value) in [
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
        (header::X_FRAME_OPTIONS, "DENY"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::CACHE_CONTROL, "no-store"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}
