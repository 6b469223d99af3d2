//! Keyed state in a key-group stream (`KeyGroupsSavepointStateHandle`, `KeyGroupsStateHandle`)
//! read as a statekit [`KeyedStateView`]: each key group's records decoded, keys split into
//! key, namespace and user key, values transcoded from Flink's encodings into statekit's
//! value encoding, and entries handed out in canonical order. Two layouts share the handle
//! (`docs/flink-format.md`):
//!
//! - the canonical savepoint format: the keyed proxy, then per key group with data, at its
//!   offset: `u16 state id`, then records `i32 key length, key, i32 value length, value`; the
//!   last record of a state has bit `0x80` set in the key's first byte, and is followed by
//!   the next state's id or `0xFFFF` (end of the key group). Compressed, a key group is one
//!   Snappy frame stream.
//! - the heap backend's checkpoint format (native heap savepoints, materialized changelog
//!   parts): at every key group's offset `i32 key group`, then per state `u16 state id`,
//!   `i32 count` and `count` × (namespace, key, whole state: a list as `i32 n` + elements, a
//!   map as `i32 n` × (user key, null flag, value)); timers as `i32 count` × timer.
//!   Compressed, each state's part is a Snappy frame stream of its own.

use crate::error::FlinkError;
use crate::heap::{HeapError, HeapReader, StreamBudget};
use crate::input::Input;
use crate::meta::{decode_keyed_proxy, BackendStateType, KeyedProxy, StateMeta};
use crate::metadata::KeyGroupsHandle;
use crate::operator::{unsnap, STREAM_IDENTIFIER};
use crate::problem::DecodeProblem;
use crate::serializer::FlinkType;
use crate::value::{schema_of, transcode, width};
use statekit_core::{
    EntryVisitor, KeyGroupRange, KeyedStateKind, OwnedEntry, StateDescriptor, StateError, TtlConfig, TypeSchema,
};
use std::ops::ControlFlow;

const END_OF_KEY_GROUP: u16 = 0xFFFF;
const META_FOLLOWS: u8 = 0x80;

/// How one state's records are laid out and transcoded.
#[derive(Clone, Debug)]
pub(crate) struct Layout {
    pub(crate) kind: KeyedStateKind,
    pub(crate) timers: bool,
    pub(crate) namespace: FlinkType,
    pub(crate) value: FlinkType,
    pub(crate) user_key: Option<FlinkType>,
    pub(crate) ttl: bool,
}

/// The keyed state stream of one subtask, in the canonical or the heap layout.
#[derive(Debug)]
pub struct KeyGroupsView {
    file: String,
    heap: bool,
    source: Source,
    /// Bytes in the stream.
    len: usize,
    max_parallelism: u32,
    range: KeyGroupRange,
    offsets: Vec<u64>,
    /// The offsets in order, for where each key group's data ends.
    sorted_offsets: Vec<u64>,
    proxy: KeyedProxy,
    layouts: Vec<Layout>,
    states: Vec<StateDescriptor>,
    /// What the heap layout's value-end searches of the whole stream may spend.
    search: StreamBudget,
}

impl KeyGroupsView {
    /// Reads the head of `bytes` (the whole stream of `handle`, named `file` in errors), and
    /// tells the layout: a savepoint handle (tag 7) is canonical; otherwise the heap layout is
    /// recognised by every key group having data that starts with its own number.
    pub fn new(bytes: Vec<u8>, handle: &KeyGroupsHandle, max_parallelism: u32, file: &str) -> Result<Self, FlinkError> {
        let proxy = decode_keyed_proxy(&bytes, file)?;
        let len = bytes.len();
        Self::with_source(Source::Bytes(bytes), len, proxy, handle, max_parallelism, file)
    }

    /// A view of the stream of `handle` in the local file `path`, `len` bytes from `start`,
    /// whose head `proxy` was read already: key groups are read from the file when visited,
    /// so memory holds one key group at a time, not the stream.
    pub fn from_file(
        path: &std::path::Path,
        start: u64,
        len: u64,
        proxy: KeyedProxy,
        handle: &KeyGroupsHandle,
        max_parallelism: u32,
    ) -> Result<Self, FlinkError> {
        let file = path.display().to_string();
        let len = usize::try_from(len).map_err(|_| FlinkError::Corrupt {
            file: file.clone(),
            offset: 0,
            field: "stream size".into(),
            reason: format!("{len} bytes"),
        })?;
        let source = Source::File {
            path: path.to_path_buf(),
            start,
        };
        Self::with_source(source, len, proxy, handle, max_parallelism, &file)
    }

    fn with_source(
        source: Source,
        len: usize,
        proxy: KeyedProxy,
        handle: &KeyGroupsHandle,
        max_parallelism: u32,
        file: &str,
    ) -> Result<Self, FlinkError> {
        let heap = !handle.savepoint
            && is_heap_layout(handle, |o| {
                let o = usize::try_from(o).ok()?;
                let b = source.read(o, o.checked_add(4)?.min(len), file).ok()?;
                <[u8; 4]>::try_from(b.as_ref()).ok()
            });
        let (layouts, states) = layouts(&proxy, file)?;
        let start = handle.range.start;
        let range = match handle.range.end() {
            Some(end) => KeyGroupRange::new(start, end),
            None => KeyGroupRange::EMPTY,
        };
        Ok(KeyGroupsView {
            file: file.to_string(),
            heap,
            source,
            len,
            max_parallelism,
            range,
            offsets: handle.offsets.clone(),
            sorted_offsets: {
                let mut o = handle.offsets.clone();
                o.sort_unstable();
                o
            },
            proxy,
            layouts,
            states,
            search: StreamBudget::new(len),
        })
    }

    /// The stream's head.
    pub fn proxy(&self) -> &KeyedProxy {
        &self.proxy
    }

    /// Whether the stream is in the heap backend's layout (else canonical).
    pub fn is_heap_layout(&self) -> bool {
        self.heap
    }

    fn corrupt(&self, at: usize, field: &str, reason: String) -> FlinkError {
        FlinkError::Corrupt {
            file: self.file.clone(),
            offset: at as u64,
            field: field.to_string(),
            reason,
        }
    }

    /// The byte range `[start, end)` of key group `kg`'s data, `None` when it has none.
    fn key_group_region(&self, kg: u32) -> Result<Option<(usize, usize)>, FlinkError> {
        let idx = kg.checked_sub(self.range.start()).map(|i| i as usize);
        let Some(offset) = idx.and_then(|i| self.offsets.get(i)).copied() else {
            return Ok(None);
        };
        if offset == 0 {
            return Ok(None);
        }
        let start = usize::try_from(offset)
            .ok()
            .filter(|&o| o >= self.proxy.len && o < self.len)
            .ok_or_else(|| {
                self.corrupt(
                    0,
                    "key-group offset",
                    format!("key group {kg} at {offset}: outside the data ({} bytes)", self.len),
                )
            })?;
        // The data ends where the next key group's begins (offsets need not be in order).
        let next = self.sorted_offsets.partition_point(|&o| o <= offset);
        let end = self
            .sorted_offsets
            .get(next)
            .and_then(|&o| usize::try_from(o).ok())
            .unwrap_or(self.len)
            .min(self.len);
        Ok(Some((start, end)))
    }

    fn key_group_entries(&self, kg: u32) -> Result<Vec<OwnedEntry>, FlinkError> {
        let Some((start, end)) = self.key_group_region(kg)? else {
            return Ok(Vec::new());
        };
        let region = self.source.read(start, end, &self.file)?;
        let region = region.as_ref();
        let mut out = Vec::new();
        if self.heap {
            self.heap_key_group(kg, start, region, &mut out)?;
        } else if self.proxy.compressed {
            let data = unsnap(region, &self.file, start as u64)?;
            // Offsets inside decompressed data are not file offsets: errors name the key
            // group's start.
            self.canonical_key_group(kg, &data, |_| start, &mut out)?;
        } else {
            self.canonical_key_group(kg, region, |p| start + p, &mut out)?;
        }
        // Stable: list elements keep their order.
        out.sort_by(|a, b| a.as_entry().canonical_cmp(&b.as_entry()));
        Ok(out)
    }

    /// One key group's data in the canonical layout; `at` maps a position in `data` to the
    /// offset errors name.
    fn canonical_key_group(
        &self,
        kg: u32,
        data: &[u8],
        at: impl Fn(usize) -> usize,
        out: &mut Vec<OwnedEntry>,
    ) -> Result<(), FlinkError> {
        let corrupt = |at: usize, field: &str, reason: String| self.corrupt(at, field, reason);
        let mut i = Input::new(data, &self.file);
        let at = |i: &Input<'_>| at(i.pos());
        let prefix = if self.max_parallelism > 128 { 2 } else { 1 };
        let mut state = usize::from(i.u16("state id")?);
        loop {
            let layout = self.layouts.get(state).ok_or_else(|| {
                corrupt(
                    at(&i) - 2,
                    "state id",
                    format!(
                        "key group {kg}: state id {state}, the head lists {}",
                        self.layouts.len()
                    ),
                )
            })?;
            loop {
                let key_at = at(&i);
                let n = i.items("key length", 1)?;
                let key = i.take(n, "key")?;
                let n = i.items("value length", 1)?;
                let value_at = at(&i);
                let value = i.take(n, "value")?;
                let first = *key.first().ok_or_else(|| corrupt(key_at, "key", "empty key".into()))?;
                let last = first & META_FOLLOWS != 0;
                let mut key = key.to_vec();
                if let Some(b) = key.first_mut() {
                    *b &= !META_FOLLOWS;
                }
                let stored_kg = key
                    .get(..prefix)
                    .map(|p| p.iter().fold(0u32, |a, &b| (a << 8) | u32::from(b)))
                    .unwrap_or(u32::MAX);
                if stored_kg != kg {
                    return Err(corrupt(
                        key_at,
                        "key",
                        format!("a record of key group {stored_kg} in key group {kg}'s data"),
                    ));
                }
                decode_record(
                    &self.proxy.key,
                    kg,
                    state as u32,
                    layout,
                    key.get(prefix..).unwrap_or(&[]),
                    value,
                    out,
                )
                .map_err(|reason| {
                    let reason = reason.to_string();
                    corrupt(
                        if reason.starts_with("value") { value_at } else { key_at },
                        &format!("state {:?}", self.states.get(state).map_or("?", |s| s.name.as_str())),
                        reason,
                    )
                })?;
                if last {
                    break;
                }
            }
            let next = i.u16("state id")?;
            if next == END_OF_KEY_GROUP {
                break;
            }
            state = usize::from(next);
        }
        Ok(())
    }

    /// One key group's data in the heap layout: `i32 key group`, then one part per state,
    /// each `u16 state id` and the state's own writer (a Snappy frame stream each when
    /// compressed).
    fn heap_key_group(
        &self,
        kg: u32,
        start: usize,
        region: &[u8],
        out: &mut Vec<OwnedEntry>,
    ) -> Result<(), FlinkError> {
        let mut i = Input::new(region, &self.file);
        let stored = i.i32("key group")?;
        if i64::from(stored) != i64::from(kg) {
            return Err(self.corrupt(
                start,
                "key group",
                format!("key group {kg}'s data starts with key group {stored}"),
            ));
        }
        let reader = HeapReader {
            key: &self.proxy.key,
            key_schema: schema_of(&self.proxy.key),
            layouts: &self.layouts,
            states: &self.states,
            key_group: kg,
            max_parallelism: self.max_parallelism,
            budget: &self.search,
        };
        let base = start + i.pos();
        if self.proxy.compressed {
            for (at, part) in frame_streams(i.rest()) {
                let data = unsnap(part, &self.file, (base + at) as u64)?;
                // Offsets inside decompressed data are not file offsets: errors name the
                // part's start.
                reader
                    .read(&data, 1, out)
                    .map_err(|e| self.heap_error(kg, e, |_| base + at))?;
            }
        } else {
            reader
                .read(i.rest(), self.layouts.len(), out)
                .map_err(|e| self.heap_error(kg, e, |at| base + at))?;
        }
        Ok(())
    }

    /// The error of key group `kg`'s heap-layout part; `at` maps a position in the part to
    /// the offset errors name.
    fn heap_error(&self, kg: u32, e: HeapError, at: impl Fn(usize) -> usize) -> FlinkError {
        match e {
            HeapError::Corrupt((pos, field, reason)) => self.corrupt(at(pos), &field, reason),
            HeapError::Budget(s) => FlinkError::SearchBudget(Box::new(crate::error::BudgetSpent {
                file: self.file.clone(),
                offset: at(s.pos) as u64,
                field: s.field,
                key_group: kg,
                class: s.class,
                trials: s.trials as u64,
                scope: s.scope,
            })),
        }
    }
}

/// Splits a composite key and transcodes one record into entries.
pub(crate) fn decode_record(
    key_type: &FlinkType,
    key_group: u32,
    state: u32,
    layout: &Layout,
    key: &[u8],
    value: &[u8],
    out: &mut Vec<OwnedEntry>,
) -> Result<(), DecodeProblem> {
    let mut k = Input::new(key, "");
    if layout.timers {
        // Timer: i64 timestamp (sign bit flipped), key, namespace; the value is empty.
        let ts = k.i64("timer")? ^ i64::MIN;
        let (key, namespace) = key_and_namespace(key_type, &mut k, &layout.namespace)?;
        out.push(OwnedEntry {
            key_group,
            state,
            key,
            namespace,
            user_key: None,
            value: ts.to_be_bytes().to_vec(),
            timestamp: None,
        });
        return Ok(());
    }
    let both_variable = width(key_type).is_none() && width(&layout.namespace).is_none();
    let (key_bytes, ns_bytes) = if both_variable {
        key_and_namespace_with_lengths(key_type, &mut k, &layout.namespace)?
    } else {
        key_and_namespace(key_type, &mut k, &layout.namespace)?
    };
    let user_key = match &layout.user_key {
        Some(t) => {
            let mut u = Vec::new();
            transcode(t, &mut k, &mut u)?;
            Some(u)
        }
        None => None,
    };
    if k.remaining() > 0 {
        return Err(DecodeProblem::Trailing {
            bytes: k.remaining(),
            what: "the key's parts",
        }
        .in_part("key"));
    }
    let mut v = Input::new(value, "");
    let mut push = |value: Vec<u8>, timestamp: Option<i64>| {
        out.push(OwnedEntry {
            key_group,
            state,
            key: key_bytes.clone(),
            namespace: ns_bytes.clone(),
            user_key: user_key.clone(),
            value,
            timestamp,
        })
    };
    match layout.kind {
        KeyedStateKind::List => {
            // Elements separated by one ',' byte, no count.
            loop {
                let ts = if layout.ttl { Some(read_i64(&mut v)?) } else { None };
                let mut e = Vec::new();
                transcode(&layout.value, &mut v, &mut e)?;
                push(e, ts);
                if v.remaining() == 0 {
                    break;
                }
                match v.u8("delimiter") {
                    Ok(b',') => {}
                    _ => return Err(DecodeProblem::ListSeparator.in_part("value")),
                }
            }
        }
        KeyedStateKind::Map => {
            // bool isNull, then the value.
            let null = v
                .bool("null flag")
                .map_err(|e| DecodeProblem::from(e).in_part("value"))?;
            if null {
                return Ok(());
            }
            let ts = if layout.ttl { Some(read_i64(&mut v)?) } else { None };
            let mut e = Vec::new();
            transcode(&layout.value, &mut v, &mut e)?;
            push(e, ts);
        }
        _ => {
            let ts = if layout.ttl { Some(read_i64(&mut v)?) } else { None };
            let mut e = Vec::new();
            transcode(&layout.value, &mut v, &mut e)?;
            push(e, ts);
        }
    }
    if v.remaining() > 0 {
        return Err(DecodeProblem::Trailing {
            bytes: v.remaining(),
            what: "the value",
        }
        .in_part("value"));
    }
    Ok(())
}

fn key_and_namespace(
    key_type: &FlinkType,
    k: &mut Input<'_>,
    ns: &FlinkType,
) -> Result<(Vec<u8>, Vec<u8>), DecodeProblem> {
    let mut key = Vec::new();
    if matches!(key_type, FlinkType::Opaque { .. }) {
        // Unknown key encoding: everything up to a fixed-width namespace.
        let w = width(ns).ok_or(DecodeProblem::OpaqueKeySplit.in_part("key"))?;
        let n = k
            .remaining()
            .checked_sub(w)
            .ok_or(DecodeProblem::KeyShorterThanNamespace.in_part("key"))?;
        key.extend_from_slice(k.take(n, "key")?);
    } else {
        transcode(key_type, k, &mut key)?;
    }
    let mut namespace = Vec::new();
    transcode(ns, k, &mut namespace)?;
    Ok((key, namespace))
}

/// Both key and namespace are variable-length: each is followed by its length (low byte
/// first, as few bytes as the value needs).
fn key_and_namespace_with_lengths(
    key_type: &FlinkType,
    k: &mut Input<'_>,
    ns: &FlinkType,
) -> Result<(Vec<u8>, Vec<u8>), DecodeProblem> {
    let start = k.pos();
    let mut key = Vec::new();
    transcode(key_type, k, &mut key)?;
    let key_len = k.pos() - start;
    skip_length_suffix(k, key_len)?;
    let start = k.pos();
    let mut namespace = Vec::new();
    transcode(ns, k, &mut namespace)?;
    let ns_len = k.pos() - start;
    skip_length_suffix(k, ns_len)?;
    Ok((key, namespace))
}

/// Whether a key-group stream is in the heap layout: every key group of the handle has data,
/// and the data of the first two starts with the key group's own number.
fn is_heap_layout(handle: &KeyGroupsHandle, peek: impl Fn(u64) -> Option<[u8; 4]>) -> bool {
    if handle.offsets.is_empty() || handle.offsets.contains(&0) {
        return false;
    }
    handle
        .offsets
        .iter()
        .zip(handle.range.start..)
        .take(2)
        .all(|(&o, kg)| peek(o).is_some_and(|b| i64::from(i32::from_be_bytes(b)) == i64::from(kg)))
}

/// Where a key-group stream's bytes are.
#[derive(Debug)]
enum Source {
    /// In memory (inline in `_metadata`, or handed over whole).
    Bytes(Vec<u8>),
    /// In a local file, from `start`.
    File { path: std::path::PathBuf, start: u64 },
}

impl Source {
    /// Bytes `[from, to)` of the stream.
    fn read(&self, from: usize, to: usize, file: &str) -> Result<std::borrow::Cow<'_, [u8]>, FlinkError> {
        match self {
            Source::Bytes(b) => Ok(b.get(from..to).unwrap_or(&[]).into()),
            Source::File { path, start } => {
                use std::io::{Read, Seek, SeekFrom};
                let io = |source| FlinkError::Io {
                    path: file.to_string(),
                    source,
                };
                let mut f = std::fs::File::open(path).map_err(io)?;
                f.seek(SeekFrom::Start(start + from as u64)).map_err(io)?;
                let mut out = vec![0; to.saturating_sub(from)];
                f.read_exact(&mut out).map_err(|e| FlinkError::Corrupt {
                    file: file.to_string(),
                    offset: from as u64,
                    field: "key group".into(),
                    reason: format!("{} bytes from {from}: {e}", to.saturating_sub(from)),
                })?;
                Ok(out.into())
            }
        }
    }
}

/// Splits concatenated Snappy frame streams at their stream identifier chunks: each part
/// with its position in `bytes`.
fn frame_streams(bytes: &[u8]) -> Vec<(usize, &[u8])> {
    let mut starts = Vec::new();
    let mut p = 0usize;
    // Walk chunk headers (type byte, 3-byte little-endian length); a damaged length ends the
    // walk, and the decoder reports the damage.
    while let Some(&[_, a, b, c]) = bytes.get(p..p.saturating_add(4)) {
        if bytes.get(p..p + STREAM_IDENTIFIER.len()) == Some(&STREAM_IDENTIFIER[..]) {
            starts.push(p);
        }
        let len = usize::from(a) | usize::from(b) << 8 | usize::from(c) << 16;
        p += 4 + len;
    }
    if starts.first() != Some(&0) {
        starts.insert(0, 0);
    }
    let mut out = Vec::with_capacity(starts.len());
    for (n, &s) in starts.iter().enumerate() {
        let e = starts.get(n + 1).copied().unwrap_or(bytes.len());
        out.push((s, bytes.get(s..e).unwrap_or(&[])));
    }
    out
}

fn skip_length_suffix(k: &mut Input<'_>, mut len: usize) -> Result<(), DecodeProblem> {
    loop {
        let b = k.u8("length suffix")?;
        if usize::from(b) != len & 0xFF {
            return Err(DecodeProblem::LengthSuffix { byte: b }.in_part("key"));
        }
        len >>= 8;
        if len == 0 {
            return Ok(());
        }
    }
}

fn read_i64(v: &mut Input<'_>) -> Result<i64, DecodeProblem> {
    v.i64("TTL timestamp")
        .map_err(|e| DecodeProblem::from(e).in_part("value"))
}

/// The statekit descriptors of the states a keyed head lists.
pub(crate) fn descriptors(proxy: &KeyedProxy) -> Result<Vec<StateDescriptor>, DecodeProblem> {
    proxy
        .states
        .iter()
        .map(|m| {
            layout(&proxy.key, m).map(|(_, d)| d).map_err(|e| DecodeProblem::State {
                state: m.name.clone(),
                source: Box::new(e),
            })
        })
        .collect()
}

/// The [`layout`] and descriptor of every state of `proxy`, in order; a state statekit cannot
/// read is [`FlinkError::Unsupported`] in `file`.
pub(crate) fn layouts(proxy: &KeyedProxy, file: &str) -> Result<(Vec<Layout>, Vec<StateDescriptor>), FlinkError> {
    let both: Vec<(Layout, StateDescriptor)> = proxy
        .states
        .iter()
        .map(|m| {
            layout(&proxy.key, m).map_err(|what| FlinkError::Unsupported {
                file: file.to_string(),
                offset: 0,
                field: format!("state {:?}", m.name),
                what: what.to_string(),
            })
        })
        .collect::<Result<_, _>>()?;
    Ok(both.into_iter().unzip())
}

/// The statekit layout and descriptor of one state from its meta info.
pub(crate) fn layout(key: &FlinkType, m: &StateMeta) -> Result<(Layout, StateDescriptor), DecodeProblem> {
    let key_schema = schema_of(key);
    if m.backend_type == BackendStateType::PriorityQueue {
        // The timer's key type is the state's key type; its namespace type is the state's.
        let ns = match m.serializer("VALUE_SERIALIZER") {
            Some(FlinkType::Timer(_, ns)) => (**ns).clone(),
            _ => return Err(DecodeProblem::NoTimerSerializer),
        };
        let layout = Layout {
            kind: KeyedStateKind::List,
            timers: true,
            namespace: ns.clone(),
            value: FlinkType::Long,
            user_key: None,
            ttl: false,
        };
        let desc = StateDescriptor {
            name: m.name.clone(),
            kind: KeyedStateKind::List,
            key_schema,
            namespace_schema: schema_of(&ns),
            value_schema: TypeSchema::I64,
            user_key_schema: None,
            ttl: None,
        };
        return Ok((layout, desc));
    }
    let kind = match m.keyed_state_type() {
        Some("VALUE") => KeyedStateKind::Value,
        Some("LIST") => KeyedStateKind::List,
        Some("MAP") => KeyedStateKind::Map,
        Some("REDUCING") => KeyedStateKind::Reducing,
        Some("AGGREGATING") => KeyedStateKind::Aggregating,
        other => return Err(DecodeProblem::StateType(other.map(str::to_string))),
    };
    let namespace = m
        .serializer("NAMESPACE_SERIALIZER")
        .cloned()
        .ok_or(DecodeProblem::NoNamespaceSerializer)?;
    let value = m
        .serializer("VALUE_SERIALIZER")
        .cloned()
        .ok_or(DecodeProblem::NoValueSerializer)?;
    let (value, user_key) = match (kind, value) {
        (KeyedStateKind::List, FlinkType::List(e)) => (*e, None),
        (KeyedStateKind::Map, FlinkType::Map(k, v)) => (*v, Some(*k)),
        (KeyedStateKind::List | KeyedStateKind::Map, v) => {
            return Err(DecodeProblem::ValueSerializer {
                kind,
                serializer: v.name(),
            });
        }
        (_, v) => (v, None),
    };
    let (value, ttl) = match value {
        FlinkType::Ttl(v) => (*v, true),
        v => (v, false),
    };
    let desc = StateDescriptor {
        name: m.name.clone(),
        kind,
        key_schema,
        namespace_schema: schema_of(&namespace),
        value_schema: schema_of(&value),
        user_key_schema: user_key.as_ref().map(schema_of),
        // Flink's TTL duration is in the job, not the snapshot: statekit shows the
        // timestamps and treats nothing as expired.
        ttl: ttl.then(|| TtlConfig::new(TtlConfig::DURATION_NOT_STORED)),
    };
    Ok((
        Layout {
            kind,
            timers: false,
            namespace,
            value,
            user_key,
            ttl,
        },
        desc,
    ))
}

/// Hands a key group's decoded entries (from `decode`, called only for a key group in
/// `range`) to `visitor`, stopping when it breaks.
pub(crate) fn visit_decoded(
    range: KeyGroupRange,
    key_group: u32,
    decode: impl FnOnce() -> Result<Vec<OwnedEntry>, FlinkError>,
    visitor: &mut EntryVisitor<'_>,
) -> Result<ControlFlow<()>, StateError> {
    if !range.contains(key_group) {
        return Ok(ControlFlow::Continue(()));
    }
    let entries = decode().map_err(|e| StateError::Stream(statekit_core::StreamProblem::Reader(Box::new(e))))?;
    for o in &entries {
        if visitor(&o.as_entry())?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Implements [`statekit_core::KeyedStateView`] for a view of Flink keyed state that decodes a key group's
/// entries at once: its `key_group_entries(key_group)` (called only for a key group in its
/// `range` field), its `max_parallelism`, `range` and `states` fields, and Flink's key-group
/// scheme.
macro_rules! decoded_keyed_view {
    ($view:ty) => {
        impl statekit_core::KeyedStateView for $view {
            statekit_core::keyed_accessors!(max_parallelism, key_group_range, states);

            fn key_group_scheme(&self) -> statekit_core::KeyGroupScheme {
                statekit_core::KeyGroupScheme::Flink
            }

            fn visit_key_group(
                &self,
                key_group: u32,
                visitor: &mut statekit_core::EntryVisitor<'_>,
            ) -> Result<std::ops::ControlFlow<()>, statekit_core::StateError> {
                $crate::canonical::visit_decoded(
                    self.range,
                    key_group,
                    || self.key_group_entries(key_group),
                    visitor,
                )
            }
        }
    };
}
#[cfg(feature = "rocksdb")]
pub(crate) use decoded_keyed_view;

decoded_keyed_view!(KeyGroupsView);
