//! Emitting a tool: the function as written, and next to it a type of the same name that
//! implements `Tool` by calling it.
//!
//! The type is a braced struct, so it lives in the type namespace only and shares the
//! function's name without clashing with it (`save_note(…)` calls the function,
//! `save_note {}` is the tool) — no name is invented that could collide with the user's own.
//! Its descriptor is an associated `const`; its arguments are a private struct deserialized
//! from the call's JSON object, one field per parameter. Generated code names only
//! `::retry_toolkit::__private_0_1`, the private module of this version (or the `crate`
//! override; see `tokens::PRIVATE`).

use proc_macro2::{Group, Span, TokenStream, TokenTree};
use quote::{format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Ident, ReturnType};

use super::valid::{Kind, Pass, TIMEOUT_NOT_POSITIVE, Tool};
use crate::function::Function;
use crate::number::Value;
use crate::options::backticked;
use crate::tokens::{must_call, private, typed_local};

/// The function, unchanged, and its tool.
pub(crate) fn expand(item: TokenStream, function: &Function, tool: Tool) -> TokenStream {
    let private = private(tool.krate.as_ref());
    let ident = &function.sig.ident;
    let vis = &function.vis;
    // A tool of a function compiled out is compiled out with it.
    let cfgs: Vec<_> = function
        .attrs
        .iter()
        .filter(|attr| attr.path().is_ident("cfg"))
        .collect();
    // Spanned on the return type, so that an output that is not `Serialize` (or an error
    // that is not `Display`) is reported there.
    let (output, output_span) = match &function.sig.output {
        ReturnType::Type(_, ty) => (statify(quote!(#ty)), ty.span()),
        ReturnType::Default => (quote!(()), Span::call_site()),
    };
    let output_type = quote_spanned!(output_span=> <#output as #private::IsResult>::Ok);
    let error_type = quote_spanned!(output_span=> <#output as #private::IsResult>::Err);
    // Whether the function retries on its own: known once the check `#[tool]` left on the
    // function has run, after any `#[retry]` there.
    let spec = spec(&tool, &private);
    let spec = quote!(#private::with_retries(#spec, <#ident as #private::ToolRetries>::RETRIES));
    let args = args_struct(&tool, vis, &private);
    let call = call(&tool, ident, &private);
    let effect = match tool.effect {
        Some(effect) => format!("`{}`", effect.name()),
        None => "`side-effect` (none declared)".to_owned(),
    };
    let struct_doc = format!(
        " The tool `{}`, declared by `#[tool]` on `async fn {ident}`. Effect: {effect}. \
         Register it with `Toolbox::with({ident} {{}})`; its descriptor is `{ident}::TOOL_SPEC`.",
        tool.name,
    );
    let spec_doc = format!(
        " What the runner knows about the tool `{}`: its name, effect, approval and timeout.",
        tool.name
    );
    quote! {
        #item

        #(#cfgs)*
        #[doc = #struct_doc]
        #[allow(non_camel_case_types, dead_code, unreachable_pub)]
        #[derive(#private::Clone, #private::Copy, #private::Debug, #private::Default)]
        #vis struct #ident {}

        #(#cfgs)*
        #[allow(unreachable_pub)]
        impl #ident {
            #[doc = #spec_doc]
            #vis const TOOL_SPEC: #private::ToolSpec = #spec;
        }

        #(#cfgs)*
        const _: () = {
            #args

            #[allow(deprecated)]
            impl #private::Tool for #ident {
                type Args = __Args;
                type Output = #output_type;
                type Error = #error_type;

                fn spec(&self) -> #private::ToolSpec {
                    Self::TOOL_SPEC
                }

                #call
            }

            // Evaluated by every build, `cargo check` included: a `timeout_ms` const that
            // fails its rule is reported now.
            const _: #private::ToolSpec = #ident::TOOL_SPEC;
        };
    }
}

/// `ToolSpec::new(name).with_effect(…)…`, a constant expression.
fn spec(tool: &Tool, private: &TokenStream) -> TokenStream {
    let name = &tool.name;
    let mut spec = quote!(#private::ToolSpec::new(#name));
    if let Some(effect) = tool.effect {
        let variant = Ident::new(effect.variant(), Span::call_site());
        spec = quote!(#spec.with_effect(#private::ToolEffect::#variant));
    }
    if tool.requires_approval {
        spec = quote!(#spec.with_approval());
    }
    let mut statements = Vec::new();
    match &tool.timeout {
        Value::Unset => {}
        Value::Lit(ms) => {
            spec = quote!(#spec.with_timeout(#private::Duration::from_millis(#ms)));
        }
        Value::Const(constant) => {
            let local = typed_local(constant, quote!(u64), &mut statements);
            let checked = must_call(
                quote!(#private::positive_ms),
                quote!(#local, #TIMEOUT_NOT_POSITIVE),
                &constant.path,
            );
            spec = quote!(#spec.with_timeout(#checked));
        }
    }
    if statements.is_empty() {
        spec
    } else {
        quote!({ #(#statements;)* #spec })
    }
}

/// The arguments: one field per argument parameter, owned (a `&str` parameter reads a
/// `String`), strict about unknown fields so that a misspelt one is an error the model reads.
fn args_struct(tool: &Tool, vis: &syn::Visibility, private: &TokenStream) -> TokenStream {
    let mut names = Vec::new();
    let fields = tool.params.iter().filter_map(|param| {
        let Kind::Arg { ident, ty } = &param.kind else {
            return None;
        };
        names.push(ident.unraw().to_string());
        let owned = statify(quote!(#ty));
        let ty = match param.pass {
            Pass::Value => owned,
            Pass::Ref | Pass::RefMut => {
                quote_spanned!(ty.span()=> <#owned as #private::ToOwned>::Owned)
            }
        };
        Some(quote!(#ident: #ty))
    });
    let fields: Vec<_> = fields.collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let shape = match names.len() {
        0 => "an empty object `{}`".to_owned(),
        1 => format!("an object with the field {}", backticked(&names)),
        _ => format!("an object with the fields {}", backticked(&names)),
    };
    let expecting = format!("the arguments of tool `{}`: {shape}", tool.name);
    let serde = format!("{private}::serde");
    quote! {
        #[derive(#private::Deserialize)]
        #[serde(crate = #serde, deny_unknown_fields, expecting = #expecting)]
        #[allow(unreachable_pub)]
        #vis struct __Args {
            #(#fields,)*
        }
    }
}

/// `async fn call`: the arguments unpacked, the key and the context handed to the parameters
/// that take them, the function called once.
fn call(tool: &Tool, ident: &Ident, private: &TokenStream) -> TokenStream {
    let args = Ident::new("args", Span::mixed_site());
    let ctx = Ident::new("ctx", Span::mixed_site());
    let local = |index: usize| format_ident!("__arg{}", index, span = Span::mixed_site());
    let mut fields = Vec::new();
    let mut keys = Vec::new();
    let mut contexts = Vec::new();
    let contexts_wanted = tool
        .params
        .iter()
        .filter(|p| matches!(p.kind, Kind::Context))
        .count();
    let mut passed = Vec::new();
    for (index, param) in tool.params.iter().enumerate() {
        let local = local(index);
        let binding = match param.pass {
            Pass::RefMut => quote!(mut #local),
            _ => quote!(#local),
        };
        match &param.kind {
            Kind::Arg { ident, .. } => fields.push(quote!(#ident: #binding)),
            Kind::Key => keys.push(quote!(let #binding = #ctx.idempotency_key();)),
            Kind::Context => {
                // Moved into the last parameter that takes it, cloned for any other.
                let value = if contexts.len() + 1 == contexts_wanted {
                    quote!(#ctx)
                } else {
                    quote!(#private::Clone::clone(&#ctx))
                };
                contexts.push(quote!(let #binding = #value;));
            }
        }
        passed.push(match param.pass {
            Pass::Value => quote!(#local),
            Pass::Ref => quote!(#private::Borrow::borrow(&#local)),
            Pass::RefMut => quote!(#private::BorrowMut::borrow_mut(&mut #local)),
        });
    }
    let ctx_param = if keys.is_empty() && contexts.is_empty() {
        quote!(_)
    } else {
        quote!(#ctx)
    };
    quote! {
        async fn call(
            &self,
            #args: Self::Args,
            #ctx_param: #private::ToolContext,
        ) -> #private::Result<Self::Output, Self::Error> {
            let __Args { #(#fields),* } = #args;
            #(#keys)*
            #(#contexts)*
            #ident(#(#passed),*).await
        }
    }
}

/// `ty` with every lifetime `'static`, elided ones included: the argument struct and the
/// `Tool` impl have no lifetime parameters, and JSON arguments are owned.
fn statify(tokens: TokenStream) -> TokenStream {
    let mut out = Vec::new();
    let mut tokens = tokens.into_iter().peekable();
    while let Some(token) = tokens.next() {
        match token {
            TokenTree::Punct(quote) if quote.as_char() == '\'' => {
                out.push(TokenTree::Punct(quote));
                if let Some(TokenTree::Ident(name)) = tokens.next() {
                    out.push(TokenTree::Ident(Ident::new("static", name.span())));
                }
            }
            TokenTree::Punct(amp) if amp.as_char() == '&' => {
                let span = amp.span();
                out.push(TokenTree::Punct(amp));
                let named =
                    matches!(tokens.peek(), Some(TokenTree::Punct(p)) if p.as_char() == '\'');
                if !named {
                    out.extend(quote_spanned!(span=> 'static));
                }
            }
            TokenTree::Group(group) => {
                let mut inner = Group::new(group.delimiter(), statify(group.stream()));
                inner.set_span(group.span());
                out.push(TokenTree::Group(inner));
            }
            other => out.push(other),
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use syn::Type;

    use super::*;

    #[test]
    fn statify_makes_every_lifetime_static() {
        let ty: Type = syn::parse_quote!(Cow<'a, [&str]>);
        assert_eq!(
            statify(quote!(#ty)).to_string(),
            quote!(Cow<'static, [&'static str]>).to_string()
        );
        let ty: Type = syn::parse_quote!(&&'_ mut Option<&'static T>);
        assert_eq!(
            statify(quote!(#ty)).to_string(),
            quote!(&'static &'static mut Option<&'static T>).to_string()
        );
    }
}
