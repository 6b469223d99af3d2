//! Operator data files: one subtask's operator (non-keyed) states, one section per state
//! (`docs/format.md` §"Operator data files").
#![deny(clippy::indexing_slicing)]

use crate::block::{BlockDecoder, WriteOptions, BLOCK_HEADER_LEN, CODEC_NONE};
use crate::container::{self, ContainerWriter, OPERATOR};
use crate::error::FormatError;
use crate::metadata::{FileRef, FileScope};
use crate::wire::{check_operator_descriptor, get_operator_descriptor, put_operator_descriptor, Cursor, Result};
use statekit_core::schema::{get_varint, put_varint};
use statekit_core::storage::{Blob, Storage};
use statekit_core::{OperatorStateData, OperatorStateDescriptor, OperatorStateMode, OperatorStateSnapshot};
use std::collections::BTreeMap;

/// Writes one subtask's operator state to a new operator data file at `path` (committed
/// atomically). Returns its [`FileRef`] (scope [`FileScope::Exclusive`], `path` as given).
///
/// List and union states must hold [`OperatorStateData::List`], broadcast states
/// [`OperatorStateData::Broadcast`]; state names must be unique.
pub fn write_operator_file(
    snapshot: &OperatorStateSnapshot,
    storage: &dyn Storage,
    path: &str,
    opts: &WriteOptions,
) -> std::result::Result<FileRef, FormatError> {
    let file = storage.describe(path);
    let mut header = Vec::new();
    put_varint(&mut header, snapshot.states.len() as u64);
    for (i, (d, data)) in snapshot.states.iter().enumerate() {
        check_operator_descriptor(d)?;
        if snapshot.states.iter().take(i).any(|(o, _)| o.name == d.name) {
            return Err(crate::error::WriteProblem::DuplicateOperatorState {
                file: file.to_string(),
                name: d.name.clone(),
            }
            .into());
        }
        let fits = matches!(
            (d.mode, data),
            (OperatorStateMode::Broadcast, OperatorStateData::Broadcast(_))
                | (
                    OperatorStateMode::List | OperatorStateMode::Union,
                    OperatorStateData::List(_)
                )
        );
        if !fits {
            return Err(crate::error::WriteProblem::OperatorStateData {
                file: file.to_string(),
                name: d.name.clone(),
                mode: d.mode,
                holds: if matches!(data, OperatorStateData::List(_)) {
                    "list"
                } else {
                    "broadcast"
                },
            }
            .into());
        }
        put_operator_descriptor(&mut header, d);
    }
    let mut cw = ContainerWriter::create(storage, path, &OPERATOR, &header, opts.compression)?;
    let mut raw = Vec::with_capacity(opts.block_size.min(16 << 20) + 1024);
    let mut entries = 0u32;
    for (i, (_, data)) in snapshot.states.iter().enumerate() {
        cw.begin_section(i as u32);
        let mut push = |raw: &mut Vec<u8>, cw: &mut ContainerWriter, parts: &[&[u8]]| -> Result<()> {
            for p in parts {
                put_varint(raw, p.len() as u64);
                raw.extend_from_slice(p);
            }
            entries += 1;
            if raw.len() >= opts.block_size {
                cw.write_block(raw, entries)?;
                raw.clear();
                entries = 0;
            }
            Ok(())
        };
        match data {
            OperatorStateData::List(items) => {
                for it in items {
                    push(&mut raw, &mut cw, &[it])?;
                }
            }
            OperatorStateData::Broadcast(map) => {
                for (k, v) in map {
                    push(&mut raw, &mut cw, &[k, v])?;
                }
            }
        }
        if entries > 0 {
            cw.write_block(&raw, entries)?;
            raw.clear();
            entries = 0;
        }
        cw.end_section();
    }
    let size = cw.finish(&[])?;
    Ok(FileRef {
        scope: FileScope::Exclusive,
        path: path.to_string(),
        size,
    })
}

/// Reads a whole operator data file, checking every CRC. `expected_size` is the size
/// `_metadata` recorded (a mismatch is reported as corruption).
pub fn read_operator_file(
    storage: &dyn Storage,
    path: &str,
    expected_size: Option<u64>,
) -> std::result::Result<OperatorStateSnapshot, FormatError> {
    let blob = storage.open(path)?;
    let file = storage.describe(path);
    let r = decode_operator_file(blob.as_ref(), &file, expected_size);
    if r.is_err() {
        statekit_core::storage::check_intact(blob.as_ref(), &file)?;
    }
    r
}

/// Decodes an operator data file held in memory; `file` names it in errors.
pub fn decode_operator_file(
    blob: &dyn Blob,
    file: &str,
    expected_size: Option<u64>,
) -> std::result::Result<OperatorStateSnapshot, FormatError> {
    let bytes = blob.bytes();
    let layout = container::parse(bytes, file, &OPERATOR, expected_size)?;
    let mut c = Cursor::new(layout.header_body(bytes, file)?, layout.header_body_offset, file);
    let n = c.count("header.state_count")?;
    let mut descs: Vec<OperatorStateDescriptor> = Vec::with_capacity(n);
    for i in 0..n {
        let d = get_operator_descriptor(&mut c, &format!("header.states[{i}]"))?;
        if descs.iter().any(|o| o.name == d.name) {
            return Err(FormatError::corrupt(
                file,
                layout.header_body_offset,
                "header.states",
                format!("operator state {:?} appears twice", d.name),
            ));
        }
        descs.push(d);
    }
    c.finish("header")?;
    if !layout.index_tail.is_empty() {
        return Err(FormatError::corrupt(
            file,
            layout.index_offset,
            "index",
            "unexpected bytes after the section table",
        ));
    }
    if layout.sections.len() != n || layout.sections.iter().enumerate().any(|(i, s)| s.id as usize != i) {
        return Err(FormatError::corrupt(
            file,
            layout.index_offset,
            "index.sections",
            format!(
                "expected one section per state (0..{n}), found {}",
                layout.sections.len()
            ),
        ));
    }
    let mut dec = BlockDecoder::new();
    let mut states = Vec::with_capacity(n);
    for (d, s) in descs.into_iter().zip(&layout.sections) {
        let broadcast = d.mode == OperatorStateMode::Broadcast;
        let mut list: Vec<Vec<u8>> = Vec::new();
        let mut map: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut last_key: Option<Vec<u8>> = None;
        let (mut blocks, mut entries, mut raw_total) = (0u64, 0u64, 0u64);
        let mut pos = s.offset;
        while pos < s.end() {
            let (h, raw) = dec.read(bytes, pos, s.end(), file)?;
            let err = |p: usize, field: &str, reason: String| {
                if h.codec == CODEC_NONE {
                    FormatError::corrupt(file, h.offset + (BLOCK_HEADER_LEN + p) as u64, field, reason)
                } else {
                    FormatError::corrupt(
                        file,
                        h.offset,
                        field,
                        format!("{reason} (at byte {p} of the decompressed block)"),
                    )
                }
            };
            if h.section != s.id {
                return Err(FormatError::corrupt(
                    file,
                    pos + 8,
                    "block.state",
                    format!("block of state {} inside state {}'s blocks", h.section, s.id),
                ));
            }
            let mut p = 0usize;
            let mut count = 0u32;
            while p < raw.len() {
                let at = p;
                let first = take(raw, &mut p).ok_or_else(|| err(at, "record.length", "bad length".into()))?;
                if broadcast {
                    let at2 = p;
                    let value = take(raw, &mut p).ok_or_else(|| err(at2, "record.value", "bad length".into()))?;
                    if last_key.as_deref().is_some_and(|k| k >= first) {
                        return Err(err(
                            at,
                            "record.key",
                            "broadcast keys are not strictly ascending".into(),
                        ));
                    }
                    last_key = Some(first.to_vec());
                    map.insert(first.to_vec(), value.to_vec());
                } else {
                    list.push(first.to_vec());
                }
                count = count.saturating_add(1);
            }
            if count != h.entries {
                return Err(FormatError::corrupt(
                    file,
                    pos + 12,
                    "block.entries",
                    format!("header says {} records, the block holds {count}", h.entries),
                ));
            }
            blocks += 1;
            entries += u64::from(count);
            raw_total += u64::from(h.raw_len);
            pos += h.total_len();
        }
        if blocks != u64::from(s.blocks) || entries != s.entries || raw_total != s.raw {
            return Err(FormatError::corrupt(
                file,
                s.offset,
                "index.section",
                format!(
                    "state {:?}: index says {} blocks, {} entries, {} raw bytes; the blocks hold {blocks}, {entries}, {raw_total}",
                    d.name, s.blocks, s.entries, s.raw
                ),
            ));
        }
        let data = if broadcast {
            OperatorStateData::Broadcast(map)
        } else {
            OperatorStateData::List(list)
        };
        states.push((d, data));
    }
    Ok(OperatorStateSnapshot { states })
}

fn take<'a>(raw: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let n = usize::try_from(get_varint(raw, pos)?).ok()?;
    let end = pos.checked_add(n)?;
    let s = raw.get(*pos..end)?;
    *pos = end;
    Some(s)
}
