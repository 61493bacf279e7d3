//! The `#[retry(...)]` attribute of `retry-core`. Use it as `retry_core::retry`.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod retry;

/// Retries an `async fn` returning `Result<_, _>`.
#[proc_macro_attribute]
pub fn retry(
    args: proc_macro::TokenStream,
    item: proc_macro::TokenStream,
) -> proc_macro::TokenStream {
    retry::expand(args.into(), item.into()).into()
}
