use std::sync::atomic::{AtomicU32, Ordering};
use retry_core::retry;

#[derive(Debug, PartialEq)]
enum E { Flaky, Io }
impl From<std::num::ParseIntError> for E { fn from(_: std::num::ParseIntError) -> Self { E::Io } }

static CALLS: AtomicU32 = AtomicU32::new(0);

#[retry(max_attempts = 5, base_delay_ms = 500, max_delay_ms = 10_000)]
async fn flaky(name: String, s: &str) -> Result<u32, E> {
    let n = CALLS.fetch_add(1, Ordering::SeqCst);
    let v: u32 = s.parse()?;
    drop(name);
    if n < 2 { return Err(E::Flaky); }
    Ok(v)
}

struct Counter { n: u32 }
impl Counter {
    #[retry]
    async fn bump(&mut self) -> Result<u32, String> {
        self.n += 1;
        if self.n < 3 { Err(format!("{}", self.n)) } else { Ok(self.n) }
    }
}

#[tokio::test(start_paused = true)]
async fn smoke() {
    assert_eq!(flaky("x".into(), "7").await, Ok(7));
    let mut c = Counter { n: 0 };
    assert_eq!(c.bump().await, Ok(3));
}
