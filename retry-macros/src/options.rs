//! Reading an attribute's `key = value, …` list: one setter per option, spans kept for every
//! error, every error collected. Shared by `#[retry]` and `#[tool]`; each attribute decides
//! what its options' values may be.

use proc_macro2::TokenStream;
use quote::ToTokens;
use syn::meta::ParseNestedMeta;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Path};

use crate::errors::Errors;

/// An option as written: its key (for spans and messages) and its value.
pub(crate) struct Opt<T> {
    pub(crate) key: Ident,
    pub(crate) value: T,
    /// Its position in the attribute, so that errors are reported in the order written.
    pub(crate) index: usize,
}

/// Where an option was written: its key and its position.
pub(crate) struct At {
    key: Ident,
    index: usize,
}

impl At {
    /// Stores a value of the right kind in its slot (a second one was rejected before).
    pub(crate) fn set<T>(
        self,
        slot: &mut Option<Opt<T>>,
        value: syn::Result<T>,
    ) -> syn::Result<()> {
        *slot = Some(Opt {
            key: self.key,
            value: value?,
            index: self.index,
        });
        Ok(())
    }
}

/// Parses `key = value, …` against the known `options`. For each known key met the first
/// time, `set(name, at, value)` stores the value (with [`At::set`]); its error is recorded
/// against the option. Unknown and repeated keys are recorded and parsing goes on with the next option, so
/// that one compile reports them all; only broken syntax (or a key without a value) stops it.
pub(crate) fn parse(
    tokens: TokenStream,
    options: &[&str],
    errors: &mut Errors,
    mut set: impl FnMut(&str, At, Expr) -> syn::Result<()>,
) {
    let mut seen: Vec<String> = Vec::new();
    let mut one = |meta: ParseNestedMeta<'_>, errors: &mut Errors| -> syn::Result<()> {
        let Some(key) = meta
            .path
            .get_ident()
            .cloned()
            .or_else(|| keyword(&meta.path))
        else {
            let name = meta.path.to_token_stream().to_string();
            return Err(meta.error(unknown_option(&name, options)));
        };
        let name = key.to_string();
        let index = seen.len();
        seen.push(name.clone());
        if !options.contains(&name.as_str()) {
            // Skip the value so that the options after it are still read.
            if meta.input.peek(syn::Token![=]) {
                meta.value()?.parse::<Expr>()?;
            }
            errors.push_at(
                index,
                syn::Error::new(key.span(), unknown_option(&name, options)),
            );
            return Ok(());
        }
        if !meta.input.peek(syn::Token![=]) {
            return Err(syn::Error::new(
                key.span(),
                format!("expected `{name} = …`: every option takes a value"),
            ));
        }
        let value: Expr = meta.value()?.parse()?;
        if seen[..index].contains(&name) {
            errors.push_at(
                index,
                syn::Error::new(
                    key.span(),
                    format!("duplicate option `{name}`: each option may be given once"),
                ),
            );
            return Ok(());
        }
        if let Err(e) = set(&name, At { key, index }, value) {
            errors.push_at(index, e);
        }
        Ok(())
    };
    let parser = syn::meta::parser(|meta| one(meta, errors));
    if let Err(e) = syn::parse::Parser::parse2(parser, tokens) {
        errors.push(e);
    }
}

/// `crate` is a keyword, so it is not an `Ident` path; every other key is.
fn keyword(path: &Path) -> Option<Ident> {
    let segment = path.segments.first()?;
    (path.segments.len() == 1 && segment.ident == "crate")
        .then(|| Ident::new("crate", segment.ident.span()))
}

fn unknown_option(name: &str, options: &[&str]) -> String {
    let valid = backticked(options);
    match closest(name, options) {
        Some(guess) => {
            format!("unknown option `{name}`: did you mean `{guess}`? Expected one of {valid}")
        }
        None => format!("unknown option `{name}`: expected one of {valid}"),
    }
}

/// `` `a`, `b`, `c` ``.
pub(crate) fn backticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The candidate within two edits of `name`, for "did you mean".
pub(crate) fn closest<'a>(name: &str, candidates: &[&'a str]) -> Option<&'a str> {
    candidates
        .iter()
        .map(|c| (edit_distance(name, c), *c))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

/// Levenshtein distance, for suggestions only.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

/// A string literal, or an error saying what the option takes.
pub(crate) fn string(value: Expr, what: &str) -> syn::Result<LitStr> {
    match value {
        Expr::Lit(ExprLit {
            lit: Lit::Str(lit), ..
        }) => Ok(lit),
        other => Err(syn::Error::new_spanned(other, what)),
    }
}

/// `crate = "…"`: where `retry_toolkit` is, for a renamed dependency.
pub(crate) fn krate(value: Expr) -> syn::Result<Path> {
    let lit = string(
        value,
        "`crate` takes a string with a path, such as `crate = \"my_retry_toolkit\"`",
    )?;
    lit.parse::<Path>().map_err(|_| {
        syn::Error::new(
            lit.span(),
            format!(
                "`crate` must be a path, such as `crate = \"my_retry_toolkit\"`; \"{}\" is not one",
                lit.value()
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPTIONS: [&str; 3] = ["max_attempts", "base_delay_ms", "jitter"];

    #[test]
    fn suggestions_are_close_names_only() {
        assert_eq!(closest("max_attempt", &OPTIONS), Some("max_attempts"));
        assert_eq!(closest("base_delay", &OPTIONS), None);
        assert_eq!(closest("jiter", &OPTIONS), Some("jitter"));
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
    }
}
