//! Small pieces of code generation both attributes use: the runtime's private path, spans
//! moved onto what a user wrote, and `const` paths checked by const evaluation.

use proc_macro2::{Delimiter, Group, Span, TokenStream, TokenTree};
use quote::{ToTokens, quote};
use syn::{Ident, Path};

use crate::number::ConstPath;

/// The name of retry-toolkit's private module, versioned as thiserror's is: `__private_0_1` for
/// version 0.1.x of this crate. retry-toolkit names the module after its own version and pins this
/// crate exactly, so the two agree; expansion by a retry-macros of another version fails at
/// this path instead of deep inside the generated code.
pub(crate) const PRIVATE: &str = concat!(
    "__private_",
    env!("CARGO_PKG_VERSION_MAJOR"),
    "_",
    env!("CARGO_PKG_VERSION_MINOR"),
);

/// The core crate's package name as a user's manifest lists it, and its library name: the only
/// two places this crate spells them.
const CORE_PACKAGE: &str = "retry-toolkit";
const CORE_LIB: &str = "retry_toolkit";

/// `{core}::__private_0_1` (see [`PRIVATE`]): the one path generated code names. `{core}` is
/// the `crate = "…"` option when given, else the name the user's manifest gives the core (a
/// renamed dependency works as it is), else `::retry_toolkit`.
pub(crate) fn private(krate: Option<&Path>) -> TokenStream {
    let module = Ident::new(PRIVATE, Span::call_site());
    match krate {
        Some(path) => quote!(#path::#module),
        None => {
            let core = core_path();
            quote!(#core::#module)
        }
    }
}

/// Why `#[tool]` cannot expand without the core's `effects` feature, and the manifest line that
/// turns it on, under the name the user's manifest gives the core.
pub(crate) fn without_effects_message() -> String {
    let version = concat!(
        env!("CARGO_PKG_VERSION_MAJOR"),
        ".",
        env!("CARGO_PKG_VERSION_MINOR")
    );
    let line = match proc_macro_crate::crate_name(CORE_PACKAGE) {
        Ok(proc_macro_crate::FoundCrate::Name(name)) if name != CORE_LIB => format!(
            "{name} = {{ package = \"{CORE_PACKAGE}\", version = \"{version}\", features = [\"effects\"] }}"
        ),
        _ => format!("{CORE_PACKAGE} = {{ version = \"{version}\", features = [\"effects\"] }}"),
    };
    format!(
        "`#[tool]` needs the `effects` feature of {CORE_PACKAGE}, which is off: turn it on in Cargo.toml\n    {line}"
    )
}

/// Where the core is, read from the manifest of the crate being compiled (`proc-macro-crate`
/// asks cargo for it, workspace dependencies included). The core's own tests, examples and doc
/// tests (`Itself`) are other crates that see it under its library name, and so does a crate
/// that reaches the core some other way (not found): there `crate = "…"` is the way out.
fn core_path() -> TokenStream {
    let renamed = match proc_macro_crate::crate_name(CORE_PACKAGE) {
        Ok(proc_macro_crate::FoundCrate::Name(name)) => syn::parse_str::<Ident>(&name).ok(),
        Ok(proc_macro_crate::FoundCrate::Itself) | Err(_) => None,
    };
    let name = renamed.unwrap_or_else(|| Ident::new(CORE_LIB, Span::call_site()));
    quote!(::#name)
}

/// `let key: Type = PATH;`, the type spanned at the option's key, so that a `const` of the
/// wrong type is reported there. Returns the local.
pub(crate) fn typed_local(
    constant: &ConstPath,
    ty: TokenStream,
    statements: &mut Vec<TokenStream>,
) -> Ident {
    let local = Ident::new(&constant.key.to_string(), Span::mixed_site());
    let ty = respan(ty, constant.key.span());
    let path = &constant.path;
    statements.push(quote!(let #local: #ty = #path));
    local
}

/// `callee(args)` spanned so that a failed const evaluation underlines `culprit`: the callee
/// takes the span of its first token, the parentheses the span of its last.
pub(crate) fn must_call(
    callee: TokenStream,
    args: TokenStream,
    culprit: &impl ToTokens,
) -> TokenStream {
    let (first, last) = span_range(culprit);
    let callee = respan(callee, first);
    let mut args = Group::new(Delimiter::Parenthesis, args);
    args.set_span(last);
    quote!(#callee #args)
}

/// The spans of the first and the last token of `tokens`.
pub(crate) fn span_range(tokens: &impl ToTokens) -> (Span, Span) {
    let mut tokens = tokens.to_token_stream().into_iter();
    let first = tokens.next().map_or_else(Span::call_site, |t| t.span());
    let last = tokens.last().map_or(first, |t| t.span());
    (first, last)
}

/// `tokens`, every one of them spanned at `span`.
pub(crate) fn respan(tokens: TokenStream, span: Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut token| {
            if let TokenTree::Group(group) = &token {
                let mut inner = Group::new(group.delimiter(), respan(group.stream(), span));
                inner.set_span(span);
                token = TokenTree::Group(inner);
            } else {
                token.set_span(span);
            }
            token
        })
        .collect()
}
