//! The attributes of [`retry-toolkit`]: `#[retry(...)]`, retried functions whose options are
//! checked while you type, and `#[tool(...)]`, agent tools whose declared effect is checked
//! against how they are used.
//!
//! Use them through `retry_toolkit::retry` and `retry_toolkit::tool` (the default `macros` feature
//! of `retry-toolkit`): one dependency, and the expansion always matches the runtime it calls.
//! The expansion finds `retry-toolkit` under the name your Cargo.toml gives it, so a renamed
//! dependency needs nothing more; `#[tool]` needs retry-toolkit's `effects` feature, and says so
//! when it is off. No features of its own; Rust 1.85 or newer.
//!
//! Retry attributes elsewhere take their numbers on trust: a `0` or a base delay above the
//! ceiling is found at run time, if at all. This one applies the same rules as
//! `RetryOptions::resolve`, with the same messages, at compile time — literals in the macro
//! itself, `const` paths and owner-level defaults through const evaluation — and points at the
//! offending option.
//!
//! [`retry-toolkit`]: https://docs.rs/retry-toolkit

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod errors;
mod function;
mod marks;
mod number;
mod options;
mod retry;
mod tokens;
mod tool;

/// An expansion as a snapshot shows it: pretty-printed, or a panic if it does not parse.
#[cfg(test)]
fn pretty(tokens: proc_macro2::TokenStream) -> String {
    match syn::parse2::<syn::File>(tokens.clone()) {
        Ok(file) => prettyplease::unparse(&file),
        Err(e) => panic!("the expansion does not parse: {e}\n{tokens}"),
    }
}

/// Retries a function returning `Result<_, _>` — an `async fn`, or a plain blocking `fn` —:
/// the body runs again after each error, with exponential backoff and full jitter, until it
/// succeeds or the attempts are used up; the **last** error is returned.
///
/// ```
/// use retry_toolkit::retry;
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
/// On a plain `fn` the loop blocks the calling thread: the same options and checks, with
/// each wait a [`Clock::sleep_blocking`] of the default clock (a surrounding `Scope`'s clock,
/// such as the testkit's mock clock, else a thread sleep). A blocking call cannot be cut
/// short, so `attempt_timeout_ms` is refused there: use `deadline_ms`.
///
/// ```no_run
/// #[derive(Debug)]
/// struct Busy;
///
/// #[retry_toolkit::retry(max_attempts = 4, base_delay_ms = 1, max_delay_ms = 2)]
/// fn read_sensor(reads: &mut u32) -> Result<u32, Busy> {
///     *reads += 1;
///     if *reads < 3 { Err(Busy) } else { Ok(21) }
/// }
///
/// let mut reads = 0;
/// assert_eq!(read_sensor(&mut reads).unwrap(), 21); // after two short waits
/// assert_eq!(reads, 3);
/// ```
///
/// [`Clock::sleep_blocking`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/trait.Clock.html#method.sleep_blocking
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
/// | `retry_after`        | path of a `fn(&E) -> Option<Duration>`         | no hints |
/// | `deadline_ms`        | integer literal or `const` path, `> 0`         | none    |
/// | `attempt_timeout_ms` | integer literal or `const` path, `> 0`         | none    |
/// | `budget`             | path of a `static` `RetryBudget` shared by every call | none |
/// | `breaker`            | path of a `static` `CircuitBreaker` shared by every call | none |
/// | `breaker_counts`     | path of a `fn(&E) -> bool`                     | every error counts |
/// | `defaults`           | path of a `const` [`RetryOptions`] layer        | none    |
/// | `crate`              | string with the path of `retry_toolkit`           | `"::retry_toolkit"` |
///
/// - Integer literals may use `_` separators (`10_000`) and a type suffix their value fits in
///   (`3u32`; `usize` and `isize` are taken as 64-bit). After failed attempt `k` the wait is
///   drawn from `[0, min(2^k · base_delay_ms, max_delay_ms))`.
/// - `when(&error, next_attempt)` is consulted only when another attempt would follow;
///   `false` returns that error at once. `notify(&error, failed_attempt, delay)` is called
///   before each wait.
/// - `retry_after(&error)` reads a server's hint (an HTTP `Retry-After`): `Some(wait)` replaces
///   the computed wait; a hint above the policy's 60 s ceiling, or beyond the deadline, ends
///   the call with that error at once.
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
/// #[retry_toolkit::retry(base_delay_ms = 5000)]
/// async fn fetch() -> Result<(), String> { Ok(()) }
/// ```
///
/// ```text
/// error: retry.base_delay_ms must be <= retry.max_delay_ms
///  --> src/lib.rs:1:37
///   |
/// 1 | #[retry_toolkit::retry(base_delay_ms = 5000)]
///   |                                     ^^^^
/// ```
///
/// The messages are those of [`OptionsError`] (`retry.max_attempts must be >= 1`,
/// `retry.max_attempts must be an integer` for `2.5`, …). A `const` path or a `defaults`
/// layer is checked by const evaluation with the same messages, pointing at the path. A free
/// `const` (`RETRY`, `config::RETRY`) is checked by `cargo check` already; a `const` read
/// through a type (`Self::RETRY`, `T::RETRY`, `Client::RETRY`) when the function is
/// instantiated, i.e. by a build of code that calls it. Unknown
/// or repeated options, values of the wrong kind, a suffixed literal whose value does not fit
/// its suffix (`300u8`), two `#[retry]` on one function (they would multiply the attempts), a
/// function that does not return `Result`, and `attempt_timeout_ms` on a function that is not
/// `async` are errors too, all reported in one compile; the function itself is kept, so that these are the only errors.
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
/// This matches `retry_toolkit::Retry::attempt_timeout`; to stop at a timeout here, let `when`
/// return `false` for `LimitExceeded::AttemptTimeout`.
///
/// ```
/// use retry_toolkit::{LimitExceeded, retry};
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
/// # A budget and a breaker shared by every call
///
/// `budget = STATIC` spends retries from a `retry_toolkit::RetryBudget` that every call of the
/// function (and anything else given it) shares: each call is a request, each retry must be
/// admitted, and a refused retry returns the last error at once. `breaker = STATIC` sends
/// every attempt through a `retry_toolkit::CircuitBreaker`: an attempt it refuses — the first of
/// a call while the circuit is open, or one whose wait ended in a break — becomes the
/// function's error through `From<CircuitOpen>` (so `E` must implement it), and a retry it
/// refuses returns the last error. `breaker_counts = f` says which errors count against the
/// breaker (the others are successes: the dependency answered). The `static`s are built in
/// `const` (`RetryBudget::with_config(…)`, where invalid settings do not compile), or are a
/// `LazyLock` of one for settings known only at run time.
///
/// ```
/// use std::time::Duration;
/// use retry_toolkit::{CircuitBreaker, CircuitOpen, RetryBudget, retry};
///
/// #[derive(Debug)]
/// enum PaymentError {
///     Declined,
///     Unavailable,
///     Refused(CircuitOpen),
/// }
///
/// impl From<CircuitOpen> for PaymentError {
///     fn from(open: CircuitOpen) -> Self {
///         PaymentError::Refused(open)
///     }
/// }
///
/// static PAYMENTS_BUDGET: RetryBudget = RetryBudget::new(); // 20 % + 10/s over 10 s
/// static PAYMENTS: CircuitBreaker = CircuitBreaker::with_config(
///     match CircuitBreaker::builder().name("payments").consecutive_failures(3).validate() {
///         Ok(config) => config,
///         Err(e) => panic!("{}", e.message()),
///     },
/// );
///
/// fn is_outage(error: &PaymentError) -> bool {
///     matches!(error, PaymentError::Unavailable)
/// }
///
/// #[retry(budget = PAYMENTS_BUDGET, breaker = PAYMENTS, breaker_counts = is_outage)]
/// async fn charge(cents: u64) -> Result<(), PaymentError> {
///     if cents > 0 { Err(PaymentError::Unavailable) } else { Err(PaymentError::Declined) }
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
/// assert!(matches!(charge(100).await, Err(PaymentError::Unavailable))); // 3 failures: open
/// assert!(matches!(charge(100).await, Err(PaymentError::Refused(_)))); // not sent
/// # }
/// ```
///
/// # Time
///
/// Waits go through `retry_toolkit::DefaultClock`: tokio's timer (so
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
/// expands to (simplified: the real paths go through a hidden module of `retry_toolkit`)
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
/// A function that borrows nothing mutably (no `&mut` argument, a `&self` receiver or none)
/// needs no such loop, and gets the closure form itself: each attempt's future is built by
/// `move || { let message = message.clone(); async move { … } }`, handed to the driver's
/// `run`, so that a first attempt that succeeds costs what it costs under `policy.retry`.
///
/// [`RetryOptions`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/struct.RetryOptions.html
/// [`OptionsError`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/enum.OptionsError.html
/// [`LimitExceeded`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/enum.LimitExceeded.html
/// [`Scope`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/struct.Scope.html
#[proc_macro_attribute]
pub fn retry(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    retry::expand(args.into(), item.into()).into()
}

/// Declares an `async fn` as an agent tool: its name, its effect, and a type the tool runner
/// calls it through. The function itself stays as written.
///
/// ```
/// use retry_toolkit::effects::{
///     CallKey, IdempotencyKey, MemoryLedger, ToolCall, ToolEffect, ToolRunner, Toolbox,
/// };
/// use retry_toolkit::tool;
/// use serde_json::json;
///
/// /// Saves a note under the call's idempotency key: a repeat overwrites the same note.
/// #[tool(effect = "idempotent-write")]
/// async fn save_note(title: String, body: String, key: IdempotencyKey) -> Result<String, String> {
///     // An upsert keyed by `key` downstream.
///     Ok(format!("saved `{title}` ({} bytes) as {key}", body.len()))
/// }
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// assert_eq!(save_note::TOOL_SPEC.effect(), ToolEffect::IdempotentWrite);
/// let runner = ToolRunner::new(MemoryLedger::new(), Toolbox::new().with(save_note {})?);
///
/// let args = json!({ "title": "trip", "body": "pack sunscreen" });
/// let call = ToolCall::new(CallKey::new("run-1", "call-1")?, "save_note", args);
/// let outcome = runner.call(call).await?;
/// let result = outcome.result().map(|r| r.outcome.clone());
/// assert_eq!(result, Some(Ok(json!("saved `trip` (14 bytes) as run-1:call-1"))));
/// # Ok(()) }
/// ```
///
/// # What it declares
///
/// Next to the function, a type **of the same name**: `save_note {}` is the tool, to register
/// in a [`Toolbox`], and `save_note::TOOL_SPEC` its [`ToolSpec`]. The type implements [`Tool`] by
/// calling the function; the function keeps its signature and can be called directly, in tests
/// for instance. A braced struct lives in the type namespace only, so the two names do not
/// clash — and no name is made up that could collide with one of yours (a `Weather` output
/// type beside a `weather` tool).
///
/// # Options
///
/// | option              | value                                                | default |
/// |---------------------|------------------------------------------------------|---------|
/// | `effect`            | `"read"`, `"idempotent-write"`, `"side-effect"`      | `"side-effect"` |
/// | `name`              | string, 1 to 64 of `A-Z a-z 0-9 _ -`                 | the function's name |
/// | `requires_approval` | `true` or `false`: every call waits for a decision   | `false` |
/// | `timeout_ms`        | integer literal or `const` path, `> 0`               | none    |
/// | `crate`             | string with the path of `retry_toolkit`                 | `"::retry_toolkit"` |
///
/// A tool that declares no effect is a side effect: a forgotten declaration costs a manual
/// reconciliation after a crash, never a second e-mail.
///
/// # Arguments
///
/// A model calls a tool with a JSON object; each parameter of the function is one field of it,
/// by the parameter's name (`r#type` is the field `type`). So `save_note` above is called with
/// `{"title": "…", "body": "…"}`:
///
/// - a field may be left out only if its type is an `Option`; an unknown field is refused,
///   so that a misspelt one is an error the model reads instead of a value silently ignored;
///   serde also accepts the fields as an array, in parameter order;
/// - a borrowed parameter is read owned and lent to the function: `&str` from a `String`,
///   `&[u8]` from a `Vec<u8>`, `&T` from its `ToOwned::Owned`;
/// - a parameter of type `IdempotencyKey` gets the call's stable key `"{run_id}:{call_id}"`,
///   one of type `ToolContext` the call's context (both also by reference); they are not read
///   from the JSON. They are recognised by the type's name as written.
///
/// Arguments that do not fit end the call with an `InvalidInput` failure before the function
/// runs. The return type is `Result<T, E>` (or an alias named `Result`): `T` is stored as JSON
/// and must implement `serde::Serialize`, `E`'s `Display` is what the model reads.
///
/// # Checked at compile time
///
/// An unknown effect lists the three, with a guess when one is close:
///
/// ```compile_fail
/// #[retry_toolkit::tool(effect = "idempotent_write")]
/// async fn save_note(key: retry_toolkit::effects::IdempotencyKey) -> Result<(), String> { Ok(()) }
/// ```
///
/// ```text
/// error: unknown tool effect `idempotent_write`: did you mean `idempotent-write`? Expected one of `read`, `idempotent-write`, `side-effect`
/// ```
///
/// An `idempotent-write` tool must take the idempotency key (and not bind it to `_`): the
/// runtime derives a key that stays the same on every attempt of a call, but a key the tool
/// does not pass on deduplicates nothing.
///
/// ```compile_fail
/// #[retry_toolkit::tool(effect = "idempotent-write")]
/// async fn save_note(title: String) -> Result<(), String> { Ok(()) }
/// ```
///
/// A side-effect tool — declared, or by default — cannot be wrapped in `#[retry]`, in either
/// order of the two attributes and however either is spelled (imported under another name,
/// reached by another path, behind `cfg_attr`): a retry may repeat an effect that already
/// happened when only its answer was lost. Declare it `idempotent-write` and pass the key on,
/// or leave an unknown outcome to reconciliation. The check does not go by names: `#[retry]`
/// leaves a mark in the body it generates, and `#[tool]` looks for it once every other
/// attribute on the function has expanded. The tool's descriptor records whether its function
/// retries (`ToolSpec::retries_internally`), and a [`Toolbox`] refuses a side effect that
/// does.
///
/// ```compile_fail
/// #[retry_toolkit::retry]
/// #[retry_toolkit::tool]
/// async fn send_email(to: String) -> Result<(), String> { Ok(()) }
/// ```
///
/// A read or an idempotent write may be retried: the retries happen inside one call of the
/// runner, with the same key.
///
/// ```
/// use retry_toolkit::effects::IdempotencyKey;
/// use retry_toolkit::{retry, tool};
///
/// #[tool(effect = "idempotent-write")]
/// #[retry(max_attempts = 3)]
/// async fn upsert_row(row: u64, key: &IdempotencyKey) -> Result<u64, String> {
///     Ok(row) // `key` goes to the database's unique column
/// }
/// ```
///
/// Invalid names, a zero timeout, unknown or repeated options, a function that is not `async`
/// or does not return `Result` are errors too, all reported in one compile; the function is
/// kept, so that these are the only errors.
///
/// # Not supported
///
/// Each of these is a compile error that says so:
///
/// - methods (`&self`, `self`…): the tool is a value of its own, with nothing to call the
///   method on. For a tool with state, implement [`Tool`] for the type that holds it, or give
///   `tool_fn` a closure that captures it. An associated function in an `impl` block fails
///   too (rustc: "struct is not supported in `impl`s"): the tool's type cannot be declared
///   there;
/// - type and const parameters, and `impl Trait` arguments: a tool has one set of
///   arguments read from JSON; declare one tool per concrete type;
/// - parameters bound by a pattern (`(a, b): (i64, i64)`, `_: bool`): an argument needs the
///   name the model passes it by;
/// - `unsafe fn`, variadics.
///
/// # Equivalent code
///
/// ```ignore
/// #[tool(effect = "read", timeout_ms = 5_000)]
/// async fn lookup(city: &str, ctx: ToolContext) -> Result<Forecast, WeatherError> { /* … */ }
/// ```
///
/// expands to (simplified: the real paths go through a hidden module of `retry_toolkit`)
///
/// ```ignore
/// async fn lookup(city: &str, ctx: ToolContext) -> Result<Forecast, WeatherError> { /* … */ }
///
/// struct lookup {}
///
/// impl lookup {
///     const TOOL_SPEC: ToolSpec = ToolSpec::new("lookup")
///         .with_effect(ToolEffect::Read)
///         .with_timeout(Duration::from_millis(5000));
/// }
///
/// #[derive(Deserialize)]
/// #[serde(deny_unknown_fields)]
/// struct Args { city: String }
///
/// impl Tool for lookup {
///     type Args = Args;
///     type Output = Forecast;
///     type Error = WeatherError;
///
///     fn spec(&self) -> ToolSpec { Self::TOOL_SPEC }
///
///     async fn call(&self, args: Args, ctx: ToolContext) -> Result<Forecast, WeatherError> {
///         lookup(&args.city, ctx).await
///     }
/// }
/// ```
///
/// [`Toolbox`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/effects/struct.Toolbox.html
/// [`ToolSpec`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/effects/struct.ToolSpec.html
/// [`Tool`]: https://docs.rs/retry-toolkit/latest/retry_toolkit/effects/trait.Tool.html
#[proc_macro_attribute]
pub fn tool(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    tool::expand(args.into(), item.into()).into()
}

/// Not public API: `#[tool]` as retry-toolkit exports it without its `effects` feature, where the
/// runtime the real attribute expands to does not exist. One error that names the feature and
/// the Cargo line, instead of one per private item the expansion would name; the function is
/// kept as written, so that its callers raise nothing more.
#[doc(hidden)]
#[proc_macro_attribute]
pub fn __tool_without_effects(
    _args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    let message = tokens::without_effects_message();
    let item = proc_macro2::TokenStream::from(item);
    quote::quote!(::core::compile_error!(#message); #item).into()
}

/// Not public API: what `#[tool]` leaves on its function to run after the function's other
/// attributes (`retry_toolkit::__private_0_1::tool_check`).
#[doc(hidden)]
#[proc_macro_attribute]
pub fn __tool_check(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    tool::expand_check(args.into(), item.into()).into()
}
