//! # statekit-wordcount
//!
//! The classic word count, written the way an engine embeds statekit — the worked example of
//! the library API, running on `statekit-runtime` (what `statekit demo wordcount` runs).
//!
//! Topology: `source` (parallelism 1, operator list state `offsets` = (input, byte offset))
//! → `counter` (parallelism P, keyed by word: ValueState `count`, ListState
//! `recent-positions`, MapState `followers`) → `sink` (parallelism P, chained to the counter,
//! operator list state `pending-commits` = pre-committed transaction files).
//!
//! A checkpoint N is taken between two records (so state, source offset and sink output are
//! consistent, as with aligned barriers) by the runtime's [`CheckpointCoordinator`]:
//! 1. *synchronous part* (the job's [`Checkpointed::snapshot`]): every sink pre-commits its
//!    open transaction, every backend freezes a copy-on-write view
//!    ([`statekit_runtime::KeyedCut::take`]), operator state is copied;
//! 2. *asynchronous part*: the views are written on background threads
//!    ([`statekit_runtime::AsyncSnapshot::write`]);
//! 3. [`statekit_checkpoint::CheckpointStore::complete`] commits `_metadata` atomically — the
//!    checkpoint exists;
//! 4. *notify complete*: sinks commit (rename) their transactions up to N.
//!
//! Restore (from a [`Snapshot`](statekit_snapshot::Snapshot) of any family): keyed state into
//! each new subtask's key-group range (any parallelism), operator state redistributed, then the
//! sink commits what the snapshot recorded as pre-committed and aborts every other pending
//! transaction ([`statekit_runtime::FileSink::recover`]).
//!
//! ## Use
//!
//! Fill in [`Settings`] (a command line does it from its flags), and call [`run`] with a
//! [`Host`]: the program around the job, which says what the job reports ([`Event`]), opens
//! the snapshot to restore from and tells when to stop. Flink's configuration keys
//! (`--config` files and `-D` entries, [`Settings::config`] and [`Settings::define`]) set
//! what the settings given explicitly do not ([`flink_keys`]).
//!
//! [`CheckpointCoordinator`]: statekit_runtime::CheckpointCoordinator
//! [`Checkpointed::snapshot`]: statekit_runtime::Checkpointed::snapshot

mod backend;
pub mod config;
mod error;
pub mod flink_keys;
mod host;
mod job;
mod settings;
pub mod source;

pub use error::{ConfigFileError, Contradiction, NotAScalar, WordcountError};
pub use host::{Event, Host, HostError};
pub use job::run;

use statekit_checkpoint::RestoreMode;
use statekit_core::{StateDescriptor, TypeSchema};
use std::path::PathBuf;
use std::time::Duration;

/// The uid of the source operator.
pub const SOURCE_UID: &str = "source";
/// The uid of the keyed counter operator.
pub const COUNTER_UID: &str = "counter";
/// The uid of the sink operator.
pub const SINK_UID: &str = "sink";

/// The settings of one run of the word count: what `statekit demo wordcount`'s flags set
/// (each field documents its flag). Flink's configuration keys from [`Settings::config`] and
/// [`Settings::define`] set the fields they map to, unless the field is named in
/// [`Settings::explicit`].
#[derive(Clone, Debug)]
pub struct Settings {
    /// Report the job's state schema ([`Event::Schema`]) and stop without running
    /// (`--print-schema`).
    pub print_schema: bool,
    /// The input text file (`None`: a small built-in text; `-`: standard input as a stream)
    /// (`--input`).
    pub input: Option<PathBuf>,
    /// A TCP socket `HOST:PORT` to read lines from, as Flink's `socketTextStream` (`--socket`).
    pub socket: Option<String>,
    /// The output directory of the sink (`--output`; a local path).
    pub output: PathBuf,
    /// The checkpoint base directory, `<dir>/<job-id>/chk-<N>/` (`--checkpoint-dir`; a local
    /// path or an object-store URL).
    pub checkpoint_dir: PathBuf,
    /// Take a checkpoint every this many records (`--checkpoint-every`, at least 1).
    pub checkpoint_every: u64,
    /// Also take a checkpoint when this much time passed since the last one
    /// (`--checkpoint-interval`).
    pub checkpoint_interval: Option<Duration>,
    /// Completed checkpoints to keep (`--retained-checkpoints`).
    pub retained_checkpoints: usize,
    /// The parallelism of the counter and the sink (`--parallelism`).
    pub parallelism: u32,
    /// The max parallelism: the number of key groups (`--max-parallelism`).
    pub max_parallelism: u32,
    /// The snapshot to restore from (directory or `_metadata`), or `latest`: the newest
    /// complete checkpoint under [`Settings::checkpoint_dir`] (`--restore`).
    pub restore: Option<String>,
    /// Allow a restore that leaves state of the snapshot unrestored
    /// (`--allow-non-restored-state`).
    pub allow_non_restored_state: bool,
    /// Where savepoints go (`--savepoint-dir`).
    pub savepoint_dir: PathBuf,
    /// When the input ends or on a stop, take a savepoint and report its path
    /// (`--stop-with-savepoint`).
    pub stop_with_savepoint: bool,
    /// The delivery guarantee (`--guarantee`).
    pub guarantee: Guarantee,
    /// Also report every emitted line ([`Event::Echo`]; `--echo`).
    pub echo: bool,
    /// The keyed state backend of the counter (`--backend`).
    pub backend: BackendKind,
    /// How checkpoints store keyed state (`--checkpoint-type`).
    pub checkpoint_type: CheckpointType,
    /// The format of savepoints (`--savepoint-format`).
    pub savepoint_format: SavepointFormat,
    /// Who owns the snapshot restored from (`--restore-mode`).
    pub restore_mode: RestoreMode,
    /// The RocksDB options profile: `default`, `spinning-disk` or `flash-ssd`
    /// (`--rocksdb-profile`).
    pub rocksdb_profile: String,
    /// Where RocksDB keeps its working databases (`None`: the system temporary directory)
    /// (`--rocksdb-dir`).
    pub rocksdb_dir: Option<PathBuf>,
    /// Turn the changelog on, as `state.changelog.enabled: true` does (`--changelog`).
    pub changelog: bool,
    /// Configuration entries `KEY=VALUE` under Flink's key names; they win over
    /// [`Settings::config`] (`-D`).
    pub define: Vec<String>,
    /// A YAML configuration file with Flink's key names (`--config`).
    pub config: Option<PathBuf>,
    /// The settings given explicitly, by field name (`backend`, `checkpoint_dir`, …): they
    /// win over the configuration keys that mean the same.
    pub explicit: Vec<String>,
}

/// How checkpoints store keyed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CheckpointType {
    /// Every checkpoint holds all state in the canonical format.
    Full,
    /// Native RocksDB checkpoints sharing unchanged files with earlier ones.
    Incremental,
}

/// The format of savepoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum SavepointFormat {
    /// Backend-independent.
    Canonical,
    /// The backend's own files.
    Native,
}

/// The keyed state backends the demo can run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum BackendKind {
    /// The heap backend (`statekit-hashmap`).
    Hashmap,
    /// The RocksDB backend (`statekit-rocksdb`; needs the `rocksdb` cargo feature, on by default).
    Rocksdb,
}

/// The delivery guarantee of a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[allow(clippy::enum_variant_names)] // the names are the standard terms
pub enum Guarantee {
    /// Checkpoints + two-phase-commit sink: no loss, no duplicates.
    ExactlyOnce,
    /// Checkpoints, sink writes directly: no loss, duplicates after a failure.
    AtLeastOnce,
    /// No checkpoints; the source commits its position ahead of processing: loss after a failure.
    AtMostOnce,
}

impl From<Guarantee> for statekit_runtime::Guarantee {
    fn from(g: Guarantee) -> Self {
        match g {
            Guarantee::ExactlyOnce => statekit_runtime::Guarantee::ExactlyOnce,
            Guarantee::AtLeastOnce => statekit_runtime::Guarantee::AtLeastOnce,
            Guarantee::AtMostOnce => statekit_runtime::Guarantee::AtMostOnce,
        }
    }
}

/// The counter's keyed states: `count` (word → occurrences), `recent-positions` (word → its
/// last three byte offsets) and `followers` (word → the words that followed it → how often).
fn counter_states() -> [StateDescriptor; 3] {
    [
        StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
        StateDescriptor::list("recent-positions", TypeSchema::Utf8, TypeSchema::U64),
        StateDescriptor::map("followers", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64),
    ]
}

/// The state schema this job declares at parallelism `p` and max parallelism `max_p`: its
/// three operators and their states (as `statekit schema --json` writes a snapshot's; what
/// `statekit check SNAPSHOT --against` reads).
pub fn job_schema(p: u32, max_p: u32) -> statekit_migrate::JobSchema {
    use statekit_migrate::schema::{KeyedStateSchema, OperatorSchema, OperatorStateSchema};
    let op = |uid: &str, parallelism: u32, keyed: Vec<KeyedStateSchema>, operator: Vec<OperatorStateSchema>| {
        OperatorSchema {
            uid: uid.to_string(),
            operator_id: Some(statekit_core::OperatorId::from_uid(uid).to_string()),
            max_parallelism: max_p,
            parallelism: Some(parallelism),
            keyed_states: keyed,
            operator_states: operator,
            key_group_scheme: Default::default(),
        }
    };
    statekit_migrate::JobSchema {
        operators: vec![
            op(
                SOURCE_UID,
                1,
                vec![],
                vec![OperatorStateSchema::of(&statekit_runtime::source::offsets_descriptor())],
            ),
            op(
                COUNTER_UID,
                p,
                counter_states().iter().map(KeyedStateSchema::of).collect(),
                vec![],
            ),
            op(
                SINK_UID,
                p,
                vec![],
                vec![OperatorStateSchema::of(
                    &statekit_runtime::sink::pending_commits_descriptor(),
                )],
            ),
        ],
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The settings `statekit demo wordcount` runs with when given no flags.
    pub(crate) fn settings() -> Settings {
        Settings {
            print_schema: false,
            input: None,
            socket: None,
            output: "statekit-data/output".into(),
            checkpoint_dir: "statekit-data/checkpoints".into(),
            checkpoint_every: 20,
            checkpoint_interval: None,
            retained_checkpoints: 3,
            parallelism: 2,
            max_parallelism: 128,
            restore: None,
            allow_non_restored_state: false,
            savepoint_dir: "statekit-data/savepoints".into(),
            stop_with_savepoint: false,
            guarantee: Guarantee::ExactlyOnce,
            echo: false,
            backend: BackendKind::Hashmap,
            checkpoint_type: CheckpointType::Full,
            savepoint_format: SavepointFormat::Canonical,
            restore_mode: RestoreMode::NoClaim,
            rocksdb_profile: "default".into(),
            rocksdb_dir: None,
            changelog: false,
            define: Vec::new(),
            config: None,
            explicit: Vec::new(),
        }
    }
}
