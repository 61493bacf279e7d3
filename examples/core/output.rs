//! Where the simulators write their charts when `--svg` is not given.

use std::path::PathBuf;

/// `NAME` in the build's target directory: `$CARGO_TARGET_DIR` when it is set (cargo builds
/// there, so that is where a user looks), else the workspace's `target/`.
pub(crate) fn default_chart(name: &str) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|dir| !dir.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../target")))
        .join(name)
}
