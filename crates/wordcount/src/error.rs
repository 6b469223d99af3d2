use statekit_changelog::{ChangelogError, ConfigError};
use statekit_checkpoint::CheckpointError;
use statekit_core::keygroup::KeyGroupError;
use statekit_core::schema::ValueDecodeError;
use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, StateError};
use statekit_objstore::LocationError;
use statekit_runtime::RuntimeError;
use statekit_snapshot::SnapshotError;
use std::path::PathBuf;

/// Errors of the word count: its settings and configuration, the restore, and the run. The
/// lower crates' errors travel boxed, so a `Result` of the job stays small.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WordcountError {
    /// The configuration file or a `-D` entry cannot be read.
    #[error(transparent)]
    ConfigFile(#[from] ConfigFileError),
    /// A Flink key given twice, under two spellings, with different values.
    #[error(transparent)]
    Contradiction(Box<Contradiction>),
    /// A key in Flink's namespaces that no option has, close to one that does.
    #[error("{origin}: unknown configuration key `{key}`; did you mean `{suggestion}`?")]
    UnknownKey {
        /// Where it came from.
        origin: String,
        /// The key as given.
        key: String,
        /// The known spelling nearest to it.
        suggestion: &'static str,
    },
    /// A Flink key's value that does not fit its option.
    #[error("{origin}: {key}: `{value}`: expected {expected}")]
    BadValue {
        /// Where it came from.
        origin: String,
        /// The key as given.
        key: String,
        /// The value as given (trimmed).
        value: String,
        /// What the option takes.
        expected: &'static str,
    },
    /// The changelog's configuration is wrong.
    #[error(transparent)]
    ChangelogConfig(Box<ConfigError>),
    /// `state.changelog.storage: memory` cannot survive the process.
    #[error("state.changelog.storage: memory keeps the log inside this process, so no checkpoint could be restored once it exits; use filesystem (the default)")]
    MemoryChangelog,
    /// Incremental checkpoints asked for with the changelog on.
    #[error("--checkpoint-type incremental and the changelog exclude each other: the changelog already makes checkpoints incremental, for either backend")]
    IncrementalWithChangelog,
    /// Native savepoints asked for with the changelog on.
    #[error("--savepoint-format native needs the RocksDB backend without the changelog (savepoints of a changelog job are canonical)")]
    NativeSavepointWithChangelog,
    /// The changelog with at-most-once, which takes no checkpoints.
    #[error("the changelog needs checkpoints; at-most-once takes none")]
    ChangelogWithoutCheckpoints,
    /// `checkpoint_every` is 0.
    #[error("--checkpoint-every must be at least 1")]
    CheckpointEveryZero,
    /// Incremental checkpoints asked of the heap backend.
    #[error("--checkpoint-type incremental needs --backend rocksdb (the heap backend checkpoints in full; or use --changelog)")]
    IncrementalNeedsRocksDb,
    /// Native savepoints asked of the heap backend.
    #[error("--savepoint-format native needs --backend rocksdb")]
    NativeSavepointNeedsRocksDb,
    /// An unknown RocksDB profile.
    #[error("--rocksdb-profile: {0}")]
    RocksDbProfile(String),
    /// The RocksDB backend asked of a build without it.
    #[error("this statekit was built without the `rocksdb` feature")]
    NoRocksDb,
    /// A native RocksDB snapshot restored into the heap backend.
    #[error("{snapshot} is a native RocksDB snapshot: restore it with --backend rocksdb (or take a canonical savepoint to switch backends)")]
    NativeNeedsRocksDb {
        /// The snapshot.
        snapshot: String,
    },
    /// At-most-once with a checkpoint directory on an object store.
    #[error("--guarantee at-most-once keeps its committed offset in a local file under --checkpoint-dir: use a local --checkpoint-dir (not {checkpoint_dir})")]
    AtMostOnceNeedsLocalDir {
        /// The checkpoint directory given.
        checkpoint_dir: String,
    },
    /// The snapshot restored holds state of operators the job does not have.
    #[error("cannot map the state of {} {} in {} to the word count, which has no such operator (its uids: {}, {}, {}): that state would be lost. Restore anyway with -n (--allow-non-restored-state, Flink's --allowNonRestoredState), or rename the uid first (statekit rewrite --rename-uid OLD=NEW)",
        if .operators.len() == 1 { "operator" } else { "operators" },
        .operators.iter().map(|u| format!("{u:?}")).collect::<Vec<_>>().join(", "),
        .snapshot.display(), crate::SOURCE_UID, crate::COUNTER_UID, crate::SINK_UID)]
    UnclaimedState {
        /// The operators' uids (or ids) as the snapshot names them.
        operators: Vec<String>,
        /// The snapshot.
        snapshot: PathBuf,
    },
    /// The TCP source cannot connect.
    #[error("--socket {addr}: cannot connect (is a server listening there? e.g. `nc -lk PORT`)")]
    SocketConnect {
        /// `HOST:PORT`.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `state.changelog.dstl.dfs.base-path` is not a usable location.
    #[error("state.changelog.dstl.dfs.base-path")]
    ChangelogBasePath(#[source] LocationError),
    /// A local directory cannot be created.
    #[error("cannot create {}", .path.display())]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Reporting to the host failed (a closed standard output, say).
    #[error("{0}")]
    Output(#[source] std::io::Error),
    /// The host's own code failed ([`crate::Host::open_snapshot`], [`crate::Host::stop_flag`]).
    #[error(transparent)]
    Host(crate::HostError),
    /// A location given is not usable.
    #[error(transparent)]
    Location(#[from] LocationError),
    /// The runtime failed (a checkpoint, the sink, the source).
    #[error(transparent)]
    Runtime(Box<RuntimeError>),
    /// A backend or its state failed.
    #[error(transparent)]
    State(Box<StateError>),
    /// Opening or restoring a backend, or finding a checkpoint, failed.
    #[error(transparent)]
    Snapshot(Box<SnapshotError>),
    /// The checkpoint store or the restored snapshot failed.
    #[error(transparent)]
    Checkpoint(Box<CheckpointError>),
    /// The changelog's upload service failed.
    #[error(transparent)]
    Changelog(Box<ChangelogError>),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A word has no key group under the restored state's key-group scheme.
    #[error(transparent)]
    KeyGroup(#[from] KeyGroupError),
    /// A stored count does not decode.
    #[error(transparent)]
    Decode(#[from] ValueDecodeError),
}

macro_rules! boxed_from {
    ($($variant:ident($t:ty)),*) => {$(
        impl From<$t> for WordcountError {
            fn from(e: $t) -> Self {
                WordcountError::$variant(Box::new(e))
            }
        }
    )*};
}

boxed_from!(
    ChangelogConfig(ConfigError),
    Runtime(RuntimeError),
    State(StateError),
    Snapshot(SnapshotError),
    Checkpoint(CheckpointError),
    Changelog(ChangelogError)
);

impl WordcountError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        use WordcountError as E;
        match self {
            E::ConfigFile(e) => e.kind(),
            E::Contradiction(_)
            | E::UnknownKey { .. }
            | E::BadValue { .. }
            | E::MemoryChangelog
            | E::IncrementalWithChangelog
            | E::NativeSavepointWithChangelog
            | E::ChangelogWithoutCheckpoints
            | E::CheckpointEveryZero
            | E::IncrementalNeedsRocksDb
            | E::NativeSavepointNeedsRocksDb
            | E::RocksDbProfile(_)
            | E::NativeNeedsRocksDb { .. }
            | E::AtMostOnceNeedsLocalDir { .. }
            | E::UnclaimedState { .. }
            | E::ChangelogBasePath(_) => ErrorKind::Caller,
            E::NoRocksDb => ErrorKind::Unsupported,
            E::SocketConnect { source, .. } | E::CreateDir { source, .. } | E::Output(source) => {
                ErrorKind::of_io(source)
            }
            E::Host(e) => ErrorKind::of_dyn(e.as_ref()),
            E::ChangelogConfig(e) => e.kind(),
            E::Location(e) => e.kind(),
            E::Runtime(e) => e.kind(),
            E::State(e) => e.kind(),
            E::Snapshot(e) => e.kind(),
            E::Checkpoint(e) => e.kind(),
            E::Changelog(e) => e.kind(),
            E::Storage(e) => e.kind(),
            E::KeyGroup(e) => e.kind(),
            E::Decode(_) => ErrorKind::Corrupt,
        }
    }
}

impl statekit_core::HasErrorKind for WordcountError {
    fn kind(&self) -> ErrorKind {
        WordcountError::kind(self)
    }
}

/// One Flink option given twice, under two spellings, with different values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{name}: set twice with different values: `{first_value}` as {first_key} ({first_origin}) and `{value}` as {key} ({origin})")]
pub struct Contradiction {
    /// The option's current name.
    pub name: &'static str,
    /// The first value.
    pub first_value: String,
    /// The spelling it was given under.
    pub first_key: String,
    /// Where it came from (`-D`, a file).
    pub first_origin: String,
    /// The second value.
    pub value: String,
    /// Its spelling.
    pub key: String,
    /// Where it came from.
    pub origin: String,
}

/// A value of the configuration file that should be a scalar (a string, a number, a
/// boolean) and is not.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("expected a scalar")]
pub struct NotAScalar;

/// The configuration file ([`crate::Settings::config`]) or a `-D` entry
/// ([`crate::Settings::define`]) cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigFileError {
    /// The file cannot be read.
    #[error("cannot read {}", .path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A `-D` entry without `=`.
    #[error("-D {define}: expected key=value")]
    DefineWithoutValue {
        /// The entry.
        define: String,
    },
    /// A `-D` entry with an empty key.
    #[error("-D {define}: the key is empty")]
    DefineWithoutKey {
        /// The entry.
        define: String,
    },
    /// The file is not YAML.
    #[error("{origin}: line {line}, column {column}: {problem}")]
    Yaml {
        /// The file.
        origin: String,
        /// The line (as the YAML parser counts).
        line: usize,
        /// The column, from 1.
        column: usize,
        /// The parser's message.
        problem: String,
    },
    /// The document is not a map at the top.
    #[error("{origin}: expected a map of keys to values at the top")]
    NotAMapAtTop {
        /// The file.
        origin: String,
    },
    /// More than one YAML document.
    #[error("{origin}: holds {count} YAML documents; expected one")]
    Documents {
        /// The file.
        origin: String,
        /// How many.
        count: usize,
    },
    /// A value flattened as a map that is none.
    #[error("{origin}: under `{prefix}`: expected a map")]
    NotAMap {
        /// The file.
        origin: String,
        /// The dotted key of the value.
        prefix: String,
    },
    /// A key of a map that is not a scalar.
    #[error("{origin}: under `{prefix}`: a key that is not a scalar")]
    KeyNotScalar {
        /// The file.
        origin: String,
        /// The dotted key of the map.
        prefix: String,
        /// What it is not.
        #[source]
        source: NotAScalar,
    },
    /// A list holding something else than scalars.
    #[error("{origin}: {key}: a list of maps")]
    ListOfMaps {
        /// The file.
        origin: String,
        /// The dotted key.
        key: String,
        /// What an item is not.
        #[source]
        source: NotAScalar,
    },
    /// A key without a value.
    #[error("{origin}: {key}: no value")]
    NoValue {
        /// The file.
        origin: String,
        /// The dotted key.
        key: String,
    },
    /// A value that is neither a map, a list nor a scalar.
    #[error("{origin}: {key}: not a scalar")]
    ValueNotScalar {
        /// The file.
        origin: String,
        /// The dotted key.
        key: String,
        /// What it is not.
        #[source]
        source: NotAScalar,
    },
}

impl ConfigFileError {
    /// What kind of failure this is: the file's I/O error's, else the caller's input.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ConfigFileError::Read { source, .. } => ErrorKind::of_io(source),
            _ => ErrorKind::Caller,
        }
    }
}

impl statekit_core::HasErrorKind for ConfigFileError {
    fn kind(&self) -> ErrorKind {
        ConfigFileError::kind(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_and_kinds() {
        let e = WordcountError::UnclaimedState {
            operators: vec!["old".into()],
            snapshot: PathBuf::from("sp"),
        };
        assert!(e.to_string().starts_with("cannot map the state of operator \"old\" in sp to the word count, which has no such operator (its uids: source, counter, sink)"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Caller);
        let two = WordcountError::UnclaimedState {
            operators: vec!["a".into(), "b".into()],
            snapshot: PathBuf::from("sp"),
        };
        assert!(
            two.to_string()
                .starts_with("cannot map the state of operators \"a\", \"b\" in sp"),
            "{two}"
        );
        let read = ConfigFileError::Read {
            path: "f.yaml".into(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "gone"),
        };
        assert_eq!(WordcountError::from(read).kind(), ErrorKind::NotFound);
        assert_eq!(WordcountError::NoRocksDb.kind(), ErrorKind::Unsupported);
    }
}
