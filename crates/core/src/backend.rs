//! The keyed state backend trait: what an engine calls for every record.

use crate::error::StateError;
use crate::keygroup::{KeyGroupRange, KeyGroupScheme};
use crate::state::{StateDescriptor, StateFunctions};
use crate::stream::KeyedStateView;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

/// A registered state, returned by [`KeyedStateBackend::register`]. Cheap to copy; only
/// meaningful for the backend that returned it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateHandle(pub u32);

/// A source of "now" in milliseconds, used for TTL.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Milliseconds since the Unix epoch (or any monotonic origin the job agrees on).
    fn now_ms(&self) -> i64;
}

/// Wall-clock time.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

/// A clock set by hand, for tests and deterministic replays.
#[derive(Debug, Default)]
pub struct ManualClock(AtomicI64);

impl ManualClock {
    /// A clock reading `now_ms`.
    pub fn new(now_ms: i64) -> Arc<Self> {
        Arc::new(ManualClock(AtomicI64::new(now_ms)))
    }
    /// Sets the time.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
    /// Moves the time forward.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// How a backend is set up: which key groups it owns out of how many, and its clock.
#[derive(Clone, Debug)]
pub struct BackendConfig {
    /// Number of key groups of the job (1..=32768).
    pub max_parallelism: u32,
    /// The key groups this backend (one subtask) owns.
    pub key_group_range: KeyGroupRange,
    /// Time source for TTL.
    pub clock: Arc<dyn Clock>,
    /// The rule that puts a key in its key group: statekit's for state statekit writes,
    /// Flink's for state restored from Apache Flink (it stays with the data).
    pub key_group_scheme: KeyGroupScheme,
}

impl BackendConfig {
    /// The config for subtask `index` of `parallelism`.
    pub fn for_subtask(max_parallelism: u32, parallelism: u32, index: u32) -> Result<Self, StateError> {
        crate::keygroup::check_parallelism(parallelism, max_parallelism)?;
        if index >= parallelism {
            return Err(StateError::InvalidParallelism(
                crate::error::ParallelismError::SubtaskIndex { index, parallelism },
            ));
        }
        Ok(BackendConfig {
            max_parallelism,
            key_group_range: KeyGroupRange::for_subtask(max_parallelism, parallelism, index),
            clock: Arc::new(SystemClock),
            key_group_scheme: KeyGroupScheme::Statekit,
        })
    }

    /// Replaces the key-group scheme (statekit's by default).
    pub fn with_key_group_scheme(mut self, scheme: KeyGroupScheme) -> Self {
        self.key_group_scheme = scheme;
        self
    }

    /// Replaces the clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
}

/// A keyed state backend: state per (state, key, namespace), split into key groups.
///
/// Keys, namespaces, values and map user keys are opaque bytes at this level (encoded as
/// their descriptor's schema says; see [`crate::schema::Codec`] for typed helpers). Every
/// operation checks that the key's key group belongs to this backend.
///
/// Snapshots are two-phase: [`KeyedStateBackend::snapshot`] is the cheap synchronous cut and
/// returns a frozen [`KeyedStateView`] that another thread may write out while this backend
/// keeps processing; the view holds exactly the state at the snapshot call (minus expired
/// TTL entries).
pub trait KeyedStateBackend: Send {
    /// Max parallelism (number of key groups).
    fn max_parallelism(&self) -> u32;
    /// The key groups this backend owns.
    fn key_group_range(&self) -> KeyGroupRange;
    /// The rule this backend puts keys in key groups by ([`BackendConfig::key_group_scheme`]).
    fn key_group_scheme(&self) -> KeyGroupScheme {
        KeyGroupScheme::Statekit
    }
    /// Registers a state, or returns the existing one of that name after checking the
    /// descriptor is compatible. `functions` supplies reduce/aggregate functions (they are
    /// not part of snapshots, so engines register them again after a restore).
    fn register(&mut self, descriptor: StateDescriptor, functions: StateFunctions) -> Result<StateHandle, StateError>;
    /// The handle of a registered state, by name.
    fn handle(&self, name: &str) -> Option<StateHandle>;
    /// The descriptors of all registered states, in handle order.
    fn descriptors(&self) -> Vec<StateDescriptor>;

    /// Value, reducing and aggregating states: writes the stored value (for aggregating
    /// state the accumulator) into `out` (cleared first). Returns false when absent.
    fn get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError>;
    /// Value, reducing and aggregating states: sets the stored value.
    fn put(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError>;
    /// List: appends an element. Reducing: folds the value in with the reduce function.
    /// Aggregating: folds the input into the accumulator.
    fn add(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError>;
    /// Removes the entry (all list elements, all map entries) for (key, namespace).
    fn clear(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<(), StateError>;

    /// List: calls `f` with each element in order; returns the number of elements.
    fn list_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, StateError>;
    /// List: replaces the whole list (an empty slice clears it).
    fn list_update(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        elements: &[&[u8]],
    ) -> Result<(), StateError>;

    /// Map: writes the value for `user_key` into `out`; false when absent.
    fn map_get(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError>;
    /// Map: inserts or replaces one entry.
    fn map_put(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError>;
    /// Map: removes one entry; true when it existed.
    fn map_remove(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
    ) -> Result<bool, StateError>;
    /// Map: calls `f` with every (user key, value), in ascending user-key order; returns the
    /// number of entries.
    fn map_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, StateError>;

    /// List, reducing and aggregating states: merges the state of every namespace in
    /// `sources` into `target` and clears the sources (window merging).
    fn merge_namespaces(
        &mut self,
        state: StateHandle,
        key: &[u8],
        target: &[u8],
        sources: &[&[u8]],
    ) -> Result<(), StateError>;

    /// The synchronous part of a snapshot for `checkpoint_id`: a frozen view of the state now.
    fn snapshot(&mut self, checkpoint_id: u64) -> Result<Arc<dyn KeyedStateView>, StateError>;
    /// Adds the entries of every view that fall in this backend's key-group range
    /// (rescaling = each new subtask restores from all overlapping old views). States are
    /// registered from the views' descriptors. Meant for a freshly created backend.
    fn restore(&mut self, views: &[&dyn KeyedStateView]) -> Result<(), StateError>;

    /// Checkpoint `checkpoint_id` completed.
    fn notify_checkpoint_complete(&mut self, _checkpoint_id: u64) -> Result<(), StateError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was aborted.
    fn notify_checkpoint_aborted(&mut self, _checkpoint_id: u64) -> Result<(), StateError> {
        Ok(())
    }
    /// Checkpoint `checkpoint_id` was subsumed by a newer completed one.
    fn notify_checkpoint_subsumed(&mut self, _checkpoint_id: u64) -> Result<(), StateError> {
        Ok(())
    }
    /// Releases all resources; the backend must not be used afterwards.
    fn dispose(&mut self) {}

    /// List: the elements as vectors (convenience over [`KeyedStateBackend::list_for_each`]).
    fn list_get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<Vec<Vec<u8>>, StateError> {
        let mut out = Vec::new();
        self.list_for_each(state, key, namespace, &mut |e| out.push(e.to_vec()))?;
        Ok(out)
    }
}

/// A boxed backend is a backend (so wrappers can hold `Box<dyn KeyedStateBackend>` or a
/// concrete type alike).
impl<B: KeyedStateBackend + ?Sized> KeyedStateBackend for Box<B> {
    fn max_parallelism(&self) -> u32 {
        (**self).max_parallelism()
    }
    fn key_group_scheme(&self) -> KeyGroupScheme {
        (**self).key_group_scheme()
    }
    fn key_group_range(&self) -> KeyGroupRange {
        (**self).key_group_range()
    }
    fn register(&mut self, descriptor: StateDescriptor, functions: StateFunctions) -> Result<StateHandle, StateError> {
        (**self).register(descriptor, functions)
    }
    fn handle(&self, name: &str) -> Option<StateHandle> {
        (**self).handle(name)
    }
    fn descriptors(&self) -> Vec<StateDescriptor> {
        (**self).descriptors()
    }
    fn get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], out: &mut Vec<u8>) -> Result<bool, StateError> {
        (**self).get(state, key, namespace, out)
    }
    fn put(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        (**self).put(state, key, namespace, value)
    }
    fn add(&mut self, state: StateHandle, key: &[u8], namespace: &[u8], value: &[u8]) -> Result<(), StateError> {
        (**self).add(state, key, namespace, value)
    }
    fn clear(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<(), StateError> {
        (**self).clear(state, key, namespace)
    }
    fn list_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8]),
    ) -> Result<usize, StateError> {
        (**self).list_for_each(state, key, namespace, f)
    }
    fn list_update(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        elements: &[&[u8]],
    ) -> Result<(), StateError> {
        (**self).list_update(state, key, namespace, elements)
    }
    fn map_get(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<bool, StateError> {
        (**self).map_get(state, key, namespace, user_key, out)
    }
    fn map_put(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
        value: &[u8],
    ) -> Result<(), StateError> {
        (**self).map_put(state, key, namespace, user_key, value)
    }
    fn map_remove(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        user_key: &[u8],
    ) -> Result<bool, StateError> {
        (**self).map_remove(state, key, namespace, user_key)
    }
    fn map_for_each(
        &mut self,
        state: StateHandle,
        key: &[u8],
        namespace: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<usize, StateError> {
        (**self).map_for_each(state, key, namespace, f)
    }
    fn merge_namespaces(
        &mut self,
        state: StateHandle,
        key: &[u8],
        target: &[u8],
        sources: &[&[u8]],
    ) -> Result<(), StateError> {
        (**self).merge_namespaces(state, key, target, sources)
    }
    fn snapshot(&mut self, checkpoint_id: u64) -> Result<Arc<dyn KeyedStateView>, StateError> {
        (**self).snapshot(checkpoint_id)
    }
    fn restore(&mut self, views: &[&dyn KeyedStateView]) -> Result<(), StateError> {
        (**self).restore(views)
    }
    fn notify_checkpoint_complete(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        (**self).notify_checkpoint_complete(checkpoint_id)
    }
    fn notify_checkpoint_aborted(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        (**self).notify_checkpoint_aborted(checkpoint_id)
    }
    fn notify_checkpoint_subsumed(&mut self, checkpoint_id: u64) -> Result<(), StateError> {
        (**self).notify_checkpoint_subsumed(checkpoint_id)
    }
    fn dispose(&mut self) {
        (**self).dispose()
    }
    fn list_get(&mut self, state: StateHandle, key: &[u8], namespace: &[u8]) -> Result<Vec<Vec<u8>>, StateError> {
        (**self).list_get(state, key, namespace)
    }
}
