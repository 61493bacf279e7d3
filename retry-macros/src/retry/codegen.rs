//! Emitting the retried function: the signature as written, a new body.
//!
//! The body becomes an `async move` block that a closure builds once per attempt and hands
//! to `Driver::run`, when the function borrows nothing mutably; otherwise (a `&mut` receiver
//! or argument) an `async` block that a `loop` builds once per attempt and hands to
//! `Driver::attempt`. A plain `fn`'s body is a closure handed to `Driver::attempt_blocking`.
//! Owned arguments are cloned for each attempt first. The policy is a
//! `const`, so the options cost nothing at run time; values the macro could not read (a `const`
//! path, a `defaults` layer) are checked inside that `const`, so a bad one is a compile error
//! pointing at it. Generated code names only `::retry_toolkit::__private_0_1`, the private
//! module of this version (or the `crate` override; see `tokens::PRIVATE`).

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::{FnArg, Generics, Ident, Pat, PatIdent, ReceiverKind, ReturnType, Signature, Type};

use super::valid::{ATTEMPT_TIMEOUT_NOT_POSITIVE, DEADLINE_NOT_POSITIVE, Limit, Options};
use crate::function::{Function, peel};
use crate::number::{ConstPath, Value};
use crate::tokens::{must_call, private, respan, span_range, typed_local};

/// The retried function.
pub(crate) fn expand(function: Function, options: Options) -> TokenStream {
    let private = private(options.krate.as_ref());
    let Function {
        attrs,
        vis,
        mut sig,
        inner_attrs,
        body,
    } = function;
    let clones = per_attempt_clones(&mut sig, &private);
    let output = nameable_output(&sig);
    let driver = driver(&options, &private, &sig.generics, output);
    let retry = Ident::new("__retry", Span::mixed_site());
    let result = Ident::new("__result", Span::mixed_site());
    // An `async` block learns its output type from its first `return`: this one, never taken,
    // makes it the declared return type before the body is checked, so the body's returns and
    // tail coerce exactly as in the function (`&String` to `&str`, `?` conversions).
    let ret = Ident::new("__ret", Span::mixed_site());
    let output_first = output.map(|output| {
        quote! {
            if let #private::Some(#ret) = #private::None::<#output> {
                return #ret;
            }
        }
    });
    // Found by a `#[tool]` or a second `#[retry]` expanding after this one.
    let mark = crate::marks::retry_applied(&private);
    let attempts = if sig.asyncness.is_none() {
        // A blocking function: the body is a closure called once per attempt, and the
        // driver waits by blocking the thread on the same clock.
        quote! {
            loop {
                #(#clones)*
                match #retry.attempt_blocking(|| { #output_first #body }) {
                    #private::ControlFlow::Break(#result) => return #result,
                    #private::ControlFlow::Continue(()) => {}
                }
            }
        }
    } else if lends_nothing_mutably(&sig) {
        // Nothing to lend across attempts: the driver owns a closure building each attempt's
        // block (`async move`: it holds its own copies of the arguments), so the first
        // attempt is polled straight from the driver's `poll` and the loop stays out of line.
        quote! {
            #retry
                .run(move || {
                    #(#clones)*
                    async move { #output_first #body }
                })
                .await
        }
    } else {
        quote! {
            loop {
                #(#clones)*
                match #retry.attempt(async { #output_first #body }).await {
                    #private::ControlFlow::Break(#result) => return #result,
                    #private::ControlFlow::Continue(()) => {}
                }
            }
        }
    };
    quote! {
        #(#attrs)*
        #vis #sig {
            #(#inner_attrs)*
            #mark
            let mut #retry = #driver;
            #attempts
        }
    }
}

/// Whether every attempt can get its own copy of each argument: the receiver, if any, is
/// `&self`, and no argument holds a `&mut` or is a reference bound `mut` (which the body
/// could reassign for the next attempt). Owned arguments are cloned per attempt anyway.
/// Anything else (`&mut self`, `self` by value, a `&mut` argument) keeps the loop, which
/// lends the function's own bindings to each attempt in turn.
fn lends_nothing_mutably(sig: &Signature) -> bool {
    // In a type, `mut` only follows `&` (with or without a lifetime) or `*`.
    fn has_mut(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|t| match t {
            TokenTree::Ident(ident) => ident == "mut",
            TokenTree::Group(group) => has_mut(group.stream()),
            _ => false,
        })
    }
    sig.inputs.iter().all(|input| match input {
        FnArg::Receiver(receiver) => {
            receiver.mutability.is_none()
                && match &receiver.kind {
                    ReceiverKind::Reference(_, _, mutability) => mutability.is_none(),
                    ReceiverKind::Typed(_, ty) => {
                        matches!(peel(ty), Type::Reference(_)) && !has_mut(ty.to_token_stream())
                    }
                    _ => false,
                }
        }
        FnArg::Typed(arg) => {
            let rebinds = match &*arg.pat {
                Pat::Ident(pat) => pat.mutability.is_some() || pat.by_ref.is_some(),
                Pat::Wild(_) => false,
                _ => true,
            };
            let reassignable_borrow = rebinds && matches!(peel(&arg.ty), Type::Reference(_));
            !has_mut(arg.ty.to_token_stream()) && !reassignable_borrow
        }
    })
}

/// `Driver::new(POLICY)` with the hooks and limits the options ask for. The error type is
/// named first when the return type allows, so that a hook of the wrong type is reported at
/// the hook instead of changing what `E` is inferred to be.
fn driver(
    options: &Options,
    private: &TokenStream,
    generics: &Generics,
    output: Option<&Type>,
) -> TokenStream {
    let error = output.map(|output| quote!(<#output as #private::IsResult>::Err));
    let policy = policy(options, private, generics);
    let new = match &error {
        Some(error) => quote!(#private::Driver::<#error>::new(#policy)),
        None => quote!(#private::Driver::new(#policy)),
    };
    let when = options.when.iter().map(|path| quote!(.when(#path)));
    let notify = options.notify.iter().map(|path| quote!(.notify(#path)));
    let hint = options
        .retry_after
        .iter()
        .map(|path| quote!(.retry_after(#path)));
    let limits = limits(options, private, generics, error.as_ref());
    let protection = protection(options, private, error.as_ref());
    quote!(#new #(#when)* #(#notify)* #(#hint)* #limits #protection)
}

/// `.protect(budget, breaker)` and `.breaker_counts(…)` when a budget or a breaker is named. Each
/// `static` is read through a trait spanned at its path, so that a `static` of another type is
/// reported there, with a message that says what `#[retry]` expected; the conversion of a
/// refused call into `E` is spanned at the `breaker` key, where a missing
/// `From<CircuitOpen>` is reported.
fn protection(
    options: &Options,
    private: &TokenStream,
    error: Option<&TokenStream>,
) -> TokenStream {
    let p = &options.protection;
    if p.budget.is_none() && p.breaker.is_none() {
        return TokenStream::new();
    }
    let shared =
        |getter: TokenStream, path: &syn::ExprPath| must_call(getter, quote!(&#path), path);
    let budget = match &p.budget {
        Some(path) => {
            let get = shared(quote!(#private::AsBudget::budget), path);
            quote!(#private::Some(#get))
        }
        None => quote!(#private::None),
    };
    let breaker = match &p.breaker {
        Some((key, path)) => {
            let get = shared(quote!(#private::AsBreaker::breaker), path);
            let to_error = match error {
                Some(error) => quote!(<#error as #private::FromCircuitOpen>::from_circuit_open),
                None => quote!(#private::FromCircuitOpen::from_circuit_open),
            };
            let to_error = respan(to_error, key.span());
            quote!(#private::Some((#get, #to_error)))
        }
        None => quote!(#private::None),
    };
    // A method of its own, like `when`: a function of the wrong signature is one type error
    // at the option.
    let counts = p
        .breaker_counts
        .iter()
        .map(|path| quote!(.breaker_counts(#path)));
    quote!(.protect(#budget, #breaker) #(#counts)*)
}

/// The declared return type, unless it cannot be written in the body (an `impl Trait` inside
/// it); inference then does without it.
fn nameable_output(sig: &Signature) -> Option<&Type> {
    fn has_impl(tokens: TokenStream) -> bool {
        tokens.into_iter().any(|t| match t {
            TokenTree::Ident(ident) => ident == "impl",
            TokenTree::Group(group) => has_impl(group.stream()),
            _ => false,
        })
    }
    match &sig.output {
        ReturnType::Type(_, ty) if !has_impl(ty.to_token_stream()) => Some(ty),
        _ => None,
    }
}

/// The policy as a constant. The macro already checked every literal; what it could not read
/// is checked here: each `const` path on its own first (in the rules' order), then the layers together.
/// Each path is bound to a local typed at its key, so a `const` of the wrong type is reported
/// there too.
fn policy(options: &Options, private: &TokenStream, generics: &Generics) -> TokenStream {
    let mut call_site = quote!(#private::RetryOptions::new());
    let mut statements = Vec::new();
    let mut culprit = None;
    let fields = [
        (
            "with_max_attempts",
            quote!(u32),
            value_tokens(&options.max_attempts),
        ),
        (
            "with_base_delay_ms",
            quote!(u64),
            value_tokens(&options.base_delay_ms),
        ),
        (
            "with_max_delay_ms",
            quote!(u64),
            value_tokens(&options.max_delay_ms),
        ),
    ];
    for (setter, ty, value) in fields {
        let setter = Ident::new(setter, Span::call_site());
        let value = match value {
            None => continue,
            Some(Ok(literal)) => literal,
            Some(Err(constant)) => {
                let local = typed_local(constant, ty, &mut statements);
                let alone = quote!(#private::RetryOptions::new().#setter(#local).validate());
                statements.push(must(private, alone, &constant.path));
                // The cross-field rule concerns the two delays.
                if setter != "with_max_attempts" && culprit.is_none() {
                    culprit = Some(&constant.path);
                }
                local.into_token_stream()
            }
        };
        call_site = quote!(#call_site.#setter(#value));
    }
    if let Some(jitter) = &options.jitter {
        call_site = quote!(#call_site.with_jitter(#private::Jitter::#jitter));
    }
    let resolved = match &options.defaults {
        Some(defaults) => {
            let local = typed_local(defaults, quote!(#private::RetryOptions), &mut statements);
            let alone = quote!(#private::RetryDefaults::new(#local));
            statements.push(must(private, alone, &defaults.path));
            culprit = Some(&defaults.path);
            quote!(#call_site.or(#local).resolve())
        }
        None => quote!(#call_site.resolve()),
    };
    let resolved = match culprit {
        Some(path) => must(private, resolved, path),
        // Only literals: the macro checked them all, so this cannot fail.
        None => quote!(#private::must(#resolved)),
    };
    let paths = [
        options.max_attempts.as_const(),
        options.base_delay_ms.as_const(),
        options.max_delay_ms.as_const(),
        options.defaults.as_ref(),
    ];
    constant(
        quote!(#private::RetryPolicy),
        quote!({ #(#statements;)* #resolved }),
        paths.into_iter().flatten(),
        generics,
        "__RETRY_POLICY",
    )
}

/// `.limits(deadline, attempt_timeout, to_error)`. `to_error` is spanned on the first limit's
/// key, so that a missing `E: From<LimitExceeded>` is reported there.
fn limits(
    options: &Options,
    private: &TokenStream,
    generics: &Generics,
    error: Option<&TokenStream>,
) -> TokenStream {
    let deadline = options.deadline.as_ref();
    let timeout = options.attempt_timeout.as_ref();
    let Some(first) = deadline.or(timeout) else {
        return TokenStream::new();
    };
    let duration = |limit: Option<&Limit>, message: &str, name: &str| match limit.map(|l| &l.value)
    {
        None | Some(Value::Unset) => quote!(#private::None),
        Some(Value::Lit(ms)) => quote!(#private::Some(#private::Duration::from_millis(#ms))),
        Some(Value::Const(path)) => {
            let mut statements = Vec::new();
            let local = typed_local(path, quote!(u64), &mut statements);
            let checked = must_call(
                quote!(#private::positive_ms),
                quote!(#local, #message),
                &path.path,
            );
            let value = quote!({ #(#statements;)* #checked });
            let value = constant(quote!(#private::Duration), value, [path], generics, name);
            quote!(#private::Some(#value))
        }
    };
    let deadline = duration(deadline, DEADLINE_NOT_POSITIVE, "__RETRY_DEADLINE");
    let timeout = duration(
        timeout,
        ATTEMPT_TIMEOUT_NOT_POSITIVE,
        "__RETRY_ATTEMPT_TIMEOUT",
    );
    let to_error = match error {
        Some(error) => quote!(<#error as #private::FromLimit>::from_limit),
        None => quote!(#private::FromLimit::from_limit),
    };
    let to_error = respan(to_error, first.key.span());
    quote!(.limits(#deadline, #timeout, #to_error))
}

/// A compile-time value. A `const` item is evaluated by every build, `cargo check` included,
/// but it cannot name `Self` or a generic parameter (of the function or of its `impl`, which
/// the attribute cannot see). So a value read through a type — `Self::RETRY`, `T::RETRY`,
/// `Client::RETRY`, `<T as Config>::RETRY` — is an inline `const { … }` block instead,
/// evaluated when the function is instantiated; a free `const` (`RETRY`, `config::RETRY`)
/// keeps the eager `const` item.
fn constant<'a>(
    ty: TokenStream,
    value: TokenStream,
    paths: impl IntoIterator<Item = &'a ConstPath>,
    generics: &Generics,
    name: &str,
) -> TokenStream {
    if paths
        .into_iter()
        .any(|constant| through_a_type(&constant.path, generics))
    {
        return quote!(const { #value });
    }
    let name = Ident::new(name, Span::mixed_site());
    quote!({
        const #name: #ty = #value;
        #name
    })
}

/// Whether `path` may name an associated `const` of a type (by Rust's naming conventions:
/// types are `UpperCamelCase`, modules `snake_case`).
fn through_a_type(path: &syn::ExprPath, generics: &Generics) -> bool {
    let segments = &path.path.segments;
    let Some(first) = segments.first() else {
        return false;
    };
    let name = first.ident.to_string();
    path.qself.is_some()
        || name == "Self"
        || generics.type_params().any(|p| p.ident == first.ident)
        || generics.const_params().any(|p| p.ident == first.ident)
        || (segments.len() > 1 && name.starts_with(|c: char| c.is_ascii_uppercase()))
}

/// `__private::must(checked)`, reported at `culprit` if the check fails.
fn must(private: &TokenStream, checked: TokenStream, culprit: &syn::ExprPath) -> TokenStream {
    must_call(quote!(#private::must), checked, culprit)
}

/// `let name = CloneArg::clone_arg(&name);` for every owned argument: the previous attempt
/// may have moved it. Borrowed arguments are lent to each attempt as they are. An argument
/// bound by a pattern is renamed, and the pattern re-applied to each attempt's copy. The
/// signature loses `mut` on cloned arguments (the copy gets it), so no `unused_mut` fires.
fn per_attempt_clones(sig: &mut Signature, private: &TokenStream) -> Vec<TokenStream> {
    let mut clones = Vec::new();
    for (index, input) in sig.inputs.iter_mut().enumerate() {
        let FnArg::Typed(arg) = input else { continue };
        if matches!(peel(&arg.ty), Type::Reference(_)) || matches!(*arg.pat, Pat::Wild(_)) {
            continue;
        }
        let (first, _) = span_range(&arg.pat);
        let (_, last) = span_range(&arg.ty);
        let (binding, source) = match &mut *arg.pat {
            Pat::Ident(pat) if pat.by_ref.is_none() && pat.subpat.is_none() => {
                let mutability = pat.mutability.take();
                let ident = &pat.ident;
                (quote!(#mutability #ident), pat.ident.clone())
            }
            pat => {
                let renamed = format_ident!("__retry_arg{}", index, span = Span::mixed_site());
                let original = std::mem::replace(
                    pat,
                    Pat::Ident(PatIdent {
                        attrs: Vec::new(),
                        by_ref: None,
                        mutability: None,
                        ident: renamed.clone(),
                        subpat: None,
                    }),
                );
                (original.into_token_stream(), renamed)
            }
        };
        // Spanned over `name: Type`, so that a type that is not `Clone` is reported there.
        let mut source = source;
        source.set_span(source.span().located_at(last));
        let amp = quote_spanned!(first=> &);
        let call = respan(quote!(#private::CloneArg::clone_arg), first);
        clones.push(quote!(let #binding = #call(#amp #source);));
    }
    clones
}

/// A set value: the literal's tokens (typed by their suffix), or the `const` path.
fn value_tokens<T: ToTokens>(value: &Value<T>) -> Option<Result<TokenStream, &ConstPath>> {
    match value {
        Value::Unset => None,
        Value::Lit(v) => Some(Ok(v.to_token_stream())),
        Value::Const(constant) => Some(Err(constant)),
    }
}
