//! The function under `#[retry]`: parsed just enough to re-emit it, and checked for the shape
//! a retried body needs (an `async fn`, a `Result`, a receiver that can be lent to every
//! attempt).

use proc_macro2::TokenStream;
use syn::parse::{Parse, ParseStream};
use syn::{Attribute, FnArg, ReceiverKind, ReturnType, Signature, Type, Visibility, braced};

use super::Errors;

/// An `async fn` item, its body kept as tokens: only the signature is looked at.
pub(crate) struct Function {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// `#![…]` attributes at the top of the body: they belong to the function.
    pub(crate) inner_attrs: Vec<Attribute>,
    /// The statements of the body, untouched.
    pub(crate) body: TokenStream,
}

impl Parse for Function {
    fn parse(input: ParseStream<'_>) -> syn::Result<Self> {
        let attrs = input.call(Attribute::parse_outer)?;
        let vis: Visibility = input.parse()?;
        let sig: Signature = input.parse()?;
        if input.peek(syn::Token![;]) {
            let semi: syn::Token![;] = input.parse()?;
            return Err(syn::Error::new_spanned(
                semi,
                "`#[retry]` needs the function's body: put it on the implementation, not on a declaration without one",
            ));
        }
        let content;
        braced!(content in input);
        let inner_attrs = content.call(Attribute::parse_inner)?;
        let body: TokenStream = content.parse()?;
        Ok(Function {
            attrs,
            vis,
            sig,
            inner_attrs,
            body,
        })
    }
}

impl Function {
    /// Records every reason this function cannot be retried as written.
    pub(crate) fn check(&self, errors: &mut Errors) {
        let sig = &self.sig;
        if sig.asyncness.is_none() {
            errors.push(not_async(sig));
            if from_async_trait(sig) {
                return;
            }
        }
        if let Err(e) = result_type(sig) {
            errors.push(e);
        }
        for input in &sig.inputs {
            let FnArg::Receiver(receiver) = input else {
                continue;
            };
            let borrowed = match &receiver.kind {
                ReceiverKind::Reference(..) => true,
                ReceiverKind::Typed(_, ty) => matches!(peel(ty), Type::Reference(_)),
                _ => false,
            };
            if !borrowed {
                errors.push(syn::Error::new_spanned(
                    receiver,
                    "`#[retry]` runs the body once per attempt, so it cannot take `self` by value: take `&self` or `&mut self`",
                ));
            }
        }
        if let Some(variadic) = &sig.variadic {
            errors.push(syn::Error::new_spanned(
                variadic,
                "`#[retry]` does not support variadic functions",
            ));
        }
    }
}

/// A function that is not `async`, with a special word for `#[async_trait]`'s output.
fn not_async(sig: &Signature) -> syn::Error {
    let message = if from_async_trait(sig) {
        "`#[retry]` does not support `#[async_trait]` methods: `#[async_trait]` has already turned this `async fn` into a boxed future. Use an `async fn` in the trait (stable since Rust 1.75) or call a `#[retry]` inherent method from this one"
    } else {
        "`#[retry]` works on an `async fn` only: add `async`, or retry a future yourself with `RetryPolicy::retry`"
    };
    syn::Error::new_spanned(sig.fn_token, message)
}

/// Whether `#[async_trait]` already rewrote this method: it runs first (it is on the `impl`),
/// and turns each `async fn` into a `fn` returning `Pin<Box<dyn Future …>>` with an
/// `'async_trait` lifetime.
fn from_async_trait(sig: &Signature) -> bool {
    sig.generics
        .lifetimes()
        .any(|l| l.lifetime.ident == "async_trait")
}

/// The return type must read as a `Result`: `Result<T, E>`, or an alias named `Result`
/// (`io::Result<T>`, `anyhow::Result<T>`).
fn result_type(sig: &Signature) -> syn::Result<()> {
    let ty = match &sig.output {
        ReturnType::Default => {
            return Err(syn::Error::new(
                sig.ident.span(),
                "`#[retry]` needs the function to return `Result<_, _>`: an error is what tells it to try again",
            ));
        }
        ReturnType::Type(_, ty) => ty,
    };
    if let Type::Path(path) = peel(ty) {
        if path.qself.is_none()
            && path
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "Result")
        {
            return Ok(());
        }
    }
    Err(syn::Error::new_spanned(
        ty,
        "`#[retry]` needs the function to return `Result<_, _>` (or an alias named `Result`, such as `io::Result<_>`): an error is what tells it to try again",
    ))
}

/// The type inside any parentheses or invisible groups.
pub(crate) fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(inner) => peel(&inner.elem),
        Type::Group(inner) => peel(&inner.elem),
        other => other,
    }
}
