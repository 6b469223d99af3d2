//! Change records: what one state mutation appends to the log (`docs/changelog-format.md`,
//! "Records"). Encoding appends to a buffer; decoding is total over byte slices and borrows
//! from them.
#![deny(clippy::indexing_slicing)]

use crate::error::ChangelogError;
use statekit_core::schema::put_varint;
use statekit_core::StateDescriptor;
use statekit_format::{Cursor, FormatError};

/// Op codes (low 4 bits of the first byte).
mod code {
    pub const METADATA: u8 = 0;
    pub const CLEAR: u8 = 1;
    pub const PUT: u8 = 2;
    pub const ADD_ELEMENT: u8 = 3;
    pub const SET_LIST: u8 = 4;
    pub const MAP_PUT: u8 = 5;
    pub const MAP_REMOVE: u8 = 6;
    pub const MERGE_LIST: u8 = 7;
    pub const READ: u8 = 8;
}

/// Bit of the op byte: an 8-byte little-endian operation time follows the state id.
const HAS_TIME: u8 = 0x80;
/// Bits of the op byte that must be zero.
const RESERVED_BITS: u8 = 0x70;

/// A read that changes state: on a state whose TTL is refreshed on read
/// (`OnReadAndWrite`), a read re-stamps what it returns; replaying it at the same time gives
/// the same stamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadKind {
    /// `get` of a value, reducing or aggregating state.
    Get,
    /// `list_for_each` / `list_get`.
    List,
    /// `map_for_each`.
    MapAll,
    /// `map_get` of one user key (the record carries it).
    MapEntry,
}

impl ReadKind {
    /// The name `statekit dump --changes` shows (`get`, `list`, `map-all`, `map-entry`).
    pub fn name(self) -> &'static str {
        match self {
            ReadKind::Get => "get",
            ReadKind::List => "list",
            ReadKind::MapAll => "map-all",
            ReadKind::MapEntry => "map-entry",
        }
    }

    fn code(self) -> u8 {
        match self {
            ReadKind::Get => 0,
            ReadKind::List => 1,
            ReadKind::MapAll => 2,
            ReadKind::MapEntry => 3,
        }
    }
}

/// What a data record does to (state, key, namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// Remove the entry (all list elements, all map entries).
    Clear,
    /// Set the stored value (value state; the *result* of a reducing or aggregating `add` or
    /// merge).
    Put(&'a [u8]),
    /// Append one list element.
    AddElement(&'a [u8]),
    /// Replace the whole list.
    SetList(Vec<&'a [u8]>),
    /// Insert or replace one map entry.
    MapPut {
        /// User key.
        user_key: &'a [u8],
        /// Value.
        value: &'a [u8],
    },
    /// Remove one map entry.
    MapRemove(&'a [u8]),
    /// Merge the lists of these namespaces into the record's namespace and clear them.
    MergeList(Vec<&'a [u8]>),
    /// A read that refreshes TTL stamps (only logged for `OnReadAndWrite` states).
    Read {
        /// Which read.
        kind: ReadKind,
        /// The user key of a [`ReadKind::MapEntry`] read (empty otherwise).
        user_key: &'a [u8],
    },
}

/// One data record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change<'a> {
    /// The state, by the id its metadata record declared.
    pub state: u32,
    /// The operation's time on the backend's clock, for states with TTL.
    pub time: Option<i64>,
    /// Serialized key.
    pub key: &'a [u8],
    /// Serialized namespace.
    pub namespace: &'a [u8],
    /// The operation.
    pub op: Op<'a>,
}

impl Op<'_> {
    /// The operation's name as `statekit dump --changes` shows it (`put`, `map-remove`, …).
    pub fn name(&self) -> &'static str {
        match self {
            Op::Clear => "clear",
            Op::Put(_) => "put",
            Op::AddElement(_) => "add-element",
            Op::SetList(_) => "set-list",
            Op::MapPut { .. } => "map-put",
            Op::MapRemove(_) => "map-remove",
            Op::MergeList(_) => "merge-list",
            Op::Read { .. } => "read",
        }
    }

    /// Whether a state of `kind` is changed (or read) by this operation.
    pub fn fits(&self, kind: statekit_core::KeyedStateKind) -> bool {
        use statekit_core::KeyedStateKind as K;
        let single = matches!(kind, K::Value | K::Reducing | K::Aggregating);
        match self {
            Op::Clear => true,
            Op::Put(_) => single,
            Op::AddElement(_) | Op::SetList(_) | Op::MergeList(_) => kind == K::List,
            Op::MapPut { .. } | Op::MapRemove(_) => kind == K::Map,
            Op::Read { kind: r, .. } => match r {
                ReadKind::Get => single,
                ReadKind::List => kind == K::List,
                ReadKind::MapAll | ReadKind::MapEntry => kind == K::Map,
            },
        }
    }
}

/// A decoded record.
#[derive(Clone, Debug, PartialEq)]
pub enum Record<'a> {
    /// Declares state id `state` (first record of a state in every log segment).
    Metadata {
        /// The id data records use.
        state: u32,
        /// The state.
        descriptor: StateDescriptor,
    },
    /// A state change.
    Change(Change<'a>),
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

/// Appends a metadata record.
pub fn encode_metadata(out: &mut Vec<u8>, state: u32, descriptor: &StateDescriptor) {
    out.push(code::METADATA);
    put_varint(out, u64::from(state));
    statekit_format::encode_state_descriptor(out, descriptor);
}

/// Appends a data record.
pub fn encode_change(out: &mut Vec<u8>, c: &Change<'_>) {
    let (op, time_bit) = (
        match &c.op {
            Op::Clear => code::CLEAR,
            Op::Put(_) => code::PUT,
            Op::AddElement(_) => code::ADD_ELEMENT,
            Op::SetList(_) => code::SET_LIST,
            Op::MapPut { .. } => code::MAP_PUT,
            Op::MapRemove(_) => code::MAP_REMOVE,
            Op::MergeList(_) => code::MERGE_LIST,
            Op::Read { .. } => code::READ,
        },
        if c.time.is_some() { HAS_TIME } else { 0 },
    );
    out.push(op | time_bit);
    put_varint(out, u64::from(c.state));
    if let Some(t) = c.time {
        out.extend_from_slice(&t.to_le_bytes());
    }
    put_bytes(out, c.key);
    put_bytes(out, c.namespace);
    match &c.op {
        Op::Clear => {}
        Op::Put(v) | Op::AddElement(v) | Op::MapRemove(v) => put_bytes(out, v),
        Op::SetList(items) | Op::MergeList(items) => {
            put_varint(out, items.len() as u64);
            for i in items {
                put_bytes(out, i);
            }
        }
        Op::MapPut { user_key, value } => {
            put_bytes(out, user_key);
            put_bytes(out, value);
        }
        Op::Read { kind, user_key } => {
            out.push(kind.code());
            if *kind == ReadKind::MapEntry {
                put_bytes(out, user_key);
            }
        }
    }
}

/// How the record decoder names its input in the [`FormatError`]s of the cursor, before they
/// become [`ChangelogError::Record`]s (which carry only the position).
const RECORD: &str = "change record";

/// The cursor's error at a position within the record as a [`ChangelogError::Record`] (the
/// caller that knows the file and offset wraps it).
#[cold]
fn record_error(e: FormatError) -> ChangelogError {
    match e {
        FormatError::Corrupt {
            offset, field, reason, ..
        } => ChangelogError::Record {
            position: usize::try_from(offset).unwrap_or(usize::MAX),
            field,
            reason,
        },
        other => ChangelogError::Format(other),
    }
}

/// A varint that must fit 32 bits.
#[inline]
fn u32v(c: &mut Cursor<'_>, field: &str) -> Result<u32, FormatError> {
    let at = c.offset();
    let v = c.varint(field)?;
    u32::try_from(v).map_err(|_| c.err_at(at, field, format!("{v} does not fit 32 bits")))
}

/// A count, then that many length-prefixed byte strings.
#[inline]
fn list<'a>(c: &mut Cursor<'a>, field: &str) -> Result<Vec<&'a [u8]>, FormatError> {
    // Every item takes at least one byte: `count` rejects counts the record cannot hold
    // before anything is allocated.
    let n = c.count(field)?;
    (0..n).map(|_| c.bytes(field)).collect()
}

/// Decodes one record (the whole of `buf`: trailing bytes are an error). Errors name the
/// byte position within the record where the bad field starts, and the field.
pub fn decode_record(buf: &[u8]) -> Result<Record<'_>, ChangelogError> {
    let mut c = Cursor::new(buf, 0, RECORD);
    let rec = decode_fields(&mut c).map_err(record_error)?;
    c.finish("record").map_err(record_error)?;
    Ok(rec)
}

fn decode_fields<'a>(c: &mut Cursor<'a>) -> Result<Record<'a>, FormatError> {
    let first = c.u8("op")?;
    if first & RESERVED_BITS != 0 {
        return Err(c.err_at(0, "op", format!("reserved bits set in {first:#04x}")));
    }
    let op_code = first & 0x0F;
    let state = u32v(c, "state")?;
    if op_code == code::METADATA {
        if first & HAS_TIME != 0 {
            return Err(c.err_at(0, "op", "a metadata record has no time"));
        }
        let descriptor = statekit_format::read_state_descriptor(c, "descriptor")?;
        return Ok(Record::Metadata { state, descriptor });
    }
    let time = if first & HAS_TIME != 0 {
        Some(c.i64("time")?)
    } else {
        None
    };
    let key = c.bytes("key")?;
    let namespace = c.bytes("namespace")?;
    let op = match op_code {
        code::CLEAR => Op::Clear,
        code::PUT => Op::Put(c.bytes("value")?),
        code::ADD_ELEMENT => Op::AddElement(c.bytes("element")?),
        code::SET_LIST => Op::SetList(list(c, "elements")?),
        code::MAP_PUT => Op::MapPut {
            user_key: c.bytes("user_key")?,
            value: c.bytes("value")?,
        },
        code::MAP_REMOVE => Op::MapRemove(c.bytes("user_key")?),
        code::MERGE_LIST => Op::MergeList(list(c, "sources")?),
        code::READ => {
            let at = c.offset();
            let kind = match c.u8("read_kind")? {
                0 => ReadKind::Get,
                1 => ReadKind::List,
                2 => ReadKind::MapAll,
                3 => ReadKind::MapEntry,
                k => return Err(c.err_at(at, "read_kind", format!("unknown read kind {k}"))),
            };
            let user_key = if kind == ReadKind::MapEntry {
                c.bytes("user_key")?
            } else {
                &[]
            };
            Op::Read { kind, user_key }
        }
        other => return Err(c.err_at(0, "op", format!("unknown op code {other}"))),
    };
    Ok(Record::Change(Change {
        state,
        time,
        key,
        namespace,
        op,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use statekit_core::TypeSchema;

    fn round_trip(c: Change<'_>) {
        let mut buf = Vec::new();
        encode_change(&mut buf, &c);
        assert_eq!(decode_record(&buf).expect("decode"), Record::Change(c));
    }

    #[test]
    fn every_op_round_trips() {
        let base = |op| Change {
            state: 3,
            time: None,
            key: b"k",
            namespace: b"",
            op,
        };
        for op in [
            Op::Clear,
            Op::Put(b"v"),
            Op::AddElement(b""),
            Op::SetList(vec![b"a", b"", b"ccc"]),
            Op::MapPut {
                user_key: b"u",
                value: b"v",
            },
            Op::MapRemove(b"u"),
            Op::MergeList(vec![b"n1", b"n2"]),
            Op::Read {
                kind: ReadKind::Get,
                user_key: b"",
            },
            Op::Read {
                kind: ReadKind::MapEntry,
                user_key: b"uk",
            },
        ] {
            round_trip(base(op.clone()));
            round_trip(Change {
                time: Some(-5),
                ..base(op)
            });
        }
        let mut buf = Vec::new();
        let d = StateDescriptor::map("m", TypeSchema::Utf8, TypeSchema::Utf8, TypeSchema::I64);
        encode_metadata(&mut buf, 7, &d);
        assert_eq!(
            decode_record(&buf).expect("decode"),
            Record::Metadata {
                state: 7,
                descriptor: d
            }
        );
    }

    /// A timed put of state 1, encoded.
    fn timed_put() -> Vec<u8> {
        let mut buf = Vec::new();
        encode_change(
            &mut buf,
            &Change {
                state: 1,
                time: Some(1),
                key: b"key",
                namespace: b"ns",
                op: Op::Put(b"value"),
            },
        );
        buf
    }

    #[test]
    fn bad_records_are_errors() {
        assert!(decode_record(&[]).is_err());
        assert!(decode_record(&[0x42, 0]).is_err(), "reserved bits");
        assert!(decode_record(&[15, 0, 0, 0]).is_err(), "unknown op");
        let mut buf = timed_put();
        for cut in 0..buf.len() {
            assert!(decode_record(&buf[..cut]).is_err(), "truncated at {cut}");
        }
        buf.push(0);
        assert!(decode_record(&buf).is_err(), "trailing byte");
    }

    /// The position and field of a record error.
    fn failure(buf: &[u8]) -> (usize, String) {
        match decode_record(buf) {
            Err(ChangelogError::Record { position, field, .. }) => (position, field),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn errors_name_the_field_and_the_byte_it_starts_at() {
        let buf = timed_put();
        // op 0, state 1, time 2..10, key 10 (length) 11..14, namespace 14 15..17, value 17 18..23.
        assert_eq!(failure(&buf[..1]), (1, "state".into()));
        assert_eq!(failure(&buf[..5]), (2, "time".into()));
        assert_eq!(failure(&buf[..12]), (10, "key".into()));
        assert_eq!(failure(&buf[..20]), (17, "value".into()));
        let mut bad = buf.clone();
        bad[0] |= 0x10;
        assert_eq!(failure(&bad), (0, "op".into()));
        bad = buf.clone();
        bad.push(9);
        assert_eq!(failure(&bad), (23, "record".into()));
        // A descriptor is read in place: its errors point into the record.
        let d = StateDescriptor::value("name", TypeSchema::Utf8, TypeSchema::I64);
        let mut buf = Vec::new();
        encode_metadata(&mut buf, 7, &d);
        // op 0, state 1, name 2 (length) 3..7, kind 7.
        buf[7] = 200;
        assert_eq!(failure(&buf), (7, "descriptor.kind".into()));
        let e = decode_record(&buf).expect_err("bad kind").to_string();
        assert_eq!(
            e,
            "change record: byte 7: descriptor.kind: unknown keyed state kind 200"
        );
    }

    proptest! {
        #[test]
        fn decoder_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = decode_record(&raw);
        }
    }
}
