//! Apache Flink's own savepoints and checkpoints, read without a JVM.
//!
//! [`decode_metadata`] reads a `_metadata` file of versions 3 to 7 (Flink 1.11 through 2.x)
//! into [`FlinkMetadata`]: operators by `statekit_core::OperatorId` (the same ids Flink
//! derives from uids), and by name and uid where the version stores them; their subtasks;
//! and every state handle kind Flink writes (inline bytes, relative and absolute files,
//! file-merging segments, canonical savepoint and heap key-group streams, RocksDB native and
//! incremental files, changelog parts, operator state with its distribution modes,
//! unaligned-checkpoint channel state). The byte layout is in `docs/flink-format.md`.
//!
//! Errors are typed ([`FlinkError`]) and name the file, the offset and the field.

// Decoders of untrusted bytes: no panicking index, unwrap or expect outside tests.
#![cfg_attr(not(test), deny(clippy::indexing_slicing, clippy::unwrap_used, clippy::expect_used))]

mod canonical;
mod changelog;
mod error;
mod heap;
mod input;
mod meta;
pub mod metadata;
#[cfg(feature = "rocksdb")]
mod native;
mod operator;
mod problem;
pub mod scope;
mod serializer;
mod snapshot;
mod value;

pub use canonical::KeyGroupsView;
pub use error::{BudgetSpent, FlinkError};
pub use meta::{decode_keyed_proxy, decode_operator_proxy, BackendStateType, KeyedProxy, OperatorProxy, StateMeta};
pub use metadata::{
    check_metadata_size, decode_metadata, is_flink_metadata, ChangelogFilePart, ChannelHandle, DistributionMode,
    FlinkKeyGroupRange, FlinkMetadata, FlinkOperator, FlinkSubtask, IncrementalHandle, KeyGroupsHandle, KeyedHandle,
    MasterState, NativeFile, OperatorStateHandle, OperatorStatePart, SnapshotProperties, StreamHandle,
    MAX_METADATA_BYTES, METADATA_MAGIC,
};
#[cfg(feature = "rocksdb")]
pub use native::NativeKeyedView;
pub use operator::read_operator_state;
pub use problem::DecodeProblem;
pub use serializer::{decode_serializer_snapshot, FlinkType};
pub use snapshot::{
    flink_key_group, FlinkOpenOptions, FlinkSnapshot, FlinkVerifyReport, Location, OpaquePart,
    METADATA_VERSION_PROPERTY,
};
