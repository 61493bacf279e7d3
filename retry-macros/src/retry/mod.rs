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
            errors.push(not_a_function(&item).unwrap_or(e));
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

/// Our own word when the item is not a function at all (syn would say "expected `fn`").
fn not_a_function(item: &TokenStream) -> Option<syn::Error> {
    let is_fn = item
        .clone()
        .into_iter()
        .any(|t| matches!(&t, proc_macro2::TokenTree::Ident(i) if i == "fn"));
    (!is_fn).then(|| {
        syn::Error::new_spanned(
            item,
            "`#[retry]` goes on an `async fn` returning `Result<_, _>`",
        )
    })
}

/// Every error of one attribute, reported together, in the order of what they point at:
/// the options as written, then the function.
#[derive(Default)]
pub(crate) struct Errors(Vec<(usize, syn::Error)>);

impl Errors {
    /// An error about the option at `index` in the attribute.
    pub(crate) fn push_at(&mut self, index: usize, error: syn::Error) {
        self.0.push((index, error));
    }

    /// An error about the attribute's syntax or the function: after the options' own.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.0.push((usize::MAX, error));
    }

    fn into_compile_errors(mut self) -> TokenStream {
        self.0.sort_by_key(|(index, _)| *index);
        self.0.iter().map(|(_, e)| e.to_compile_error()).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests;
