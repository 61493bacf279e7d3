//! `#[tool(...)]`: parse the arguments ([`args`]), check them together with the function
//! ([`valid`]), then emit the function and its tool ([`codegen`]).
//!
//! On any error the function is emitted unchanged next to the `compile_error!`s, so that the
//! only errors a user sees are ours, all of them in one compile, and an IDE keeps seeing the
//! function.

mod args;
mod codegen;
mod valid;

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;
use crate::function::Function;
use args::Args;
use valid::Tool;

pub(crate) use valid::tool_under_retry;

/// Expands `#[tool(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    let checked = match Function::parse(&item, "tool") {
        Ok(function) => Tool::check(args, &function, &mut errors).map(|tool| (function, tool)),
        Err(e) => {
            errors.push(e);
            None
        }
    };
    match checked {
        Some((function, tool)) if errors.is_empty() => codegen::expand(item, &function, tool),
        _ => {
            let errors = errors.into_compile_errors();
            quote!(#errors #item)
        }
    }
}

#[cfg(test)]
mod tests;
