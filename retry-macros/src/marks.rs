//! What one attribute's expansion leaves for the other to find, so that `#[retry]` over a
//! side-effect `#[tool]`, and `#[retry]` twice, are refused however each attribute is spelled:
//! renamed with `use … as`, reached by another path, or behind `cfg_attr`. A macro cannot see
//! the name another attribute was imported under, but it sees what that attribute's expansion
//! produced.
//!
//! - `#[retry]` puts `const _: __private::RetryApplied = __private::RetryApplied;` at the top
//!   of the body it generates (and of the function it keeps on an error), so a `#[tool]` or a
//!   second `#[retry]` expanding after it finds the mark in the function it is handed.
//! - `#[tool]` appends `#[__private::tool_check(…)]` to the function's attributes: after every
//!   attribute still to expand there, so it runs last and sees the mark of a `#[retry]` that
//!   was written below `#[tool]`.

use proc_macro2::{Delimiter, Group, TokenStream, TokenTree};
use quote::quote;

/// The name of the mark's type in `__private`.
const RETRY_APPLIED: &str = "RetryApplied";

/// The statement `#[retry]` leaves at the top of a body.
pub(crate) fn retry_applied(private: &TokenStream) -> TokenStream {
    quote!(const _: #private::RetryApplied = #private::RetryApplied;)
}

/// Whether `#[retry]` already expanded on this item: its mark, `__private::RetryApplied`, is
/// somewhere in it (another attribute macro in between may have moved the body).
pub(crate) fn retried(item: &TokenStream) -> bool {
    let tokens: Vec<TokenTree> = item.clone().into_iter().collect();
    tokens.iter().enumerate().any(|(i, token)| match token {
        TokenTree::Group(group) => retried(&group.stream()),
        TokenTree::Ident(ident) if ident == RETRY_APPLIED && i >= 3 => {
            matches!(&tokens[i - 1], TokenTree::Punct(p) if p.as_char() == ':')
                && matches!(&tokens[i - 2], TokenTree::Punct(p) if p.as_char() == ':')
                && matches!(&tokens[i - 3], TokenTree::Ident(p) if p == crate::tokens::PRIVATE)
        }
        _ => false,
    })
}

/// `item`, a function, with `statement` first in its body (after the body's `#![…]`). Every
/// other token keeps its span, the body's braces included.
pub(crate) fn insert_in_body(item: TokenStream, statement: TokenStream) -> TokenStream {
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    if let Some(TokenTree::Group(body)) = tokens.last_mut() {
        if body.delimiter() == Delimiter::Brace {
            let inner: Vec<TokenTree> = body.stream().into_iter().collect();
            let at = after_attributes(&inner, true);
            let stream: TokenStream = inner[..at]
                .iter()
                .cloned()
                .chain(statement)
                .chain(inner[at..].iter().cloned())
                .collect();
            let mut new = Group::new(Delimiter::Brace, stream);
            new.set_span(body.span());
            *body = new;
        }
    }
    tokens.into_iter().collect()
}

/// `item` with `attribute` after its outer attributes, every token keeping its span.
pub(crate) fn append_attribute(item: TokenStream, attribute: TokenStream) -> TokenStream {
    let tokens: Vec<TokenTree> = item.into_iter().collect();
    let at = after_attributes(&tokens, false);
    tokens[..at]
        .iter()
        .cloned()
        .chain(attribute)
        .chain(tokens[at..].iter().cloned())
        .collect()
}

/// The index after the leading `#[…]` (or, `inner`, `#![…]`) attributes of `tokens`.
fn after_attributes(tokens: &[TokenTree], inner: bool) -> usize {
    let width = if inner { 3 } else { 2 };
    let mut at = 0;
    loop {
        let is_hash = matches!(tokens.get(at), Some(TokenTree::Punct(p)) if p.as_char() == '#');
        let bang =
            !inner || matches!(tokens.get(at + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!');
        let bracket = matches!(
            tokens.get(at + width - 1),
            Some(TokenTree::Group(g)) if g.delimiter() == Delimiter::Bracket
        );
        if !(is_hash && bang && bracket) {
            return at;
        }
        at += width;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mark_is_found_anywhere_and_only_under_private() {
        let private = crate::tokens::private(None);
        let mark = retry_applied(&private);
        assert!(retried(&quote!(fn f() { #mark })));
        assert!(retried(&quote!(fn f() { async move { { #mark } }.await })));
        let renamed = crate::tokens::private(Some(&syn::parse_quote!(resilience)));
        let renamed = retry_applied(&renamed);
        assert!(retried(&quote!(fn f() { #renamed })));
        assert!(!retried(&quote!(
            fn f() {
                let RetryApplied = 1;
            }
        )));
        assert!(!retried(&quote!(
            fn f() {
                mine::RetryApplied
            }
        )));
    }

    #[test]
    fn insertions_go_after_the_attributes() {
        let item = quote!(
            #[doc = "d"]
            #[inline]
            fn f() {
                #![allow(unused)]
                body();
            }
        );
        assert_eq!(
            insert_in_body(item.clone(), quote!(mark;)).to_string(),
            quote!(
                #[doc = "d"]
                #[inline]
                fn f() {
                    #![allow(unused)]
                    mark;
                    body();
                }
            )
            .to_string()
        );
        assert_eq!(
            append_attribute(item, quote!(#[check])).to_string(),
            quote!(
                #[doc = "d"]
                #[inline]
                #[check]
                fn f() {
                    #![allow(unused)]
                    body();
                }
            )
            .to_string()
        );
    }
}
