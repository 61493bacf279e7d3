//! The transactional outbox: save an order and enqueue its confirmation e-mail in one SQLite
//! transaction, so that there is never an e-mail for an order that rolled back, nor an order
//! whose e-mail was lost.
//!
//! Run with `cargo run -p retry-examples-durable --example outbox`. The store and the shop's
//! own `orders` table share one file in a temporary directory: the store opens it first
//! (creating its tables), then the shop's connection adds its table beside them. Two orders
//! are placed; the second one's payment is declined, its transaction rolls back, and with it
//! its e-mail. The worker then sends exactly one e-mail.

use std::error::Error;

use retry_durable::{Jobs, SqliteStore, When, WorkOptions};
use rusqlite::Connection;

/// Saves the order and its e-mail in one transaction; `declined` rolls both back.
fn place_order(
    jobs: &Jobs<SqliteStore>,
    conn: &mut Connection,
    order: i64,
    email: &str,
    declined: bool,
) -> Result<(), Box<dyn Error>> {
    let tx = conn.transaction()?;
    tx.execute(
        "INSERT INTO orders (id, email) VALUES (?1, ?2)",
        (order, email),
    )?;
    // The key makes a retried request enqueue the e-mail once.
    let options = WorkOptions::new().key(format!("confirm-{order}"));
    jobs.schedule_in(&tx, When::Now, "confirm", &(order, email), options)?;
    if declined {
        println!("order {order}: payment declined, rolled back (order and e-mail)");
        tx.rollback()?;
    } else {
        tx.commit()?;
        println!("order {order}: saved with its e-mail, one commit");
    }
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("shop.db");
    let jobs = Jobs::builder(SqliteStore::open(&path)?)
        .owner("shop")
        .handler(
            "confirm",
            |(order, email): (i64, String), _ctx| async move {
                println!("             e-mail to {email}: order {order} confirmed");
                Ok(())
            },
        )
        .build()?;

    let mut conn = Connection::open(&path)?;
    conn.execute_batch("CREATE TABLE orders (id INTEGER PRIMARY KEY, email TEXT NOT NULL)")?;
    place_order(&jobs, &mut conn, 1, "ada@example.com", false)?;
    place_order(&jobs, &mut conn, 2, "bob@example.com", true)?;
    // A worker in this process hears of committed work at once; one in another process, by
    // its poll.
    jobs.wake();

    let sent = jobs.run_due().await?;
    let orders: i64 = conn.query_row("SELECT count(*) FROM orders", [], |row| row.get(0))?;
    println!("orders saved: {orders}, e-mails sent: {sent}");
    assert_eq!((orders, sent), (1, 1));
    Ok(())
}
