//! Keyed state in Flink's canonical savepoint format (`KeyGroupsSavepointStateHandle`) read
//! as a statekit [`KeyedStateView`]: each key group's records decoded, keys split into key,
//! namespace and user key, values transcoded from Flink's encodings into statekit's value
//! encoding, and entries handed out in canonical order.
//!
//! Layout (`docs/flink-format.md`): the keyed proxy, then per key group with data, at its
//! offset: `u16 state id`, then records `i32 key length, key, i32 value length, value`; the
//! last record of a state has bit `0x80` set in the key's first byte, and is followed by the
//! next state's id or `0xFFFF` (end of the key group).

use crate::error::FlinkError;
use crate::input::Input;
use crate::meta::{decode_keyed_proxy, BackendStateType, KeyedProxy, StateMeta};
use crate::metadata::KeyGroupsHandle;
use crate::serializer::FlinkType;
use statekit_core::{
    EntryVisitor, KeyGroupRange, KeyedStateKind, KeyedStateView, OwnedEntry, StateDescriptor, StateError, TtlConfig,
    TypeSchema,
};
use std::ops::ControlFlow;

const END_OF_KEY_GROUP: u16 = 0xFFFF;
const META_FOLLOWS: u8 = 0x80;

/// How one state's records are laid out and transcoded.
#[derive(Clone, Debug)]
struct Layout {
    kind: KeyedStateKind,
    timers: bool,
    namespace: FlinkType,
    value: FlinkType,
    user_key: Option<FlinkType>,
    ttl: bool,
}

/// A canonical savepoint's keyed state stream of one subtask.
#[derive(Debug)]
pub struct CanonicalKeyedView {
    file: String,
    bytes: Vec<u8>,
    max_parallelism: u32,
    range: KeyGroupRange,
    offsets: Vec<u64>,
    proxy: KeyedProxy,
    layouts: Vec<Layout>,
    states: Vec<StateDescriptor>,
}

impl CanonicalKeyedView {
    /// Reads the head of `bytes` (the stream of `handle`, named `file` in errors).
    pub fn new(bytes: Vec<u8>, handle: &KeyGroupsHandle, max_parallelism: u32, file: &str) -> Result<Self, FlinkError> {
        let proxy = decode_keyed_proxy(&bytes, file)?;
        if proxy.compressed {
            return Err(FlinkError::Unsupported {
                file: file.to_string(),
                offset: 4,
                field: "compression flag".into(),
                what: "Snappy-compressed key groups (execution.checkpointing.snapshot-compression) are not read yet"
                    .into(),
            });
        }
        let mut layouts = Vec::with_capacity(proxy.states.len());
        let mut states = Vec::with_capacity(proxy.states.len());
        for m in &proxy.states {
            let (layout, desc) = layout(&proxy.key, m).map_err(|what| FlinkError::Unsupported {
                file: file.to_string(),
                offset: 0,
                field: format!("state {:?}", m.name),
                what,
            })?;
            layouts.push(layout);
            states.push(desc);
        }
        let start = handle.range.start;
        let range = match handle.range.end() {
            Some(end) => KeyGroupRange::new(start, end),
            None => KeyGroupRange::EMPTY,
        };
        Ok(CanonicalKeyedView {
            file: file.to_string(),
            bytes,
            max_parallelism,
            range,
            offsets: handle.offsets.clone(),
            proxy,
            layouts,
            states,
        })
    }

    /// The stream's head.
    pub fn proxy(&self) -> &KeyedProxy {
        &self.proxy
    }

    fn key_group_entries(&self, kg: u32) -> Result<Vec<OwnedEntry>, FlinkError> {
        let idx = kg.checked_sub(self.range.start()).map(|i| i as usize);
        let Some(offset) = idx.and_then(|i| self.offsets.get(i)).copied() else {
            return Ok(Vec::new());
        };
        if offset == 0 {
            return Ok(Vec::new());
        }
        let corrupt = |at: usize, field: &str, reason: String| FlinkError::Corrupt {
            file: self.file.clone(),
            offset: at as u64,
            field: field.to_string(),
            reason,
        };
        let start = usize::try_from(offset)
            .ok()
            .filter(|&o| o >= self.proxy.len && o < self.bytes.len())
            .ok_or_else(|| {
                corrupt(
                    0,
                    "key-group offset",
                    format!(
                        "key group {kg} at {offset}: outside the data ({} bytes)",
                        self.bytes.len()
                    ),
                )
            })?;
        let data = self.bytes.get(start..).unwrap_or(&[]);
        let mut i = Input::new(data, &self.file);
        let at = |i: &Input<'_>| start + i.pos();
        let prefix = if self.max_parallelism > 128 { 2 } else { 1 };
        let mut out = Vec::new();
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
                self.decode_record(
                    kg,
                    state as u32,
                    layout,
                    key.get(prefix..).unwrap_or(&[]),
                    value,
                    &mut out,
                )
                .map_err(|reason| {
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
        // Stable: list elements keep their order.
        out.sort_by(|a, b| a.as_entry().canonical_cmp(&b.as_entry()));
        Ok(out)
    }

    /// Splits a composite key and transcodes one record into entries.
    fn decode_record(
        &self,
        key_group: u32,
        state: u32,
        layout: &Layout,
        key: &[u8],
        value: &[u8],
        out: &mut Vec<OwnedEntry>,
    ) -> Result<(), String> {
        let mut k = Input::new(key, "");
        if layout.timers {
            // Timer: i64 timestamp (sign bit flipped), key, namespace; the value is empty.
            let ts = k.i64("timer").map_err(|e| e.to_string())? ^ i64::MIN;
            let (key, namespace) = self.key_and_namespace(&mut k, &layout.namespace)?;
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
        let both_variable = width(&self.proxy.key).is_none() && width(&layout.namespace).is_none();
        let (key_bytes, ns_bytes) = if both_variable {
            self.key_and_namespace_with_lengths(&mut k, &layout.namespace)?
        } else {
            self.key_and_namespace(&mut k, &layout.namespace)?
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
            return Err(format!("key: {} bytes after the key's parts", k.remaining()));
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
                        _ => return Err("value: list elements are not separated by ','".into()),
                    }
                }
            }
            KeyedStateKind::Map => {
                // bool isNull, then the value.
                let null = v.bool("null flag").map_err(|e| format!("value: {e}"))?;
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
            return Err(format!("value: {} bytes after the value", v.remaining()));
        }
        Ok(())
    }

    fn key_and_namespace(&self, k: &mut Input<'_>, ns: &FlinkType) -> Result<(Vec<u8>, Vec<u8>), String> {
        let mut key = Vec::new();
        if matches!(self.proxy.key, FlinkType::Opaque { .. }) {
            // Unknown key encoding: everything up to a fixed-width namespace.
            let w = width(ns).ok_or("key: an opaque key before a variable-length namespace cannot be split")?;
            let n = k.remaining().checked_sub(w).ok_or("key: shorter than its namespace")?;
            key.extend_from_slice(k.take(n, "key").map_err(|e| e.to_string())?);
        } else {
            transcode(&self.proxy.key, k, &mut key)?;
        }
        let mut namespace = Vec::new();
        transcode(ns, k, &mut namespace)?;
        Ok((key, namespace))
    }

    /// Both key and namespace are variable-length: each is followed by its length (low byte
    /// first, as few bytes as the value needs).
    fn key_and_namespace_with_lengths(&self, k: &mut Input<'_>, ns: &FlinkType) -> Result<(Vec<u8>, Vec<u8>), String> {
        let start = k.pos();
        let mut key = Vec::new();
        transcode(&self.proxy.key, k, &mut key)?;
        let key_len = k.pos() - start;
        skip_length_suffix(k, key_len)?;
        let start = k.pos();
        let mut namespace = Vec::new();
        transcode(ns, k, &mut namespace)?;
        let ns_len = k.pos() - start;
        skip_length_suffix(k, ns_len)?;
        Ok((key, namespace))
    }
}

fn skip_length_suffix(k: &mut Input<'_>, mut len: usize) -> Result<(), String> {
    loop {
        let b = k.u8("length suffix").map_err(|e| e.to_string())?;
        if usize::from(b) != len & 0xFF {
            return Err(format!("key: length suffix byte {b} does not match the part's length"));
        }
        len >>= 8;
        if len == 0 {
            return Ok(());
        }
    }
}

fn read_i64(v: &mut Input<'_>) -> Result<i64, String> {
    v.i64("TTL timestamp").map_err(|e| format!("value: {e}"))
}

/// Encoded width of a type in Flink's encoding, when fixed.
fn width(t: &FlinkType) -> Option<usize> {
    match t {
        FlinkType::Long | FlinkType::Double => Some(8),
        FlinkType::Int | FlinkType::Float => Some(4),
        FlinkType::Short | FlinkType::Char => Some(2),
        FlinkType::Byte | FlinkType::Boolean | FlinkType::VoidNamespace | FlinkType::GlobalWindow => Some(1),
        FlinkType::Void => Some(0),
        FlinkType::TimeWindow => Some(16),
        _ => None,
    }
}

/// Whether statekit transcodes values of `t` (others stay Flink's bytes, schema `bytes`).
fn transcodes(t: &FlinkType) -> bool {
    matches!(
        t,
        FlinkType::String
            | FlinkType::Long
            | FlinkType::Int
            | FlinkType::Short
            | FlinkType::Byte
            | FlinkType::Boolean
            | FlinkType::Double
            | FlinkType::Float
            | FlinkType::Char
            | FlinkType::Void
            | FlinkType::VoidNamespace
            | FlinkType::GlobalWindow
            | FlinkType::TimeWindow
            | FlinkType::ByteArray
    )
}

fn schema_of(t: &FlinkType) -> TypeSchema {
    if transcodes(t) {
        t.schema()
    } else {
        TypeSchema::Bytes
    }
}

/// Reads one value of Flink type `t` from `i` and appends it in statekit's value encoding
/// (top level: strings and byte strings as their raw bytes). A type statekit does not
/// transcode takes the rest of the input as bytes.
fn transcode(t: &FlinkType, i: &mut Input<'_>, out: &mut Vec<u8>) -> Result<(), String> {
    let e = |e: FlinkError| e.to_string();
    match t {
        FlinkType::String => {
            let s = read_flink_string(i)?.ok_or("a null String")?;
            out.extend_from_slice(s.as_bytes());
        }
        FlinkType::Long | FlinkType::Double => out.extend_from_slice(i.take(8, "value").map_err(e)?),
        FlinkType::Int | FlinkType::Float => out.extend_from_slice(i.take(4, "value").map_err(e)?),
        FlinkType::Short => out.extend_from_slice(&i32::from(i.u16("value").map_err(e)? as i16).to_be_bytes()),
        FlinkType::Byte => out.extend_from_slice(&i32::from(i.u8("value").map_err(e)? as i8).to_be_bytes()),
        FlinkType::Boolean => out.push(u8::from(i.bool("value").map_err(e)?)),
        FlinkType::Char => {
            let c = i.u16("value").map_err(e)?;
            out.extend_from_slice(String::from_utf16_lossy(&[c]).as_bytes());
        }
        FlinkType::Void => {}
        FlinkType::VoidNamespace | FlinkType::GlobalWindow => {
            i.u8("namespace").map_err(e)?;
        }
        FlinkType::TimeWindow => out.extend_from_slice(i.take(16, "window").map_err(e)?),
        FlinkType::ByteArray => {
            let n = i.items("length", 1).map_err(e)?;
            out.extend_from_slice(i.take(n, "bytes").map_err(e)?);
        }
        _ => out.extend_from_slice(i.rest()),
    }
    Ok(())
}

/// Flink's `StringValue` encoding: (UTF-16 length + 1) as a 7-bit varint (0 = null), then
/// each UTF-16 unit as such a varint.
fn read_flink_string(i: &mut Input<'_>) -> Result<Option<String>, String> {
    let len = read_varint(i)?;
    if len == 0 {
        return Ok(None);
    }
    let n = usize::try_from(len - 1).map_err(|_| "string length")?;
    if n > i.remaining() {
        return Err(format!("a string of {n} characters in {} bytes", i.remaining()));
    }
    let mut units = Vec::with_capacity(n);
    for _ in 0..n {
        let u = read_varint(i)?;
        units.push(u16::try_from(u).map_err(|_| format!("string character {u:#x} is not a UTF-16 unit"))?);
    }
    String::from_utf16(&units)
        .map(Some)
        .map_err(|_| "a string with an unpaired surrogate".to_string())
}

fn read_varint(i: &mut Input<'_>) -> Result<u32, String> {
    let mut v: u32 = 0;
    for shift in [0, 7, 14, 21, 28] {
        let b = i.u8("string").map_err(|e| e.to_string())?;
        v |= u32::from(b & 0x7F) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("string varint longer than 5 bytes".into())
}

/// The statekit descriptors of the states a keyed head lists.
pub(crate) fn descriptors(proxy: &KeyedProxy) -> Result<Vec<StateDescriptor>, String> {
    proxy
        .states
        .iter()
        .map(|m| {
            layout(&proxy.key, m)
                .map(|(_, d)| d)
                .map_err(|e| format!("state {:?}: {e}", m.name))
        })
        .collect()
}

/// The statekit layout and descriptor of one state from its meta info.
fn layout(key: &FlinkType, m: &StateMeta) -> Result<(Layout, StateDescriptor), String> {
    let key_schema = schema_of(key);
    if m.backend_type == BackendStateType::PriorityQueue {
        // The timer's key type is the state's key type; its namespace type is the state's.
        let ns = match m.serializer("VALUE_SERIALIZER") {
            Some(FlinkType::Timer(_, ns)) => (**ns).clone(),
            _ => return Err("a timer state without a timer serializer".into()),
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
        other => return Err(format!("keyed state type {other:?} is not read")),
    };
    let namespace = m
        .serializer("NAMESPACE_SERIALIZER")
        .cloned()
        .ok_or("no namespace serializer")?;
    let value = m.serializer("VALUE_SERIALIZER").cloned().ok_or("no value serializer")?;
    let (value, user_key) = match (kind, value) {
        (KeyedStateKind::List, FlinkType::List(e)) => (*e, None),
        (KeyedStateKind::Map, FlinkType::Map(k, v)) => (*v, Some(*k)),
        (KeyedStateKind::List | KeyedStateKind::Map, v) => {
            return Err(format!("a {kind:?} state with value serializer {}", v.name()));
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
        ttl: ttl.then(|| TtlConfig::new(u64::MAX)),
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

impl KeyedStateView for CanonicalKeyedView {
    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn states(&self) -> &[StateDescriptor] {
        &self.states
    }

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        if !self.range.contains(key_group) {
            return Ok(ControlFlow::Continue(()));
        }
        let entries = self
            .key_group_entries(key_group)
            .map_err(|e| StateError::Snapshot(e.to_string()))?;
        for o in &entries {
            if visitor(&o.as_entry())?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}
