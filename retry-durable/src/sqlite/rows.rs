//! How SQLite reads one column ([`Columns`]); everything else about rows is shared
//! (`crate::sql`).

use rusqlite::Row;
use rusqlite::types::FromSql;

use crate::record::{DeadLetter, WorkRecord};
use crate::sql::{Columns, Read, dead_from, work_from};

/// One column, or what is wrong with it.
fn col<T: FromSql>(row: &Row<'_>, index: usize) -> Result<T, String> {
    row.get(index).map_err(|e| match e {
        rusqlite::Error::InvalidColumnType(_, name, kind) => format!("column {name} holds {kind}"),
        rusqlite::Error::FromSqlConversionFailure(_, _, cause) => cause.to_string(),
        rusqlite::Error::IntegralValueOutOfRange(_, value) => {
            format!("column {index} value {value} out of range")
        }
        other => other.to_string(),
    })
}

impl Columns for Row<'_> {
    fn int(&self, index: usize) -> Result<i64, String> {
        col(self, index)
    }

    fn opt_int(&self, index: usize) -> Result<Option<i64>, String> {
        col(self, index)
    }

    fn text(&self, index: usize) -> Result<String, String> {
        col(self, index)
    }

    fn opt_text(&self, index: usize) -> Result<Option<String>, String> {
        col(self, index)
    }
}

/// Reads a `work` row (the id must be an integer: it is the primary key).
pub(super) fn work_from_row(row: &Row<'_>) -> rusqlite::Result<Read<WorkRecord>> {
    Ok(work_from(row.get(0)?, row))
}

/// Reads a `dead_letter` row.
pub(super) fn dead_from_row(row: &Row<'_>) -> rusqlite::Result<Read<DeadLetter>> {
    Ok(dead_from(row.get(0)?, row))
}
