//! The function under an attribute: parsed just enough to look at its signature and re-emit
//! it, with the checks both attributes make on it.

use proc_macro2::TokenStream;
use syn::parse::{ParseStream, Parser};
use syn::{Attribute, ReturnType, Signature, Type, Visibility, braced};

/// A function item, its body kept as tokens: only the signature is looked at.
pub(crate) struct Function {
    pub(crate) attrs: Vec<Attribute>,
    pub(crate) vis: Visibility,
    pub(crate) sig: Signature,
    /// `#![…]` attributes at the top of the body: they belong to the function.
    pub(crate) inner_attrs: Vec<Attribute>,
    /// The statements of the body, untouched.
    pub(crate) body: TokenStream,
}

impl Function {
    /// Parses the item under `#[{attr}]`: a function with a body, or our own word for what it
    /// is instead (syn would say "expected `fn`").
    pub(crate) fn parse(item: &TokenStream, attr: &str) -> syn::Result<Function> {
        let parse = |input: ParseStream<'_>| parse_function(input, attr);
        parse.parse2(item.clone()).map_err(|e| {
            let is_fn = item
                .clone()
                .into_iter()
                .any(|t| matches!(&t, proc_macro2::TokenTree::Ident(i) if i == "fn"));
            if is_fn {
                e
            } else {
                syn::Error::new_spanned(
                    item,
                    format!("`#[{attr}]` goes on an `async fn` returning `Result<_, _>`"),
                )
            }
        })
    }
}

fn parse_function(input: ParseStream<'_>, attr: &str) -> syn::Result<Function> {
    let attrs = input.call(Attribute::parse_outer)?;
    let vis: Visibility = input.parse()?;
    let sig: Signature = input.parse()?;
    if input.peek(syn::Token![;]) {
        let semi: syn::Token![;] = input.parse()?;
        return Err(syn::Error::new_spanned(
            semi,
            format!(
                "`#[{attr}]` needs the function's body: put it on the implementation, not on a declaration without one"
            ),
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

/// Whether `#[async_trait]` already rewrote this method: it runs first (it is on the `impl`),
/// and turns each `async fn` into a `fn` returning `Pin<Box<dyn Future …>>` with an
/// `'async_trait` lifetime.
pub(crate) fn from_async_trait(sig: &Signature) -> bool {
    sig.generics
        .lifetimes()
        .any(|l| l.lifetime.ident == "async_trait")
}

/// Why a return type is not a `Result`.
pub(crate) enum NotResult<'a> {
    /// No return type at all: spanned on the function's name.
    Missing,
    /// Another type: spanned on it.
    Other(&'a Type),
}

/// The return type, if it reads as a `Result`: `Result<T, E>`, or an alias named `Result`
/// (`io::Result<T>`, `anyhow::Result<T>`).
pub(crate) fn result_type(sig: &Signature) -> Result<&Type, NotResult<'_>> {
    let ty = match &sig.output {
        ReturnType::Default => return Err(NotResult::Missing),
        ReturnType::Type(_, ty) => ty,
    };
    match peel(ty) {
        Type::Path(path)
            if path.qself.is_none()
                && path
                    .path
                    .segments
                    .last()
                    .is_some_and(|s| s.ident == "Result") =>
        {
            Ok(ty)
        }
        _ => Err(NotResult::Other(ty)),
    }
}

impl NotResult<'_> {
    /// The error for `sig`, with the attribute's own `why`.
    pub(crate) fn error(&self, sig: &Signature, attr: &str, why: &str) -> syn::Error {
        match self {
            NotResult::Missing => syn::Error::new(
                sig.ident.span(),
                format!("`#[{attr}]` needs the function to return `Result<_, _>`: {why}"),
            ),
            NotResult::Other(ty) => syn::Error::new_spanned(
                ty,
                format!(
                    "`#[{attr}]` needs the function to return `Result<_, _>` (or an alias named `Result`, such as `io::Result<_>`): {why}"
                ),
            ),
        }
    }
}

/// The type inside any parentheses or invisible groups.
pub(crate) fn peel(ty: &Type) -> &Type {
    match ty {
        Type::Paren(inner) => peel(&inner.elem),
        Type::Group(inner) => peel(&inner.elem),
        other => other,
    }
}
