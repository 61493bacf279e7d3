//! Who may act, and whether a POST comes from the dashboard's own pages.
//!
//! Reading is open to whoever reaches the port (loopback by default). Acting needs the action
//! token given at start: a script sends it as `Authorization: Bearer …`; a browser user types
//! it once into the login form and gets a session cookie (`HttpOnly`, `SameSite=Strict`)
//! holding a random per-process value, never the token itself. A browser POST must also carry
//! the per-process CSRF value from a hidden field of the page, and must not come from another
//! site (`Sec-Fetch-Site`, `Origin`).

use axum::http::{HeaderMap, header};
use rand::Rng;

/// The session cookie's name.
pub(super) const COOKIE: &str = "retry_jobs_session";

/// The secrets of one dashboard process, drawn at start.
pub(super) struct Secrets {
    /// The action token given at start; `None` when the dashboard is read-only.
    pub(super) token: Option<String>,
    /// The value of the hidden CSRF field of every form.
    pub(super) csrf: String,
    /// The value of the session cookie a login sets.
    pub(super) session: String,
}

impl Secrets {
    pub(super) fn new(token: Option<String>) -> Self {
        Secrets {
            token,
            csrf: random_hex(),
            session: random_hex(),
        }
    }

    /// Whether the request carries the session cookie of this process.
    pub(super) fn logged_in(&self, headers: &HeaderMap) -> bool {
        self.token.is_some()
            && cookie(headers, COOKIE).is_some_and(|value| same(value, &self.session))
    }

    /// Whether the request carries the action token as a bearer token.
    pub(super) fn bearer(&self, headers: &HeaderMap) -> bool {
        let Some(token) = &self.token else {
            return false;
        };
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| same(given.trim(), token))
    }

    /// Whether `given` is the action token.
    pub(super) fn is_token(&self, given: &str) -> bool {
        self.token
            .as_deref()
            .is_some_and(|token| same(given, token))
    }

    /// Whether `given` is the CSRF value.
    pub(super) fn is_csrf(&self, given: Option<&str>) -> bool {
        given.is_some_and(|given| same(given, &self.csrf))
    }
}

/// Whether a POST may come from where it says: not from another site. Browsers send
/// `Sec-Fetch-Site`, which then decides (under the `no-referrer` policy of these pages a
/// browser sends `Origin: null` even from the page itself); without it, `Origin`, if sent,
/// must name this host.
pub(super) fn same_origin(headers: &HeaderMap) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &header::HeaderValue| v.to_str().ok())
    };
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.to_str(), Ok("same-origin" | "none"));
    }
    match (text(header::ORIGIN), text(header::HOST)) {
        (None, _) => true,
        (Some(origin), Some(host)) => origin == format!("http://{host}"),
        (Some(_), None) => false,
    }
}

/// The value of cookie `name`, if the request has one.
fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

/// Compares secrets in time that does not depend on where they first differ.
fn same(given: &str, secret: &str) -> bool {
    let (a, b) = (given.as_bytes(), secret.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// 32 random bytes as hex, from the thread generator (seeded from the OS).
fn random_hex() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The `Set-Cookie` value of a login.
pub(super) fn login_cookie(session: &str) -> String {
    format!("{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict")
}

/// The `Set-Cookie` value of a logout.
pub(super) fn logout_cookie() -> String {
    format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_secret_comparison_needs_every_byte() {
        assert!(same("abc", "abc"));
        assert!(!same("abd", "abc"));
        assert!(!same("ab", "abc"));
        assert!(!same("", "abc"));
    }
}
