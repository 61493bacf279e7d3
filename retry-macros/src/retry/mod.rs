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

use args::Args;
use item::Function;
use valid::Options;

/// Expands `#[retry(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    let options = Options::check(args, &mut errors);
    let function = match syn::parse2::<Function>(item.clone()) {
        Ok(function) => {
            function.check(&mut errors);
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
            let errors = errors.0.iter().map(syn::Error::to_compile_error);
            quote!(#(#errors)* #item)
        }
    }
}

/// Every error of one attribute, reported together.
#[derive(Default)]
pub(crate) struct Errors(Vec<syn::Error>);

impl Errors {
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.0.push(error);
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}
