//! A real rmcp server in process, over tokio duplex pipes, with faults a test scripts: refused
//! connects, a handshake that never comes, a connection cut in the middle of a call, a server
//! slower than the deadline. One test binary for both areas, so that the SDK's generic client
//! and server code is compiled once for them.

#[path = "../support/mod.rs"]
mod support;

mod connection;
mod runner;
