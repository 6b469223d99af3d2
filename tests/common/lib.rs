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
