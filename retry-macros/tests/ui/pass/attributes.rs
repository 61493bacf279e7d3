//! Docs, attributes and visibility stay as written; `crate = "…"` finds a renamed runtime.
#![deny(warnings, missing_docs)]

extern crate retry_toolkit as resilience;

/// Items whose docs and visibility `#[retry]` must keep.
pub mod api {
    /// Fetches something; `#[must_use]` and the docs survive the expansion.
    #[must_use = "the fetch does nothing unless awaited"]
    #[resilience::retry(crate = "resilience", max_attempts = 2)]
    #[cfg_attr(all(), inline)]
    pub async fn fetch(id: u64) -> Result<u64, String> {
        #![allow(clippy::needless_return)]
        return Ok(id);
    }

    /// Only visible inside the crate.
    #[resilience::retry]
    pub(crate) async fn internal() -> Result<(), String> {
        Ok(())
    }
}

fn main() {
    drop(api::fetch(1));
    drop(api::internal());
}
