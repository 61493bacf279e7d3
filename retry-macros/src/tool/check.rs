//! The check `#[tool]` leaves on its function, `#[__private::tool_check(…)]`: appended after
//! the function's other attributes, it expands last, once a `#[retry]` written below `#[tool]`
//! has rewritten the function — so it sees that `#[retry]`'s mark whatever name it was
//! imported under. It refuses a side effect that retries, and tells the tool's descriptor
//! whether its function retries on its own.

use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::parse::{Parse, ParseStream, Parser};
use syn::{Attribute, Ident, LitStr, Path, Token};

use super::args::ToolEffect;
use super::valid::retry_conflict;
use crate::function::Function;

/// `#[{private}::tool_check(private = {private}, effect = …, tool = {ident})]`. The effect is
/// the literal as written, for the error's span, or `undeclared` spanned at this `#[tool]`;
/// `tool` is there when the tool's type was declared.
pub(crate) fn attribute(
    private: &TokenStream,
    effect: Option<&(ToolEffect, LitStr)>,
    tool: Option<&Ident>,
) -> TokenStream {
    let effect = match effect {
        Some((_, lit)) => quote!(#lit),
        None => {
            let undeclared = Ident::new("undeclared", Span::call_site());
            quote!(#undeclared)
        }
    };
    let tool = tool.map(|ident| quote!(, tool = #ident));
    quote!(#[#private::tool_check(private = #private, effect = #effect #tool)])
}

/// The check's arguments, as [`attribute`] writes them.
struct Check {
    /// The span of the `#[tool]` that wrote the check (its tokens carry it).
    at: Span,
    private: Path,
    /// `None`: undeclared, with the span of `#[tool]`.
    effect: (Option<ToolEffect>, Span),
    tool: Option<Ident>,
}

impl Parse for Check {
    fn parse(input: ParseStream<'_>) -> syn::Result<Check> {
        fn key(input: ParseStream<'_>, name: &str) -> syn::Result<Span> {
            let key: Ident = input.parse()?;
            if key != name {
                return Err(syn::Error::new(key.span(), format!("expected `{name}`")));
            }
            input.parse::<Token![=]>()?;
            Ok(key.span())
        }
        let at = key(input, "private")?;
        let private = Path::parse_mod_style(input)?;
        input.parse::<Token![,]>()?;
        key(input, "effect")?;
        let effect = if input.peek(LitStr) {
            let lit: LitStr = input.parse()?;
            let effect = ToolEffect::ALL
                .into_iter()
                .find(|e| e.name() == lit.value());
            (effect.or(Some(ToolEffect::SideEffect)), lit.span())
        } else {
            let undeclared: Ident = input.parse()?;
            (None, undeclared.span())
        };
        let tool = if input.parse::<Option<Token![,]>>()?.is_some() {
            key(input, "tool")?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(Check {
            at,
            private,
            effect,
            tool,
        })
    }
}

/// Expands `#[tool_check(args)] item`: the function unchanged, the conflict if it retries a
/// side effect, and `ToolRetries` for the tool's type.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let check = match Check::parse.parse2(args) {
        Ok(check) => check,
        // Only `#[tool]` writes this attribute.
        Err(e) => {
            let e = e.to_compile_error();
            return quote!(#e #item);
        }
    };
    let retried = crate::marks::retried(&item);
    let (effect, span) = check.effect;
    let conflict = retry_conflict(effect)
        .filter(|_| retried)
        .map(|message| syn::Error::new(span, message).to_compile_error());
    let retries = check.tool.map(|ident| {
        // As the tool's type: compiled out with the function.
        let cfgs: Vec<Attribute> = Function::parse(&item, "tool")
            .map(|function| function.attrs)
            .unwrap_or_default()
            .into_iter()
            .filter(|attr| attr.path().is_ident("cfg"))
            .collect();
        let private = &check.private;
        // Spanned at `#[tool]`, as the tool's own impls: where those are refused (a function in
        // an `impl` block), this one is refused with the very same error, reported once.
        quote_spanned! {check.at=>
            #(#cfgs)*
            impl #private::ToolRetries for #ident {
                const RETRIES: bool = #retried;
            }
        }
    });
    quote!(#conflict #item #retries)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arguments of the attribute `#[tool]` writes, read back.
    fn read_back(attribute: TokenStream) -> Check {
        let attr: Attribute = syn::parse_quote!(#attribute);
        attr.parse_args_with(Check::parse).unwrap()
    }

    #[test]
    fn x3_the_check_reads_what_tool_writes() {
        let private = crate::tokens::private(Some(&syn::parse_quote!(resilience)));
        let lit: LitStr = syn::parse_quote!("side-effect");
        let ident: Ident = syn::parse_quote!(send_email);
        let check = read_back(attribute(
            &private,
            Some(&(ToolEffect::SideEffect, lit)),
            Some(&ident),
        ));
        let read = &check.private;
        assert_eq!(quote!(#read).to_string(), private.to_string());
        assert_eq!(check.effect.0, Some(ToolEffect::SideEffect));
        assert_eq!(check.tool, Some(ident));
        let undeclared = read_back(attribute(&crate::tokens::private(None), None, None));
        assert_eq!(undeclared.effect.0, None);
        assert_eq!(undeclared.tool, None);
    }

    #[test]
    fn x3_a_side_effect_that_retries_is_refused_and_recorded() {
        let private = crate::tokens::private(None);
        let args = quote!(
            private = #private,
            effect = undeclared,
            tool = send
        );
        let mark = crate::marks::retry_applied(&private);
        let out = expand(
            args.clone(),
            quote!(async fn send() -> Result<(), ()> { #mark Ok(()) }),
        );
        let out = out.to_string();
        assert!(out.contains("compile_error"), "{out}");
        assert!(out.contains("const RETRIES : bool = true"), "{out}");
        let out = expand(
            args,
            quote!(
                async fn send() -> Result<(), ()> {
                    Ok(())
                }
            ),
        )
        .to_string();
        assert!(!out.contains("compile_error"), "{out}");
        assert!(out.contains("const RETRIES : bool = false"), "{out}");
    }
}
