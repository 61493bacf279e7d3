//! Snapshots of the expansion, pretty-printed: any change to the generated code shows up as a
//! snapshot diff to review (`cargo insta review`).

use proc_macro2::TokenStream;
use quote::quote;

fn expand(args: TokenStream, item: TokenStream) -> String {
    crate::pretty(super::expand(args, item))
}

#[test]
fn x3_idempotent_write() {
    insta::assert_snapshot!(expand(
        quote!(effect = "idempotent-write", timeout_ms = 10_000),
        quote! {
            /// Saves a note; a repeat with the same key overwrites it.
            #[cfg(feature = "notes")]
            pub async fn save_note(
                title: &str,
                mut body: String,
                key: IdempotencyKey,
            ) -> Result<Saved, NotesError> {
                body.push('\n');
                NOTES.upsert(key.as_str(), title, &body).await
            }
        },
    ));
}

#[test]
fn x3_undeclared_with_context_and_options() {
    insta::assert_snapshot!(expand(
        quote!(
            name = "send-email",
            requires_approval = true,
            timeout_ms = config::SEND_TIMEOUT_MS,
            crate = "resilience"
        ),
        quote! {
            pub(crate) async fn send_email<'a>(
                to: Cow<'a, str>,
                ctx: &ToolContext,
                cc: Option<Vec<String>>,
            ) -> io::Result<Receipt> {
                mailer().send(&to, cc, ctx.deadline()).await
            }
        },
    ));
}

#[test]
fn x3_no_arguments() {
    insta::assert_snapshot!(expand(
        quote!(effect = "read"),
        quote! {
            async fn now() -> Result<u64, Infallible> {
                Ok(42)
            }
        },
    ));
}

#[test]
fn x3_errors_keep_the_function() {
    insta::assert_snapshot!(expand(
        quote!(effect = "idempotent_write", bogus = 1),
        quote! {
            #[retry]
            fn untouched(x: u32) -> u32 { x }
        },
    ));
}
