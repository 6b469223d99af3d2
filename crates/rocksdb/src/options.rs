//! [`RocksDbOptions`]: named profiles and the knobs that matter, turned into RocksDB options.

use crate::layout::{list_full_merge, list_partial_merge, MERGE_OPERATOR_NAME};
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// A named starting point for [`RocksDbOptions`], after Flink's `PredefinedOptions`.
///
/// | profile | block cache | block size | write buffers | compression: level 0, others (bottommost) | compaction | background jobs |
/// |---|---|---|---|---|---|---|
/// | `default` | 64 MiB | 4 KiB | 2 × 64 MiB | none, lz4 (lz4) | level, 64 MiB files | 2 |
/// | `spinning-disk` | 256 MiB | 128 KiB | 4 × 64 MiB, merge 3 | lz4, lz4 (zstd) | level, dynamic level sizes, 256 MiB files, 2 MiB compaction readahead | 4 |
/// | `flash-ssd` | 128 MiB | 16 KiB | 3 × 64 MiB | none, lz4 (lz4) | level, dynamic level sizes, 64 MiB files | 4 |
///
/// Every profile uses a 10-bit bloom filter per key (state access is point lookups), keeps
/// index and filter blocks in the block cache, and never fsyncs (the working directory is
/// scratch space: durability comes from checkpoints, so the write-ahead log is off too), and
/// puts a 256 MiB write-back cache in front of RocksDB for point reads and writes
/// ([`RocksDbOptions::write_back_cache_bytes`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    /// Moderate memory, general-purpose.
    #[default]
    Default,
    /// Spinning disks: big blocks and files, compaction readahead and more memory, so that
    /// reads and compactions turn into fewer, longer sequential I/Os (Flink's
    /// `SPINNING_DISK_OPTIMIZED_HIGH_MEM`).
    SpinningDisk,
    /// Local flash / SSD: random reads are cheap, so small blocks and more background
    /// compaction threads (Flink's `FLASH_SSD_OPTIMIZED`).
    FlashSsd,
}

impl Profile {
    /// Every profile.
    pub const ALL: [Profile; 3] = [Profile::Default, Profile::SpinningDisk, Profile::FlashSsd];

    /// The profile's name: `default`, `spinning-disk` or `flash-ssd`.
    pub fn name(self) -> &'static str {
        match self {
            Profile::Default => "default",
            Profile::SpinningDisk => "spinning-disk",
            Profile::FlashSsd => "flash-ssd",
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Profile::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| format!("unknown RocksDB profile {s:?} (expected default, spinning-disk or flash-ssd)"))
    }
}

/// Block compression of SST files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compression {
    /// No compression.
    None,
    /// LZ4: fast, moderate ratio.
    Lz4,
    /// Zstandard: slower, better ratio.
    Zstd,
}

impl Compression {
    pub(crate) fn to_rocksdb(self) -> rocksdb::DBCompressionType {
        match self {
            Compression::None => rocksdb::DBCompressionType::None,
            Compression::Lz4 => rocksdb::DBCompressionType::Lz4,
            Compression::Zstd => rocksdb::DBCompressionType::Zstd,
        }
    }

    /// The name: `none`, `lz4` or `zstd`.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        }
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(format!("unknown compression {other:?} (expected none, lz4 or zstd)")),
        }
    }
}

/// How a [`RocksDbBackend`](crate::RocksDbBackend) sets up its database. Start from a
/// [`Profile`] ([`RocksDbOptions::profile`], or [`Default`] for [`Profile::Default`]) and
/// adjust the public fields or use the `with_*` methods.
///
/// ```
/// use statekit_rocksdb::{Compression, Profile, RocksDbOptions};
/// let opts = RocksDbOptions::profile(Profile::FlashSsd)
///     .with_block_cache_bytes(512 << 20)
///     .with_compression(Compression::Zstd);
/// assert_eq!(opts.block_size, 16 << 10);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct RocksDbOptions {
    /// The profile these settings started from (informational once fields are changed).
    pub profile: Profile,
    /// Directory under which the backend creates its own fresh working directory
    /// (`statekit-rocksdb-XXXXXX`), removed again when the backend and all its snapshot
    /// views are dropped. `None`: [`std::env::temp_dir`].
    pub local_dir: Option<PathBuf>,
    /// Size of the LRU block cache shared by all column families (uncompressed data,
    /// index and filter blocks), in bytes.
    pub block_cache_bytes: usize,
    /// Size of one memtable per column family, in bytes (`write_buffer_size`).
    pub write_buffer_bytes: usize,
    /// Memtables per column family, including the active one (`max_write_buffer_number`).
    pub max_write_buffers: i32,
    /// Immutable memtables merged into one flush (`min_write_buffer_number_to_merge`).
    pub min_write_buffers_to_merge: i32,
    /// Compression of level 0, the tables memtable flushes write — among them the flush in
    /// the synchronous part of every checkpoint. `None` in the `default` and `flash-ssd`
    /// profiles (RocksDB's own reasoning when it added per-level compression: level 0 holds
    /// little of the data and is rewritten by the next compaction, which compresses it);
    /// the `spinning-disk` profile compresses it, disk bandwidth being its scarce resource.
    /// Flink's `state.backend.rocksdb.compression.per.level` sets the same per level.
    pub l0_compression: Compression,
    /// Compression of all levels but the last (and level 0, see `l0_compression`).
    pub compression: Compression,
    /// Compression of the bottommost level (most of the data).
    pub bottommost_compression: Compression,
    /// Uncompressed size of an SST data block, in bytes.
    pub block_size: usize,
    /// Bloom filter bits per key; 0 disables the filter.
    pub bloom_bits_per_key: f64,
    /// LZ4's acceleration (RocksDB's `compression_opts.level`, negated): 1 is LZ4's default;
    /// each step up compresses faster and a little less. Used when no level is compressed
    /// with zstd (whose levels the same setting would change); otherwise ignored.
    pub lz4_acceleration: u32,
    /// Background flush and compaction threads (`max_background_jobs`).
    pub background_jobs: i32,
    /// Target size of an SST file at level 1 (`target_file_size_base`), in bytes.
    pub target_file_bytes: u64,
    /// Total size of level 1 (`max_bytes_for_level_base`), in bytes.
    pub level_base_bytes: u64,
    /// Size levels dynamically from the last one (`level_compaction_dynamic_level_bytes`).
    pub dynamic_level_bytes: bool,
    /// Readahead of compaction inputs (`compaction_readahead_size`), in bytes; 0 = RocksDB's
    /// default.
    pub compaction_readahead_bytes: usize,
    /// Let RocksDB compact in the background (`!disable_auto_compactions`). Off, files are only
    /// compacted by [`RocksDbBackend::compact`](crate::RocksDbBackend::compact): reads slow down
    /// as level-0 files pile up, but incremental checkpoints upload exactly the new flushes.
    pub auto_compactions: bool,
    /// Level-0 files that trigger a compaction into level 1
    /// (`level0_file_num_compaction_trigger`). Each native checkpoint flushes one level-0 file
    /// per state; a level-0 compaction rewrites what it overlaps in level 1, which the next
    /// incremental checkpoint uploads — a higher trigger spreads that over more checkpoints,
    /// at some cost to reads.
    pub level0_compaction_trigger: i32,
    /// Largest `MANIFEST` before RocksDB starts a new one (`max_manifest_file_size`), in bytes.
    /// The `MANIFEST` is private to every native checkpoint, so it stays small.
    pub max_manifest_bytes: usize,
    /// Budget of the write-back cache in front of RocksDB, in bytes (0: off), per backend
    /// (one per subtask, like the block cache and memtables). Point reads and writes of
    /// entries up to 1 KiB are served from it while it has room (beyond, they go straight to
    /// RocksDB, and once it stops holding the working set it is written back and emptied);
    /// dirty entries reach RocksDB in one sorted batch before every scan, merge, snapshot and
    /// checkpoint. Each entry is charged its key, its value and 96 bytes. Dirty entries are
    /// also written back (and stay cached) once their keys and values exceed what the
    /// memtables hold (`write_buffer_bytes` × `max_write_buffers`), in write batches of a
    /// quarter memtable each, so that no memtable grows past its size. At a checkpoint's
    /// synchronous cut, a write-back of 1/64 of a memtable or more goes into sorted SST
    /// files, written while the memtables are flushed, and ingested: the cut writes at most
    /// the memtables and that bound, side by side.
    pub write_back_cache_bytes: usize,
}

impl Default for RocksDbOptions {
    fn default() -> Self {
        Self::profile(Profile::Default)
    }
}

impl RocksDbOptions {
    /// The settings of a named profile (see [`Profile`] for the table).
    pub fn profile(profile: Profile) -> Self {
        const MIB: usize = 1 << 20;
        let base = RocksDbOptions {
            profile,
            local_dir: None,
            block_cache_bytes: 64 * MIB,
            write_buffer_bytes: 64 * MIB,
            max_write_buffers: 2,
            min_write_buffers_to_merge: 1,
            l0_compression: Compression::None,
            compression: Compression::Lz4,
            bottommost_compression: Compression::Lz4,
            block_size: 4 << 10,
            bloom_bits_per_key: 10.0,
            lz4_acceleration: 1,
            background_jobs: 2,
            target_file_bytes: 64 << 20,
            level_base_bytes: 256 << 20,
            dynamic_level_bytes: false,
            compaction_readahead_bytes: 0,
            auto_compactions: true,
            level0_compaction_trigger: 4,
            max_manifest_bytes: 4 * MIB,
            write_back_cache_bytes: 256 * MIB,
        };
        match profile {
            Profile::Default => base,
            Profile::SpinningDisk => RocksDbOptions {
                block_cache_bytes: 256 * MIB,
                max_write_buffers: 4,
                min_write_buffers_to_merge: 3,
                l0_compression: Compression::Lz4,
                bottommost_compression: Compression::Zstd,
                block_size: 128 << 10,
                background_jobs: 4,
                target_file_bytes: 256 << 20,
                level_base_bytes: 1 << 30,
                dynamic_level_bytes: true,
                compaction_readahead_bytes: 2 * MIB,
                ..base
            },
            Profile::FlashSsd => RocksDbOptions {
                block_cache_bytes: 128 * MIB,
                max_write_buffers: 3,
                block_size: 16 << 10,
                background_jobs: 4,
                dynamic_level_bytes: true,
                ..base
            },
        }
    }

    /// Sets the write-back cache's budget (0 turns it off).
    pub fn with_write_back_cache_bytes(mut self, bytes: usize) -> Self {
        self.write_back_cache_bytes = bytes;
        self
    }

    /// Turns background compactions on or off.
    pub fn with_auto_compactions(mut self, on: bool) -> Self {
        self.auto_compactions = on;
        self
    }

    /// Sets the directory the working directory is created in.
    pub fn with_local_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.local_dir = Some(dir.into());
        self
    }

    /// Sets the block cache size.
    pub fn with_block_cache_bytes(mut self, bytes: usize) -> Self {
        self.block_cache_bytes = bytes;
        self
    }

    /// Sets the memtable size.
    pub fn with_write_buffer_bytes(mut self, bytes: usize) -> Self {
        self.write_buffer_bytes = bytes;
        self
    }

    /// Sets the compression of every level, including level 0 and the bottommost.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.l0_compression = compression;
        self.compression = compression;
        self.bottommost_compression = compression;
        self
    }

    /// Sets the compression of level 0 alone (see [`RocksDbOptions::l0_compression`]).
    pub fn with_l0_compression(mut self, compression: Compression) -> Self {
        self.l0_compression = compression;
        self
    }

    /// The RocksDB options for the database and for every column family (the merge
    /// operator is set on all of them, so any column family can hold a list state).
    pub fn to_rocksdb(&self, cache: &rocksdb::Cache) -> rocksdb::Options {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        o.set_use_fsync(false);
        o.set_log_level(rocksdb::LogLevel::Warn);
        o.set_keep_log_file_num(2);
        o.set_max_log_file_size(4 << 20);
        o.set_stats_dump_period_sec(0);
        o.set_max_open_files(-1);
        o.set_max_background_jobs(self.background_jobs.max(1));
        o.set_write_buffer_size(self.write_buffer_bytes.max(64 << 10));
        o.set_max_write_buffer_number(self.max_write_buffers.max(2));
        o.set_min_write_buffer_number_to_merge(self.min_write_buffers_to_merge.max(1));
        o.set_compression_type(self.compression.to_rocksdb());
        if self.l0_compression != self.compression {
            // Per level: RocksDB then ignores `compression` (the bottommost still applies).
            let c = self.compression.to_rocksdb();
            o.set_compression_per_level(&[self.l0_compression.to_rocksdb(), c, c, c, c, c, c]);
        }
        o.set_bottommost_compression_type(self.bottommost_compression.to_rocksdb());
        let lz4_only = [self.l0_compression, self.compression, self.bottommost_compression]
            .iter()
            .all(|c| *c != Compression::Zstd);
        if self.lz4_acceleration > 1 && lz4_only {
            let level = i32::try_from(self.lz4_acceleration).unwrap_or(i32::MAX);
            // window bits and strategy as RocksDB's defaults; no dictionary.
            o.set_compression_options(-14, -level, 0, 0);
        }
        o.set_target_file_size_base(self.target_file_bytes.max(1 << 20));
        o.set_max_bytes_for_level_base(self.level_base_bytes.max(1 << 20));
        o.set_level_compaction_dynamic_level_bytes(self.dynamic_level_bytes);
        if self.compaction_readahead_bytes > 0 {
            o.set_compaction_readahead_size(self.compaction_readahead_bytes);
        }
        o.set_merge_operator(MERGE_OPERATOR_NAME, list_full_merge, list_partial_merge);
        o.set_disable_auto_compactions(!self.auto_compactions);
        let l0 = self.level0_compaction_trigger.max(1);
        o.set_level_zero_file_num_compaction_trigger(l0);
        // RocksDB's defaults (20 and 36) keep their distance from a raised trigger.
        o.set_level_zero_slowdown_writes_trigger(l0.max(4) * 5);
        o.set_level_zero_stop_writes_trigger(l0.max(4) * 9);
        o.set_max_manifest_file_size(self.max_manifest_bytes.max(64 << 10));
        // Start writeback while table files are written (flushes, compactions, bulk loads),
        // so their final sync finds little left to do.
        o.set_bytes_per_sync(8 << 20);
        // A whole-key bloom filter per memtable: a point read of a key a memtable does not
        // hold skips its skiplist search (the largest cost of reads that miss the write-back
        // cache, in `perf`).
        o.set_memtable_whole_key_filtering(true);
        o.set_memtable_prefix_bloom_ratio(0.1);

        let mut t = rocksdb::BlockBasedOptions::default();
        t.set_block_cache(cache);
        t.set_block_size(self.block_size.max(1 << 10));
        t.set_cache_index_and_filter_blocks(true);
        t.set_pin_l0_filter_and_index_blocks_in_cache(true);
        t.set_format_version(5);
        if self.bloom_bits_per_key > 0.0 {
            t.set_bloom_filter(self.bloom_bits_per_key, false);
        }
        o.set_block_based_table_factory(&t);
        o
    }
}
