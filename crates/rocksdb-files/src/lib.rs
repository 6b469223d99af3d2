//! RocksDB's files read in safe Rust (work in progress).
