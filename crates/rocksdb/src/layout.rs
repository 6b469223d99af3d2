//! The byte layout of keys and values in the column families (`docs/rocksdb-layout.md`).
//!
//! **Keys.** One column family per state. Every key starts with the key group, big-endian,
//! in 1 byte when the max parallelism is ≤ 128 and in 2 bytes otherwise (Flink's rule), so a
//! column family iterates key group by key group. The key and the namespace follow, each in
//! an order-preserving, self-delimiting escape encoding (`0x00` → `0x00 0xFF`, then the
//! terminator `0x00 0x00`); map states append the user key as is:
//!
//! ```text
//! value, list, reducing, aggregating:  kg ‖ esc(key) ‖ 00 00 ‖ esc(namespace) ‖ 00 00
//! map:                                 kg ‖ esc(key) ‖ 00 00 ‖ esc(namespace) ‖ 00 00 ‖ user key
//! ```
//!
//! The encoding is prefix-free and preserves order: comparing two encoded keys as unsigned
//! bytes gives the order of their `(key group, key, namespace, user key)` tuples, each part
//! compared as unsigned bytes. That is exactly the canonical order of
//! [`Entry::canonical_cmp`](statekit_core::Entry::canonical_cmp) within a state, so a
//! snapshot streams a column family's key-group range in canonical order without sorting.
//!
//! **Values.** For a state without TTL the stored value is the value itself (value,
//! reducing, aggregating: the value or accumulator; map: the map value). With TTL it is
//! prefixed by the last-update timestamp, an `i64` in 8 big-endian bytes. A list is the
//! concatenation of its elements, each `[timestamp (8 bytes, TTL only)] ‖ LEB128 length ‖
//! bytes`, so reading never scans for a delimiter.
//!
//! **List merge operands.** `add` appends without reading: it writes a merge operand, a
//! self-delimiting segment `tag ‖ LEB128 length ‖ payload` ([`push_list_operand`]). The
//! merge operator applies segments to the stored list in order (tag 2 first drops the
//! elements expired at the segment's time, as the heap backend does before appending to a
//! list with TTL) and combines segments by concatenating them.
#![deny(clippy::indexing_slicing)]

use crate::error::{Corruption, RocksDbError};
use statekit_core::StateError;

/// The terminator written after an escaped key or namespace.
const TERMINATOR: [u8; 2] = [0x00, 0x00];
/// The escape of a `0x00` byte inside a key or namespace.
const ESCAPED_ZERO: [u8; 2] = [0x00, 0xFF];
/// Length of a TTL timestamp prefix.
pub const TIMESTAMP_BYTES: usize = 8;

fn corrupt(what: Corruption) -> StateError {
    RocksDbError::from(what).into()
}

/// The key layout of one backend: the width of the key-group prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyLayout {
    prefix_bytes: usize,
}

/// The parts of a stored key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DecodedKey {
    /// Key group.
    pub key_group: u32,
    /// Serialized key.
    pub key: Vec<u8>,
    /// Serialized namespace.
    pub namespace: Vec<u8>,
    /// Everything after the namespace: the user key of a map entry, empty otherwise.
    pub user_key: Vec<u8>,
}

impl KeyLayout {
    /// The layout for a job with this max parallelism: a 1-byte key-group prefix when it is
    /// at most 128, else 2 bytes (`CompositeKeySerializationUtils` in Flink).
    pub fn for_max_parallelism(max_parallelism: u32) -> Self {
        KeyLayout {
            prefix_bytes: if max_parallelism <= 128 { 1 } else { 2 },
        }
    }

    /// Width of the key-group prefix in bytes (1 or 2).
    pub fn prefix_bytes(&self) -> usize {
        self.prefix_bytes
    }

    /// Appends the big-endian key-group prefix. `key_group` must fit the width (it does
    /// for every key group below the max parallelism, and for the one-past-the-end bound).
    #[inline]
    pub fn push_key_group(&self, buf: &mut Vec<u8>, key_group: u32) {
        if self.prefix_bytes == 1 {
            buf.push(key_group as u8);
        } else {
            buf.extend_from_slice(&(key_group as u16).to_be_bytes());
        }
    }

    /// The key group a stored key starts with (`None`: shorter than the prefix).
    pub fn key_group_of(&self, stored_key: &[u8]) -> Option<u32> {
        if self.prefix_bytes == 1 {
            stored_key.first().map(|b| u32::from(*b))
        } else {
            stored_key.first_chunk::<2>().map(|b| u32::from(u16::from_be_bytes(*b)))
        }
    }

    /// The bytes every key of `key_group` starts with.
    pub fn key_group_prefix(&self, key_group: u32) -> Vec<u8> {
        let mut buf = Vec::with_capacity(2);
        self.push_key_group(&mut buf, key_group);
        buf
    }

    /// Replaces `buf` with `kg ‖ esc(key) ‖ 00 00 ‖ esc(namespace) ‖ 00 00`: a full key of
    /// a value/list/reducing/aggregating state, and the prefix of every entry of one map.
    #[inline]
    pub fn encode_key_ns(&self, buf: &mut Vec<u8>, key_group: u32, key: &[u8], namespace: &[u8]) {
        buf.clear();
        buf.reserve(self.prefix_bytes + key.len() + namespace.len() + 2 * TERMINATOR.len());
        self.push_key_group(buf, key_group);
        push_escaped(buf, key);
        push_escaped(buf, namespace);
    }

    /// Replaces `buf` with the key of one map entry: [`KeyLayout::encode_key_ns`] then the
    /// user key.
    #[inline]
    pub fn encode_map_key(&self, buf: &mut Vec<u8>, key_group: u32, key: &[u8], namespace: &[u8], user_key: &[u8]) {
        self.encode_key_ns(buf, key_group, key, namespace);
        buf.extend_from_slice(user_key);
    }

    /// Splits a stored key into `out` (its buffers are reused).
    pub fn decode_into(&self, raw: &[u8], out: &mut DecodedKey) -> Result<(), StateError> {
        let prefix = if self.prefix_bytes == 1 {
            raw.split_first().map(|(&kg, rest)| (u32::from(kg), rest))
        } else {
            raw.split_first_chunk::<2>()
                .map(|(kg, rest)| (u32::from(u16::from_be_bytes(*kg)), rest))
        };
        let (key_group, rest) = prefix.ok_or_else(|| corrupt(Corruption::NoKeyGroupPrefix { len: raw.len() }))?;
        out.key_group = key_group;
        let rest = take_escaped(rest, &mut out.key).ok_or_else(|| corrupt(Corruption::Unterminated { part: "key" }))?;
        let rest = take_escaped(rest, &mut out.namespace)
            .ok_or_else(|| corrupt(Corruption::Unterminated { part: "namespace" }))?;
        out.user_key.clear();
        out.user_key.extend_from_slice(rest);
        Ok(())
    }

    /// Splits a stored key.
    pub fn decode(&self, raw: &[u8]) -> Result<DecodedKey, StateError> {
        let mut out = DecodedKey::default();
        self.decode_into(raw, &mut out)?;
        Ok(out)
    }
}

/// Appends `bytes` escaped (`0x00` → `0x00 0xFF`) and the terminator `0x00 0x00`.
#[inline]
pub fn push_escaped(buf: &mut Vec<u8>, bytes: &[u8]) {
    // The runs between zero bytes (one more than there are zeros), each zero escaped.
    let mut runs = bytes.split(|&b| b == 0);
    if let Some(first) = runs.next() {
        buf.extend_from_slice(first);
    }
    for run in runs {
        buf.extend_from_slice(&ESCAPED_ZERO);
        buf.extend_from_slice(run);
    }
    buf.extend_from_slice(&TERMINATOR);
}

/// Reads one escaped part into `out` (cleared first); returns what follows its terminator,
/// or `None` when the part is malformed or unterminated.
fn take_escaped<'a>(raw: &'a [u8], out: &mut Vec<u8>) -> Option<&'a [u8]> {
    out.clear();
    let mut rest = raw;
    loop {
        let i = rest.iter().position(|&b| b == 0)?;
        let (run, zero) = rest.split_at_checked(i)?;
        out.extend_from_slice(run);
        // `zero` starts with the zero byte; the byte after it says what it is.
        match zero.get(1..)?.split_first()? {
            (0x00, after) => return Some(after),
            (0xFF, after) => {
                out.push(0);
                rest = after;
            }
            _ => return None,
        }
    }
}

/// The smallest key greater than every key starting with `prefix`, or `None` when there is
/// none (`prefix` is all `0xFF`).
pub fn prefix_successor(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut out = prefix.to_vec();
    while let Some(last) = out.pop() {
        if last < 0xFF {
            out.push(last + 1);
            return Some(out);
        }
    }
    None
}

// ---------------------------------------------------------------------------------------
// Values

/// Replaces `buf` with a stored value: `[timestamp, 8 bytes BE] ‖ value` when `ts` is set,
/// else the value alone.
#[inline]
pub fn encode_value(buf: &mut Vec<u8>, ts: Option<i64>, value: &[u8]) {
    buf.clear();
    if let Some(ts) = ts {
        buf.extend_from_slice(&ts.to_be_bytes());
    }
    buf.extend_from_slice(value);
}

/// Splits a stored value of a state with (`stamped`) or without TTL into its timestamp
/// (0 without TTL) and value.
#[inline]
pub fn split_value(raw: &[u8], stamped: bool) -> Result<(i64, &[u8]), StateError> {
    if !stamped {
        return Ok((0, raw));
    }
    let Some((ts, value)) = raw.split_first_chunk::<TIMESTAMP_BYTES>() else {
        return Err(corrupt(Corruption::ShortTtlValue { len: raw.len() }));
    };
    Ok((i64::from_be_bytes(*ts), value))
}

/// Appends one list element: `[timestamp, 8 bytes BE] ‖ LEB128 length ‖ bytes`.
#[inline]
pub fn push_element(buf: &mut Vec<u8>, ts: Option<i64>, element: &[u8]) {
    if let Some(ts) = ts {
        buf.extend_from_slice(&ts.to_be_bytes());
    }
    push_leb128(buf, element.len() as u64);
    buf.extend_from_slice(element);
}

/// Iterates the elements of a stored list: `(timestamp or 0, element)`.
#[derive(Clone, Debug)]
pub struct ListElements<'a> {
    rest: &'a [u8],
    stamped: bool,
}

impl<'a> ListElements<'a> {
    /// The elements of `raw`, stored with timestamps when `stamped`.
    pub fn new(raw: &'a [u8], stamped: bool) -> Self {
        ListElements { rest: raw, stamped }
    }

    /// Reads a LEB128 length.
    fn take_len(&mut self) -> Result<u64, StateError> {
        let mut len: u64 = 0;
        let mut shift = 0u32;
        loop {
            let (&byte, rest) = self
                .rest
                .split_first()
                .ok_or_else(|| corrupt(Corruption::LengthCutOff))?;
            self.rest = rest;
            if shift >= 64 || (shift == 63 && byte > 1) {
                return Err(corrupt(Corruption::LengthOverflow));
            }
            len |= u64::from(byte & 0x7F) << shift;
            if byte & 0x80 == 0 {
                return Ok(len);
            }
            shift += 7;
        }
    }

    fn take(&mut self) -> Result<(i64, &'a [u8]), StateError> {
        let mut ts = 0;
        if self.stamped {
            let Some((t, rest)) = self.rest.split_first_chunk::<TIMESTAMP_BYTES>() else {
                return Err(corrupt(Corruption::ShortElement));
            };
            ts = i64::from_be_bytes(*t);
            self.rest = rest;
        }
        let len = self.take_len()?;
        let (element, rest) = usize::try_from(len)
            .ok()
            .and_then(|l| self.rest.split_at_checked(l))
            .ok_or_else(|| corrupt(Corruption::ElementPastValue { len }))?;
        self.rest = rest;
        Ok((ts, element))
    }
}

impl<'a> Iterator for ListElements<'a> {
    type Item = Result<(i64, &'a [u8]), StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let item = self.take();
        if item.is_err() {
            self.rest = &[];
        }
        Some(item)
    }
}

// ---------------------------------------------------------------------------------------
// List merge operands

/// Operand tag: append elements stored without timestamps.
pub const OPERAND_APPEND: u8 = 0;
/// Operand tag: append elements stored with timestamps.
pub const OPERAND_APPEND_STAMPED: u8 = 1;
/// Operand tag: drop the elements expired at the operand's time, then append (stamped).
pub const OPERAND_EXPIRE_APPEND: u8 = 2;

fn leb128_len(mut n: u64) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

fn push_leb128(buf: &mut Vec<u8>, mut n: u64) {
    loop {
        let byte = (n & 0x7F) as u8;
        n >>= 7;
        if n == 0 {
            buf.push(byte);
            return;
        }
        buf.push(byte | 0x80);
    }
}

/// Appends one list merge operand (a *segment*) carrying `elements`, already encoded with
/// [`push_element`]:
///
/// * `stamped = false`: `00 ‖ LEB128 len ‖ elements` — append;
/// * `stamped = true`, `expire = None`: `01 ‖ LEB128 len ‖ elements` — append;
/// * `expire = Some((now, ttl_ms))`: `02 ‖ LEB128 len ‖ now (i64 BE) ‖ ttl_ms (u64 BE) ‖
///   elements` — first drop the elements already in the list that have expired at `now`
///   under `ttl_ms` (what the heap backend does before appending to a list with TTL), then
///   append.
///
/// Operands are self-delimiting, so combining operands is concatenating them.
pub fn push_list_operand(buf: &mut Vec<u8>, stamped: bool, expire: Option<(i64, u64)>, elements: &[u8]) {
    match expire {
        Some((now, ttl_ms)) => {
            buf.push(OPERAND_EXPIRE_APPEND);
            push_leb128(buf, 16 + elements.len() as u64);
            buf.extend_from_slice(&now.to_be_bytes());
            buf.extend_from_slice(&ttl_ms.to_be_bytes());
        }
        None => {
            buf.push(if stamped {
                OPERAND_APPEND_STAMPED
            } else {
                OPERAND_APPEND
            });
            push_leb128(buf, elements.len() as u64);
        }
    }
    buf.extend_from_slice(elements);
}

/// Appends the operand of one `add`: [`push_list_operand`] of the single element
/// `[now] ‖ LEB128 length ‖ element`, expiring at `now` when `ttl` is `Some((now, ttl_ms))`.
#[inline]
pub fn push_add_operand(buf: &mut Vec<u8>, ttl: Option<(i64, u64)>, element: &[u8]) {
    let element_len = leb128_len(element.len() as u64) + element.len();
    match ttl {
        Some((now, ttl_ms)) => {
            buf.push(OPERAND_EXPIRE_APPEND);
            push_leb128(buf, (16 + TIMESTAMP_BYTES + element_len) as u64);
            buf.extend_from_slice(&now.to_be_bytes());
            buf.extend_from_slice(&ttl_ms.to_be_bytes());
            push_element(buf, Some(now), element);
        }
        None => {
            buf.push(OPERAND_APPEND);
            push_leb128(buf, element_len as u64);
            push_element(buf, None, element);
        }
    }
}

/// The size [`push_list_operand`] adds for `elements_len` bytes of elements.
pub fn list_operand_len(expire: bool, elements_len: usize) -> usize {
    let payload = elements_len + if expire { 16 } else { 0 };
    1 + leb128_len(payload as u64) + payload
}

/// One decoded list merge operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListOperand<'a> {
    /// Whether the elements carry timestamps.
    pub stamped: bool,
    /// `(now, ttl_ms)` for an expire-then-append operand.
    pub expire: Option<(i64, u64)>,
    /// The encoded elements.
    pub elements: &'a [u8],
}

/// Reads one list merge operand; returns it and what follows.
fn take_operand(raw: &[u8]) -> Result<(ListOperand<'_>, &[u8]), StateError> {
    let (&tag, after) = raw.split_first().ok_or_else(|| corrupt(Corruption::EmptyOperand))?;
    let mut elems = ListElements::new(after, false);
    let len = elems.take_len()?;
    let body = elems.rest;
    let (payload, next) = usize::try_from(len)
        .ok()
        .and_then(|l| body.split_at_checked(l))
        .ok_or_else(|| corrupt(Corruption::OperandPastEnd))?;
    let bad = || corrupt(Corruption::BadOperand { tag, len });
    let op = match tag {
        OPERAND_APPEND | OPERAND_APPEND_STAMPED => ListOperand {
            stamped: tag == OPERAND_APPEND_STAMPED,
            expire: None,
            elements: payload,
        },
        OPERAND_EXPIRE_APPEND => {
            // `now ‖ ttl_ms ‖ elements`.
            let (now, rest) = payload.split_first_chunk::<8>().ok_or_else(bad)?;
            let (ttl, elements) = rest.split_first_chunk::<8>().ok_or_else(bad)?;
            ListOperand {
                stamped: true,
                expire: Some((i64::from_be_bytes(*now), u64::from_be_bytes(*ttl))),
                elements,
            }
        }
        _ => return Err(bad()),
    };
    Ok((op, next))
}

/// Splits a concatenation of list merge operands.
pub fn list_operands(raw: &[u8]) -> impl Iterator<Item = Result<ListOperand<'_>, StateError>> {
    let mut rest = raw;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        Some(match take_operand(rest) {
            Ok((op, next)) => {
                rest = next;
                Ok(op)
            }
            Err(e) => {
                rest = &[];
                Err(e)
            }
        })
    })
}

/// Applies list merge operands to a stored list (`existing`, plain elements), giving the
/// new stored list.
pub fn apply_list_operands<'a>(
    existing: Option<&[u8]>,
    operands: impl Iterator<Item = &'a [u8]>,
) -> Result<Vec<u8>, StateError> {
    let mut acc: Vec<u8> = existing.map(<[u8]>::to_vec).unwrap_or_default();
    let mut kept = Vec::new();
    for raw in operands {
        for op in list_operands(raw) {
            let op = op?;
            if let Some((now, ttl_ms)) = op.expire {
                let cfg = statekit_core::TtlConfig::new(ttl_ms);
                kept.clear();
                let mut dropped = false;
                for e in ListElements::new(&acc, true) {
                    let (ts, e) = e?;
                    if cfg.is_expired(ts, now) {
                        dropped = true;
                    } else {
                        push_element(&mut kept, Some(ts), e);
                    }
                }
                if dropped {
                    std::mem::swap(&mut acc, &mut kept);
                }
            }
            acc.extend_from_slice(op.elements);
        }
    }
    Ok(acc)
}

/// Full merge of the list merge operator: the stored list after the operands.
pub(crate) fn list_full_merge(
    _key: &[u8],
    existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    match apply_list_operands(existing, operands.iter()) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(error = %e, "list merge failed");
            None
        }
    }
}

/// Partial merge of the list merge operator: operands are self-delimiting, so combining
/// them is concatenating them (associative, order kept).
pub(crate) fn list_partial_merge(
    _key: &[u8],
    _existing: Option<&[u8]>,
    operands: &rocksdb::MergeOperands,
) -> Option<Vec<u8>> {
    let len = operands.iter().map(<[u8]>::len).sum::<usize>();
    let mut out = Vec::with_capacity(len);
    for op in operands.iter() {
        out.extend_from_slice(op);
    }
    Some(out)
}

/// Name of the list merge operator, recorded by RocksDB in its OPTIONS file.
pub const MERGE_OPERATOR_NAME: &str = "statekit-list-v1";
