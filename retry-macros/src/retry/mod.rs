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

use proc_macro2::{Span, TokenStream};
use quote::quote;

use crate::errors::Errors;
use crate::function::Function;
use crate::marks;
use args::Args;
use valid::Options;

/// Expands `#[retry(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    // Where `__private` is, if the options said so without an error: needed for the mark
    // left on a function kept unchanged.
    let private = errors
        .is_empty()
        .then(|| crate::tokens::private(args.krate.as_ref().map(|opt| &opt.value)));
    let options = Options::check(args, &mut errors);
    let function = match Function::parse(&item, "retry") {
        Ok(function) => {
            item::check(&function, options.as_ref(), &mut errors);
            // Another `#[retry]`, however spelled, expanded before this one.
            if marks::retried(&item) {
                errors.push(syn::Error::new(Span::call_site(), STACKED));
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
        (function, _) => {
            let errors = errors.into_compile_errors();
            // Still marked as retried, so that a `#[tool]` or `#[retry]` expanding after this
            // one reports its conflict in the same compile.
            let item = match (function, private) {
                (Some(_), Some(private)) => {
                    marks::insert_in_body(item, marks::retry_applied(&private))
                }
                _ => item,
            };
            quote!(#errors #item)
        }
    }
}

/// Two `#[retry]` on one function.
const STACKED: &str = "this function is already under another `#[retry]`: stacked, they multiply the attempts (two with `max_attempts = 3` run the body up to 9 times). \
     Keep one `#[retry]` and set its `max_attempts` to the total number of runs you want";

#[cfg(test)]
mod tests;
