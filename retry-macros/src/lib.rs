//! The `#[retry(...)]` attribute of [`retry-core`]: retried `async fn`s whose options are
//! checked while you type.
//!
//! Use it through `retry_core::retry` (the default `macros` feature of `retry-core`): one
//! dependency, and the expansion always matches the runtime it calls.
//!
//! Retry attributes elsewhere take their numbers on trust: a `0` or a base delay above the
//! ceiling is found at run time, if at all. This one applies the same rules as
//! `RetryOptions::resolve`, with the same messages, at compile time — literals in the macro
//! itself, `const` paths and owner-level defaults through const evaluation — and points at the
//! offending option.
//!
//! [`retry-core`]: https://docs.rs/retry-core

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod errors;
mod function;
mod number;
mod options;
mod retry;
mod tokens;
mod tool;

/// Retries an `async fn` returning `Result<_, _>`: the body runs again after each error,
/// with exponential backoff and full jitter, until it succeeds or the attempts are used up;
/// the **last** error is returned.
///
/// ```
/// use retry_core::retry;
///
/// #[derive(Debug)]
/// struct Unavailable;
///
/// #[retry(max_attempts = 5, base_delay_ms = 500, max_delay_ms = 10_000)]
/// async fn fetch(attempts: &mut u32) -> Result<&'static str, Unavailable> {
///     *attempts += 1;
///     if *attempts < 3 { Err(Unavailable) } else { Ok("payload") }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let mut attempts = 0;
/// assert_eq!(fetch(&mut attempts).await.unwrap(), "payload");
/// assert_eq!(attempts, 3);
/// # }
/// ```
///
/// # Options
///
/// Every option is optional; a bare `#[retry]` uses the built-in values.
///
/// | option               | value                                          | default |
/// |----------------------|------------------------------------------------|---------|
/// | `max_attempts`       | integer literal or `const` path, `>= 1`        | 3       |
/// | `base_delay_ms`      | integer literal or `const` path, `> 0`         | 100     |
/// | `max_delay_ms`       | integer literal or `const` path, `>= base`     | 3000    |
/// | `jitter`             | `"full"`, `"equal"`, `"decorrelated"`, `"none"` | `"full"` |
/// | `when`               | path of a `fn(&E, u32) -> bool`                | retry every error |
/// | `notify`             | path of a `fn(&E, u32, Duration)`              | none (`tracing` only) |
/// | `deadline_ms`        | integer literal or `const` path, `> 0`         | none    |
/// | `attempt_timeout_ms` | integer literal or `const` path, `> 0`         | none    |
/// | `defaults`           | path of a `const` [`RetryOptions`] layer        | none    |
/// | `crate`              | string with the path of `retry_core`           | `"::retry_core"` |
///
/// - Integer literals may use `_` separators (`10_000`). After failed attempt `k` the wait is
///   drawn from `[0, min(2^k · base_delay_ms, max_delay_ms))`.
/// - `when(&error, next_attempt)` is consulted only when another attempt would follow;
///   `false` returns that error at once. `notify(&error, failed_attempt, delay)` is called
///   before each wait.
/// - `defaults = PATH` names an owner-level layer, typically an associated `const` such as
///   `Self::RETRY`; the attribute's options win field by field, and the merged options are
///   checked as a whole (`RetryOptions::or`).
///
/// # Checked at compile time
///
/// Each literal is checked against its own rule, then the merged options against
/// `base_delay_ms <= max_delay_ms` — after layering over the built-in values, so this fails
/// because the built-in ceiling is 3000 ms:
///
/// ```compile_fail
/// #[retry_core::retry(base_delay_ms = 5000)]
/// async fn fetch() -> Result<(), String> { Ok(()) }
/// ```
///
/// ```text
/// error: retry.base_delay_ms must be <= retry.max_delay_ms
///  --> src/lib.rs:1:37
///   |
/// 1 | #[retry_core::retry(base_delay_ms = 5000)]
///   |                                     ^^^^
/// ```
///
/// The messages are those of [`OptionsError`] (`retry.max_attempts must be >= 1`,
/// `retry.max_attempts must be an integer` for `2.5`, …). A `const` path or a `defaults`
/// layer is checked by const evaluation with the same messages, pointing at the path. A free
/// `const` (`RETRY`, `config::RETRY`) is checked by `cargo check` already; a `const` read
/// through a type (`Self::RETRY`, `T::RETRY`, `Client::RETRY`) when the function is
/// instantiated, i.e. by a build of code that calls it. Unknown
/// or repeated options, values of the wrong kind, a function that is not `async` or does not
/// return `Result` are errors too, all reported in one compile; the function itself is kept,
/// so that these are the only errors.
///
/// # Signatures
///
/// The signature, docs, attributes and visibility stay as written; only the body changes.
/// Methods (`&self`, `&mut self`), generics, `impl Trait` arguments, where clauses and
/// borrowed arguments work as usual, and `return` or `?` in the body end the current attempt.
/// An argument taken **by value** is cloned for each attempt, because an attempt may consume
/// it: it must be `Clone`, or be borrowed instead. `self` by value is refused for the same
/// reason.
///
/// `async fn` in traits works (on an implementation, or on a default body). `#[async_trait]`
/// methods are refused with a message: that attribute has already turned the method into a
/// boxed future by the time `#[retry]` sees it.
///
/// # Limits
///
/// `deadline_ms` bounds the whole call, attempts and waits together; `attempt_timeout_ms`
/// drops an attempt that runs longer. The function keeps its declared `Result<T, E>`, so a
/// limit reaches the caller as `E::from(`[`LimitExceeded`]`)`, and `E` must implement
/// `From<LimitExceeded>`. A timed-out attempt fails like any other attempt (`when` and
/// `notify` see it, and it is retried while attempts remain); the deadline ends the call.
///
/// ```
/// use retry_core::{LimitExceeded, retry};
///
/// #[derive(Debug, PartialEq)]
/// enum FetchError {
///     Unavailable,
///     Limit(LimitExceeded),
/// }
///
/// impl From<LimitExceeded> for FetchError {
///     fn from(limit: LimitExceeded) -> Self {
///         FetchError::Limit(limit)
///     }
/// }
///
/// #[retry(max_attempts = 10, deadline_ms = 1_000, attempt_timeout_ms = 200)]
/// async fn fetch() -> Result<(), FetchError> {
///     std::future::pending().await // never answers
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// let error = fetch().await.unwrap_err();
/// assert!(matches!(error, FetchError::Limit(LimitExceeded::DeadlineExceeded { .. })));
/// # }
/// ```
///
/// # Time
///
/// Waits go through `retry_core::DefaultClock`: tokio's timer (so
/// `#[tokio::test(start_paused = true)]` makes them instant), or the clock and seed of an
/// enclosing [`Scope`], so a test can drive a function under `#[retry]` on a mock clock
/// without changing its signature.
///
/// # Equivalent code
///
/// ```ignore
/// #[retry(max_attempts = 5, when = is_transient)]
/// async fn send(&mut self, message: String) -> Result<Receipt, SendError> {
///     self.connection.send(&message).await
/// }
/// ```
///
/// expands to (simplified: the real paths go through `retry_core::__private`)
///
/// ```ignore
/// async fn send(&mut self, message: String) -> Result<Receipt, SendError> {
///     // Checked and computed at compile time: no validation at run time.
///     const POLICY: RetryPolicy = must(RetryOptions::new().with_max_attempts(5).resolve());
///     let mut driver = Driver::<SendError>::new(POLICY).when(is_transient);
///     loop {
///         let message = message.clone(); // owned arguments: one copy per attempt
///         match driver.attempt(async { self.connection.send(&message).await }).await {
///             ControlFlow::Break(result) => return result, // a value, or the last error
///             ControlFlow::Continue(()) => {}              // waited; try again
///         }
///     }
/// }
/// ```
///
/// which behaves like the closure-based loop
///
/// ```ignore
/// policy.retry(|_| async { self.connection.send(&message).await }).when(is_transient).await
/// ```
///
/// — same decisions, same delays for the same seed, same cost — except that it compiles for
/// `&mut self`, which a closure called once per attempt cannot lend to each attempt's future.
///
/// [`RetryOptions`]: https://docs.rs/retry-core/latest/retry_core/struct.RetryOptions.html
/// [`OptionsError`]: https://docs.rs/retry-core/latest/retry_core/enum.OptionsError.html
/// [`LimitExceeded`]: https://docs.rs/retry-core/latest/retry_core/enum.LimitExceeded.html
/// [`Scope`]: https://docs.rs/retry-core/latest/retry_core/struct.Scope.html
#[proc_macro_attribute]
pub fn retry(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    retry::expand(args.into(), item.into()).into()
}

/// Declares an `async fn` as an agent tool with a declared effect.
#[proc_macro_attribute]
pub fn tool(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    tool::expand(args.into(), item.into()).into()
}
