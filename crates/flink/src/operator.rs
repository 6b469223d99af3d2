//! Operator (non-keyed) state of one subtask: list, union and broadcast states, read from
//! an operator state stream and the element offsets `_metadata` records for it.
//!
//! Layout (`docs/flink-format.md` §"Operator state"): the operator proxy (states with
//! their distribution mode and element serializer, then the broadcast states with key and
//! value serializers), then the data. A list state's elements lie back to back, one offset
//! per element; a broadcast state has one offset, where `i32 size` and `size` (key, value)
//! pairs begin. With compression (proxy version 6), each offset starts a Snappy frame
//! stream of its own.

use crate::error::FlinkError;
use crate::input::Input;
use crate::meta::{decode_operator_proxy, OperatorProxy, StateMeta};
use crate::metadata::{DistributionMode, OperatorStateHandle};
use crate::problem::DecodeProblem;
use crate::serializer::FlinkType;
use crate::value::{decodable, schema_of, transcode};
use statekit_core::{OperatorStateData, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot};
use std::collections::BTreeMap;
use std::io::Read;

/// The chunk a Snappy frame stream starts with.
pub(crate) const STREAM_IDENTIFIER: [u8; 10] = [0xff, 0x06, 0x00, 0x00, b's', b'N', b'a', b'P', b'p', b'Y'];

/// Decompressed bytes allowed per compressed byte (Snappy expands at most about 21 times).
const MAX_EXPANSION: u64 = 32;

/// Reads the operator states of one subtask from `bytes`, the whole stream of `handle`
/// (`file` names it in errors). States come in the handle's order; list elements and
/// broadcast entries are transcoded to statekit's value encoding where statekit decodes
/// their type (otherwise they are Flink's bytes, schema `bytes`).
pub fn read_operator_state(
    bytes: &[u8],
    handle: &OperatorStateHandle,
    file: &str,
) -> Result<OperatorStateSnapshot, FlinkError> {
    let proxy = decode_operator_proxy(bytes, file)?;
    let mut all: Vec<u64> = handle.states.iter().flat_map(|p| p.offsets.iter().copied()).collect();
    all.sort_unstable();
    all.dedup();
    let end_of = |off: u64| -> u64 { all.iter().copied().find(|&o| o > off).unwrap_or(bytes.len() as u64) };
    let reader = Reader {
        bytes,
        file,
        proxy: &proxy,
    };
    let mut out = OperatorStateSnapshot::default();
    for part in &handle.states {
        let meta = reader.meta(&part.name, part.mode)?;
        match part.mode {
            DistributionMode::SplitDistribute | DistributionMode::Union => {
                let t = meta.serializer("VALUE_SERIALIZER").ok_or_else(|| {
                    reader.corrupt(
                        proxy.len,
                        &part.name,
                        "a list state without an element serializer".into(),
                    )
                })?;
                let mut elements = Vec::with_capacity(part.offsets.len());
                for &off in &part.offsets {
                    let data = reader.region(off, end_of(off), &part.name)?;
                    let mut i = Input::new(&data, file);
                    let mut e = Vec::new();
                    transcode(t, &mut i, &mut e)
                        .map_err(|r| reader.corrupt(off as usize, &part.name, r.in_part("element").to_string()))?;
                    elements.push(e);
                }
                out.states.push((
                    OperatorStateDescriptor {
                        name: part.name.clone(),
                        mode: if part.mode == DistributionMode::Union {
                            OperatorStateMode::Union
                        } else {
                            OperatorStateMode::List
                        },
                        value_schema: schema_of(t),
                        key_schema: None,
                    },
                    OperatorStateData::List(elements),
                ));
            }
            DistributionMode::Broadcast => {
                let missing =
                    |role: &str| reader.corrupt(proxy.len, &part.name, format!("a broadcast state without a {role}"));
                let kt = meta
                    .serializer("KEY_SERIALIZER")
                    .ok_or_else(|| missing("key serializer"))?;
                let vt = meta
                    .serializer("VALUE_SERIALIZER")
                    .ok_or_else(|| missing("value serializer"))?;
                let mut map = BTreeMap::new();
                // One offset, or none when the state is empty.
                for &off in &part.offsets {
                    let data = reader.region(off, end_of(off), &part.name)?;
                    read_broadcast(&data, kt, vt, &mut map)
                        .map_err(|r| reader.corrupt(off as usize, &part.name, r.to_string()))?;
                }
                out.states.push((
                    OperatorStateDescriptor {
                        name: part.name.clone(),
                        mode: OperatorStateMode::Broadcast,
                        value_schema: schema_of(vt),
                        key_schema: Some(schema_of(kt)),
                    },
                    OperatorStateData::Broadcast(map),
                ));
            }
        }
    }
    Ok(out)
}

fn read_broadcast(
    data: &[u8],
    kt: &FlinkType,
    vt: &FlinkType,
    map: &mut BTreeMap<Vec<u8>, Vec<u8>>,
) -> Result<(), DecodeProblem> {
    let mut i = Input::new(data, "");
    let n = i.items("broadcast state size", 1)?;
    if n > 0 && !decodable(kt) {
        return Err(DecodeProblem::BroadcastKeys { type_name: kt.name() });
    }
    if n > 1 && !decodable(vt) {
        return Err(DecodeProblem::BroadcastValues { type_name: vt.name() });
    }
    for _ in 0..n {
        let mut k = Vec::new();
        transcode(kt, &mut i, &mut k).map_err(|e| e.in_part("key"))?;
        let mut v = Vec::new();
        transcode(vt, &mut i, &mut v).map_err(|e| e.in_part("value"))?;
        map.insert(k, v);
    }
    Ok(())
}

struct Reader<'a> {
    bytes: &'a [u8],
    file: &'a str,
    proxy: &'a OperatorProxy,
}

impl Reader<'_> {
    fn corrupt(&self, offset: usize, state: &str, reason: String) -> FlinkError {
        FlinkError::Corrupt {
            file: self.file.to_string(),
            offset: offset as u64,
            field: format!("operator state {state:?}"),
            reason,
        }
    }

    /// The meta info of state `name`, from the list or the broadcast part of the head.
    fn meta(&self, name: &str, mode: DistributionMode) -> Result<&StateMeta, FlinkError> {
        let list = if mode == DistributionMode::Broadcast {
            &self.proxy.broadcast
        } else {
            &self.proxy.states
        };
        list.iter().find(|m| m.name == name).ok_or_else(|| {
            self.corrupt(
                0,
                name,
                format!("_metadata lists it ({}), the stream's head does not", mode.name()),
            )
        })
    }

    /// The bytes of one element or broadcast state: `[start, end)` of the stream,
    /// decompressed when the stream is.
    fn region(&self, start: u64, end: u64, state: &str) -> Result<Vec<u8>, FlinkError> {
        let len = self.bytes.len() as u64;
        if start < self.proxy.len as u64 || start >= len || end > len || end < start {
            return Err(self.corrupt(
                start as usize,
                state,
                format!("offset {start} is outside the state data [{}, {len})", self.proxy.len),
            ));
        }
        let raw = self.bytes.get(start as usize..end as usize).unwrap_or(&[]);
        if !self.proxy.compressed {
            return Ok(raw.to_vec());
        }
        unsnap(raw, self.file, start)
    }
}

/// Decompresses a Snappy frame stream (xerial's `SnappyFramedOutputStream`, the framing
/// format of the Snappy project) that starts at `offset` of `file`.
///
/// An operator state stream is one frame stream from its head on, and an element's offset
/// points at a chunk inside it: such a part is read as if the stream identifier preceded it.
pub(crate) fn unsnap(raw: &[u8], file: &str, offset: u64) -> Result<Vec<u8>, FlinkError> {
    let mut out = Vec::new();
    let cap = (raw.len() as u64).saturating_mul(MAX_EXPANSION).saturating_add(1 << 16);
    let ident: &[u8] = if raw.starts_with(&STREAM_IDENTIFIER) {
        &[]
    } else {
        &STREAM_IDENTIFIER
    };
    let mut d = snap::read::FrameDecoder::new(ident.chain(raw)).take(cap);
    d.read_to_end(&mut out).map_err(|e| FlinkError::Corrupt {
        file: file.to_string(),
        offset,
        field: "Snappy frames".into(),
        reason: e.to_string(),
    })?;
    Ok(out)
}
