//! Helpers shared by statekit's integration tests.

use statekit_core::{BackendConfig, KeyedStateBackend, StateDescriptor, StateFunctions, StateHandle, TypeSchema};
use statekit_hashmap::HashMapBackend;

pub mod changelog_crash;

/// `len` bytes of the xorshift64 stream from the nonzero state `x`: values of a given size,
/// determined by `x`, incompressible enough.
pub fn xorshift_bytes(mut x: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The changelog tests' materialization: no interval, a materialization once the changelog
/// tail holds `max_tail_bytes`, given up after three failures.
pub fn tail_policy(max_tail_bytes: u64) -> statekit_changelog::MaterializationPolicy {
    statekit_changelog::MaterializationPolicy {
        interval: None,
        max_tail_bytes: Some(max_tail_bytes),
        max_failures: 3,
    }
}

/// This test binary run again for its test `name` alone (`--exact --nocapture`, one thread),
/// its standard output piped: a child process to kill mid-work. The caller adds the
/// environment and standard error.
pub fn test_child(name: &str) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().expect("current exe"));
    c.args([name, "--exact", "--nocapture", "--test-threads=1"])
        .stdout(std::process::Stdio::piped());
    c
}

/// Reads `child`'s standard output line by line until `at(line)` holds (within 120 s), then
/// waits `delay`, kills it with SIGKILL and reaps it (its output stays open until then).
pub fn kill_when(child: &mut std::process::Child, mut at: impl FnMut(&str) -> bool, delay: std::time::Duration) {
    use std::io::BufRead;
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let line = lines.next().expect("child exited early").expect("read line");
        if at(&line) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "child made no progress");
    }
    std::thread::sleep(delay);
    // SAFETY: plain FFI call sending SIGKILL to our own child process.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGKILL) };
    assert_eq!(rc, 0, "kill failed");
    child.wait().expect("wait");
    drop(lines);
}

/// What `read` makes of `parallelism` heap backends of max parallelism `max_parallelism`,
/// each restored from the changelog handles of operator `uid` in checkpoint `reader` for its
/// key groups, then given to `register`; a failed restore panics, `what` first in the message.
pub fn restored_model<R, M>(
    reader: &statekit_checkpoint::SnapshotReader,
    (uid, max_parallelism): (&str, u32),
    parallelism: u32,
    what: &str,
    mut register: impl FnMut(&mut dyn KeyedStateBackend) -> R,
    read: impl FnOnce(&mut [&mut dyn KeyedStateBackend]) -> M,
) -> M {
    let mut restored = backends(max_parallelism, parallelism);
    for b in &mut restored {
        let range = b.key_group_range();
        let hs = reader.changelog_handles(uid, range).expect("handles");
        statekit_changelog::restore_into(b, None, range, &hs).unwrap_or_else(|e| panic!("{what}: {e}"));
        register(b);
    }
    let mut refs: Vec<&mut dyn KeyedStateBackend> =
        restored.iter_mut().map(|b| b as &mut dyn KeyedStateBackend).collect();
    read(&mut refs)
}

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
    /// `statekit_changelog::ChangelogBackend` over the heap backend.
    ChangelogHeap,
    /// `statekit_changelog::ChangelogBackend` over the RocksDB backend.
    ChangelogRocksDb,
}

impl BackendKind {
    /// True for the changelog kinds.
    pub fn is_changelog(self) -> bool {
        matches!(self, BackendKind::ChangelogHeap | BackendKind::ChangelogRocksDb)
    }
}

/// What a changelog backend needs besides its config: the upload service and where
/// materializations go (a job directory).
#[derive(Clone, Debug)]
pub struct ChangelogEnv {
    /// The upload service.
    pub storage: statekit_changelog::ChangelogStorage,
    /// The job directory.
    pub job: std::sync::Arc<dyn statekit_core::storage::Storage>,
    /// The materialization policy.
    pub policy: statekit_changelog::MaterializationPolicy,
}

/// A backend of either kind; derefs to `dyn KeyedStateBackend`, plus `contains`.
#[derive(Debug)]
pub enum AnyBackend {
    /// The heap backend.
    Heap(HashMapBackend),
    /// The RocksDB backend.
    RocksDb(Box<statekit_rocksdb::RocksDbBackend>),
    /// The changelog over the heap backend.
    ChangelogHeap(Box<statekit_changelog::ChangelogBackend<HashMapBackend>>),
    /// The changelog over the RocksDB backend.
    ChangelogRocksDb(Box<statekit_changelog::ChangelogBackend<statekit_rocksdb::RocksDbBackend>>),
}

/// RocksDB options small enough for tests that hold many databases at once. The write-back
/// cache is tiny, so it fills and is written back every few operations: the model tests run
/// its every path (hits, misses, eviction, write-back before scans, merges and snapshots).
pub fn test_rocksdb_options() -> statekit_rocksdb::RocksDbOptions {
    statekit_rocksdb::RocksDbOptions::default()
        .with_block_cache_bytes(4 << 20)
        .with_write_buffer_bytes(1 << 20)
        .with_write_back_cache_bytes(512)
}

impl AnyBackend {
    /// A backend of `kind` for `config` (RocksDB with [`test_rocksdb_options`]); the changelog
    /// kinds need [`AnyBackend::with_changelog`].
    pub fn new(kind: BackendKind, config: statekit_core::BackendConfig) -> Self {
        match kind {
            BackendKind::Heap => AnyBackend::Heap(HashMapBackend::new(config).expect("heap backend")),
            BackendKind::RocksDb => AnyBackend::RocksDb(Box::new(
                statekit_rocksdb::RocksDbBackend::new(config, test_rocksdb_options()).expect("rocksdb backend"),
            )),
            BackendKind::ChangelogHeap | BackendKind::ChangelogRocksDb => {
                panic!("changelog backends need AnyBackend::with_changelog")
            }
        }
    }

    /// A backend of any kind; changelog kinds use `env` (subtask `index` seeds the
    /// materialization jitter).
    pub fn with_changelog(
        kind: BackendKind,
        config: statekit_core::BackendConfig,
        env: Option<&ChangelogEnv>,
        index: u32,
    ) -> Self {
        let make = |env: &ChangelogEnv| {
            statekit_changelog::Materializer::new(env.job.clone(), env.policy.clone(), u64::from(index))
        };
        match (kind, env) {
            (BackendKind::ChangelogHeap, Some(env)) => AnyBackend::ChangelogHeap(Box::new(
                statekit_changelog::ChangelogBackend::new(config, &env.storage, make(env), HashMapBackend::new)
                    .expect("changelog backend"),
            )),
            (BackendKind::ChangelogRocksDb, Some(env)) => AnyBackend::ChangelogRocksDb(Box::new(
                statekit_changelog::ChangelogBackend::new(config, &env.storage, make(env), |c| {
                    statekit_rocksdb::RocksDbBackend::new(c, test_rocksdb_options())
                })
                .expect("changelog backend"),
            )),
            (k, _) => AnyBackend::new(k, config),
        }
    }

    /// The kind.
    pub fn kind(&self) -> BackendKind {
        match self {
            AnyBackend::Heap(_) => BackendKind::Heap,
            AnyBackend::RocksDb(_) => BackendKind::RocksDb,
            AnyBackend::ChangelogHeap(_) => BackendKind::ChangelogHeap,
            AnyBackend::ChangelogRocksDb(_) => BackendKind::ChangelogRocksDb,
        }
    }

    /// The changelog operations of a changelog backend.
    pub fn changelog(&mut self) -> Option<&mut dyn ChangelogOps> {
        match self {
            AnyBackend::ChangelogHeap(b) => Some(b.as_mut()),
            AnyBackend::ChangelogRocksDb(b) => Some(b.as_mut()),
            _ => None,
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
            AnyBackend::ChangelogHeap(b) => b.delegate().contains(state, key, namespace),
            AnyBackend::ChangelogRocksDb(b) => b.delegate().contains(state, key, namespace),
        }
    }
}

impl std::ops::Deref for AnyBackend {
    type Target = dyn KeyedStateBackend;
    fn deref(&self) -> &Self::Target {
        match self {
            AnyBackend::Heap(b) => b,
            AnyBackend::RocksDb(b) => b.as_ref(),
            AnyBackend::ChangelogHeap(b) => b.as_ref(),
            AnyBackend::ChangelogRocksDb(b) => b.as_ref(),
        }
    }
}

impl std::ops::DerefMut for AnyBackend {
    fn deref_mut(&mut self) -> &mut Self::Target {
        match self {
            AnyBackend::Heap(b) => b,
            AnyBackend::RocksDb(b) => b.as_mut(),
            AnyBackend::ChangelogHeap(b) => b.as_mut(),
            AnyBackend::ChangelogRocksDb(b) => b.as_mut(),
        }
    }
}

/// The golden native fixture (`fixtures/v1/native-savepoint`): its operator, shape and the
/// deterministic state it holds, shared by the generator (`examples/gen_native_fixture.rs`)
/// and the test that reads it back (`native_fixture.rs`).
pub mod native_fixture {
    use statekit_core::{
        BackendConfig, KeyedStateBackend, ManualClock, OwnedEntry, StateDescriptor, StateFunctions, TtlConfig,
        TtlUpdateType, TypeSchema,
    };

    /// Operator uid.
    pub const UID: &str = "word-counter";
    /// Max parallelism.
    pub const MAX_P: u32 = 8;
    /// Parallelism when written.
    pub const P: u32 = 2;
    /// The clock of the writing job (TTL timestamps).
    pub const NOW_MS: i64 = 1_700_000_000_000;

    /// The states: a value, a list with TTL, a windowed map.
    pub fn descriptors() -> Vec<StateDescriptor> {
        vec![
            StateDescriptor::value("count", TypeSchema::Utf8, TypeSchema::I64),
            StateDescriptor::list("seen", TypeSchema::Utf8, TypeSchema::Bytes).with_ttl(TtlConfig {
                ttl_ms: 86_400_000,
                update_type: TtlUpdateType::OnCreateAndWrite,
            }),
            StateDescriptor::map("followers", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64)
                .with_namespace(TypeSchema::I64),
        ]
    }

    /// Subtask `i` of the writing job, filled with its part of the state.
    pub fn filled_backend(i: u32) -> statekit_rocksdb::RocksDbBackend {
        let clock = ManualClock::new(NOW_MS);
        let cfg = BackendConfig::for_subtask(MAX_P, P, i)
            .expect("config")
            .with_clock(clock);
        let mut b = statekit_rocksdb::RocksDbBackend::new(cfg, crate::test_rocksdb_options()).expect("backend");
        let hs: Vec<_> = descriptors()
            .into_iter()
            .map(|d| b.register(d, StateFunctions::None).expect("register"))
            .collect();
        for w in 0..60u32 {
            let key = format!("word-{w}").into_bytes();
            if crate::owner(&key, MAX_P, P) != i as usize {
                continue;
            }
            b.put(hs[0], &key, &[], &i64::from(w * 3 + 1).to_be_bytes())
                .expect("put");
            for e in 0..(w % 4) {
                b.add(hs[1], &key, &[], &[w as u8, e as u8, 0, 0xFF]).expect("add");
            }
            for f in 0..(w % 3) {
                let window = i64::from(f).to_be_bytes();
                let follower = format!("word-{}", (w + f + 1) % 60).into_bytes();
                b.map_put(hs[2], &key, &window, &follower, &i64::from(f + 1).to_be_bytes())
                    .expect("map_put");
            }
        }
        b
    }

    /// Every entry of the fixture, in key-group then canonical order (from fresh backends).
    pub fn expected_entries() -> Vec<OwnedEntry> {
        let mut all = Vec::new();
        for i in 0..P {
            let mut b = filled_backend(i);
            let view = b.snapshot(0).expect("snapshot");
            let mv = statekit_core::MemoryView::collect(view.as_ref(), view.key_group_range()).expect("collect");
            all.extend_from_slice(mv.entries());
        }
        all
    }
}

/// The changelog-specific operations of a changelog backend, whatever its delegate.
pub trait ChangelogOps {
    /// See `ChangelogBackend::checkpoint`.
    fn checkpoint(&mut self, id: u64) -> Result<statekit_changelog::ChangelogCut, statekit_core::StateError>;
    /// See `ChangelogBackend::materialize_now`.
    fn materialize_now(&mut self) -> Result<(), statekit_core::StateError>;
    /// See `ChangelogBackend::restore_changelog`.
    fn restore_changelog(
        &mut self,
        handles: &[statekit_format::ResolvedChangelogHandle],
        share: bool,
    ) -> Result<statekit_changelog::ReplayStats, statekit_core::StateError>;
    /// See `ChangelogBackend::poll`.
    fn poll(&mut self) -> Result<(), statekit_core::StateError>;
}

impl<D: KeyedStateBackend> ChangelogOps for statekit_changelog::ChangelogBackend<D> {
    fn checkpoint(&mut self, id: u64) -> Result<statekit_changelog::ChangelogCut, statekit_core::StateError> {
        statekit_changelog::ChangelogBackend::checkpoint(self, id)
    }
    fn materialize_now(&mut self) -> Result<(), statekit_core::StateError> {
        statekit_changelog::ChangelogBackend::materialize_now(self)
    }
    fn restore_changelog(
        &mut self,
        handles: &[statekit_format::ResolvedChangelogHandle],
        share: bool,
    ) -> Result<statekit_changelog::ReplayStats, statekit_core::StateError> {
        statekit_changelog::ChangelogBackend::restore_changelog(self, handles, share)
    }
    fn poll(&mut self) -> Result<(), statekit_core::StateError> {
        statekit_changelog::ChangelogBackend::poll(self)
    }
}
