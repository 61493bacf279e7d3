//! Signatures keep working under `#[retry]` (SPEC X4): receivers, generics, `impl Trait`,
//! where clauses, lifetimes, patterns, borrowed and owned arguments, `Result` aliases.
#![deny(warnings)]

use std::fmt::Debug;
use std::io;

use retry_toolkit::{RetryOptions, retry};

struct Client {
    name: String,
    calls: u32,
}

impl Client {
    const RETRY: RetryOptions = RetryOptions::new().with_max_attempts(4);

    // The body's returns and tail coerce to the declared type (`&String` to `&str`).
    #[retry]
    async fn name(&self) -> Result<&str, String> {
        if self.name.is_empty() {
            return Ok(&self.name);
        }
        Ok(&self.name)
    }

    #[retry(defaults = Self::RETRY)]
    async fn bump(&mut self, by: u32) -> Result<u32, String> {
        self.calls += by;
        Ok(self.calls)
    }

    #[retry]
    async fn typed_receiver(self: &Self, suffix: &str) -> Result<String, String> {
        Ok(format!("{}{suffix}", self.name))
    }

    #[retry]
    async fn mut_argument(&mut self, mut tries: Vec<u32>) -> Result<usize, String> {
        tries.push(self.calls);
        Ok(tries.len())
    }
}

#[retry(max_attempts = 2)]
async fn generic<'a, T, const N: usize>(items: &'a [T; N], extra: T) -> Result<usize, String>
where
    T: Clone + Debug + PartialEq,
{
    Ok(items.iter().filter(|i| **i == extra).count())
}

#[retry]
async fn impl_trait(key: impl AsRef<str> + Clone, sink: &mut Vec<String>) -> Result<(), String> {
    sink.push(key.as_ref().to_owned());
    Ok(())
}

#[retry]
async fn patterns((id, tag): (u64, String), _: u8, Wrapper(inner): Wrapper) -> io::Result<String> {
    Ok(format!("{id}{tag}{inner}"))
}

#[derive(Clone)]
struct Wrapper(u32);

#[retry]
async fn question_mark(text: &str) -> Result<u32, Box<dyn std::error::Error + Send + Sync>> {
    let n: u32 = text.parse()?;
    if n == 0 {
        return Err("zero".into());
    }
    Ok(n)
}

#[retry]
async fn unsafe_inside() -> Result<u8, String> {
    let value = 7u8;
    let pointer: *const u8 = &value;
    // SAFETY: `pointer` points at `value`, alive for this whole block.
    Ok(unsafe { *pointer })
}

// A return type that cannot be named in the body: inference does without it.
#[retry]
async fn opaque(n: u32) -> Result<impl std::fmt::Display, String> {
    Ok(n)
}

fn main() {
    drop(opaque(1));
    let mut client = Client { name: "c".into(), calls: 0 };
    drop(client.name());
    drop(client.typed_receiver("!"));
    drop(client.bump(1));
    drop(client.mut_argument(vec![]));
    drop(generic(&[1, 2], 2));
    let mut sink = Vec::new();
    drop(impl_trait("k", &mut sink));
    drop(patterns((1, "t".into()), 0, Wrapper(3)));
    drop(question_mark("4"));
    drop(unsafe_inside());
}

/// Owner-level defaults read through a type: `Self` of a generic `impl`, and the `impl`'s own
/// type parameter, which the attribute cannot see.
trait Config {
    const RETRY: RetryOptions;
}

struct Fast;

impl Config for Fast {
    const RETRY: RetryOptions = RetryOptions::new().with_base_delay_ms(10);
}

struct Pool<C> {
    config: std::marker::PhantomData<C>,
}

impl<C: Config> Pool<C> {
    const RETRY: RetryOptions = RetryOptions::new().with_max_attempts(2);

    #[retry(defaults = Self::RETRY)]
    async fn own(&self) -> Result<(), String> {
        Ok(())
    }

    #[retry(defaults = C::RETRY, max_delay_ms = Pool::<C>::CEILING_MS)]
    async fn configured(&self) -> Result<(), String> {
        Ok(())
    }

    const CEILING_MS: u64 = 1_000;
}

#[allow(dead_code)]
fn use_pool(pool: &Pool<Fast>) {
    drop(pool.own());
    drop(pool.configured());
}
