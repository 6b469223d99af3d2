//! RocksDB's files read in safe Rust, read-only: block-based tables (SST files), the
//! MANIFEST, and a column family's entries merged as a read sees them.
//!
//! Snapshots hand statekit RocksDB files that anyone may have written or damaged. RocksDB's
//! own C++ reader trusts its files (a footer claiming a 2^40-byte block makes it throw
//! `std::bad_alloc`; a changed block byte under a recomputed checksum can crash it), so the
//! read-only tools read them here instead: every length, offset and count is checked against
//! the bytes there are before it is used, and every failure is a typed [`Error`] naming the
//! file, the offset and the field. No `unwrap`, no unchecked indexing, no recursion.
//!
//! What is read:
//! - tables of format_version 0 to 7 (RocksDB 6.x through 10.x; FRocksDB 6.20 as Flink 1.x
//!   writes), legacy and current footers, the format_version 6 footer with its checksum and
//!   context checksums; block checksums CRC32C, xxHash, xxHash64 and XXH3;
//! - blocks uncompressed, Snappy (`snap`), LZ4/LZ4HC (`lz4_flex`'s checked safe decoder) and
//!   ZSTD (`ruzstd`, a pure-Rust decoder: untrusted blocks never reach C, and it is mature
//!   enough to be the `zstd` decoder of several Rust projects and is fuzzed upstream); Zlib,
//!   BZip2, Xpress, dictionaries and custom compressors are refused as unsupported;
//! - index blocks of every built-in type (binary search, hash, two-level partitioned, with
//!   first keys), plain or delta-encoded values (format_version >= 4); data blocks with
//!   restart points, prefix-compressed keys and the optional hash index; range deletions;
//! - the MANIFEST's log records (32 KiB blocks, CRC32C) and version edits: column families
//!   added and dropped, files added (all `NewFile` variants, custom fields) and deleted, last
//!   sequence number;
//! - a column family read as a whole ([`Db::read_column_family`]): entries of all its live
//!   tables in user-key order, the newest visible version of each key (puts, deletes, single
//!   deletes, range deletions), merge operands resolved by a caller's merge function.
//!   Only the bytewise comparator is read; others are refused by name.
//!   [`ColumnFamilyReader::read_range`] reads a key range, decoding only the data blocks
//!   the index says may hold it (a Flink or statekit key group at a time).
//! - write-ahead logs are not replayed: a non-empty log that a column family still needs
//!   (numbered at or above its log number) is refused as unsupported rather than left out
//!   (snapshots flush before they cut, so theirs are empty or absent).
//!
//! Allocations are bounded by the input: blocks lie inside their file (checked before they
//! are sliced), and a compressed block's declared uncompressed size is checked against
//! [`Limits::max_block_bytes`] (and the sum against [`Limits::max_table_bytes`]) before
//! anything is allocated for it.

// Decoders of untrusted bytes: no panicking index, unwrap or expect outside tests.
#![cfg_attr(not(test), deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used))]

mod block;
mod coding;
mod db;
mod error;
mod log;
mod manifest;
mod table;

pub use block::{mask_crc, BlockHandle, ChecksumType};
pub use db::{string_append, ColumnFamilyReader, Db, DbFile, FileData, MergeFn, SharedBytes};
pub use error::{Error, ErrorKind, Result};
pub use log::records as log_records;
pub use manifest::{read_manifest, ColumnFamily, FileMeta, Manifest};
pub use table::{
    decode_footer, read_table, table_layout, Footer, Properties, RangeTombstone, Table, TableEntry, TableLayout,
    BLOCK_BASED_MAGIC, LEGACY_BLOCK_BASED_MAGIC, MAX_FORMAT_VERSION, MAX_SEQUENCE,
};

/// Name of RocksDB's default (bytewise) comparator, the only one read.
pub const BYTEWISE_COMPARATOR: &str = "leveldb.BytewiseComparator";

/// What a stored point entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A value.
    Put,
    /// A deletion.
    Delete,
    /// A single deletion.
    SingleDelete,
    /// A merge operand.
    Merge,
}

impl EntryKind {
    /// RocksDB's value type byte.
    pub fn type_byte(self) -> u8 {
        match self {
            EntryKind::Delete => 0,
            EntryKind::Put => 1,
            EntryKind::Merge => 2,
            EntryKind::SingleDelete => 7,
        }
    }
}

/// Bounds on what one table may make the reader allocate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest uncompressed block (a compressed block declaring more is refused).
    pub max_block_bytes: usize,
    /// Most decoded block bytes of one table.
    pub max_table_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_block_bytes: 256 << 20,
            max_table_bytes: 16 << 30,
        }
    }
}
