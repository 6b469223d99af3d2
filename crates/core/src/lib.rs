//! # statekit-core
//!
//! The vocabulary an engine links against: key groups and ranges (Flink's formulas),
//! operator ids derived from uids (Flink's murmur3_128), keyed state kinds and operator state
//! modes, descriptors with self-describing [`TypeSchema`]s, TTL, the
//! [`KeyedStateBackend`] trait, the canonical [`Entry`] stream every snapshot can be read
//! as ([`KeyedStateView`]), operator state with Flink's redistribution, and the
//! [`Storage`](storage::Storage) trait checkpoint files go through, and decoded values as
//! JSON ([`json`]: the one serialisation every report shares) and as text ([`text`]: the one
//! rendering every tool shows); Apache Flink's configuration
//! keys with their old spellings, value syntax and typo rule ([`flink_config`]); and the
//! [`ErrorKind`] every library error tells ([`HasErrorKind`]).
//!
//! Crates above this one: `statekit-format` (on-disk format), `statekit-hashmap` (heap
//! backend), `statekit-checkpoint` (checkpoint/savepoint lifecycle).

pub mod backend;
pub mod error;
pub mod flink_config;
pub mod hash;
pub mod json;
pub mod keygroup;
pub mod limits;
pub mod location;
#[cfg(target_os = "linux")]
mod mapguard;
pub mod operator;
pub mod operator_state;
pub mod schema;
pub mod state;
pub mod storage;
pub mod stream;
pub mod temp;
pub mod text;

pub use backend::{BackendConfig, Clock, KeyedStateBackend, ManualClock, StateHandle, SystemClock};
pub use error::{
    EntryProblem, ErrorKind, HasErrorKind, Incompatibility, KindedError, ParallelismError, RestoreError, StateError,
    StreamProblem,
};
pub use keygroup::{
    key_group_for_key, KeyGroupAssigner, KeyGroupRange, KeyGroupScheme, DEFAULT_MAX_PARALLELISM,
    UPPER_BOUND_MAX_PARALLELISM,
};
pub use operator::{uid_looks_auto_generated, OperatorId};
pub use operator_state::{
    redistribute, OperatorStateData, OperatorStateHandle, OperatorStateSnapshot, OperatorStateStore,
};
pub use schema::{decode_value, encode_value, Codec, TypeSchema, Value};
pub use state::{
    AggregateFn, KeyedStateKind, OperatorStateDescriptor, OperatorStateMode, ReduceFn, StateDescriptor, StateFunctions,
    TtlConfig, TtlContext, TtlUpdateType,
};
pub use stream::{Entry, EntryVisitor, KeyedStateView, MemoryView, OwnedEntry};
