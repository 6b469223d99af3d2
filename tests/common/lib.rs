//! Helpers shared by statekit's integration tests.

use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_hashmap::HashMapBackend;

/// `parallelism` hashmap backends of one operator.
pub fn backends(max_parallelism: u32, parallelism: u32) -> Vec<HashMapBackend> {
    (0..parallelism)
        .map(|i| {
            HashMapBackend::new(BackendConfig::for_subtask(max_parallelism, parallelism, i).expect("config"))
                .expect("backend")
        })
        .collect()
}

/// The subtask owning `key`.
pub fn owner(key: &[u8], max_parallelism: u32, parallelism: u32) -> usize {
    let kg = statekit_core::key_group_for_key(key, max_parallelism);
    statekit_core::keygroup::subtask_for_key_group(max_parallelism, parallelism, kg) as usize
}

/// Registers a value state `name` with byte key and value.
pub fn value_state(b: &mut dyn KeyedStateBackend, name: &str) -> StateHandle {
    b.register(
        StateDescriptor::value(name, TypeSchema::Bytes, TypeSchema::Bytes),
        StateFunctions::None,
    )
    .expect("register")
}

/// Which keyed state backend a test subtask runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackendKind {
    /// `statekit_hashmap::HashMapBackend`.
    Heap,
    /// `statekit_rocksdb::RocksDbBackend`.
    RocksDb,
}

/// A backend of either kind; derefs to `dyn KeyedStateBackend`, plus `contains`.
#[derive(Debug)]
pub enum AnyBackend {
    /// The heap backend.
    Heap(HashMapBackend),
    /// The RocksDB backend.
    RocksDb(Box<statekit_rocksdb::RocksDbBackend>),
}

/// RocksDB options small enough for tests that hold many databases at once.
pub fn test_rocksdb_options() -> statekit_rocksdb::RocksDbOptions {
    statekit_rocksdb::RocksDbOptions::default()
        .with_block_cache_bytes(4 << 20)
        .with_write_buffer_bytes(1 << 20)
}

impl AnyBackend {
    /// A backend of `kind` for `config` (RocksDB with [`test_rocksdb_options`]).
    pub fn new(kind: BackendKind, config: statekit_core::BackendConfig) -> Self {
        match kind {
            BackendKind::Heap => AnyBackend::Heap(HashMapBackend::new(config).expect("heap backend")),
            BackendKind::RocksDb => AnyBackend::RocksDb(Box::new(
                statekit_rocksdb::RocksDbBackend::new(config, test_rocksdb_options()).expect("rocksdb backend"),
            )),
        }
    }

    /// The kind.
    pub fn kind(&self) -> BackendKind {
        match self {
            AnyBackend::Heap(_) => BackendKind::Heap,
            AnyBackend::RocksDb(_) => BackendKind::RocksDb,
        }
    }

    /// True when (key, namespace) holds visible state (no TTL refresh).
    pub fn contains(
        &self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
    ) -> Result<bool, statekit_core::StateError> {
        match self {
            AnyBackend::Heap(b) => b.contains(state, key, namespace),
            AnyBackend::RocksDb(b) => b.contains(state, key, namespace),
        }
    }
}

impl std::ops::Deref for AnyBackend {
    type Target = dyn KeyedStateBackend;
    fn deref(&self) -> &Self::Target {
        match self {
            AnyBackend::Heap(b) => b,
            AnyBackend::RocksDb(b) => b.as_ref(),
        }
    }
}

impl std::ops::DerefMut for AnyBackend {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            AnyBackend::Heap(b) => b,
            AnyBackend::RocksDb(b) => b.as_mut(),
        }
    }
}
