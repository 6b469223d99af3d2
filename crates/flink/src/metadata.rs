//! Flink's `_metadata`: versions 3 to 7 (Flink 1.11 through 2.x), every state handle kind.
//!
//! The layout is described byte by byte in `docs/flink-format.md`. Decoding never trusts a
//! count or a length further than the bytes left, so damaged input is an error naming the
//! offset and the field, never a panic, a huge allocation or a long loop.

use crate::error::FlinkError;
use crate::input::Input;
use statekit_core::OperatorId;

/// The magic number a `_metadata` file starts with.
pub const METADATA_MAGIC: i32 = 0x4960_672d;
/// Oldest `_metadata` version read (Flink 1.11).
pub const MIN_VERSION: i32 = 3;
/// Newest `_metadata` version read.
pub const MAX_VERSION: i32 = 7;

const MASTER_STATE_MAGIC: i32 = 0xc96b_1696_u32 as i32;

/// A decoded `_metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlinkMetadata {
    /// The format version (3 to 7).
    pub version: i32,
    /// The checkpoint id (savepoints carry one too).
    pub checkpoint_id: u64,
    /// Master (coordinator-wide) states.
    pub master_states: Vec<MasterState>,
    /// Operators, in the order Flink wrote them.
    pub operators: Vec<FlinkOperator>,
    /// What the version 4+ trailer says about the snapshot, when it says it.
    pub properties: Option<SnapshotProperties>,
}

impl FlinkMetadata {
    /// The operator with this id.
    pub fn operator(&self, id: &OperatorId) -> Option<&FlinkOperator> {
        self.operators.iter().find(|o| &o.id == id)
    }
}

/// A master state (`i32 version, UTF name, bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MasterState {
    /// Its version.
    pub version: i32,
    /// Its name.
    pub name: String,
    /// Its bytes.
    pub bytes: Vec<u8>,
}

/// Checkpoint or savepoint, and a savepoint's format: from the Java-serialized
/// `CheckpointProperties` at the end of a version 4+ `_metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotProperties {
    /// A savepoint (`SavepointType`), else a checkpoint (`CheckpointType`).
    pub savepoint: bool,
    /// `CANONICAL` or `NATIVE` for savepoints.
    pub format: Option<String>,
    /// The type's name as Flink shows it (`Savepoint`, `Checkpoint`, `Full Checkpoint`, …).
    pub name: Option<String>,
}

/// One operator of the job graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlinkOperator {
    /// Its name (version 5+ only).
    pub name: Option<String>,
    /// Its uid (version 5+ only).
    pub uid: Option<String>,
    /// Its id (the murmur3 hash of the uid, or one Flink generated).
    pub id: OperatorId,
    /// Parallelism when the snapshot was taken.
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// The operator coordinator's state.
    pub coordinator: Option<StreamHandle>,
    /// Every subtask had finished (`FullyFinishedOperatorState`).
    pub fully_finished: bool,
    /// Subtasks with state or finished, by index (others had nothing).
    pub subtasks: Vec<FlinkSubtask>,
}

/// The state of one subtask.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FlinkSubtask {
    /// Subtask index.
    pub index: u32,
    /// The subtask had finished (no state follows).
    pub finished: bool,
    /// Managed operator state.
    pub managed_operator: Vec<OperatorStateHandle>,
    /// Raw operator state.
    pub raw_operator: Vec<OperatorStateHandle>,
    /// Managed keyed state.
    pub managed_keyed: Option<KeyedHandle>,
    /// Raw keyed state (timers of a heap-timer RocksDB job, custom raw state).
    pub raw_keyed: Option<KeyedHandle>,
    /// In-flight input data of an unaligned checkpoint.
    pub input_channels: Vec<ChannelHandle>,
    /// In-flight output data of an unaligned checkpoint.
    pub result_subpartitions: Vec<ChannelHandle>,
    /// The checkpoint this subtask's state was taken from (version 7, regional checkpoints).
    pub ref_checkpoint_id: Option<i64>,
}

/// Where a stream of bytes is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamHandle {
    /// Inline in `_metadata` (tag 1).
    Bytes {
        /// The path the data would have had.
        name: String,
        /// The data.
        data: Vec<u8>,
    },
    /// A file by absolute path or URI (tag 2).
    File {
        /// The path or URI.
        path: String,
        /// Its size.
        size: u64,
    },
    /// A file relative to the directory holding `_metadata` (tag 6).
    Relative {
        /// The relative path.
        path: String,
        /// Its size.
        size: u64,
    },
    /// A key-groups handle used as a stream (tag 3 in a stream position).
    KeyGroups(Box<KeyGroupsHandle>),
    /// A segment of a merged physical file (tag 15, file merging).
    Segment {
        /// Start of the segment in the physical file.
        start: u64,
        /// Its length.
        size: u64,
        /// 0 exclusive, 1 shared.
        scope: i32,
        /// The physical file.
        path: String,
        /// The logical file's id.
        logical_id: String,
    },
    /// An empty segment (tag 16).
    EmptySegment,
}

impl StreamHandle {
    /// Bytes the handle covers.
    pub fn size(&self) -> u64 {
        match self {
            StreamHandle::Bytes { data, .. } => data.len() as u64,
            StreamHandle::File { size, .. }
            | StreamHandle::Relative { size, .. }
            | StreamHandle::Segment { size, .. } => *size,
            StreamHandle::KeyGroups(k) => k.stream.size(),
            StreamHandle::EmptySegment => 0,
        }
    }

    /// A short description: `inline (N B)`, the path, or the segment.
    pub fn describe(&self) -> String {
        match self {
            StreamHandle::Bytes { data, .. } => format!("inline ({} B)", data.len()),
            StreamHandle::File { path, .. } | StreamHandle::Relative { path, .. } => path.clone(),
            StreamHandle::KeyGroups(k) => k.stream.describe(),
            StreamHandle::Segment { path, start, size, .. } => format!("{path}[{start}..{}]", start + size),
            StreamHandle::EmptySegment => "empty segment".into(),
        }
    }
}

/// A key-group range as Flink writes it: first key group and count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlinkKeyGroupRange {
    /// First key group.
    pub start: u32,
    /// Number of key groups (0 = empty).
    pub count: u32,
}

impl FlinkKeyGroupRange {
    /// The last key group, when not empty.
    pub fn end(&self) -> Option<u32> {
        self.count.checked_sub(1).map(|c| self.start + c)
    }
}

/// Keyed state in Flink's full formats (canonical savepoint, heap checkpoint): one stream with
/// an offset per key group (tags 3, 7, 12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyGroupsHandle {
    /// Tag 7: a canonical savepoint (the data is in the canonical format for sure).
    pub savepoint: bool,
    /// Key groups covered.
    pub range: FlinkKeyGroupRange,
    /// Offset of each key group's data in the stream (0 = none in the canonical format).
    pub offsets: Vec<u64>,
    /// The stream.
    pub stream: StreamHandle,
    /// The handle's id (tag 12).
    pub handle_id: Option<String>,
}

/// A file of a native RocksDB snapshot, by its local name in the database.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NativeFile {
    /// Name in the database directory (`000042.sst`, `MANIFEST-000004`, …).
    pub local_name: String,
    /// Where it is.
    pub handle: StreamHandle,
}

/// A RocksDB native or incremental snapshot (tags 5, 11).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncrementalHandle {
    /// The checkpoint that wrote it.
    pub checkpoint_id: i64,
    /// The backend instance's id.
    pub backend_id: String,
    /// Key groups covered.
    pub range: FlinkKeyGroupRange,
    /// Bytes this checkpoint added (tag 11).
    pub checkpointed_size: Option<i64>,
    /// The meta data stream (state meta infos).
    pub meta: StreamHandle,
    /// Files shared with other checkpoints (`shared/`).
    pub shared: Vec<NativeFile>,
    /// Files of this checkpoint only.
    pub private: Vec<NativeFile>,
    /// The handle's id (tag 11).
    pub handle_id: Option<String>,
}

/// A changelog (DSTL) file part: a file and the offset where its changes start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangelogFilePart {
    /// Offset in the (decompressed) file.
    pub offset: u64,
    /// The file.
    pub handle: StreamHandle,
}

/// Keyed state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeyedHandle {
    /// Full formats (tags 3, 7, 12).
    KeyGroups(KeyGroupsHandle),
    /// RocksDB native or incremental (tags 5, 11).
    Incremental(IncrementalHandle),
    /// Changelog: a materialized part plus changes (tags 8, 14).
    Changelog {
        /// Key groups covered.
        range: FlinkKeyGroupRange,
        /// Bytes this checkpoint added.
        checkpointed_size: i64,
        /// The materialized base.
        materialized: Vec<KeyedHandle>,
        /// Changes since.
        non_materialized: Vec<KeyedHandle>,
        /// The materialization's id.
        materialization_id: i64,
        /// The checkpoint (tag 14).
        checkpoint_id: Option<i64>,
        /// The handle's id.
        handle_id: String,
    },
    /// Changes held in `_metadata` (tag 9, in-memory DSTL).
    ChangelogBytes {
        /// Key groups covered.
        range: FlinkKeyGroupRange,
        /// First sequence number.
        from: i64,
        /// Sequence number after the last.
        to: i64,
        /// Changes: key group (-1 = metadata) and bytes.
        changes: Vec<(i32, Vec<u8>)>,
        /// The handle's id.
        handle_id: String,
    },
    /// Changes in DSTL files (tags 10, 13).
    ChangelogFiles {
        /// Key groups covered.
        range: FlinkKeyGroupRange,
        /// The file parts, in order.
        parts: Vec<ChangelogFilePart>,
        /// Bytes covered.
        size: i64,
        /// Bytes this checkpoint added.
        checkpointed_size: i64,
        /// The handle's id.
        handle_id: String,
        /// The changelog storage (`filesystem`; tag 13).
        storage: Option<String>,
    },
}

impl KeyedHandle {
    /// The key groups the handle covers.
    pub fn range(&self) -> FlinkKeyGroupRange {
        match self {
            KeyedHandle::KeyGroups(k) => k.range,
            KeyedHandle::Incremental(i) => i.range,
            KeyedHandle::Changelog { range, .. }
            | KeyedHandle::ChangelogBytes { range, .. }
            | KeyedHandle::ChangelogFiles { range, .. } => *range,
        }
    }

    /// Flink's class name for the handle.
    pub fn type_name(&self) -> &'static str {
        match self {
            KeyedHandle::KeyGroups(k) if k.savepoint => "KeyGroupsSavepointStateHandle",
            KeyedHandle::KeyGroups(_) => "KeyGroupsStateHandle",
            KeyedHandle::Incremental(_) => "IncrementalRemoteKeyedStateHandle",
            KeyedHandle::Changelog { .. } => "ChangelogStateBackendHandle",
            KeyedHandle::ChangelogBytes { .. } => "InMemoryChangelogStateHandle",
            KeyedHandle::ChangelogFiles { .. } => "ChangelogStateHandleStreamImpl",
        }
    }

    /// Every stream the handle references (nested handles included).
    pub fn streams(&self) -> Vec<&StreamHandle> {
        let mut out = Vec::new();
        self.collect_streams(&mut out);
        out
    }

    fn collect_streams<'a>(&'a self, out: &mut Vec<&'a StreamHandle>) {
        match self {
            KeyedHandle::KeyGroups(k) => out.push(&k.stream),
            KeyedHandle::Incremental(i) => {
                out.push(&i.meta);
                out.extend(i.shared.iter().chain(&i.private).map(|f| &f.handle));
            }
            KeyedHandle::Changelog {
                materialized,
                non_materialized,
                ..
            } => {
                for h in materialized.iter().chain(non_materialized) {
                    h.collect_streams(out);
                }
            }
            KeyedHandle::ChangelogBytes { .. } => {}
            KeyedHandle::ChangelogFiles { parts, .. } => out.extend(parts.iter().map(|p| &p.handle)),
        }
    }
}

/// How list-like operator state is handed to subtasks on restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DistributionMode {
    /// Split among subtasks (round robin).
    SplitDistribute,
    /// Every subtask gets every element.
    Union,
    /// Every subtask has the same (broadcast) state.
    Broadcast,
}

impl DistributionMode {
    /// Flink's name (`SPLIT_DISTRIBUTE`, `UNION`, `BROADCAST`).
    pub fn name(self) -> &'static str {
        match self {
            DistributionMode::SplitDistribute => "SPLIT_DISTRIBUTE",
            DistributionMode::Union => "UNION",
            DistributionMode::Broadcast => "BROADCAST",
        }
    }
}

/// One named operator state inside an operator state stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorStatePart {
    /// The state's name.
    pub name: String,
    /// How it is distributed.
    pub mode: DistributionMode,
    /// Offset of each element (list states) or of the state (broadcast) in the stream.
    pub offsets: Vec<u64>,
}

/// Operator state of one subtask (tags 4, 17).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorStateHandle {
    /// The states in the stream.
    pub states: Vec<OperatorStatePart>,
    /// The stream.
    pub stream: StreamHandle,
    /// File merging (tag 17): the task-owned and shared directories.
    pub merged_dirs: Option<(String, String)>,
}

/// In-flight data of an unaligned checkpoint (kept to account for the bytes; never decoded).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelHandle {
    /// The subtask.
    pub subtask: i32,
    /// Gate and channel, or partition and subpartition (-1 when merged).
    pub info: (i32, i32),
    /// The stream.
    pub stream: StreamHandle,
    /// Bytes of the channel's data.
    pub size: u64,
}

/// Decodes a `_metadata` file's bytes; `file` names it in errors.
pub fn decode_metadata(bytes: &[u8], file: &str) -> Result<FlinkMetadata, FlinkError> {
    let mut d = Decoder {
        input: Input::new(bytes, file),
        version: 0,
        depth: 0,
    };
    d.metadata()
}

/// Whether `bytes` start like a Flink `_metadata` (its magic number).
pub fn is_flink_metadata(bytes: &[u8]) -> bool {
    bytes.get(..4) == Some(&METADATA_MAGIC.to_be_bytes()[..])
}

/// The largest Flink `_metadata` statekit reads: 1 GiB. It is read whole into memory (and
/// its inline state copied out of it), so a larger one is refused before any of it is read.
/// Flink keeps state inline in `_metadata` only below `state.storage.fs.memory-threshold`
/// (at most 1 MiB per handle) or with the JobManager's checkpoint storage (meant for small
/// state), so real ones are far smaller; statekit's own `_metadata` holds no state at all.
pub const MAX_METADATA_BYTES: u64 = 1 << 30;

/// Fails with [`FlinkError::Unsupported`] naming `file` and its `size` when a `_metadata`
/// of `size` bytes is larger than [`MAX_METADATA_BYTES`].
pub fn check_metadata_size(size: u64, file: &str) -> Result<(), FlinkError> {
    if size > MAX_METADATA_BYTES {
        return Err(FlinkError::Unsupported {
            file: file.to_string(),
            offset: 0,
            field: "file size".into(),
            what: format!(
                "a _metadata of {size} bytes: statekit reads one of at most {MAX_METADATA_BYTES} bytes (1 GiB)"
            ),
        });
    }
    Ok(())
}

/// Reads the local `_metadata` file `path` (`shown` in errors): its size is checked against
/// [`MAX_METADATA_BYTES`] before anything is read, and no more than that is read even when it
/// grows meanwhile. A file that does not start with Flink's magic number is read no further
/// than its first 4 bytes (which are returned, for the caller to refuse).
pub(crate) fn read_metadata_file(path: &std::path::Path, shown: &str) -> Result<Vec<u8>, FlinkError> {
    use std::io::Read;
    let io = |source| FlinkError::Io {
        path: shown.to_string(),
        source,
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let size = f.metadata().map_err(io)?.len();
    check_metadata_size(size, shown)?;
    let mut out = Vec::with_capacity(4);
    (&mut f).take(4).read_to_end(&mut out).map_err(io)?;
    if !is_flink_metadata(&out) {
        return Ok(out);
    }
    out.reserve(usize::try_from(size).unwrap_or(0));
    f.take(MAX_METADATA_BYTES + 1 - 4).read_to_end(&mut out).map_err(io)?;
    check_metadata_size(out.len() as u64, shown)?;
    Ok(out)
}

/// Nesting limit for handles inside handles (changelog handles hold keyed handles).
const MAX_DEPTH: u32 = 8;

struct Decoder<'a> {
    input: Input<'a>,
    version: i32,
    depth: u32,
}

impl Decoder<'_> {
    fn metadata(&mut self) -> Result<FlinkMetadata, FlinkError> {
        let i = &mut self.input;
        let magic = i.i32("magic number")?;
        if magic != METADATA_MAGIC {
            return Err(i.corrupt_at(
                0,
                "magic number",
                format!("{magic:#010x} is not Flink's {METADATA_MAGIC:#010x}"),
            ));
        }
        let version = i.i32("version")?;
        if !(MIN_VERSION..=MAX_VERSION).contains(&version) {
            let what = if version < MIN_VERSION {
                format!("_metadata version {version} (written before Flink 1.11); versions {MIN_VERSION} to {MAX_VERSION} are read")
            } else {
                format!("_metadata version {version} (newer than this reader); versions {MIN_VERSION} to {MAX_VERSION} are read")
            };
            return Err(i.unsupported_at(4, "version", what));
        }
        self.version = version;
        let checkpoint_id = self.input.u64("checkpoint id")?;
        let n = self.input.items("number of master states", 8)?;
        let mut master_states = Vec::with_capacity(n);
        for _ in 0..n {
            master_states.push(self.master_state()?);
        }
        let n = self.input.items("number of operators", 16 + 8 + 4)?;
        let mut operators = Vec::with_capacity(n);
        for _ in 0..n {
            operators.push(self.operator()?);
        }
        let properties = if version >= 4 {
            scan_properties(self.input.rest())
        } else {
            if self.input.remaining() > 0 {
                return Err(self.input.corrupt_at(
                    self.input.pos(),
                    "end of file",
                    format!("{} bytes after the last operator", self.input.remaining()),
                ));
            }
            None
        };
        Ok(FlinkMetadata {
            version,
            checkpoint_id,
            master_states,
            operators,
            properties,
        })
    }

    fn master_state(&mut self) -> Result<MasterState, FlinkError> {
        let i = &mut self.input;
        let at = i.pos();
        let magic = i.i32("master state magic")?;
        if magic != MASTER_STATE_MAGIC {
            return Err(i.corrupt_at(at, "master state magic", format!("{magic:#010x}")));
        }
        let len = i.items("master state length", 1)?;
        let body = i.take(len, "master state")?;
        let mut b = Input::new(body, "");
        let parse = |b: &mut Input<'_>| -> Result<MasterState, FlinkError> {
            let version = b.i32("version")?;
            let name = b.utf("name")?;
            let n = b.items("length", 1)?;
            let bytes = b.take(n, "bytes")?.to_vec();
            Ok(MasterState { version, name, bytes })
        };
        parse(&mut b).map_err(|e| i.corrupt_at(at, "master state", e.to_string()))
    }

    fn operator(&mut self) -> Result<FlinkOperator, FlinkError> {
        let (name, uid) = if self.version >= 5 {
            let name = self.input.utf("operator name")?;
            let uid = self.input.utf("operator uid")?;
            (
                Some(name).filter(|s| !s.is_empty()),
                Some(uid).filter(|s| !s.is_empty()),
            )
        } else {
            (None, None)
        };
        let id_bytes = self.input.take(16, "operator id")?;
        let mut id = [0u8; 16];
        id.copy_from_slice(id_bytes);
        let id = OperatorId(id);
        let at = self.input.pos();
        let parallelism = self.input.i32("parallelism")?;
        let max_parallelism = self.input.i32("max parallelism")?;
        let (parallelism, max_parallelism) = match (u32::try_from(parallelism), u32::try_from(max_parallelism)) {
            (Ok(p), Ok(m)) if p >= 1 && (1..=32768).contains(&m) && p <= m => (p, m),
            _ => {
                return Err(self.input.corrupt_at(
                    at,
                    "parallelism",
                    format!("operator {id}: parallelism {parallelism} / max parallelism {max_parallelism}"),
                ))
            }
        };
        let at = self.input.pos();
        let coordinator = self.stream_handle("coordinator state")?;
        if matches!(coordinator, Some(ref h) if !matches!(h, StreamHandle::Bytes { .. })) {
            return Err(self.input.corrupt_at(at, "coordinator state", "not inline bytes"));
        }
        let at = self.input.pos();
        let n = self.input.i32("number of subtask states")?;
        // -1: the operator had fully finished (`FullyFinishedOperatorState`), no subtask states.
        let fully_finished = n == -1;
        let subtasks = if fully_finished {
            Vec::new()
        } else {
            self.subtask_states(at, n, id, parallelism)?
        };
        Ok(FlinkOperator {
            name,
            uid,
            id,
            parallelism,
            max_parallelism,
            coordinator,
            fully_finished,
            subtasks,
        })
    }

    /// The `n` subtask states of operator `id` (the count read at `at`), each at its index
    /// below `parallelism`.
    fn subtask_states(
        &mut self,
        at: usize,
        n: i32,
        id: OperatorId,
        parallelism: u32,
    ) -> Result<Vec<FlinkSubtask>, FlinkError> {
        let n = usize::try_from(n)
            .ok()
            .filter(|&n| n <= parallelism as usize)
            .ok_or_else(|| {
                self.input.corrupt_at(
                    at,
                    "number of subtask states",
                    format!("operator {id}: {n} for parallelism {parallelism}"),
                )
            })?;
        let mut subtasks: Vec<FlinkSubtask> = Vec::with_capacity(n);
        for _ in 0..n {
            let at = self.input.pos();
            let raw = self.input.i32("subtask index")?;
            let (index, finished) = if raw < 0 { (-(raw + 1), true) } else { (raw, false) };
            let index = u32::try_from(index)
                .ok()
                .filter(|&i| i < parallelism && !subtasks.iter().any(|s| s.index == i))
                .ok_or_else(|| {
                    self.input.corrupt_at(
                        at,
                        "subtask index",
                        format!("operator {id}: subtask {index} (duplicate, or not below parallelism {parallelism})"),
                    )
                })?;
            let mut s = if finished {
                FlinkSubtask::default()
            } else {
                self.subtask()?
            };
            s.index = index;
            s.finished = finished;
            subtasks.push(s);
        }
        Ok(subtasks)
    }

    fn subtask(&mut self) -> Result<FlinkSubtask, FlinkError> {
        let mut s = FlinkSubtask::default();
        let n = self.input.items("managed operator state count", 1)?;
        for _ in 0..n {
            if let Some(h) = self.operator_handle("managed operator state")? {
                s.managed_operator.push(h);
            }
        }
        let n = self.input.items("raw operator state count", 1)?;
        for _ in 0..n {
            if let Some(h) = self.operator_handle("raw operator state")? {
                s.raw_operator.push(h);
            }
        }
        s.managed_keyed = self.keyed_handle("managed keyed state")?;
        s.raw_keyed = self.keyed_handle("raw keyed state")?;
        let n = self.input.items("input channel state count", 1)?;
        for _ in 0..n {
            s.input_channels.push(self.channel_handle(true)?);
        }
        let n = self.input.items("result subpartition state count", 1)?;
        for _ in 0..n {
            s.result_subpartitions.push(self.channel_handle(false)?);
        }
        if self.version >= 7 && self.input.bool("has reference checkpoint")? {
            s.ref_checkpoint_id = Some(self.input.i64("reference checkpoint id")?);
        }
        Ok(s)
    }

    fn range(&mut self, field: &str) -> Result<FlinkKeyGroupRange, FlinkError> {
        let at = self.input.pos();
        let start = self.input.i32(field)?;
        let count = self.input.i32(field)?;
        match (u32::try_from(start), u32::try_from(count)) {
            (Ok(start), Ok(count)) if u64::from(start) + u64::from(count) <= 32768 => {
                Ok(FlinkKeyGroupRange { start, count })
            }
            _ => Err(self
                .input
                .corrupt_at(at, field, format!("key groups from {start}, {count} of them"))),
        }
    }

    fn enter(&mut self, field: &str) -> Result<(), FlinkError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self
                .input
                .corrupt_at(self.input.pos(), field, "handles nested too deeply"));
        }
        Ok(())
    }

    fn stream_handle(&mut self, field: &str) -> Result<Option<StreamHandle>, FlinkError> {
        self.enter(field)?;
        let r = self.stream_handle_inner(field);
        self.depth -= 1;
        r
    }

    fn stream_handle_inner(&mut self, field: &str) -> Result<Option<StreamHandle>, FlinkError> {
        let at = self.input.pos();
        let tag = self.input.u8(field)?;
        let i = &mut self.input;
        Ok(Some(match tag {
            0 => return Ok(None),
            1 => {
                let name = i.utf(field)?;
                let n = i.items(field, 1)?;
                let data = i.take(n, field)?.to_vec();
                StreamHandle::Bytes { name, data }
            }
            2 => {
                let size = i.u64(field)?;
                let path = i.utf(field)?;
                StreamHandle::File { path, size }
            }
            6 => {
                let path = i.utf(field)?;
                let size = i.u64(field)?;
                StreamHandle::Relative { path, size }
            }
            3 => StreamHandle::KeyGroups(Box::new(self.key_groups(field, false, false)?)),
            15 => {
                let start = i.u64(field)?;
                let size = i.u64(field)?;
                let scope = i.i32(field)?;
                let path = i.utf(field)?;
                let logical_id = i.utf(field)?;
                StreamHandle::Segment {
                    start,
                    size,
                    scope,
                    path,
                    logical_id,
                }
            }
            16 => StreamHandle::EmptySegment,
            t => {
                return Err(i.corrupt_at(at, field, format!("stream handle type {t} unknown")));
            }
        }))
    }

    fn required_stream(&mut self, field: &str) -> Result<StreamHandle, FlinkError> {
        let at = self.input.pos();
        self.stream_handle(field)?
            .ok_or_else(|| self.input.corrupt_at(at, field, "missing (null handle)"))
    }

    fn key_groups(&mut self, field: &str, savepoint: bool, with_id: bool) -> Result<KeyGroupsHandle, FlinkError> {
        let range = self.range(field)?;
        let at = self.input.pos();
        if (range.count as usize).saturating_mul(8) > self.input.remaining() {
            return Err(self
                .input
                .corrupt_at(at, field, "more key-group offsets than bytes left"));
        }
        let mut offsets = Vec::with_capacity(range.count as usize);
        for _ in 0..range.count {
            offsets.push(self.input.u64("key-group offset")?);
        }
        let stream = self.required_stream(field)?;
        let handle_id = if with_id { Some(self.input.utf(field)?) } else { None };
        Ok(KeyGroupsHandle {
            savepoint,
            range,
            offsets,
            stream,
            handle_id,
        })
    }

    fn keyed_handle(&mut self, field: &str) -> Result<Option<KeyedHandle>, FlinkError> {
        self.enter(field)?;
        let r = self.keyed_handle_inner(field);
        self.depth -= 1;
        r
    }

    fn keyed_handle_inner(&mut self, field: &str) -> Result<Option<KeyedHandle>, FlinkError> {
        let at = self.input.pos();
        let tag = self.input.u8(field)?;
        Ok(Some(match tag {
            0 => return Ok(None),
            3 => KeyedHandle::KeyGroups(self.key_groups(field, false, false)?),
            7 => KeyedHandle::KeyGroups(self.key_groups(field, true, false)?),
            12 => KeyedHandle::KeyGroups(self.key_groups(field, false, true)?),
            5 | 11 => {
                let v2 = tag == 11;
                let checkpoint_id = self.input.i64(field)?;
                let backend_id = self.input.utf(field)?;
                let range = self.range(field)?;
                let checkpointed_size = if v2 { Some(self.input.i64(field)?) } else { None };
                let meta = self.required_stream(field)?;
                let shared = self.native_files(field)?;
                let private = self.native_files(field)?;
                let handle_id = if v2 { Some(self.input.utf(field)?) } else { None };
                KeyedHandle::Incremental(IncrementalHandle {
                    checkpoint_id,
                    backend_id,
                    range,
                    checkpointed_size,
                    meta,
                    shared,
                    private,
                    handle_id,
                })
            }
            8 | 14 => {
                let range = self.range(field)?;
                let checkpointed_size = self.input.i64(field)?;
                let materialized = self.keyed_list(field)?;
                let non_materialized = self.keyed_list(field)?;
                let materialization_id = self.input.i64(field)?;
                let checkpoint_id = if tag == 14 { Some(self.input.i64(field)?) } else { None };
                let handle_id = self.input.utf(field)?;
                KeyedHandle::Changelog {
                    range,
                    checkpointed_size,
                    materialized,
                    non_materialized,
                    materialization_id,
                    checkpoint_id,
                    handle_id,
                }
            }
            9 => {
                let range = self.range(field)?;
                let from = self.input.i64(field)?;
                let to = self.input.i64(field)?;
                let n = self.input.items(field, 8)?;
                let mut changes = Vec::with_capacity(n);
                for _ in 0..n {
                    let kg = self.input.i32(field)?;
                    let len = self.input.items(field, 1)?;
                    changes.push((kg, self.input.take(len, field)?.to_vec()));
                }
                let handle_id = self.input.utf(field)?;
                KeyedHandle::ChangelogBytes {
                    range,
                    from,
                    to,
                    changes,
                    handle_id,
                }
            }
            10 | 13 => {
                let range = self.range(field)?;
                let n = self.input.items(field, 9)?;
                let mut parts = Vec::with_capacity(n);
                for _ in 0..n {
                    let offset = self.input.u64(field)?;
                    let handle = self.required_stream(field)?;
                    parts.push(ChangelogFilePart { offset, handle });
                }
                let size = self.input.i64(field)?;
                let checkpointed_size = self.input.i64(field)?;
                let handle_id = self.input.utf(field)?;
                let storage = if tag == 13 { Some(self.input.utf(field)?) } else { None };
                KeyedHandle::ChangelogFiles {
                    range,
                    parts,
                    size,
                    checkpointed_size,
                    handle_id,
                    storage,
                }
            }
            t => {
                return Err(self
                    .input
                    .corrupt_at(at, field, format!("keyed state handle type {t} unknown")))
            }
        }))
    }

    fn keyed_list(&mut self, field: &str) -> Result<Vec<KeyedHandle>, FlinkError> {
        let n = self.input.items(field, 1)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            if let Some(h) = self.keyed_handle(field)? {
                v.push(h);
            }
        }
        Ok(v)
    }

    fn native_files(&mut self, field: &str) -> Result<Vec<NativeFile>, FlinkError> {
        let n = self.input.items(field, 3)?;
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let local_name = self.input.utf(field)?;
            let handle = self.required_stream(field)?;
            v.push(NativeFile { local_name, handle });
        }
        Ok(v)
    }

    fn operator_handle(&mut self, field: &str) -> Result<Option<OperatorStateHandle>, FlinkError> {
        let at = self.input.pos();
        let tag = self.input.u8(field)?;
        if tag == 0 {
            return Ok(None);
        }
        if tag != 4 && tag != 17 {
            return Err(self
                .input
                .corrupt_at(at, field, format!("operator state handle type {tag} unknown")));
        }
        let n = self.input.items(field, 7)?;
        let mut states = Vec::with_capacity(n);
        for _ in 0..n {
            let name = self.input.utf(field)?;
            let at = self.input.pos();
            let mode = match self.input.u8(field)? {
                0 => DistributionMode::SplitDistribute,
                1 => DistributionMode::Union,
                2 => DistributionMode::Broadcast,
                m => {
                    return Err(self.input.corrupt_at(
                        at,
                        field,
                        format!("state {name:?}: distribution mode {m} unknown"),
                    ))
                }
            };
            let k = self.input.items(field, 8)?;
            let mut offsets = Vec::with_capacity(k);
            for _ in 0..k {
                offsets.push(self.input.u64("operator state offset")?);
            }
            states.push(OperatorStatePart { name, mode, offsets });
        }
        let merged_dirs = if tag == 17 {
            let task_owned = self.input.utf(field)?;
            let shared = self.input.utf(field)?;
            let _empty = self.input.bool(field)?;
            Some((task_owned, shared))
        } else {
            None
        };
        let stream = self.required_stream(field)?;
        Ok(Some(OperatorStateHandle {
            states,
            stream,
            merged_dirs,
        }))
    }

    fn channel_handle(&mut self, input: bool) -> Result<ChannelHandle, FlinkError> {
        let field = if input {
            "input channel state"
        } else {
            "result subpartition state"
        };
        let merged = if self.version >= 6 {
            let at = self.input.pos();
            match self.input.u8(field)? {
                1 | 2 => false,
                3 | 4 => true,
                t => {
                    return Err(self
                        .input
                        .corrupt_at(at, field, format!("channel handle type {t} unknown")))
                }
            }
        } else {
            false
        };
        if merged {
            let subtask = self.input.i32(field)?;
            let size = self.input.u64(field)?;
            let stream = self.required_stream(field)?;
            let n = self.input.items(field, 1)?;
            self.input.take(n, field)?;
            return Ok(ChannelHandle {
                subtask,
                info: (-1, -1),
                stream,
                size,
            });
        }
        let subtask = self.input.i32(field)?;
        let a = self.input.i32(field)?;
        let b = self.input.i32(field)?;
        let n = self.input.items(field, 8)?;
        for _ in 0..n {
            self.input.i64(field)?;
        }
        let size = self.input.u64(field)?;
        let stream = self.required_stream(field)?;
        Ok(ChannelHandle {
            subtask,
            info: (a, b),
            stream,
            size,
        })
    }
}

/// The most bytes of the trailer after the operators that are scanned for the snapshot's
/// properties: Flink's `CheckpointProperties` take under 1 KiB; what lies beyond is ignored.
pub(crate) const MAX_TRAILER_SCAN: usize = 64 << 10;

/// The longest Java string the trailer scan reads (the constants and names it looks for are
/// a few characters; class and field descriptors are skipped anyway).
const MAX_TRAILER_STRING: usize = 256;

/// Reads what the Java-serialized `CheckpointProperties` trailer says, by its strings: the
/// snapshot type's class (`SavepointType` or `CheckpointType`), the type's name and the
/// savepoint format (`CANONICAL`, `NATIVE`). Not a Java deserializer: the trailer is a fixed
/// shape written by Flink, and nothing else in it matters to a reader. Only its first
/// [`MAX_TRAILER_SCAN`] bytes are looked at, and strings of up to [`MAX_TRAILER_STRING`]
/// bytes, so the scan costs a bounded multiple of that window whatever follows the operators.
fn scan_properties(trailer: &[u8]) -> Option<SnapshotProperties> {
    let trailer = trailer.get(..MAX_TRAILER_SCAN).unwrap_or(trailer);
    let find = |needle: &[u8]| trailer.windows(needle.len()).any(|w| w == needle);
    let savepoint = if find(b"checkpoint.SavepointType") {
        true
    } else if find(b"checkpoint.CheckpointType") {
        false
    } else {
        return None;
    };
    // TC_STRING (0x74) + u16 length + bytes: the enum constants and the name.
    let mut strings = Vec::new();
    let mut i = 0;
    while let Some(&b) = trailer.get(i) {
        if b == 0x74 {
            if let Some(len) = trailer
                .get(i + 1..i + 3)
                .and_then(|l| <[u8; 2]>::try_from(l).ok())
                .map(|l| usize::from(u16::from_be_bytes(l)))
                .filter(|&l| l <= MAX_TRAILER_STRING)
            {
                if let Some(s) = trailer.get(i + 3..i + 3 + len) {
                    if let Ok(s) = std::str::from_utf8(s) {
                        if !s.is_empty() && !s.starts_with('L') && !s.contains('/') {
                            strings.push(s.to_string());
                            i += 3 + len;
                            continue;
                        }
                    }
                }
            }
        }
        i += 1;
    }
    let format = strings
        .iter()
        .find(|s| *s == "CANONICAL" || *s == "NATIVE")
        .cloned()
        .filter(|_| savepoint);
    let name = strings
        .iter()
        .find(|s| s.contains("oint") && s.chars().next().is_some_and(char::is_uppercase))
        .cloned();
    Some(SnapshotProperties {
        savepoint,
        format,
        name,
    })
}
