//! What the durable benches share: the batching settings of their retry-durable rows.

/// The batching settings of the retry-durable rows, from the environment, to compare them in
/// the same build: `DURABLE_PREFETCH` items queued beyond the free slots
/// (`JobsBuilder::prefetch`), `DURABLE_FLUSH_MS` ms that attempt ends may wait to share a
/// write (`JobsBuilder::flush_interval`). Unset: the defaults.
pub(crate) fn batching<S: retry_durable::Store>(
    builder: retry_durable::JobsBuilder<S>,
) -> retry_durable::JobsBuilder<S> {
    let setting = |name| {
        std::env::var(name)
            .ok()
            .map(|v: String| v.parse::<u64>().unwrap_or_else(|_| panic!("{name}")))
    };
    let builder = match setting("DURABLE_PREFETCH") {
        Some(n) => builder.prefetch(u32::try_from(n).expect("DURABLE_PREFETCH")),
        None => builder,
    };
    match setting("DURABLE_FLUSH_MS") {
        Some(ms) => builder.flush_interval(std::time::Duration::from_millis(ms)),
        None => builder,
    }
}
