//! A Flink snapshot directory opened: `_metadata` decoded, every file it references located
//! (relative to the directory, absolute, or re-rooted when the snapshot was moved), operators
//! named, and the whole presented in statekit's metadata model.

use crate::error::FlinkError;
use crate::metadata::{decode_metadata, FlinkMetadata, FlinkOperator, KeyedHandle, StreamHandle};
use statekit_core::storage::{Storage, StorageError};
use statekit_core::{
    KeyGroupRange, OperatorId, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot, StateDescriptor,
    TypeSchema,
};
use statekit_format::{
    FileRef, FileScope, OperatorMetadata, SnapshotFormat, SnapshotKind, SnapshotMetadata, SubtaskMetadata,
};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

/// The property of [`FlinkSnapshot::to_statekit`]'s metadata that marks a Flink snapshot
/// (its value: the `_metadata` version).
pub const METADATA_VERSION_PROPERTY: &str = "flink.metadata_version";

/// How to open a Flink snapshot.
#[derive(Clone, Debug, Default)]
pub struct FlinkOpenOptions {
    /// Uids the job declares: an operator whose id is the hash of one of them is shown by it
    /// (Flink before 2.0 stores ids only).
    pub uids: Vec<String>,
    /// `OLD=NEW` prefixes for absolute paths of a snapshot that was moved (`--flink-root`).
    pub roots: Vec<(String, String)>,
}

/// Where a referenced stream's bytes are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// Inline in `_metadata`.
    Inline,
    /// A local file (found where the handle says, or re-rooted).
    Local(PathBuf),
    /// A URI of a file system statekit cannot reach (`hdfs://…`, or an object-store URL in a
    /// process without an object-store client installed).
    Remote(String),
    /// A local path that does not exist (after trying every root).
    Missing(String),
    /// A handle that leads outside what the snapshot may read (see [`crate::scope`]): never
    /// opened.
    Outside {
        /// The handle's path as `_metadata` records it.
        handle: String,
        /// What is wrong with it and the rule it breaks.
        rule: String,
    },
}

/// An open Flink snapshot.
#[derive(Clone, Debug)]
pub struct FlinkSnapshot {
    dir: PathBuf,
    metadata_file: PathBuf,
    metadata: FlinkMetadata,
    uids: BTreeMap<OperatorId, String>,
    roots: Vec<(String, String)>,
    /// `_metadata`'s modification time (Flink writes it last), ms since the epoch.
    written_ms: i64,
    /// When the snapshot is on an object store ([`FlinkSnapshot::open_stored`]): the store and
    /// the snapshot's directory in it. Relative handles are fetched from that directory;
    /// absolute paths of a snapshot that was copied there are looked for around it.
    stored: Option<(Arc<dyn Storage>, String)>,
    /// Where its handles may lead ([`crate::scope`]).
    scope: crate::scope::Scope,
    /// Local copies of files fetched from object stores, shared by clones and removed with
    /// the last of them; made on first use.
    cache: Arc<OnceLock<Arc<FetchCache>>>,
}

/// Local copies of a snapshot's files on object stores, each fetched once, whole.
#[derive(Debug)]
struct FetchCache {
    dir: tempfile::TempDir,
    /// Every file asked for (by a key naming it), fetched once, or failed once with the reason.
    fetched: Mutex<HashMap<String, Arc<Fetched>>>,
}

/// A file's local copy once fetched, or why it could not be.
type Fetched = OnceLock<Result<PathBuf, StorageError>>;

impl FetchCache {
    /// The local copy of `path` of `storage`, fetched on first use and known by `key`; a
    /// failure is [`Location::Missing`] with the reason.
    fn fetch(&self, key: &str, storage: &dyn Storage, path: &str) -> Location {
        let (cell, n) = {
            let mut map = self.fetched.lock().unwrap_or_else(|p| p.into_inner());
            let n = map.len();
            (map.entry(key.to_string()).or_default().clone(), n)
        };
        let got = cell.get_or_init(|| {
            let local = self.dir.path().join(format!("{n:06}"));
            storage.download(path, &local).map(|_| local)
        });
        match got {
            Ok(p) => Location::Local(p.clone()),
            Err(e) => Location::Missing(e.to_string()),
        }
    }
}

/// A keyed state's kind and types, as a conflict between subtasks names them.
fn declared(d: &StateDescriptor) -> String {
    let ttl = if d.ttl.is_some() { " with TTL" } else { "" };
    match &d.user_key_schema {
        Some(u) => format!(
            "{} state (key {}, namespace {}, user key {u}, value {}){ttl}",
            d.kind, d.key_schema, d.namespace_schema, d.value_schema
        ),
        None => format!(
            "{} state (key {}, namespace {}, value {}){ttl}",
            d.kind, d.key_schema, d.namespace_schema, d.value_schema
        ),
    }
}

impl FlinkSnapshot {
    /// Opens the snapshot whose `_metadata` is `path`, or inside directory `path`.
    pub fn open(path: &Path, options: &FlinkOpenOptions) -> Result<Self, FlinkError> {
        let metadata_file = if path.is_dir() {
            path.join("_metadata")
        } else {
            path.to_path_buf()
        };
        let dir = metadata_file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf();
        let shown = metadata_file.display().to_string();
        // At most `MAX_METADATA_BYTES`, checked before reading.
        let bytes = crate::metadata::read_metadata_file(&metadata_file, &shown)?;
        if !crate::metadata::is_flink_metadata(&bytes) {
            return Err(FlinkError::NotFlink {
                path: shown,
                reason: "its _metadata does not start with Flink's magic number 0x4960672d".into(),
            });
        }
        let written_ms = std::fs::metadata(&metadata_file)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        Self::decoded(dir, metadata_file, &bytes, written_ms, options, None)
    }

    /// Opens a Flink snapshot on an object store (or any [`Storage`]): the directory `dir` of
    /// `storage`, named `url` in messages; `metadata` is its `_metadata` (already read: one
    /// request) and `written_ms` when it was written. Files are fetched whole into a local
    /// temporary directory when first read — relative ones from `dir`, absolute `s3://`
    /// (`s3a://`, `s3p://`, `gs://`, …) ones through the process's URL resolver
    /// ([`statekit_core::location::resolve_url`]), absolute local paths of a snapshot copied to
    /// the store by their place under its job directory — so `show` reads `_metadata` only and
    /// `dump` of one state reads the files that hold it.
    pub fn open_stored(
        storage: Arc<dyn Storage>,
        dir: &str,
        url: &str,
        metadata: &[u8],
        written_ms: i64,
        options: &FlinkOpenOptions,
    ) -> Result<Self, FlinkError> {
        let shown = format!("{}/_metadata", url.trim_end_matches('/'));
        crate::metadata::check_metadata_size(metadata.len() as u64, &shown)?;
        if !crate::metadata::is_flink_metadata(metadata) {
            return Err(FlinkError::NotFlink {
                path: shown,
                reason: "its _metadata does not start with Flink's magic number 0x4960672d".into(),
            });
        }
        Self::decoded(
            PathBuf::from(url),
            PathBuf::from(shown),
            metadata,
            written_ms,
            options,
            Some((storage, dir.to_string())),
        )
    }

    /// The snapshot of the decoded `_metadata` `bytes`, its operators named.
    fn decoded(
        dir: PathBuf,
        metadata_file: PathBuf,
        bytes: &[u8],
        written_ms: i64,
        options: &FlinkOpenOptions,
        stored: Option<(Arc<dyn Storage>, String)>,
    ) -> Result<Self, FlinkError> {
        let metadata = decode_metadata(bytes, &metadata_file.display().to_string())?;
        let mut uids = BTreeMap::new();
        for op in &metadata.operators {
            if let Some(u) = &op.uid {
                uids.insert(op.id, u.clone());
            }
        }
        for u in &options.uids {
            let id = OperatorId::from_uid(u);
            if metadata.operator(&id).is_some() {
                uids.entry(id).or_insert_with(|| u.clone());
            }
        }
        let scope = match &stored {
            Some((_, key)) => crate::scope::Scope::stored(key, &dir.display().to_string(), &options.roots),
            None => crate::scope::Scope::local(&dir, &options.roots),
        };
        Ok(FlinkSnapshot {
            dir,
            metadata_file,
            metadata,
            uids,
            roots: options.roots.clone(),
            written_ms,
            stored,
            scope,
            cache: Arc::new(OnceLock::new()),
        })
    }

    /// The decoded `_metadata`.
    pub fn metadata(&self) -> &FlinkMetadata {
        &self.metadata
    }

    /// The directory holding `_metadata`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `_metadata` file.
    pub fn metadata_file(&self) -> &Path {
        &self.metadata_file
    }

    /// The uid an operator is known by: stored (version 5+), or given and matched by hash.
    pub fn uid(&self, id: &OperatorId) -> Option<&str> {
        self.uids.get(id).map(String::as_str)
    }

    /// The name statekit shows an operator by: its uid when known, else its id's 32 hex
    /// digits (which `--uid` also accepts).
    pub fn display_uid(&self, op: &FlinkOperator) -> String {
        self.uid(&op.id).map_or_else(|| op.id.to_string(), str::to_string)
    }

    /// Where a stream's bytes are. Relative handles resolve against the directory holding
    /// `_metadata`. Absolute `file:` paths are used when they exist; otherwise each
    /// `--flink-root OLD=NEW` is tried, then the path's tail from its `shared/`, `taskowned/`
    /// or `chk-N/` part on under the job directory (the parent of the one holding
    /// `_metadata`), then the path's last 4, 3 or 2 components under one of the 4 directories
    /// above the one holding `_metadata` (a changelog's `<job id>/dstl/<file>` copied beside
    /// the checkpoints), then the file's name beside `_metadata`, so a checkpoint directory
    /// that was copied elsewhere still opens.
    ///
    /// Every place is admitted only by the confinement rule of [`crate::scope`] (a savepoint's
    /// files inside its directory, a checkpoint's below its job directory, its job's
    /// changelog directory or a `--flink-root`); a handle that leads nowhere else is
    /// [`Location::Outside`], and the file it names is not opened.
    pub fn locate(&self, h: &StreamHandle) -> Location {
        use crate::scope::Verdict;
        match h {
            StreamHandle::Bytes { .. } | StreamHandle::EmptySegment => Location::Inline,
            StreamHandle::Relative { path, .. } => {
                let rel = match crate::scope::relative_components(path) {
                    Ok(parts) => parts.join("/"),
                    Err(why) => return self.outside(path, why),
                };
                if let Some((storage, dir)) = &self.stored {
                    let key = statekit_core::storage::join(dir, &rel);
                    if !self.scope.admits_key(&key) {
                        return self.outside(path, "it leads outside");
                    }
                    return self.fetch(storage.as_ref(), &key);
                }
                let p = self.dir.join(&rel);
                match self.scope.check_local(&p) {
                    Verdict::Inside => Location::Local(p),
                    Verdict::Absent => Location::Missing(p.display().to_string()),
                    Verdict::Outside => self.outside(path, "it leads outside"),
                    Verdict::Escapes => self.outside(path, "it leads outside through a symlink"),
                }
            }
            StreamHandle::File { path, .. } | StreamHandle::Segment { path, .. } => self.locate_absolute(path),
            StreamHandle::KeyGroups(k) => self.locate(&k.stream),
        }
    }

    /// The bytes of a stream (inline data, or the whole local file; a segment's range). A
    /// file whose size is not the one `_metadata` records, or a segment past its file's end,
    /// is corrupt.
    pub fn read_stream(&self, h: &StreamHandle) -> Result<Vec<u8>, FlinkError> {
        self.read_prefix(h, None)
    }

    /// Up to `limit` bytes from the start of a stream (for the heads of state streams, which
    /// are small: the whole stream need not be read to learn its states).
    pub fn read_head(&self, h: &StreamHandle, limit: usize) -> Result<Vec<u8>, FlinkError> {
        self.read_prefix(h, Some(limit))
    }

    /// A stream's bytes, all of them or up to `limit`; a local file is read from the stream's
    /// start (a segment's offset) for as many bytes as are wanted, never more.
    fn read_prefix(&self, h: &StreamHandle, limit: Option<usize>) -> Result<Vec<u8>, FlinkError> {
        self.read_prefix_slack(h, limit, 0)
    }

    /// [`Self::read_prefix`], a whole file being allowed `slack` bytes more than `_metadata`
    /// records (a changelog file's recorded size leaves out its first byte).
    fn read_prefix_slack(&self, h: &StreamHandle, limit: Option<usize>, slack: u64) -> Result<Vec<u8>, FlinkError> {
        use std::io::{Read, Seek};
        let start = match h {
            StreamHandle::Bytes { data, .. } => {
                return Ok(data.iter().take(limit.unwrap_or(usize::MAX)).copied().collect())
            }
            StreamHandle::EmptySegment => return Ok(Vec::new()),
            StreamHandle::KeyGroups(k) => return self.read_prefix(&k.stream, limit),
            StreamHandle::Segment { start, .. } => Some(*start),
            StreamHandle::File { .. } | StreamHandle::Relative { .. } => None,
        };
        let path = match self.locate(h) {
            Location::Local(p) => p,
            Location::Missing(p) => {
                return Err(FlinkError::Io {
                    path: p,
                    source: std::io::Error::new(std::io::ErrorKind::NotFound, "referenced by _metadata but not found"),
                })
            }
            Location::Remote(u) => {
                return Err(FlinkError::Io {
                    path: u,
                    source: std::io::Error::new(std::io::ErrorKind::Unsupported, "not a local file"),
                })
            }
            Location::Outside { handle, rule } => {
                return Err(FlinkError::Outside {
                    metadata: self.metadata_file.display().to_string(),
                    handle,
                    rule,
                })
            }
            Location::Inline => return Ok(Vec::new()),
        };
        let shown = path.display().to_string();
        let io = |source| FlinkError::Io {
            path: shown.clone(),
            source,
        };
        let mut f = std::fs::File::open(&path).map_err(io)?;
        let size = h.size();
        if let Some(start) = start {
            f.seek(std::io::SeekFrom::Start(start)).map_err(io)?;
        } else if limit.is_none() {
            file_len(&path, size, slack)?;
        }
        // A whole file of unrecorded size (0) is read to its end.
        let want = match (start, limit) {
            (None, None) if size == 0 || slack > 0 => u64::MAX,
            (_, None) => size,
            (_, Some(l)) => size.min(l as u64),
        };
        let mut out = Vec::with_capacity(usize::try_from(want).unwrap_or(usize::MAX).min(1 << 20));
        f.take(want).read_to_end(&mut out).map_err(io)?;
        if let (Some(start), None) = (start, limit) {
            if (out.len() as u64) < size {
                return Err(FlinkError::Corrupt {
                    file: shown,
                    offset: start,
                    field: "segment".into(),
                    reason: format!("{size} bytes from {start} are past the end of the file"),
                });
            }
        }
        Ok(out)
    }

    /// The keyed proxy (states and types) of the stream `h` begins with, reading no more of
    /// it than the head needs.
    pub fn keyed_head(&self, h: &StreamHandle) -> Result<crate::meta::KeyedProxy, FlinkError> {
        self.head(h, crate::meta::decode_keyed_proxy)
    }

    /// The operator proxy (states, modes and types) of the stream `h` begins with.
    pub fn operator_head(&self, h: &StreamHandle) -> Result<crate::meta::OperatorProxy, FlinkError> {
        self.head(h, crate::meta::decode_operator_proxy)
    }

    fn head<T>(&self, h: &StreamHandle, decode: fn(&[u8], &str) -> Result<T, FlinkError>) -> Result<T, FlinkError> {
        let shown = self.locate_shown(h);
        let mut limit = 64 << 10;
        loop {
            let bytes = self.read_head(h, limit)?;
            match decode(&bytes, &shown) {
                Err(FlinkError::Corrupt { .. }) if bytes.len() == limit => limit = limit.saturating_mul(16),
                r => return r,
            }
        }
    }

    /// The keyed states of operator `op`, as statekit descriptors: the union, by name, of
    /// what the heads of its subtasks' keyed streams list (a subtask registers only the
    /// states it used). Errors with [`FlinkError::Unsupported`] for keyed state kept in a form
    /// not read yet (RocksDB files, changelog, the heap checkpoint format).
    ///
    /// Two subtasks that declare one state with different kinds or types make the snapshot
    /// unreadable as one ([`FlinkError::Corrupt`] naming both): read with one subtask's
    /// types, the other's values would not decode.
    pub fn keyed_descriptors(&self, op: &FlinkOperator) -> Result<Vec<StateDescriptor>, FlinkError> {
        let mut out: Vec<StateDescriptor> = Vec::new();
        // The subtask each descriptor of `out` came from.
        let mut from: Vec<u32> = Vec::new();
        let mut add = |d: StateDescriptor, subtask: u32, out: &mut Vec<StateDescriptor>| {
            let Some(i) = out.iter().position(|o| o.name == d.name) else {
                out.push(d);
                from.push(subtask);
                return Ok(());
            };
            match (out.get(i), from.get(i)) {
                (Some(o), Some(first)) if *o != d => Err(FlinkError::Corrupt {
                    file: self.metadata_file.display().to_string(),
                    offset: 0,
                    field: format!("operator {} keyed state {:?}", self.display_uid(op), d.name),
                    reason: format!(
                        "subtask {first} declares it as {}, subtask {subtask} as {}: one state of one operator has one type",
                        declared(o),
                        declared(&d)
                    ),
                }),
                _ => Ok(()),
            }
        };
        for (subtask, k) in op
            .subtasks
            .iter()
            .filter_map(|s| s.managed_keyed.as_ref().map(|k| (s.index, k)))
        {
            let proxy = match k {
                KeyedHandle::Incremental(i) => self.keyed_head(&i.meta)?,
                KeyedHandle::KeyGroups(g) => self.keyed_head(&g.stream)?,
                k => {
                    // Changelog: the states of the materialized part and of the log.
                    let r = k.range();
                    let Some(end) = r.end() else { continue };
                    for v in self.handle_views(op, k, KeyGroupRange::new(r.start, end))? {
                        for d in v.states() {
                            add(d.clone(), subtask, &mut out)?;
                        }
                    }
                    continue;
                }
            };
            let descs = crate::canonical::descriptors(&proxy).map_err(|what| FlinkError::Unsupported {
                file: self.metadata_file.display().to_string(),
                offset: 0,
                field: format!("operator {} state meta info", op.id),
                what: what.to_string(),
            })?;
            for d in descs {
                add(d, subtask, &mut out)?;
            }
        }
        Ok(out)
    }

    /// The parts of `op`'s states that statekit keeps as Flink's bytes (values of Kryo,
    /// Avro or a user's serializer, and composites holding one), each with the serializer
    /// that wrote it. Keyed states come from the heads of full, native and materialized
    /// changelog streams (a changelog's log alone does not name its serializers); operator
    /// and broadcast states from their streams' heads.
    pub fn opaque_parts(&self, op: &FlinkOperator) -> Result<Vec<OpaquePart>, FlinkError> {
        let mut out: Vec<OpaquePart> = Vec::new();
        let mut push = |state: &str, part: &str, t: &crate::serializer::FlinkType| {
            if !crate::value::decodable(t) && !out.iter().any(|o| o.state == state && o.part == part) {
                out.push(OpaquePart {
                    state: state.to_string(),
                    part: part.to_string(),
                    serializer: t.name(),
                });
            }
        };
        let mut handles: Vec<&KeyedHandle> = op.subtasks.iter().filter_map(|s| s.managed_keyed.as_ref()).collect();
        while let Some(k) = handles.pop() {
            let proxy = match k {
                KeyedHandle::KeyGroups(g) => self.keyed_head(&g.stream)?,
                KeyedHandle::Incremental(i) => self.keyed_head(&i.meta)?,
                KeyedHandle::Changelog { materialized, .. } => {
                    handles.extend(materialized);
                    continue;
                }
                _ => continue,
            };
            for m in &proxy.states {
                // A state whose layout statekit does not know is refused when read.
                let Ok((layout, _)) = crate::canonical::layout(&proxy.key, m) else {
                    continue;
                };
                push(&m.name, "key", &proxy.key);
                push(&m.name, "namespace", &layout.namespace);
                if let Some(u) = &layout.user_key {
                    push(&m.name, "user key", u);
                }
                push(&m.name, "value", &layout.value);
            }
        }
        for h in op.subtasks.iter().flat_map(|s| &s.managed_operator) {
            let proxy = self.operator_head(&h.stream)?;
            for m in proxy.states.iter().chain(&proxy.broadcast) {
                if let Some(k) = m.serializer("KEY_SERIALIZER") {
                    push(&m.name, "key", k);
                }
                if let Some(v) = m.serializer("VALUE_SERIALIZER") {
                    push(&m.name, "value", v);
                }
            }
        }
        Ok(out)
    }

    /// One view per subtask of `op` whose key groups overlap `range`.
    pub fn keyed_views(
        &self,
        op: &FlinkOperator,
        range: KeyGroupRange,
    ) -> Result<Vec<Box<dyn statekit_core::KeyedStateView>>, FlinkError> {
        let mut out: Vec<Box<dyn statekit_core::KeyedStateView>> = Vec::new();
        for s in &op.subtasks {
            let Some(k) = &s.managed_keyed else { continue };
            let r = k.range();
            let Some(end) = r.end() else { continue };
            let own = KeyGroupRange::new(r.start, end);
            if own.intersection(&range).is_empty() {
                continue;
            }
            out.extend(self.handle_views(op, k, own)?);
        }
        Ok(out)
    }

    /// The operator states of `op` as statekit descriptors (mode, element or key and value
    /// schemas), from the heads of its subtasks' operator state streams: the union by name,
    /// in `_metadata`'s order.
    pub fn operator_descriptors(&self, op: &FlinkOperator) -> Result<Vec<OperatorStateDescriptor>, FlinkError> {
        let mut out: Vec<OperatorStateDescriptor> = Vec::new();
        for h in op.subtasks.iter().flat_map(|s| &s.managed_operator) {
            if h.states.iter().all(|p| out.iter().any(|d| d.name == p.name)) {
                continue;
            }
            let proxy = self.operator_head(&h.stream)?;
            for part in &h.states {
                if out.iter().any(|d| d.name == part.name) {
                    continue;
                }
                let metas = if part.mode == crate::metadata::DistributionMode::Broadcast {
                    &proxy.broadcast
                } else {
                    &proxy.states
                };
                let meta = metas.iter().find(|m| m.name == part.name);
                let schema = |role: &str| {
                    meta.and_then(|m| m.serializer(role))
                        .map_or(TypeSchema::Bytes, crate::value::schema_of)
                };
                out.push(OperatorStateDescriptor {
                    name: part.name.clone(),
                    mode: mode_of(part.mode),
                    value_schema: schema("VALUE_SERIALIZER"),
                    key_schema: (part.mode == crate::metadata::DistributionMode::Broadcast)
                        .then(|| schema("KEY_SERIALIZER")),
                });
            }
        }
        Ok(out)
    }

    /// The managed operator state subtask `index` of `op` stored (list, union and broadcast
    /// states, in `_metadata`'s order); empty when it stored none.
    pub fn operator_state(&self, op: &FlinkOperator, index: u32) -> Result<OperatorStateSnapshot, FlinkError> {
        let mut out = OperatorStateSnapshot::default();
        let Some(s) = op.subtasks.iter().find(|s| s.index == index) else {
            return Ok(out);
        };
        for h in &s.managed_operator {
            let bytes = self.read_stream(&h.stream)?;
            let part = crate::operator::read_operator_state(&bytes, h, &self.locate_shown(&h.stream))?;
            out.states.extend(part.states);
        }
        Ok(out)
    }

    /// The views of one keyed handle over `range`: a key-group stream, a RocksDB database, or
    /// a changelog handle's materialized part with its log replayed.
    fn handle_views(
        &self,
        op: &FlinkOperator,
        k: &KeyedHandle,
        range: KeyGroupRange,
    ) -> Result<Vec<Box<dyn statekit_core::KeyedStateView>>, FlinkError> {
        match k {
            KeyedHandle::KeyGroups(g) => Ok(vec![Box::new(self.key_groups_view(op, g)?)]),
            KeyedHandle::Incremental(i) => Ok(vec![self.native_view(op, i, range)?]),
            KeyedHandle::Changelog {
                materialized,
                non_materialized,
                ..
            } => {
                let mut base = Vec::new();
                let mut key = None;
                for m in materialized {
                    let head = match m {
                        KeyedHandle::KeyGroups(g) => Some(&g.stream),
                        KeyedHandle::Incremental(i) => Some(&i.meta),
                        _ => None,
                    };
                    if let (None, Some(h)) = (&key, head) {
                        key = Some(self.keyed_head(h)?.key);
                    }
                    base.extend(self.handle_views(op, m, range)?);
                }
                let mut changes = Vec::new();
                let mut files: BTreeMap<String, (Vec<u8>, bool)> = BTreeMap::new();
                for c in non_materialized {
                    match c {
                        KeyedHandle::ChangelogFiles { parts, .. } => {
                            for p in parts {
                                let shown = self.locate_shown(&p.handle);
                                if !files.contains_key(&shown) {
                                    let bytes = self.read_prefix_slack(&p.handle, None, 1)?;
                                    files.insert(shown.clone(), crate::changelog::dstl_data(&bytes, &shown)?);
                                }
                                if let Some((data, compressed)) = files.get(&shown) {
                                    crate::changelog::read_change_set(
                                        data,
                                        *compressed,
                                        p.offset,
                                        &shown,
                                        &mut changes,
                                    )?;
                                }
                            }
                        }
                        KeyedHandle::ChangelogBytes { changes: cs, .. } => {
                            for (kg, b) in cs {
                                changes.push(crate::changelog::RawChange {
                                    key_group: *kg,
                                    bytes: b.clone(),
                                    at: (format!("{} (inline)", self.metadata_file.display()), 0),
                                });
                            }
                        }
                        other => return Err(self.unsupported_handle(op, other)),
                    }
                }
                let name = format!(
                    "{} (operator {}, key groups {range})",
                    self.metadata_file.display(),
                    op.id
                );
                Ok(vec![Box::new(crate::changelog::replay(
                    &name,
                    &base,
                    key,
                    &changes,
                    op.max_parallelism,
                    range,
                )?)])
            }
            other => Err(self.unsupported_handle(op, other)),
        }
    }

    /// A key-group stream's view: a local file's key groups are read when visited (memory
    /// holds one at a time); inline streams are in memory already.
    fn key_groups_view(
        &self,
        op: &FlinkOperator,
        g: &crate::metadata::KeyGroupsHandle,
    ) -> Result<crate::canonical::KeyGroupsView, FlinkError> {
        let start = match &g.stream {
            StreamHandle::Segment { start, .. } => Some(*start),
            StreamHandle::File { .. } | StreamHandle::Relative { .. } => Some(0),
            _ => None,
        };
        if let (Some(start), Location::Local(path)) = (start, self.locate(&g.stream)) {
            let recorded = g.stream.size();
            let whole = matches!(g.stream, StreamHandle::File { .. } | StreamHandle::Relative { .. });
            // A whole file has the size `_metadata` records (or any, unrecorded); a segment
            // lies inside its file.
            let actual = file_len(&path, if whole { recorded } else { 0 }, 0)?;
            let len = if whole && recorded == 0 { actual } else { recorded };
            if start.saturating_add(len) > actual {
                return Err(FlinkError::Corrupt {
                    file: path.display().to_string(),
                    offset: actual,
                    field: "file size".into(),
                    reason: format!("{actual} bytes, _metadata records {len} from {start}"),
                });
            }
            let proxy = self.keyed_head(&g.stream)?;
            return crate::canonical::KeyGroupsView::from_file(&path, start, len, proxy, g, op.max_parallelism);
        }
        let bytes = self.read_stream(&g.stream)?;
        crate::canonical::KeyGroupsView::new(bytes, g, op.max_parallelism, &self.locate_shown(&g.stream))
    }

    fn unsupported_handle(&self, op: &FlinkOperator, k: &KeyedHandle) -> FlinkError {
        FlinkError::Unsupported {
            file: self.metadata_file.display().to_string(),
            offset: 0,
            field: format!("operator {} keyed state", op.id),
            what: format!("{} inside a changelog handle", k.type_name()),
        }
    }

    /// Checks what Flink's format lets a reader check: every file `_metadata` references is
    /// there with the size it records, every keyed entry of every operator decodes (key
    /// groups in range, records well formed, values by their serializers), every operator
    /// state element and broadcast entry decodes. Problems are collected, each naming its
    /// file and offset; the walk goes on past them.
    pub fn verify(&self) -> FlinkVerifyReport {
        let mut r = FlinkVerifyReport {
            files: 1,
            bytes: std::fs::metadata(&self.metadata_file).map_or(0, |m| m.len()),
            ..Default::default()
        };
        let mut seen = std::collections::BTreeSet::new();
        for op in &self.metadata.operators {
            let mut streams: Vec<&StreamHandle> = Vec::new();
            for s in &op.subtasks {
                for k in [&s.managed_keyed, &s.raw_keyed].into_iter().flatten() {
                    streams.extend(k.streams());
                }
                streams.extend(s.managed_operator.iter().chain(&s.raw_operator).map(|h| &h.stream));
            }
            for h in streams {
                if matches!(h, StreamHandle::Bytes { .. } | StreamHandle::EmptySegment) {
                    continue;
                }
                let shown = self.locate_shown(h);
                if !seen.insert(shown) {
                    continue;
                }
                // A local file's size is checked here, its bytes when its state is decoded
                // below (never all of it in memory); a changelog file's recorded size leaves out
                // its first byte.
                let checked = match (h, self.locate(h)) {
                    (StreamHandle::File { .. } | StreamHandle::Relative { .. }, Location::Local(p)) => {
                        file_len(&p, h.size(), 1)
                    }
                    _ => self.read_prefix_slack(h, None, 1).map(|b| b.len() as u64),
                };
                match checked {
                    Ok(n) => {
                        r.files += 1;
                        r.bytes += n;
                    }
                    Err(e) => r.problems.push(e),
                }
            }
            // Subtasks that disagree on a state's type: every reader refuses the snapshot.
            if let Err(e @ FlinkError::Corrupt { .. }) = self.keyed_descriptors(op) {
                r.problems.push(e);
            }
            let full = KeyGroupRange::new(0, op.max_parallelism.saturating_sub(1));
            match self.keyed_views(op, full) {
                Ok(views) => {
                    for v in views {
                        for kg in v.key_group_range() {
                            let mut n = 0u64;
                            // Every part decoded by its schema, as `dump` renders it: the
                            // first entry of the key group that does not is a problem.
                            let mut undecodable: Option<String> = None;
                            let states = v.states();
                            let res = v.visit_key_group(kg, &mut |e| {
                                n += 1;
                                if undecodable.is_none() {
                                    if let Err(why) = statekit_core::stream::check_entry_values(states, e) {
                                        undecodable = Some(format!("entry {}: {why}", n - 1));
                                    }
                                }
                                Ok(std::ops::ControlFlow::Continue(()))
                            });
                            r.entries += n;
                            if let Some(reason) = undecodable {
                                r.problems.push(FlinkError::Corrupt {
                                    file: self.metadata_file.display().to_string(),
                                    offset: 0,
                                    field: format!("operator {} key group {kg}", self.display_uid(op)),
                                    reason,
                                });
                            }
                            if let Err(e) = res {
                                r.problems.push(FlinkError::Corrupt {
                                    file: self.metadata_file.display().to_string(),
                                    offset: 0,
                                    field: format!("operator {} key group {kg}", self.display_uid(op)),
                                    reason: e.to_string(),
                                });
                                break;
                            }
                        }
                    }
                }
                Err(e) => r.problems.push(e),
            }
            for s in &op.subtasks {
                match self.operator_state(op, s.index) {
                    Ok(snap) => {
                        for (_, data) in &snap.states {
                            r.entries += match data {
                                statekit_core::OperatorStateData::List(items) => items.len() as u64,
                                statekit_core::OperatorStateData::Broadcast(m) => m.len() as u64,
                            };
                        }
                    }
                    Err(e) => r.problems.push(e),
                }
            }
        }
        // The handles outside the snapshot by their text first; each outside handle once.
        let mut problems = self.handle_problems();
        let mut named: std::collections::BTreeSet<String> = problems
            .iter()
            .filter_map(|e| match e {
                FlinkError::Outside { handle, .. } => Some(handle.clone()),
                _ => None,
            })
            .collect();
        for e in std::mem::take(&mut r.problems) {
            if let FlinkError::Outside { handle, .. } = &e {
                if !named.insert(handle.clone()) {
                    continue;
                }
            }
            problems.push(e);
        }
        r.problems = problems;
        r
    }

    /// The handles of `_metadata` that lead outside the snapshot by their text alone, no file
    /// looked at ([`crate::scope`]): a relative handle that is not a plain path below its
    /// directory, an absolute one with a `.` or `..` component, a savepoint's absolute path
    /// outside its directory, an object-store URL outside the bucket and prefix the snapshot
    /// may read. Each handle once, in `_metadata`'s order. Readers refuse such a snapshot when
    /// they open it (`verify` lists them); the other handles are checked when they are read.
    pub fn handle_problems(&self) -> Vec<FlinkError> {
        let mut out = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for s in self.metadata.operators.iter().flat_map(|o| &o.subtasks) {
            let mut streams: Vec<&StreamHandle> = Vec::new();
            for k in [&s.managed_keyed, &s.raw_keyed].into_iter().flatten() {
                streams.extend(k.streams());
            }
            streams.extend(s.managed_operator.iter().chain(&s.raw_operator).map(|h| &h.stream));
            for h in streams {
                if let Some(Location::Outside { handle, rule }) = self.outside_by_text(h) {
                    if seen.insert(handle.clone()) {
                        out.push(FlinkError::Outside {
                            metadata: self.metadata_file.display().to_string(),
                            handle,
                            rule,
                        });
                    }
                }
            }
        }
        out
    }

    /// [`Location::Outside`] when the handle `h` leads outside by its text alone.
    fn outside_by_text(&self, h: &StreamHandle) -> Option<Location> {
        match h {
            StreamHandle::Relative { path, .. } => crate::scope::relative_components(path)
                .err()
                .map(|why| self.outside(path, why)),
            StreamHandle::File { path, .. } | StreamHandle::Segment { path, .. } => {
                let local = match path.strip_prefix("file://").or_else(|| path.strip_prefix("file:")) {
                    Some(p) => format!("/{}", p.trim_start_matches('/')),
                    None if path.starts_with('/') => path.clone(),
                    None => {
                        let (scheme, _) = path.split_once("://")?;
                        crate::scope::fetchable_scheme(scheme)?;
                        return match crate::scope::Place::parse(path) {
                            Err(why) => Some(self.outside(path, why)),
                            Ok(place) if self.url_target(&place).is_none() => {
                                Some(self.outside(path, "it names another bucket or prefix"))
                            }
                            Ok(_) => None,
                        };
                    }
                };
                if let Err(why) = crate::scope::Place::parse(&local) {
                    return Some(self.outside(path, why));
                }
                let savepoint_outside = !self.scope.is_checkpoint()
                    && (self.stored.is_some() || !self.scope.holds_lexically(Path::new(&local)));
                savepoint_outside.then(|| self.outside(path, SAVEPOINT_ABSOLUTE))
            }
            StreamHandle::KeyGroups(k) => self.outside_by_text(&k.stream),
            StreamHandle::Bytes { .. } | StreamHandle::EmptySegment => None,
        }
    }

    /// A RocksDB native or incremental handle's database, opened read-only.
    #[cfg(feature = "rocksdb")]
    fn native_view(
        &self,
        op: &FlinkOperator,
        i: &crate::metadata::IncrementalHandle,
        range: KeyGroupRange,
    ) -> Result<Box<dyn statekit_core::KeyedStateView>, FlinkError> {
        use crate::native::Source;
        let proxy = self.keyed_head(&i.meta)?;
        let mut files = Vec::with_capacity(i.shared.len() + i.private.len());
        for f in i.shared.iter().chain(&i.private) {
            let src = match (&f.handle, self.locate(&f.handle)) {
                (StreamHandle::Relative { .. } | StreamHandle::File { .. }, Location::Local(p)) => Source::File(p),
                (h, _) => Source::Bytes(self.read_stream(h)?),
            };
            files.push((f.local_name.clone(), src));
        }
        let name = format!(
            "{} (operator {}, key groups {range})",
            self.metadata_file.display(),
            op.id
        );
        Ok(Box::new(crate::native::NativeKeyedView::open(
            &name,
            proxy,
            &files,
            op.max_parallelism,
            range,
        )?))
    }

    #[cfg(not(feature = "rocksdb"))]
    fn native_view(
        &self,
        op: &FlinkOperator,
        _: &crate::metadata::IncrementalHandle,
        _: KeyGroupRange,
    ) -> Result<Box<dyn statekit_core::KeyedStateView>, FlinkError> {
        Err(FlinkError::Unsupported {
            file: self.metadata_file.display().to_string(),
            offset: 0,
            field: format!("operator {} keyed state", op.id),
            what: "RocksDB files (IncrementalRemoteKeyedStateHandle): this statekit was built without RocksDB".into(),
        })
    }

    fn locate_shown(&self, h: &StreamHandle) -> String {
        match self.locate(h) {
            Location::Local(p) => p.display().to_string(),
            Location::Inline => format!("{} (inline)", self.metadata_file.display()),
            Location::Remote(u) | Location::Missing(u) => u,
            Location::Outside { handle, .. } => handle,
        }
    }

    /// [`Location::Outside`] for `handle`: `why`, and the snapshot's rule.
    fn outside(&self, handle: &str, why: &str) -> Location {
        Location::Outside {
            handle: handle.to_string(),
            rule: format!("{why}; {}", self.scope.rule()),
        }
    }

    fn locate_absolute(&self, uri: &str) -> Location {
        use crate::scope::Verdict;
        let local = match uri.strip_prefix("file://").or_else(|| uri.strip_prefix("file:")) {
            Some(p) => p.to_string(),
            None if uri.starts_with('/') => uri.to_string(),
            None => return self.locate_url(uri),
        };
        // `file:///x` and `file:/x` both name /x.
        let local = format!("/{}", local.trim_start_matches('/'));
        if let Err(why) = crate::scope::Place::parse(&local) {
            return self.outside(uri, why);
        }
        // A savepoint is relocatable: an absolute handle is read only where it is, inside it.
        if !self.scope.is_checkpoint() {
            if self.stored.is_some() {
                return self.outside(uri, SAVEPOINT_ABSOLUTE);
            }
            let p = PathBuf::from(&local);
            return match self.scope.check_local(&p) {
                Verdict::Inside => Location::Local(p),
                Verdict::Absent => Location::Missing(local),
                Verdict::Outside => self.outside(uri, SAVEPOINT_ABSOLUTE),
                Verdict::Escapes => self.outside(uri, "it leads outside through a symlink"),
            };
        }
        if let Some((storage, dir)) = &self.stored {
            return self.locate_moved_to_store(storage.as_ref(), dir, &local);
        }
        // Where to look, in order; each place is admitted by the scope before it is looked at.
        let mut tries: Vec<PathBuf> = vec![PathBuf::from(&local)];
        for (old, new) in &self.roots {
            if let Some(rest) = local.strip_prefix(old.as_str()) {
                tries.push(PathBuf::from(format!("{new}{rest}")));
            }
        }
        // Moved: look for the file by its place relative to the job directory.
        let parts: Vec<&str> = local.split('/').collect();
        if let Some(job) = self.dir.parent() {
            for (i, part) in parts.iter().enumerate() {
                if *part == "shared" || *part == "taskowned" || part.starts_with("chk-") {
                    if let Some(tail) = parts.get(i..) {
                        tries.push(job.join(tail.join("/")));
                    }
                }
            }
        }
        // Moved with its surroundings (a changelog's `<base>/<job id>/dstl/<file>` beside the
        // checkpoints, say): the path's last components under an ancestor of the snapshot's
        // directory, the longest tail first. Bounded: 4 tails × 4 ancestors.
        for n in (2..=4).rev() {
            let Some(tail) = parts.len().checked_sub(n).and_then(|s| parts.get(s..)) else {
                continue;
            };
            for a in self.dir.ancestors().skip(1).take(4) {
                tries.push(a.join(tail.join("/")));
            }
        }
        if let Some(name) = parts.last() {
            tries.push(self.dir.join(name));
        }
        let mut outside = false;
        let mut escapes = false;
        for (i, p) in tries.into_iter().enumerate() {
            match self.scope.check_local(&p) {
                Verdict::Inside => return Location::Local(p),
                Verdict::Absent => {}
                // Only the path itself counts: the other tries are guesses.
                Verdict::Outside => outside |= i == 0,
                Verdict::Escapes => escapes = true,
            }
        }
        if escapes {
            self.outside(uri, "it leads outside through a symlink")
        } else if outside {
            self.outside(uri, "it is outside, and no file of it is found inside either")
        } else {
            Location::Missing(local)
        }
    }

    /// A file Flink references by a URI of another file system: an object store's, fetched
    /// through the process's URL resolver (Flink's `s3a://`, `s3p://` and `s3n://` are S3)
    /// when the scope admits it (as it is, or re-rooted by a `--flink-root` whose both sides
    /// are URLs) — no request is made for one it does not; any other scheme, or no resolver,
    /// is [`Location::Remote`].
    fn locate_url(&self, uri: &str) -> Location {
        use crate::scope::Place;
        let Some((scheme, _)) = uri.split_once("://") else {
            return Location::Remote(uri.to_string());
        };
        if crate::scope::fetchable_scheme(scheme).is_none() {
            return Location::Remote(uri.to_string());
        }
        let place = match Place::parse(uri) {
            Ok(p) => p,
            Err(why) => return self.outside(uri, why),
        };
        let Some(target) = self.url_target(&place) else {
            return self.outside(uri, "it names another bucket or prefix");
        };
        match statekit_core::location::resolve_url(&target.to_string()) {
            Ok(statekit_core::location::Location::Stored { storage, path, .. }) => self.fetch(storage.as_ref(), &path),
            _ => Location::Remote(uri.to_string()),
        }
    }

    /// Where the object `place` is fetched from: itself when the scope admits it, else its
    /// place re-rooted by the first `--flink-root OLD=NEW` (both URLs) that admits it.
    fn url_target(&self, place: &crate::scope::Place) -> Option<crate::scope::Place> {
        use crate::scope::Place;
        if self.scope.admits_url(place) {
            return Some(place.clone());
        }
        for (old, new) in &self.roots {
            let (Ok(old), Ok(new)) = (Place::parse(old), Place::parse(new)) else {
                continue;
            };
            if place.is_within(&old) {
                let mut moved = new;
                let tail = place.parts().iter().skip(old.parts().len()).cloned();
                match &mut moved {
                    Place::Local(c) | Place::Url { key: c, .. } => c.extend(tail),
                }
                if self.scope.admits_url(&moved) {
                    return Some(moved);
                }
            }
        }
        None
    }

    /// A local absolute path in the `_metadata` of a snapshot that was copied to an object
    /// store: looked for as on local disk ([`Self::locate_absolute`]) but in the store — its
    /// tail from `shared/`, `taskowned/` or `chk-N/` under the job directory (the parent of
    /// `dir`), then its last 4, 3 or 2 components under the 4 directories above `dir`, then
    /// its name in `dir`. Each try the scope admits is one `HEAD`; bounded.
    fn locate_moved_to_store(&self, storage: &dyn Storage, dir: &str, local: &str) -> Location {
        use statekit_core::storage::join;
        let parts: Vec<&str> = local.split('/').filter(|p| !p.is_empty()).collect();
        let ancestors: Vec<&str> = {
            let mut a = Vec::new();
            let mut d = dir;
            while let Some((p, _)) = d.rsplit_once('/') {
                a.push(p);
                d = p;
            }
            if !dir.is_empty() {
                a.push("");
            }
            a
        };
        let mut tries: Vec<String> = Vec::new();
        if let Some(job) = ancestors.first() {
            for (i, part) in parts.iter().enumerate() {
                if *part == "shared" || *part == "taskowned" || part.starts_with("chk-") {
                    if let Some(tail) = parts.get(i..) {
                        tries.push(join(job, &tail.join("/")));
                    }
                }
            }
        }
        for n in (2..=4).rev() {
            let Some(tail) = parts.len().checked_sub(n).and_then(|s| parts.get(s..)) else {
                continue;
            };
            for a in ancestors.iter().take(4) {
                tries.push(join(a, &tail.join("/")));
            }
        }
        if let Some(name) = parts.last() {
            tries.push(join(dir, name));
        }
        for t in tries {
            if self.scope.admits_key(&t) && storage.exists(&t).unwrap_or(false) {
                return self.fetch(storage, &t);
            }
        }
        Location::Missing(local.to_string())
    }

    /// The local copy of `path` of `storage` (fetched on first use).
    fn fetch(&self, storage: &dyn Storage, path: &str) -> Location {
        match self.fetch_cache() {
            Ok(c) => c.fetch(&storage.describe(path), storage, path),
            Err(e) => Location::Missing(format!("{}: {e}", std::env::temp_dir().display())),
        }
    }

    /// The cache of fetched files, made on first use (in a new temporary directory).
    fn fetch_cache(&self) -> std::io::Result<Arc<FetchCache>> {
        if let Some(c) = self.cache.get() {
            return Ok(c.clone());
        }
        let dir = tempfile::Builder::new().prefix(".statekit-flink-").tempdir()?;
        let made = Arc::new(FetchCache {
            dir,
            fetched: Mutex::new(HashMap::new()),
        });
        // Another thread may have made one first: the first one stays.
        Ok(self.cache.get_or_init(|| made).clone())
    }

    /// The snapshot in statekit's metadata model: operators by uid (or hex id), subtasks with
    /// Flink's key-group ranges, operator states with their modes, and `flink.*` properties
    /// (`flink.metadata_version`, `flink.snapshot_type`, `flink.savepoint_format`,
    /// `flink.keyed_handles`). State types are not in `_metadata`: keyed states and value
    /// schemas are filled in when the state data is read.
    pub fn to_statekit(&self) -> SnapshotMetadata {
        let md = &self.metadata;
        let mut format = SnapshotFormat::Canonical;
        let mut handle_kinds = std::collections::BTreeSet::new();
        let mut operators = Vec::with_capacity(md.operators.len());
        for op in &md.operators {
            let mut subtasks = Vec::with_capacity(op.parallelism as usize);
            let mut states: Vec<OperatorStateDescriptor> = Vec::new();
            for index in 0..op.parallelism {
                let key_groups = KeyGroupRange::for_subtask(op.max_parallelism, op.parallelism, index);
                let found = op.subtasks.iter().find(|s| s.index == index);
                let mut sm = SubtaskMetadata {
                    index,
                    key_groups,
                    finished: op.fully_finished || found.is_some_and(|s| s.finished),
                    keyed: statekit_format::KeyedHandle::None,
                    keyed_stats: None,
                    operator: None,
                };
                if let Some(s) = found {
                    if let Some(k) = &s.managed_keyed {
                        handle_kinds.insert(k.type_name());
                        match k {
                            KeyedHandle::Incremental(_) => format = SnapshotFormat::Native,
                            KeyedHandle::Changelog { .. } if format != SnapshotFormat::Native => {
                                format = SnapshotFormat::Changelog
                            }
                            _ => {}
                        }
                        let size: u64 = k.streams().iter().map(|h| h.size()).sum();
                        sm.keyed =
                            statekit_format::KeyedHandle::Canonical(self.file_ref(k.streams().first().copied(), size));
                    }
                    if let Some(h) = s.managed_operator.first() {
                        sm.operator = Some(self.file_ref(Some(&h.stream), h.stream.size()));
                        for part in &h.states {
                            if !states.iter().any(|d| d.name == part.name) {
                                states.push(OperatorStateDescriptor {
                                    name: part.name.clone(),
                                    mode: mode_of(part.mode),
                                    value_schema: TypeSchema::Bytes,
                                    key_schema: None,
                                });
                            }
                        }
                    }
                }
                subtasks.push(sm);
            }
            operators.push(OperatorMetadata {
                uid: self.display_uid(op),
                operator_id: op.id,
                parallelism: op.parallelism,
                max_parallelism: op.max_parallelism,
                finished: op.fully_finished || (!op.subtasks.is_empty() && op.subtasks.iter().all(|s| s.finished)),
                key_group_scheme: statekit_core::KeyGroupScheme::Flink,
                keyed_states: Vec::new(),
                operator_states: states,
                subtasks,
            });
        }
        let savepoint = match &md.properties {
            Some(p) => p.savepoint,
            None => !self
                .dir
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("chk-")),
        };
        let mut properties = BTreeMap::new();
        properties.insert(METADATA_VERSION_PROPERTY.to_string(), md.version.to_string());
        properties.insert(
            "flink.snapshot_type".to_string(),
            md.properties
                .as_ref()
                .and_then(|p| p.name.clone())
                .unwrap_or_else(|| if savepoint { "Savepoint" } else { "Checkpoint" }.to_string()),
        );
        if let Some(f) = md.properties.as_ref().and_then(|p| p.format.clone()) {
            properties.insert("flink.savepoint_format".to_string(), f);
        }
        if !handle_kinds.is_empty() {
            properties.insert(
                "flink.keyed_handles".to_string(),
                handle_kinds.into_iter().collect::<Vec<_>>().join(","),
            );
        }
        SnapshotMetadata {
            kind: if savepoint {
                SnapshotKind::Savepoint
            } else {
                SnapshotKind::Checkpoint
            },
            format,
            checkpoint_id: md.checkpoint_id,
            job_id: self.job_id(),
            // Not in `_metadata`: when Flink wrote it (it is written last).
            timestamp_ms: self.written_ms,
            properties,
            operators,
        }
    }

    /// The job id: a checkpoint's job directory name (32 hex digits), else unknown (zeros):
    /// `_metadata` does not store it.
    fn job_id(&self) -> String {
        self.dir
            .parent()
            .and_then(|p| p.file_name())
            .and_then(|n| n.to_str())
            .filter(|n| n.len() == 32 && n.bytes().all(|b| b.is_ascii_hexdigit()))
            .map_or_else(|| "0".repeat(32), str::to_string)
    }

    fn file_ref(&self, h: Option<&StreamHandle>, size: u64) -> FileRef {
        let (scope, path) = match h {
            Some(StreamHandle::Relative { path, .. }) => (FileScope::Exclusive, path.clone()),
            Some(StreamHandle::File { path, .. }) | Some(StreamHandle::Segment { path, .. }) => {
                (FileScope::Absolute, path.clone())
            }
            Some(StreamHandle::KeyGroups(k)) => return self.file_ref(Some(&k.stream), size),
            _ => (FileScope::Exclusive, "_metadata".to_string()),
        };
        FileRef { scope, path, size }
    }
}

/// Why a savepoint's absolute handle is refused.
const SAVEPOINT_ABSOLUTE: &str = "a savepoint's handles are relative, or absolute paths of files inside it as it is";

/// What [`FlinkSnapshot::verify`] read and found.
#[derive(Debug, Default)]
pub struct FlinkVerifyReport {
    /// Files read in full (`_metadata` included).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Keyed entries, operator state elements and broadcast entries decoded.
    pub entries: u64,
    /// Every problem found, each naming its file (and offset where it has one).
    pub problems: Vec<FlinkError>,
}

impl FlinkVerifyReport {
    /// The report in the format layer's words (each problem as file, offset, field, reason:
    /// [`FlinkError::into_problem`]), as `verify` lists the problems of every family.
    pub fn into_format_report(self) -> statekit_format::SnapshotVerifyReport {
        statekit_format::SnapshotVerifyReport {
            files: self.files,
            bytes: self.bytes,
            entries: self.entries,
            problems: self.problems.into_iter().map(FlinkError::into_problem).collect(),
        }
    }
}

/// The length of the local file `path`, which must be `recorded` bytes, or up to `slack`
/// more (a changelog file's recorded size leaves out its first byte); any length when
/// `recorded` is 0 (not recorded).
fn file_len(path: &Path, recorded: u64, slack: u64) -> Result<u64, FlinkError> {
    let len = std::fs::metadata(path)
        .map_err(|source| FlinkError::Io {
            path: path.display().to_string(),
            source,
        })?
        .len();
    if recorded != 0 && (len < recorded || len > recorded + slack) {
        return Err(FlinkError::Corrupt {
            file: path.display().to_string(),
            offset: len,
            field: "file size".into(),
            reason: format!("{len} bytes, _metadata records {recorded}"),
        });
    }
    Ok(len)
}

/// statekit's name for a distribution mode.
fn mode_of(m: crate::metadata::DistributionMode) -> OperatorStateMode {
    match m {
        crate::metadata::DistributionMode::SplitDistribute => OperatorStateMode::List,
        crate::metadata::DistributionMode::Union => OperatorStateMode::Union,
        crate::metadata::DistributionMode::Broadcast => OperatorStateMode::Broadcast,
    }
}

/// A part of a state's entries statekit keeps as Flink's bytes ([`FlinkSnapshot::opaque_parts`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpaquePart {
    /// The state's name.
    pub state: String,
    /// Which part of its entries: `key`, `namespace`, `user key` or `value`.
    pub part: String,
    /// The serializer that wrote it: its snapshot class and the type it names
    /// (`KryoSerializerSnapshot (java.util.UUID)`), or the composite holding it.
    pub serializer: String,
}

/// The key group Flink puts a key in: `murmurHash(key.hashCode()) % max parallelism`, for keys
/// whose Java `hashCode` statekit computes from their bytes in statekit's value encoding
/// (`String`, `Character`, `Integer`, `Short`, `Byte`, `Long`, `Boolean`, `Float`, `Double`;
/// [`statekit_core::KeyGroupScheme::Flink`]); `None` for other key types.
pub fn flink_key_group(key: &[u8], schema: &TypeSchema, max_parallelism: u32) -> Option<u32> {
    statekit_core::KeyGroupScheme::Flink
        .key_group(key, schema, max_parallelism)
        .ok()
}
