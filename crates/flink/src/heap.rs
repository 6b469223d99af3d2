//! The heap backend's key-group layout (native heap savepoints, materialized changelog
//! parts): per state `u16 state id`, `i32 count` and `count` × (namespace, key, whole
//! state), with no lengths anywhere.
//!
//! A value statekit cannot decode (Kryo, Avro, a user's serializer) therefore has no end
//! to step to. The reader finds it by search: at such a value it tries each end in turn,
//! shortest first, and keeps the first one after which the rest of the part parses to its
//! exact end — every later key decoding, landing in this key group by Flink's rule
//! (`murmurHash(hashCode) % max parallelism`, where statekit computes the key's
//! `hashCode`), every namespace byte of a non-windowed state being 0, every count fitting
//! and the next state id following. The true split always parses, so a split is taken
//! only when the search proves it the only one: a first split found is never trusted on
//! its own (a wrong one can reconnect to the true entries further on). The search is
//! bounded twice: each part by a budget of trials proportional to its size, and all the
//! parts of one stream (a file's key groups) together by a [`StreamBudget`] proportional to
//! the stream's size, so many small hostile key groups cannot each spend a part's minimum. A
//! trial's price grows with the bytes it parses. When no split parses, when two do, or when
//! the proof runs out of budget, the read fails naming the state, the offset and why (a
//! canonical savepoint has lengths and always reads); a spent budget is its own error
//! ([`HeapError::Budget`], `FlinkError::SearchBudget`).

use crate::canonical::Layout;
use crate::input::Input;
use crate::problem::DecodeProblem;
use crate::serializer::FlinkType;
use crate::snapshot::flink_key_group;
use crate::value::{decodable, transcode, transcode_part};
use statekit_core::{KeyedStateKind, OwnedEntry, StateDescriptor, TypeSchema};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A failure: the position in the part's bytes, the field and the reason.
pub(crate) type Fail = (usize, String, String);

/// Why a part could not be read.
#[derive(Debug)]
pub(crate) enum HeapError {
    /// Its bytes do not parse (or not in exactly one way): position, field, reason.
    Corrupt(Fail),
    /// The search for where values with no length end spent its budget first.
    Budget(Spent),
}

impl From<Fail> for HeapError {
    fn from(f: Fail) -> Self {
        HeapError::Corrupt(f)
    }
}

/// A search that spent its budget.
#[derive(Debug)]
pub(crate) struct Spent {
    /// Where the first value with no length starts, in the part's bytes.
    pub(crate) pos: usize,
    /// The state (`state "name"`).
    pub(crate) field: String,
    /// The values' serializer.
    pub(crate) class: String,
    /// The trials the budget held.
    pub(crate) trials: usize,
    /// What the budget was for: the part, or the whole stream and its size.
    pub(crate) scope: String,
}

/// Trials per byte of a part a value-end search may spend, the least and the most it may
/// (a trial is one short parse; the most is seconds of work).
const TRIALS_PER_BYTE: usize = 64;
const TRIALS_MIN: usize = 1 << 20;
const TRIALS_MAX: usize = 1 << 24;

/// A trial that parses more than this many bytes costs one more trial per this many (so the
/// budget bounds the bytes parsed, not only the parses: a long key re-read at each trial).
const BYTES_PER_TRIAL: usize = 64;

/// Trials per byte of a whole stream its searches may spend together, the least and the
/// most: a key group's part gets what its own budget allows, or what is left of its stream's
/// if that is less.
const STREAM_TRIALS_PER_BYTE: usize = 16;
const STREAM_TRIALS_MIN: usize = TRIALS_MIN;
const STREAM_TRIALS_MAX: usize = 1 << 26;

/// The trials all the value-end searches of one stream (a file's key groups) may spend
/// together: [`STREAM_TRIALS_PER_BYTE`] per byte of the stream, at least
/// [`STREAM_TRIALS_MIN`], at most [`STREAM_TRIALS_MAX`]. Shared by the threads reading it.
#[derive(Debug)]
pub(crate) struct StreamBudget {
    left: AtomicUsize,
    total: usize,
    len: usize,
}

impl StreamBudget {
    /// The budget of a stream of `len` bytes.
    pub(crate) fn new(len: usize) -> Self {
        let total = len
            .saturating_mul(STREAM_TRIALS_PER_BYTE)
            .clamp(STREAM_TRIALS_MIN, STREAM_TRIALS_MAX);
        StreamBudget {
            left: AtomicUsize::new(total),
            total,
            len,
        }
    }

    fn left(&self) -> usize {
        self.left.load(Ordering::Relaxed)
    }

    /// Takes `n` trials (what is left, if less).
    fn spend(&self, n: usize) {
        let _ = self
            .left
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| Some(l.saturating_sub(n)));
    }
}

/// A search node: the position right after a value with no length, and what the parse
/// still expects there (parts, state, entries, elements).
type Node = (usize, usize, usize, usize, usize);

fn node(at: &At, pos: usize) -> Node {
    (pos, at.parts_left, at.state, at.entries_left, at.inner_left)
}

/// The state of a value-end search.
struct Search {
    /// Complete parses from each node visited that did not fail at once (capped at 2).
    memo: HashMap<Node, u8>,
    /// Trials left.
    budget: usize,
    /// Trials the search started with, and what they were for (the part, or its stream).
    trials: usize,
    scope: String,
    /// The failure that got furthest, for the error when no split parses.
    furthest: Option<Fail>,
    /// Where the first value with no length starts, for errors.
    first: At,
    /// Per state, the positions where an entry head parses ([`HeapReader::heads`]).
    heads: HashMap<usize, Vec<usize>>,
}

/// What one key group's heap-layout bytes are read with.
pub(crate) struct HeapReader<'a> {
    /// The key type.
    pub(crate) key: &'a FlinkType,
    /// Its statekit schema (for Flink's key-group rule).
    pub(crate) key_schema: TypeSchema,
    /// The states' layouts, by state id.
    pub(crate) layouts: &'a [Layout],
    /// The states, by state id (for names).
    pub(crate) states: &'a [StateDescriptor],
    /// The key group being read.
    pub(crate) key_group: u32,
    /// The job's max parallelism.
    pub(crate) max_parallelism: u32,
    /// What the searches of the whole stream may still spend.
    pub(crate) budget: &'a StreamBudget,
}

/// Where a parse stands; cloned at each value whose end is searched for.
#[derive(Clone, Debug, Default)]
struct At {
    pos: usize,
    /// State parts still to come.
    parts_left: usize,
    /// The current state id.
    state: usize,
    /// Entries of the current state part still to come.
    entries_left: usize,
    /// List elements or map entries of the current entry still to come.
    inner_left: usize,
    key: Vec<u8>,
    namespace: Vec<u8>,
    user_key: Option<Vec<u8>>,
    timestamp: Option<i64>,
}

enum Step {
    /// The part parsed to its end.
    Done,
    /// `At::pos` is the start of a value with no length; the context is in `At`.
    Unbounded,
}

impl HeapReader<'_> {
    fn field(&self, state: usize) -> String {
        format!("state {:?}", self.states.get(state).map_or("?", |s| s.name.as_str()))
    }

    fn entry(&self, at: &At, value: Vec<u8>) -> OwnedEntry {
        OwnedEntry {
            key_group: self.key_group,
            state: at.state as u32,
            key: at.key.clone(),
            namespace: at.namespace.clone(),
            user_key: at.user_key.clone(),
            value,
            timestamp: at.timestamp,
        }
    }

    /// Reads `parts` state parts from `data` (all of it) into `out`.
    pub(crate) fn read(&self, data: &[u8], parts: usize, out: &mut Vec<OwnedEntry>) -> Result<(), HeapError> {
        let root = At {
            parts_left: parts,
            ..At::default()
        };
        let start_len = out.len();
        let mut at = root.clone();
        match self.run(data, &mut at, out)? {
            Step::Done => return Ok(()),
            Step::Unbounded => out.truncate(start_len),
        }
        // Count the complete parses from the start (capped at 2), then walk the only one.
        let own = data.len().saturating_mul(TRIALS_PER_BYTE).clamp(TRIALS_MIN, TRIALS_MAX);
        let stream = self.budget.left();
        let (trials, scope) = if own <= stream {
            (own, format!("this key group's {} bytes", data.len()))
        } else {
            (
                stream,
                format!(
                    "what was left of the {} trials of the stream's {} bytes",
                    self.budget.total, self.budget.len
                ),
            )
        };
        let mut search = Search {
            memo: HashMap::new(),
            budget: trials,
            trials,
            scope,
            furthest: None,
            first: at.clone(),
            heads: HashMap::new(),
        };
        let counted = self.completions(data, &root, &mut search);
        self.budget.spend(trials - search.budget);
        match counted? {
            0 => {
                let (pos, field, reason) = search.furthest.unwrap_or_default();
                return Err(HeapError::Corrupt((
                    pos,
                    field,
                    format!("{reason} (after searching for where a value with no length ends)"),
                )));
            }
            1 => {}
            _ => {
                return Err(self
                    .unsplittable(&search.first, "more than one split of its bytes parses")
                    .into())
            }
        }
        let mut at = root;
        loop {
            match self.run(data, &mut at, out)? {
                Step::Done => return Ok(()),
                Step::Unbounded => {
                    let start = at.pos;
                    let end = (start..=data.len())
                        .find(|&q| search.memo.get(&node(&at, q)) == Some(&1))
                        .ok_or_else(|| self.unsplittable(&at, "the search lost its split"))?;
                    out.push(self.entry(&at, data.get(start..end).unwrap_or(&[]).to_vec()));
                    at.pos = end;
                }
            }
        }
    }

    /// The number of complete parses from `root` (0, 1, or 2 for "more than one"), every
    /// node's count kept in `search.memo`. Depth-first with an explicit stack: a node is a
    /// position right after a value with no length, with the counts still to come.
    fn completions(&self, data: &[u8], root: &At, search: &mut Search) -> Result<u8, HeapError> {
        struct Frame {
            key: Node,
            /// The parse stopped at a value with no length: its context, and the next end.
            at: At,
            next: usize,
            count: u8,
        }
        let mut scratch = Vec::new();
        let mut stack: Vec<Frame> = Vec::new();
        // Runs a node's parse: its count when final, else a frame to expand.
        let mut open = |s: &mut Search, at: &mut At| -> Result<Result<u8, ()>, HeapError> {
            self.charge(s, 1)?;
            let start = at.pos;
            scratch.clear();
            let (reached, r) = match self.run(data, at, &mut scratch) {
                Ok(Step::Done) => (at.pos, Ok(1)),
                Ok(Step::Unbounded) => (at.pos, Err(())),
                Err(f) => {
                    let reached = f.0;
                    if s.furthest.as_ref().is_none_or(|g| f.0 >= g.0) {
                        s.furthest = Some(f);
                    }
                    (reached, Ok(0))
                }
            };
            // A trial that parsed far (a long key, many decodable entries) costs more.
            self.charge(s, reached.saturating_sub(start) / BYTES_PER_TRIAL)?;
            Ok(r)
        };
        let mut at = root.clone();
        let root_key = node(&at, at.pos);
        match open(search, &mut at)? {
            Ok(n) => return Ok(n),
            Err(()) => stack.push(Frame {
                key: root_key,
                next: at.pos,
                at,
                count: 0,
            }),
        }
        let mut done: Option<u8> = None;
        loop {
            let Some(top) = stack.last_mut() else {
                return Ok(done.unwrap_or(0));
            };
            if let Some(n) = done.take() {
                top.count = top.count.saturating_add(n).min(2);
            }
            if top.count >= 2 || top.next > data.len() {
                let f = stack
                    .pop()
                    .ok_or_else(|| self.unsplittable(&search.first, "the search lost its place"))?;
                search.memo.insert(f.key, f.count);
                done = Some(f.count);
                continue;
            }
            let q = top.next;
            top.next += 1;
            let key = node(&top.at, q);
            if let Some(&n) = search.memo.get(&key) {
                done = Some(n);
                continue;
            }
            // Each entry still to come needs a place where an entry's head (namespace, key
            // of this key group) parses: an end with too few of them after it cannot be one,
            // nor can any later end (this cuts the paths that skip an entry inside a value,
            // and keeps the scan of ends short).
            if top.at.inner_left == 0 && top.at.entries_left > 0 {
                let state = top.at.state;
                if !search.heads.contains_key(&state) {
                    let heads = self.heads(data, state, search)?;
                    search.heads.insert(state, heads);
                }
                let heads = search.heads.get(&state).map_or(&[][..], Vec::as_slice);
                let after = heads.len() - heads.partition_point(|&p| p < q);
                if after < top.at.entries_left {
                    top.next = data.len() + 1;
                    done = Some(0);
                    continue;
                }
            }
            let mut child = top.at.clone();
            child.pos = q;
            match open(search, &mut child)? {
                Ok(n) => {
                    // Most ends fail at once and are not worth remembering: memory holds
                    // only the nodes that parse on (an absent node counts 0).
                    if n > 0 {
                        search.memo.insert(key, n);
                    }
                    done = Some(n);
                }
                Err(()) => stack.push(Frame {
                    key,
                    next: child.pos,
                    at: child,
                    count: 0,
                }),
            }
        }
    }

    /// Every position of `data` where an entry head of `state` (namespace, then a key of
    /// this key group) parses, in order; the bytes parsed are charged to the search (a long
    /// key parsed at every position would cost the square of the part's size).
    fn heads(&self, data: &[u8], state: usize, search: &mut Search) -> Result<Vec<usize>, HeapError> {
        let Some(layout) = self.layouts.get(state) else {
            return Ok(Vec::new());
        };
        let mut i = Input::new(data, "");
        let mut out = Vec::new();
        let mut parsed = 0usize;
        for p in 0..data.len() {
            i.seek(p);
            let ok = self.entry_head(layout, &mut i).is_ok();
            parsed += i.pos() - p + 1;
            if parsed >= BYTES_PER_TRIAL {
                self.charge(search, parsed / BYTES_PER_TRIAL)?;
                parsed %= BYTES_PER_TRIAL;
            }
            if ok {
                out.push(p);
            }
        }
        Ok(out)
    }

    /// Takes `n` trials from the search's budget, or fails saying it is spent.
    fn charge(&self, s: &mut Search, n: usize) -> Result<(), HeapError> {
        if n > s.budget {
            s.budget = 0;
            let class = self
                .layouts
                .get(s.first.state)
                .map_or_else(String::new, |l| l.value.name());
            return Err(HeapError::Budget(Spent {
                pos: s.first.pos,
                field: self.field(s.first.state),
                class,
                trials: s.trials,
                scope: s.scope.clone(),
            }));
        }
        s.budget -= n;
        Ok(())
    }

    /// An entry's head: its namespace, then its key, which must be in this key group by
    /// Flink's rule where statekit computes it. Errors carry the position and the reason.
    fn entry_head(&self, layout: &Layout, i: &mut Input<'_>) -> Result<(Vec<u8>, Vec<u8>), (usize, DecodeProblem)> {
        let ns_at = i.pos();
        let namespace = part(&layout.namespace, "a namespace", i).map_err(|r| (ns_at, r))?;
        let key_at = i.pos();
        let key = part(self.key, "a key", i).map_err(|r| (key_at, r))?;
        match flink_key_group(&key, &self.key_schema, self.max_parallelism) {
            Some(g) if g != self.key_group => Err((
                key_at,
                DecodeProblem::ForeignKeyGroup {
                    found: g,
                    expected: self.key_group,
                },
            )),
            _ => Ok((namespace, key)),
        }
    }

    /// The error for values whose ends cannot be found, at the first such value.
    fn unsplittable(&self, at: &At, why: &str) -> Fail {
        let (pos, state) = (at.pos, at.state);
        let class = self.layouts.get(state).map_or_else(String::new, |l| l.value.name());
        (
            pos,
            self.field(state),
            format!(
                "values of {class} have no length in the heap layout, and {why} (key group {}; a canonical \
                 savepoint of the job has lengths)",
                self.key_group
            ),
        )
    }

    /// Parses from `at` until the end of `data` or a value with no length.
    fn run(&self, data: &[u8], at: &mut At, out: &mut Vec<OwnedEntry>) -> Result<Step, Fail> {
        let mut i = Input::new(data, "");
        i.seek(at.pos);
        loop {
            let pos = i.pos();
            if at.inner_left > 0 {
                at.inner_left -= 1;
                let layout = self.layout(at.state, pos)?;
                let field = self.field(at.state);
                let fail = |r: DecodeProblem| (pos, field.clone(), r.to_string());
                if layout.kind == KeyedStateKind::Map {
                    let uk = layout
                        .user_key
                        .as_ref()
                        .ok_or_else(|| fail(DecodeProblem::MapWithoutUserKey))?;
                    let u = part(uk, "a map key", &mut i).map_err(fail)?;
                    if i.bool("map value null flag").map_err(|e| fail(e.into()))? {
                        continue;
                    }
                    at.user_key = Some(u);
                } else {
                    at.user_key = None;
                }
                at.timestamp = ttl(layout, &mut i).map_err(fail)?;
                if self.value(layout, at, &mut i, out).map_err(fail)? {
                    return Ok(Step::Unbounded);
                }
                continue;
            }
            if at.entries_left > 0 {
                at.entries_left -= 1;
                let layout = self.layout(at.state, pos)?;
                let field = self.field(at.state);
                let fail = |p: usize, r: DecodeProblem| (p, field.clone(), r.to_string());
                if layout.timers {
                    let ts = i.i64("timer").map_err(|e| fail(pos, e.into()))? ^ i64::MIN;
                    at.key = part(self.key, "a key", &mut i).map_err(|r| fail(pos, r))?;
                    at.namespace = part(&layout.namespace, "a namespace", &mut i).map_err(|r| fail(pos, r))?;
                    at.user_key = None;
                    at.timestamp = None;
                    out.push(self.entry(at, ts.to_be_bytes().to_vec()));
                    continue;
                }
                (at.namespace, at.key) = self.entry_head(layout, &mut i).map_err(|(p, r)| fail(p, r))?;
                at.user_key = None;
                match layout.kind {
                    KeyedStateKind::List => {
                        at.inner_left = i.items("list size", 1).map_err(|e| fail(i.pos(), e.into()))?;
                    }
                    KeyedStateKind::Map => {
                        at.inner_left = i.items("map size", 2).map_err(|e| fail(i.pos(), e.into()))?;
                    }
                    _ => {
                        at.timestamp = ttl(layout, &mut i).map_err(|r| fail(i.pos(), r))?;
                        let p = i.pos();
                        if self.value(layout, at, &mut i, out).map_err(|r| fail(p, r))? {
                            return Ok(Step::Unbounded);
                        }
                    }
                }
                continue;
            }
            if at.parts_left > 0 {
                at.parts_left -= 1;
                let id = i
                    .u16("state id")
                    .map_err(|e| (pos, "state id".to_string(), e.to_string()))?;
                at.state = usize::from(id);
                self.layout(at.state, pos)?;
                at.entries_left = i
                    .items("entry count", 1)
                    .map_err(|e| (pos + 2, self.field(at.state), e.to_string()))?;
                continue;
            }
            if i.remaining() > 0 {
                return Err((
                    pos,
                    "state part".to_string(),
                    format!("{} bytes after the last state's entries", i.remaining()),
                ));
            }
            at.pos = pos;
            return Ok(Step::Done);
        }
    }

    fn layout(&self, state: usize, pos: usize) -> Result<&Layout, Fail> {
        self.layouts.get(state).ok_or_else(|| {
            (
                pos,
                "state id".to_string(),
                format!(
                    "key group {}: state id {state}, the head lists {}",
                    self.key_group,
                    self.layouts.len()
                ),
            )
        })
    }

    /// Reads one value (or list element) into `out`; `true` when it has no length, with
    /// `at.pos` at its start and nothing read.
    fn value(
        &self,
        layout: &Layout,
        at: &mut At,
        i: &mut Input<'_>,
        out: &mut Vec<OwnedEntry>,
    ) -> Result<bool, DecodeProblem> {
        if !decodable(&layout.value) {
            at.pos = i.pos();
            return Ok(true);
        }
        let mut v = Vec::new();
        transcode(&layout.value, i, &mut v)?;
        out.push(self.entry(at, v));
        Ok(false)
    }
}

/// A key, namespace or map key: these must be decodable (the search covers values only).
fn part(t: &FlinkType, what: &'static str, i: &mut Input<'_>) -> Result<Vec<u8>, DecodeProblem> {
    transcode_part(
        t,
        what,
        ": in the heap layout nothing after it can be found without user code",
        i,
    )
}

fn ttl(layout: &Layout, i: &mut Input<'_>) -> Result<Option<i64>, DecodeProblem> {
    if layout.ttl {
        Ok(Some(i.i64("TTL timestamp")?))
    } else {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use statekit_core::hash::java_string_hash_code;
    use statekit_core::keygroup::flink_key_group_for_hash_code;

    const MAXP: u32 = 128;

    fn flink_str(s: &str, out: &mut Vec<u8>) {
        let units: Vec<u16> = s.encode_utf16().collect();
        let put = |mut v: u32, out: &mut Vec<u8>| {
            while v >= 0x80 {
                out.push((v as u8 & 0x7F) | 0x80);
                v >>= 7;
            }
            out.push(v as u8);
        };
        put(units.len() as u32 + 1, out);
        for u in units {
            put(u32::from(u), out);
        }
    }

    fn kg_of(s: &str) -> u32 {
        flink_key_group_for_hash_code(java_string_hash_code(s), MAXP)
    }

    /// `n` String keys of key group `kg`.
    fn keys_in(kg: u32, n: usize) -> Vec<String> {
        (0..)
            .map(|i| format!("key-{i}"))
            .filter(|k| kg_of(k) == kg)
            .take(n)
            .collect()
    }

    fn layout(kind: KeyedStateKind, value: FlinkType) -> Layout {
        Layout {
            kind,
            timers: false,
            namespace: FlinkType::VoidNamespace,
            value,
            user_key: None,
            ttl: false,
        }
    }

    fn opaque() -> FlinkType {
        FlinkType::Opaque {
            class: "KryoSerializerSnapshot (java.util.UUID)".into(),
        }
    }

    /// A Kryo-like value: a class byte, then varint-ish bytes of a counter.
    fn kryo(i: usize) -> Vec<u8> {
        let mut v = vec![0x54, 0x01];
        v.extend((0..(3 + i % 7)).map(|j| (i * 31 + j * 17) as u8 | 0x80));
        v.push(0x02);
        v
    }

    fn read(key: &FlinkType, layouts: &[Layout], kg: u32, data: &[u8], parts: usize) -> Result<Vec<OwnedEntry>, Fail> {
        read_with(key, layouts, kg, data, parts, &StreamBudget::new(data.len())).map_err(|e| match e {
            HeapError::Corrupt(f) => f,
            HeapError::Budget(s) => (
                s.pos,
                s.field,
                format!("budget spent: {} trials for {}", s.trials, s.scope),
            ),
        })
    }

    fn read_with(
        key: &FlinkType,
        layouts: &[Layout],
        kg: u32,
        data: &[u8],
        parts: usize,
        budget: &StreamBudget,
    ) -> Result<Vec<OwnedEntry>, HeapError> {
        let states: Vec<StateDescriptor> = (0..layouts.len())
            .map(|n| StateDescriptor::value(&format!("s{n}"), TypeSchema::Utf8, TypeSchema::Bytes))
            .collect();
        let r = HeapReader {
            key,
            key_schema: crate::value::schema_of(key),
            layouts,
            states: &states,
            key_group: kg,
            max_parallelism: MAXP,
            budget,
        };
        let mut out = Vec::new();
        r.read(data, parts, &mut out).map(|()| out)
    }

    #[test]
    fn opaque_values_of_a_value_state_are_split_at_their_true_ends() {
        let kg = 7;
        let keys = keys_in(kg, 12);
        // State 0: opaque values; state 1: Long values, after it.
        let mut data = vec![0, 0];
        data.extend((keys.len() as i32).to_be_bytes());
        for (n, k) in keys.iter().enumerate() {
            data.push(0);
            flink_str(k, &mut data);
            data.extend(kryo(n));
        }
        data.extend([0, 1]);
        data.extend(1i32.to_be_bytes());
        data.push(0);
        flink_str(&keys[0], &mut data);
        data.extend(42i64.to_be_bytes());
        let layouts = [
            layout(KeyedStateKind::Value, opaque()),
            layout(KeyedStateKind::Value, FlinkType::Long),
        ];
        let out = read(&FlinkType::String, &layouts, kg, &data, 2).expect("read");
        assert_eq!(out.len(), keys.len() + 1);
        for (n, k) in keys.iter().enumerate() {
            assert_eq!(out[n].key, k.as_bytes());
            assert_eq!(out[n].value, kryo(n), "entry {n}");
        }
        assert_eq!(out[keys.len()].value, 42i64.to_be_bytes());
    }

    /// One list-state part in key group `kg`: one entry (a key of the group) whose list is
    /// `elements`; the key and the bytes.
    fn list_part(kg: u32, elements: &[Vec<u8>]) -> (String, Vec<u8>) {
        let key = keys_in(kg, 1).remove(0);
        let mut data = vec![0, 0];
        data.extend(1i32.to_be_bytes());
        data.push(0);
        flink_str(&key, &mut data);
        data.extend((elements.len() as i32).to_be_bytes());
        for e in elements {
            data.extend(e);
        }
        (key, data)
    }

    #[test]
    fn a_list_of_opaque_elements_is_refused_as_ambiguous_not_guessed() {
        let (key, data) = list_part(3, &[kryo(1), kryo(2)]);
        let layouts = [layout(KeyedStateKind::List, opaque())];
        let (pos, field, reason) = read(&FlinkType::String, &layouts, 3, &data, 1).expect_err("ambiguous");
        assert_eq!(field, "state \"s0\"");
        assert!(reason.contains("more than one split"), "{reason}");
        assert!(reason.contains("java.util.UUID"), "{reason}");
        assert_eq!(pos, 2 + 4 + 1 + 1 + key.len() + 4);
    }

    #[test]
    fn one_opaque_list_element_is_read_whole() {
        let (_, data) = list_part(3, &[kryo(5)]);
        let layouts = [layout(KeyedStateKind::List, opaque())];
        let out = read(&FlinkType::String, &layouts, 3, &data, 1).expect("read");
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].value, kryo(5));
    }

    #[test]
    fn damage_after_an_opaque_value_is_an_error_not_a_guess() {
        let kg = 11;
        let keys = keys_in(kg, 3);
        let mut data = vec![0, 0];
        data.extend(3i32.to_be_bytes());
        for (n, k) in keys.iter().enumerate() {
            data.push(0);
            flink_str(k, &mut data);
            data.extend(kryo(n));
        }
        // A key of another key group in place of the last one.
        let wrong = keys_in(kg + 1, 1).remove(0);
        let at = data.len() - kryo(2).len() - keys[2].len() - 1;
        data.truncate(at);
        flink_str(&wrong, &mut data);
        data.extend(kryo(2));
        let layouts = [layout(KeyedStateKind::Value, opaque())];
        let e = read(&FlinkType::String, &layouts, kg, &data, 1).expect_err("damaged");
        assert!(e.2.contains("searching for where a value with no length ends"), "{e:?}");
        // Truncated data: an error, never a panic.
        for cut in 0..data.len() {
            let _ = read(&FlinkType::String, &layouts, kg, &data[..cut], 1);
        }
    }

    #[test]
    fn a_key_in_the_wrong_key_group_is_corruption() {
        let key = &keys_in(5, 1)[0];
        let mut data = vec![0, 0];
        data.extend(1i32.to_be_bytes());
        data.push(0);
        flink_str(key, &mut data);
        data.extend(9i64.to_be_bytes());
        let layouts = [layout(KeyedStateKind::Value, FlinkType::Long)];
        let e = read(&FlinkType::String, &layouts, 6, &data, 1).expect_err("wrong group");
        assert!(e.2.contains("a key of key group 5 in key group 6's data"), "{e:?}");
        assert_eq!(e.0, 7);
    }

    /// A key group's data crafted to make the split search explore without end: `heads`
    /// entry heads of key group `kg` back to back (each could start an entry), `entries`
    /// of them claimed by a value state of opaque values (state 0), then a second part
    /// whose state id no head lists, so no split ever completes.
    fn hostile_part(kg: u32, heads: usize, entries: usize) -> Vec<u8> {
        let key = keys_in(kg, 1).remove(0);
        let mut data = vec![0, 0];
        data.extend((entries as i32).to_be_bytes());
        for _ in 0..heads {
            data.push(0);
            flink_str(&key, &mut data);
        }
        data.extend([0xFF; 8]);
        data
    }

    /// Issue 40 point 8: each hostile key group spent its part's whole budget (a million
    /// trials, ~0.45 s), so a file of many of them took minutes (hours at max parallelism
    /// 32 768). The searches of one stream now share a budget proportional to its size: once
    /// it is spent, every later search fails at once, saying so.
    #[test]
    fn the_searches_of_a_stream_share_one_budget() {
        let layouts = [
            layout(KeyedStateKind::Value, opaque()),
            layout(KeyedStateKind::Value, FlinkType::Long),
        ];
        let parts: Vec<(u32, Vec<u8>)> = (0..12).map(|kg| (kg, hostile_part(kg, 200, 100))).collect();
        let total: usize = parts.iter().map(|(_, p)| p.len()).sum();
        let budget = StreamBudget::new(total);
        assert_eq!(budget.total, STREAM_TRIALS_MIN, "a small stream gets the least");
        let started = std::time::Instant::now();
        let mut spent = Vec::new();
        for (kg, data) in &parts {
            match read_with(&FlinkType::String, &layouts, *kg, data, 2, &budget) {
                Err(HeapError::Budget(s)) => spent.push(s),
                other => panic!("key group {kg}: {other:?}"),
            }
        }
        // The first search spends its own budget; the rest find the stream's spent.
        assert!(spent[0].scope.contains("this key group's"), "{:?}", spent[0]);
        for s in &spent[1..] {
            assert!(s.scope.contains("of the stream's"), "{s:?}");
            assert_eq!(s.trials, 0, "{s:?}");
            assert_eq!(s.field, "state \"s0\"");
            assert!(s.class.contains("java.util.UUID"), "{s:?}");
        }
        assert_eq!(budget.left(), 0);
        // Hang detector: twelve searches of a million trials each took minutes in a debug build.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(60),
            "{:?}",
            started.elapsed()
        );
    }

    /// The budget of a stream grows with its size up to a cap; a legitimate search (the
    /// large key group below) spends a small part of it.
    #[test]
    fn a_stream_budget_is_proportional_to_its_size_and_capped() {
        assert_eq!(StreamBudget::new(0).total, STREAM_TRIALS_MIN);
        assert_eq!(StreamBudget::new(1 << 20).total, (1 << 20) * STREAM_TRIALS_PER_BYTE);
        assert_eq!(StreamBudget::new(usize::MAX).total, STREAM_TRIALS_MAX);
        let b = StreamBudget::new(10);
        b.spend(usize::MAX);
        assert_eq!(b.left(), 0);
    }

    /// Thousands of entries of opaque values in one key group: the search stays linear
    /// (each end tried only while enough entry heads follow) and proves the one split.
    #[test]
    fn a_large_key_group_of_opaque_values_reads() {
        let kg = 7;
        let keys = keys_in(kg, 3000);
        let value = |i: usize| {
            let mut v = vec![0x54, 0x01];
            v.extend((0..16).map(|j| ((i * 7919 + j * 104_729) % 251) as u8));
            v
        };
        let mut data = vec![0, 0];
        data.extend((keys.len() as i32).to_be_bytes());
        for (i, k) in keys.iter().enumerate() {
            data.push(0);
            flink_str(k, &mut data);
            data.extend(value(i));
        }
        let layouts = [layout(KeyedStateKind::Value, opaque())];
        let budget = StreamBudget::new(data.len());
        let out = read_with(&FlinkType::String, &layouts, kg, &data, 1, &budget).expect("read");
        // A few trials per byte: far inside the budget of a stream of this size.
        let spent = budget.total - budget.left();
        assert!(spent <= data.len() * 4, "{spent} trials for {} bytes", data.len());
        assert_eq!(out.len(), keys.len());
        for (i, e) in out.iter().enumerate() {
            assert_eq!(e.key, keys[i].as_bytes());
            assert_eq!(e.value, value(i), "entry {i}");
        }
    }
}
