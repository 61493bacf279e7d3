//! The store conformance suite on PostgreSQL, unchanged: each case on a database of its own
//! on a server the tests start themselves (or `DATABASE_URL`).

use crate::conformance;
use crate::support::postgres as pg;

conformance_suite!(pg::fresh().await);
