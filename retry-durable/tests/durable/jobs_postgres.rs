//! The owner's behaviour on PostgreSQL, unchanged from SQLite and memory.

use crate::engine;
use crate::support::postgres as pg;

engine_suite!(pg::fresh().await);
