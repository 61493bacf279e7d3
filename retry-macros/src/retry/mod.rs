//! `#[retry(...)]`: parse the arguments ([`args`]), check them ([`valid`]) and the function
//! ([`item`]), then emit the retried function ([`codegen`]).
//!
//! On any error the function is emitted unchanged next to the `compile_error!`s, so that the
//! only errors a user sees are ours, all of them in one compile, and an IDE keeps seeing the
//! function.

mod args;
mod codegen;
mod item;
mod valid;

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;
use crate::function::Function;
use args::Args;
use valid::Options;

/// Expands `#[retry(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    let options = Options::check(args, &mut errors);
    let function = match Function::parse(&item, "retry") {
        Ok(function) => {
            item::check(&function, &mut errors);
            // `#[tool]` below this attribute is still on the function.
            if let Some(conflict) = crate::tool::tool_under_retry(&function) {
                errors.push(conflict);
            }
            Some(function)
        }
        Err(e) => {
            errors.push(e);
            None
        }
    };
    match (function, options) {
        (Some(function), Some(options)) if errors.is_empty() => codegen::expand(function, options),
        _ => {
            let errors = errors.into_compile_errors();
            quote!(#errors #item)
        }
    }
}

#[cfg(test)]
mod tests;
