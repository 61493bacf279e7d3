//! `#[tool(...)]`: parse the arguments ([`args`]), check them together with the function
//! ([`valid`]), then emit the function and its tool ([`codegen`]).
//!
//! On any error the function is emitted unchanged next to the `compile_error!`s, so that the
//! only errors a user sees are ours, all of them in one compile, and an IDE keeps seeing the
//! function.

mod args;
mod codegen;
mod valid;

use proc_macro2::TokenStream;
use quote::quote;

use crate::errors::Errors;
use crate::function::Function;
use args::{Args, ToolEffect};
use valid::Tool;

mod check;

pub(crate) use check::expand as expand_check;

/// Expands `#[tool(args)] item`.
pub(crate) fn expand(args: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let args = Args::parse(args, &mut errors);
    // What the check left on the function needs: known only if the options parsed.
    let options_parsed = errors.is_empty();
    let private = crate::tokens::private(args.krate.as_ref().map(|opt| &opt.value));
    let effect = args
        .effect
        .as_ref()
        .map(|opt| (opt.value.effect, opt.value.lit.clone()));
    // A `#[retry]` written above this attribute, however spelled, already expanded.
    let retried = crate::marks::retried(&item);
    let checked = match Function::parse(&item, "tool") {
        Ok(function) => Tool::check(args, &function, retried, &mut errors)
            .map(|tool| (function, tool))
            .ok_or(true),
        Err(e) => {
            errors.push(e);
            Err(false)
        }
    };
    match checked {
        Ok((function, tool)) if errors.is_empty() => {
            let check = check::attribute(&private, effect.as_ref(), Some(&function.sig.ident));
            let item = crate::marks::append_attribute(item, check);
            codegen::expand(item, &function, tool)
        }
        checked => {
            let is_function = matches!(checked, Ok(_) | Err(true));
            let errors = errors.into_compile_errors();
            // A `#[retry]` written below this attribute has not expanded yet: leave the check
            // on the function, so that its conflict is reported in this compile too.
            let conflicts = effect
                .as_ref()
                .is_none_or(|(e, _)| *e == ToolEffect::SideEffect);
            let item = if is_function && options_parsed && !retried && conflicts {
                let check = check::attribute(&private, effect.as_ref(), None);
                crate::marks::append_attribute(item, check)
            } else {
                item
            };
            quote!(#errors #item)
        }
    }
}

#[cfg(test)]
mod tests;
