//! The crash tests' [`Backend`] on SQLite: the url is the file's path.

use std::collections::BTreeMap;

use retry_durable::SqliteStore;

use super::Backend;

pub struct Sqlite;

impl Backend for Sqlite {
    type Store = SqliteStore;
    const NAME: &'static str = "SQLite";

    async fn open(url: &str) -> SqliteStore {
        SqliteStore::open(url).unwrap()
    }

    async fn commits_in_history(url: &str, run: &str) -> BTreeMap<String, i64> {
        let conn = rusqlite::Connection::open(url).unwrap();
        let mut statement = conn
            .prepare(
                "SELECT call_id, count(*) FROM call_history
                 WHERE run_id = ?1 AND state = 'committed' GROUP BY call_id",
            )
            .unwrap();
        statement
            .query_map([run], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}
