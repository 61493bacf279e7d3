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
    pub(crate) fn of<B>(request: &Request<B>) -> Self {
        Target {
            method: request.method().clone(),
            uri: request.uri().clone(),
        }
    }

    /// This target, leaving a placeholder (`GET /`) in its place: for an owner that needs
    /// it no more, so that it moves where it goes without a copy.
    pub(crate) fn take(&mut self) -> Target {
        std::mem::replace(
            self,
            Target {
                method: Method::GET,
                uri: Uri::from_static("/"),
            },
        )
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
