//! The child program of `tests/changelog_crash.rs`: runs the changelog crash job (a
//! deterministic workload on changelog subtasks over the heap or the RocksDB backend,
//! checkpointing every 100 records through a slowed storage, materializing often, printing a
//! marker before each slowed upload and materialization) until it is killed.
//!
//! ```text
//! cargo run -p statekit-tests --example changelog_crash_child -- DIR heap|rocksdb
//! ```
//!
//! Each run restores the newest complete checkpoint under `DIR/checkpoints/` and goes on from
//! the record count it covers. The test runs the same code (`statekit_tests::changelog_crash`)
//! by starting its own binary in child mode, so it never depends on a separately built (or
//! stale) example binary.

use statekit_tests::changelog_crash::{child_main, Delegate};
use std::path::Path;

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(dir), Some(delegate)) = (args.next(), args.next().as_deref().and_then(Delegate::parse)) else {
        eprintln!("usage: changelog_crash_child DIR heap|rocksdb");
        std::process::exit(2);
    };
    child_main(Path::new(&dir), delegate);
}
