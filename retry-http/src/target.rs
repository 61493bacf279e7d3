//! [`Target`]: the method and URI of a call, what its errors and events name.

use std::fmt;

use http::{Method, Request, Uri};

/// The method and URI of a call. Cheap to clone: a standard method is a tag, a URI a few
/// reference counts.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
}

impl Target {
    #[inline]
    pub(crate) fn of<B>(request: &Request<B>) -> Self {
        Target {
            method: request.method().clone(),
            uri: request.uri().clone(),
        }
    }

    /// The URI's host and port, `-` when it has none (a relative URI).
    pub(crate) fn host(&self) -> &str {
        self.uri.authority().map_or("-", |a| a.as_str())
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.method, self.host())
    }
}
