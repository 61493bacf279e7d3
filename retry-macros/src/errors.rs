//! [`Errors`]: every error of one attribute, collected so that one compile reports them all.

use proc_macro2::TokenStream;

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

    /// The `compile_error!`s, in order.
    pub(crate) fn into_compile_errors(mut self) -> TokenStream {
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
