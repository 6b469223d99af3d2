//! Keyed state of Flink's changelog checkpoints (`ChangelogStateBackendHandle`): the
//! materialized part (any keyed view) with the changes logged since (DSTL files or inline
//! bytes) replayed over it, handed out as one in-memory view.
//!
//! A DSTL file (`docs/flink-format.md` §"Changelog") is one byte (1 = the rest is a Snappy
//! frame stream), then change sets; a file part's offset counts from after that byte. A
//! change set is `i32 n` sections of `i32 count, i32 key group (-1 = metadata), count ×
//! (i32 length, change)`. A change is an operation byte and its fields: `METADATA` registers a
//! state (`i32 version`, its meta info, `bool ttl` [+ Java-serialized TTL config], `bool
//! default` [+ value], `u16 state id`, `u8 type`); the others carry `u16 state id`, the key, the
//! namespace and the operation's payload.
//!
//! The key serializer is not in the log (Flink takes it from the job): it is the materialized
//! part's, or, without one, the first of Flink's simple key types every logged change parses
//! with exactly.

use crate::canonical::{layout, Layout};
use crate::error::FlinkError;
use crate::input::Input;
use crate::meta::read_meta;
use crate::operator::unsnap;
use crate::problem::DecodeProblem;
use crate::serializer::FlinkType;
use crate::value::{decodable, transcode_part};
use statekit_core::{
    KeyGroupRange, KeyGroupScheme, KeyedStateKind, KeyedStateView, MemoryView, OwnedEntry, StateDescriptor,
};
use std::collections::BTreeMap;
use std::ops::ControlFlow;

const CLEAR: u8 = 0;
const SET: u8 = 1;
const SET_INTERNAL: u8 = 2;
const ADD: u8 = 3;
const MERGE_NS: u8 = 4;
const ADD_ELEMENT: u8 = 5;
const ADD_OR_UPDATE_ELEMENT: u8 = 6;
const REMOVE_ELEMENT: u8 = 7;
const METADATA: u8 = 8;

/// Key types tried, in order, when the log has no materialized part to name the key's.
const KEY_CANDIDATES: [FlinkType; 5] = [
    FlinkType::String,
    FlinkType::Long,
    FlinkType::Int,
    FlinkType::Boolean,
    FlinkType::Short,
];

/// A change as logged, with where it came from (for errors).
pub(crate) struct RawChange {
    /// Key group (-1 = metadata).
    pub(crate) key_group: i32,
    /// The change's bytes.
    pub(crate) bytes: Vec<u8>,
    /// File and offset of the change set it is in.
    pub(crate) at: (String, u64),
}

/// A DSTL file's change sets: the bytes after its first byte, decompressed when that byte
/// says so; `file` names it in errors. The bool says whether they were compressed.
pub(crate) fn dstl_data(bytes: &[u8], file: &str) -> Result<(Vec<u8>, bool), FlinkError> {
    match bytes.split_first() {
        Some((0, rest)) => Ok((rest.to_vec(), false)),
        Some((1, rest)) => Ok((unsnap(rest, file, 1)?, true)),
        Some((f, _)) => Err(FlinkError::Corrupt {
            file: file.to_string(),
            offset: 0,
            field: "compression flag".into(),
            reason: format!("{f}, 0 or 1 expected"),
        }),
        None => Err(FlinkError::Corrupt {
            file: file.to_string(),
            offset: 0,
            field: "compression flag".into(),
            reason: "an empty changelog file".into(),
        }),
    }
}

/// Appends the changes of the change set at `offset` of a DSTL file's change sets
/// ([`dstl_data`]; `file` names it in errors).
pub(crate) fn read_change_set(
    data: &[u8],
    compressed: bool,
    offset: u64,
    file: &str,
    out: &mut Vec<RawChange>,
) -> Result<(), FlinkError> {
    let start = usize::try_from(offset)
        .ok()
        .filter(|&o| o < data.len())
        .ok_or_else(|| FlinkError::Corrupt {
            file: file.to_string(),
            offset,
            field: "change set offset".into(),
            reason: format!("past the end ({} bytes of changes)", data.len()),
        })?;
    let mut i = Input::new(data.get(start..).unwrap_or(&[]), file);
    // File offsets where the data is the file's; the change set's offset inside
    // decompressed data.
    let base = |i: &Input<'_>| {
        if compressed {
            offset
        } else {
            1 + offset + i.pos() as u64
        }
    };
    let sections = i.items("change set sections", 8)?;
    for _ in 0..sections {
        let count = i.items("changes", 4)?;
        let key_group = i.i32("key group")?;
        for _ in 0..count {
            let at = base(&i);
            let n = i.items("change length", 1)?;
            let bytes = i.take(n, "change")?.to_vec();
            out.push(RawChange {
                key_group,
                bytes,
                at: (file.to_string(), at),
            });
        }
    }
    Ok(())
}

/// A value or element with its TTL timestamp.
type Stamped = (Vec<u8>, Option<i64>);

/// Where a cell is: key group, state, key, namespace.
type CellAt = (u32, usize, Vec<u8>, Vec<u8>);

/// One state's value under a key and namespace while replaying.
#[derive(Clone, Debug)]
enum Cell {
    One(Vec<u8>, Option<i64>),
    List(Vec<(Vec<u8>, Option<i64>)>),
    Map(BTreeMap<Vec<u8>, (Vec<u8>, Option<i64>)>),
}

/// A decoded data change.
enum Payload {
    None,
    One(Vec<u8>, Option<i64>),
    List(Vec<(Vec<u8>, Option<i64>)>),
    Map(Vec<(Vec<u8>, Option<Stamped>)>),
    Element(Vec<u8>, Option<i64>),
    MapPut(Vec<u8>, Option<(Vec<u8>, Option<i64>)>),
    MapRemove(Vec<u8>),
    Timer(i64),
    Merge(Vec<Vec<u8>>),
}

struct Decoded {
    op: u8,
    state: usize,
    key: Vec<u8>,
    namespace: Vec<u8>,
    payload: Payload,
}

/// The states known to the replay, by name; index = statekit state id.
#[derive(Default)]
struct States {
    list: Vec<(StateDescriptor, Layout)>,
}

impl States {
    fn index(&self, name: &str) -> Option<usize> {
        self.list.iter().position(|(d, _)| d.name == name)
    }
}

/// Replays `changes` over `base` (the materialized part's views, possibly none): the result
/// is one view over `range`. `key` is the key type when known (from the materialized part's
/// head); `name` names the handle in errors.
pub(crate) fn replay(
    name: &str,
    base: &[Box<dyn KeyedStateView>],
    base_key: Option<FlinkType>,
    changes: &[RawChange],
    max_parallelism: u32,
    range: KeyGroupRange,
) -> Result<MemoryView, FlinkError> {
    let unsupported = |what: String| FlinkError::Unsupported {
        file: name.to_string(),
        offset: 0,
        field: "changelog".into(),
        what,
    };
    // The metadata changes, in order: (position in `changes`, log state id, meta).
    let mut metas = Vec::new();
    for (n, c) in changes.iter().enumerate() {
        if c.bytes.first() == Some(&METADATA) {
            metas.push((n, read_metadata(c)?));
        }
    }
    let key = match base_key {
        Some(k) => k,
        None => infer_key(changes, &metas).ok_or_else(|| {
            unsupported(
                "the changelog holds no materialized part, and its keys are none of Flink's simple key types \
                 (String, Long, Integer, Boolean, Short): the key type is not in the log"
                    .into(),
            )
        })?,
    };
    let mut states = States::default();
    let mut cells: BTreeMap<CellAt, Cell> = BTreeMap::new();
    // The materialized part.
    for v in base {
        let mut map = Vec::with_capacity(v.states().len());
        for d in v.states() {
            let idx = match states.index(&d.name) {
                Some(i) => i,
                None => {
                    let l = base_layout(d);
                    states.list.push((d.clone(), l));
                    states.list.len() - 1
                }
            };
            map.push(idx);
        }
        for kg in v.key_group_range().intersection(&range) {
            let r = v.visit_key_group(kg, &mut |e| {
                let Some(&idx) = map.get(e.state as usize) else {
                    return Ok(ControlFlow::Continue(()));
                };
                let kind = states.list.get(idx).map(|(d, _)| d.kind);
                let cell = cells
                    .entry((kg, idx, e.key.to_vec(), e.namespace.to_vec()))
                    .or_insert_with(|| match kind {
                        Some(KeyedStateKind::List) => Cell::List(Vec::new()),
                        Some(KeyedStateKind::Map) => Cell::Map(BTreeMap::new()),
                        _ => Cell::One(Vec::new(), None),
                    });
                match cell {
                    Cell::List(items) => items.push((e.value.to_vec(), e.timestamp)),
                    Cell::Map(m) => {
                        m.insert(e.user_key.unwrap_or(&[]).to_vec(), (e.value.to_vec(), e.timestamp));
                    }
                    Cell::One(v, ts) => {
                        *v = e.value.to_vec();
                        *ts = e.timestamp;
                    }
                }
                Ok(ControlFlow::Continue(()))
            });
            let _ = r.map_err(|e| FlinkError::Corrupt {
                file: name.to_string(),
                offset: 0,
                field: "materialized part".into(),
                reason: e.to_string(),
            })?;
        }
    }
    // The log, in order; a state's log id maps to it from its metadata change on.
    let mut ids: BTreeMap<u16, usize> = BTreeMap::new();
    let mut next_meta = metas.iter().peekable();
    for (n, c) in changes.iter().enumerate() {
        if let Some((_, (id, meta))) = next_meta.next_if(|(m, _)| *m == n) {
            let (l, d) = layout(&key, meta).map_err(|what| unsupported(format!("state {:?}: {what}", meta.name)))?;
            // A state the materialized part holds too takes the log's Flink types.
            let idx = match states.index(&d.name) {
                Some(i) => {
                    if let Some(slot) = states.list.get_mut(i) {
                        slot.1 = l;
                    }
                    i
                }
                None => {
                    states.list.push((d, l));
                    states.list.len() - 1
                }
            };
            ids.insert(*id, idx);
            continue;
        }
        let corrupt = |reason: String| FlinkError::Corrupt {
            file: c.at.0.clone(),
            offset: c.at.1,
            field: "change".into(),
            reason,
        };
        let kg =
            u32::try_from(c.key_group).map_err(|_| corrupt(format!("a data change in key group {}", c.key_group)))?;
        if !range.contains(kg) {
            continue;
        }
        let d = decode_change(&c.bytes, &key, &ids, &states).map_err(|p| corrupt(p.to_string()))?;
        apply(&mut cells, &states, kg, d).map_err(|p| unsupported(p.to_string()))?;
    }
    let mut entries = Vec::new();
    for ((kg, idx, key, namespace), cell) in cells {
        let state = idx as u32;
        let timers = states.list.get(idx).is_some_and(|(_, l)| l.timers);
        let mut push = |user_key: Option<Vec<u8>>, value: Vec<u8>, timestamp: Option<i64>| {
            entries.push(OwnedEntry {
                key_group: kg,
                state,
                key: key.clone(),
                namespace: namespace.clone(),
                user_key,
                value,
                timestamp,
            })
        };
        match cell {
            Cell::One(v, ts) => push(None, v, ts),
            Cell::List(items) => {
                // Timers are a set, in timestamp order.
                let mut items = items;
                if timers {
                    items.sort();
                    items.dedup();
                }
                for (v, ts) in items {
                    push(None, v, ts);
                }
            }
            Cell::Map(m) => {
                for (uk, (v, ts)) in m {
                    push(Some(uk), v, ts);
                }
            }
        }
    }
    let descriptors = states.list.into_iter().map(|(d, _)| d).collect();
    Ok(MemoryView::new(max_parallelism, range, descriptors, entries).with_key_group_scheme(KeyGroupScheme::Flink))
}

/// A layout for a state only the materialized part knows (its descriptor's schemas are
/// statekit's; the log never refers to it by Flink types then).
fn base_layout(d: &StateDescriptor) -> Layout {
    Layout {
        kind: d.kind,
        timers: d.name.starts_with("_timer_state/"),
        namespace: FlinkType::Opaque {
            class: "materialized".into(),
        },
        value: FlinkType::Opaque {
            class: "materialized".into(),
        },
        user_key: None,
        ttl: d.ttl.is_some(),
    }
}

/// `METADATA`: `i32 version`, the meta info, `bool ttl` [+ Java-serialized TTL config],
/// `bool default` [+ value] (neither flag for timers), `u16 state id`, `u8 type`. The TTL config has no length, so the
/// id and type are read from the change's end (a default value beside a TTL config is
/// refused).
fn read_metadata(c: &RawChange) -> Result<(u16, crate::meta::StateMeta), FlinkError> {
    let mut i = Input::new(&c.bytes, &c.at.0);
    let fix = |mut e: FlinkError| {
        // The input's offsets count from the change; the file's from its start.
        if let FlinkError::Corrupt { offset, .. } = &mut e {
            *offset += c.at.1;
        }
        e
    };
    i.u8("operation").map_err(fix)?;
    let version = i.i32("metadata version").map_err(fix)?;
    if !(6..=7).contains(&version) {
        return Err(fix(i.unsupported_at(
            1,
            "metadata version",
            format!("{version} (6 and 7 are read)"),
        )));
    }
    let meta = read_meta(&mut i).map_err(fix)?;
    let n = c.bytes.len();
    let tail = c.bytes.get(n.saturating_sub(3)..).unwrap_or(&[]);
    let (id, _ty) = match tail {
        [a, b, t] => (u16::from_be_bytes([*a, *b]), *t),
        _ => return Err(fix(i.corrupt_at(n, "state id", "the change ends early"))),
    };
    if meta.backend_type == crate::meta::BackendStateType::PriorityQueue {
        // Timers: no TTL or default value flags.
        return Ok((id, meta));
    }
    let ttl = i.bool("TTL flag").map_err(fix)?;
    if !ttl {
        let default = i.bool("default value flag").map_err(fix)?;
        if default && i.remaining() < 3 {
            return Err(fix(i.corrupt_at(i.pos(), "default value", "missing")));
        }
    } else if c.bytes.get(n.saturating_sub(4)) != Some(&0) {
        return Err(fix(i.unsupported_at(
            i.pos(),
            "default value",
            "a state with both a TTL config and a default value",
        )));
    }
    Ok((id, meta))
}

/// The first simple key type every data change of a known state parses with exactly.
fn infer_key(changes: &[RawChange], metas: &[(usize, (u16, crate::meta::StateMeta))]) -> Option<FlinkType> {
    KEY_CANDIDATES.iter().find_map(|k| {
        let mut states = States::default();
        let mut ids = BTreeMap::new();
        for (_, (id, meta)) in metas {
            let (l, d) = layout(k, meta).ok()?;
            ids.insert(*id, states.list.len());
            states.list.push((d, l));
        }
        let mut seen = 0;
        for c in changes.iter().filter(|c| c.bytes.first() != Some(&METADATA)) {
            decode_change(&c.bytes, k, &ids, &states).ok()?;
            seen += 1;
        }
        (seen > 0).then(|| k.clone())
    })
}

fn decode_change(
    bytes: &[u8],
    key_type: &FlinkType,
    ids: &BTreeMap<u16, usize>,
    states: &States,
) -> Result<Decoded, DecodeProblem> {
    let mut i = Input::new(bytes, "");
    let op = i.u8("operation")?;
    let id = i.u16("state id")?;
    let &state = ids.get(&id).ok_or(DecodeProblem::StateIdBeforeMetadata { id })?;
    let (_, l) = states.list.get(state).ok_or(DecodeProblem::StateId)?;
    let part = |t: &FlinkType, what: &'static str, i: &mut Input<'_>| {
        transcode_part(t, what, ", which has no length in the changelog", i)
    };
    let ttl = |i: &mut Input<'_>| -> Result<Option<i64>, DecodeProblem> {
        if l.ttl {
            Ok(Some(i.i64("TTL timestamp")?))
        } else {
            Ok(None)
        }
    };
    let element = |i: &mut Input<'_>| -> Result<(Vec<u8>, Option<i64>), DecodeProblem> {
        let ts = ttl(i)?;
        Ok((part(&l.value, "a value", i)?, ts))
    };
    // The last part of a change: a value statekit does not decode is the rest of the
    // change (a change carries its length).
    let last_element = |i: &mut Input<'_>| -> Result<(Vec<u8>, Option<i64>), DecodeProblem> {
        if decodable(&l.value) {
            return element(i);
        }
        let ts = ttl(i)?;
        Ok((i.rest().to_vec(), ts))
    };
    let map_value = |i: &mut Input<'_>| -> Result<Option<Stamped>, DecodeProblem> {
        if i.bool("map value null flag")? {
            Ok(None)
        } else {
            element(i).map(Some)
        }
    };
    if l.timers {
        // A timer: no key or namespace scope, the element only (they are inside it); an
        // addition carries a count (1) before it, a removal none.
        if op == ADD_ELEMENT {
            let n = i.i32("timer count")?;
            if n != 1 {
                return Err(DecodeProblem::TimerCount { n });
            }
        }
        let ts = i.i64("timer")? ^ i64::MIN;
        let key = part(key_type, "a key", &mut i)?;
        let namespace = part(&l.namespace, "a namespace", &mut i)?;
        if i.remaining() > 0 {
            return Err(DecodeProblem::Trailing {
                bytes: i.remaining(),
                what: "the timer",
            });
        }
        return match op {
            ADD_ELEMENT | REMOVE_ELEMENT => Ok(Decoded {
                op,
                state,
                key,
                namespace,
                payload: Payload::Timer(ts),
            }),
            other => Err(DecodeProblem::TimerOperation { op: other }),
        };
    }
    let key = part(key_type, "a key", &mut i)?;
    let namespace = part(&l.namespace, "a namespace", &mut i)?;
    let payload = match (op, l.kind) {
        (CLEAR, _) => Payload::None,
        (SET | SET_INTERNAL | ADD, KeyedStateKind::List) => {
            let n = i.items("list size", 1)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(element(&mut i)?);
            }
            Payload::List(items)
        }
        (SET | SET_INTERNAL | ADD, KeyedStateKind::Map) => {
            let uk = l.user_key.as_ref().ok_or(DecodeProblem::MapWithoutUserKey)?;
            let n = i.items("map size", 2)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let k = part(uk, "a map key", &mut i)?;
                items.push((k, map_value(&mut i)?));
            }
            Payload::Map(items)
        }
        (SET | SET_INTERNAL | ADD, _) => {
            let (v, ts) = last_element(&mut i)?;
            Payload::One(v, ts)
        }
        (ADD_ELEMENT, KeyedStateKind::List) => {
            let (v, ts) = last_element(&mut i)?;
            Payload::Element(v, ts)
        }
        (ADD_OR_UPDATE_ELEMENT, KeyedStateKind::Map) => {
            let uk = l.user_key.as_ref().ok_or(DecodeProblem::MapWithoutUserKey)?;
            // User key and value, no null flag (unlike a whole map's entries).
            let k = part(uk, "a map key", &mut i)?;
            Payload::MapPut(k, Some(last_element(&mut i)?))
        }
        (REMOVE_ELEMENT, KeyedStateKind::Map) => {
            let uk = l.user_key.as_ref().ok_or(DecodeProblem::MapWithoutUserKey)?;
            Payload::MapRemove(part(uk, "a map key", &mut i)?)
        }
        (MERGE_NS, _) => {
            let n = i.items("merged namespaces", 1)?;
            let mut sources = Vec::with_capacity(n);
            for _ in 0..n {
                sources.push(part(&l.namespace, "a namespace", &mut i)?);
            }
            Payload::Merge(sources)
        }
        (op, kind) => return Err(DecodeProblem::Operation { op, kind }),
    };
    if i.remaining() > 0 {
        return Err(DecodeProblem::TrailingAfterChange {
            bytes: i.remaining(),
            op,
        });
    }
    Ok(Decoded {
        op,
        state,
        key,
        namespace,
        payload,
    })
}

fn apply(cells: &mut BTreeMap<CellAt, Cell>, states: &States, kg: u32, d: Decoded) -> Result<(), DecodeProblem> {
    let kind = states.list.get(d.state).map(|(desc, _)| desc.kind);
    let at = (kg, d.state, d.key, d.namespace);
    let empty = || match kind {
        Some(KeyedStateKind::List) => Cell::List(Vec::new()),
        Some(KeyedStateKind::Map) => Cell::Map(BTreeMap::new()),
        _ => Cell::One(Vec::new(), None),
    };
    match d.payload {
        Payload::None => {
            cells.remove(&at);
        }
        Payload::One(v, ts) => {
            cells.insert(at, Cell::One(v, ts));
        }
        Payload::List(items) => {
            let replace = d.op != ADD;
            let cell = cells.entry(at).or_insert_with(empty);
            if let Cell::List(l) = cell {
                if replace {
                    l.clear();
                }
                l.extend(items);
            }
        }
        Payload::Map(items) => {
            let replace = d.op != ADD;
            let cell = cells.entry(at).or_insert_with(empty);
            if let Cell::Map(m) = cell {
                if replace {
                    m.clear();
                }
                for (k, v) in items {
                    match v {
                        Some(v) => {
                            m.insert(k, v);
                        }
                        None => {
                            m.remove(&k);
                        }
                    }
                }
            }
        }
        Payload::Element(v, ts) => {
            if let Cell::List(l) = cells.entry(at).or_insert_with(empty) {
                l.push((v, ts));
            }
        }
        Payload::MapPut(k, v) => {
            if let Cell::Map(m) = cells.entry(at.clone()).or_insert_with(empty) {
                match v {
                    Some(v) => {
                        m.insert(k, v);
                    }
                    None => {
                        m.remove(&k);
                    }
                }
            }
        }
        Payload::MapRemove(k) => {
            if let Some(Cell::Map(m)) = cells.get_mut(&at) {
                m.remove(&k);
                if m.is_empty() {
                    cells.remove(&at);
                }
            }
        }
        Payload::Timer(ts) => {
            let v = ts.to_be_bytes().to_vec();
            if d.op == ADD_ELEMENT {
                if let Cell::List(l) = cells.entry(at).or_insert_with(|| Cell::List(Vec::new())) {
                    l.push((v, None));
                }
            } else if let Some(Cell::List(l)) = cells.get_mut(&at) {
                l.retain(|(x, _)| *x != v);
                if l.is_empty() {
                    cells.remove(&at);
                }
            }
        }
        Payload::Merge(sources) => match kind {
            Some(KeyedStateKind::List | KeyedStateKind::Map) => {
                let (kg, state, key, target) = at;
                for ns in sources {
                    let Some(src) = cells.remove(&(kg, state, key.clone(), ns)) else {
                        continue;
                    };
                    let cell = cells
                        .entry((kg, state, key.clone(), target.clone()))
                        .or_insert_with(empty);
                    match (cell, src) {
                        (Cell::List(t), Cell::List(s)) => t.extend(s),
                        (Cell::Map(t), Cell::Map(s)) => t.extend(s),
                        _ => {}
                    }
                }
            }
            _ => return Err(DecodeProblem::MergeNeedsUserCode),
        },
    }
    Ok(())
}
