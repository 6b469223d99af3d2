//! Encoding and decoding of `_metadata` (`docs/format.md` §"The `_metadata` file").
#![deny(clippy::indexing_slicing)]

use crate::container::{check_magic_and_version, FORMAT_VERSION};
use crate::error::FormatError;
use crate::metadata::{
    ChangelogKeyedHandle, FileRef, FileScope, KeyGroupStats, KeyedHandle, KeyedStats, LogSegmentRef, MaterializedPart,
    NativeFile, NativeKeyedHandle, NativeStateStats, NativeStats, OperatorMetadata, SnapshotFormat, SnapshotKind,
    SnapshotMetadata, SubtaskMetadata,
};
use crate::wire::{
    get_operator_descriptor, get_state_descriptor, le_u32, put_operator_descriptor, put_state_descriptor, put_str,
    put_u32, put_u64, Cursor, Result,
};
use crate::StateStats;
use statekit_core::schema::put_varint;
use statekit_core::storage::{check_path, Storage};
use statekit_core::{KeyGroupRange, KeyGroupScheme, OperatorId};
use std::collections::BTreeMap;

/// Magic of `_metadata`.
pub(crate) const METADATA_MAGIC: [u8; 4] = *b"SKMD";
const PREFIX_LEN: usize = 16;

const SUBTASK_FINISHED: u8 = 1;
const SUBTASK_HAS_KEYED: u8 = 2;
const SUBTASK_HAS_OPERATOR: u8 = 4;
const SUBTASK_HAS_KEYED_STATS: u8 = 8;
const SUBTASK_HAS_NATIVE: u8 = 16;
const SUBTASK_HAS_CHANGELOG: u8 = 32;
const PART_HAS_STATS: u8 = 1;
const OPERATOR_FINISHED: u8 = 1;
/// The operator's keys are in Apache Flink's key groups (`KeyGroupScheme::Flink`); clear:
/// statekit's. Files written before the bit existed never set it, and read as statekit's.
const OPERATOR_FLINK_KEY_GROUPS: u8 = 2;

/// Absolute offsets of the records of a decoded `_metadata`, for messages about them.
#[derive(Clone, Debug, Default)]
pub(crate) struct MetadataOffsets {
    /// Offset of each operator record.
    pub operators: Vec<u64>,
    /// Offset of each subtask record, per operator.
    pub subtasks: Vec<Vec<u64>>,
}

/// Encodes `_metadata`: magic, version, flags, body length, body, CRC32.
pub fn encode_metadata(meta: &SnapshotMetadata) -> Vec<u8> {
    let mut body = Vec::with_capacity(256);
    body.push(match meta.kind {
        SnapshotKind::Checkpoint => 0,
        SnapshotKind::Savepoint => 1,
    });
    body.push(match meta.format {
        SnapshotFormat::Canonical => 0,
        SnapshotFormat::Native => 1,
        SnapshotFormat::Changelog => 2,
    });
    put_u64(&mut body, meta.checkpoint_id);
    put_str(&mut body, &meta.job_id);
    put_u64(&mut body, meta.timestamp_ms as u64);
    put_varint(&mut body, meta.properties.len() as u64);
    for (k, v) in &meta.properties {
        put_str(&mut body, k);
        put_str(&mut body, v);
    }
    put_varint(&mut body, meta.operators.len() as u64);
    for op in &meta.operators {
        put_str(&mut body, &op.uid);
        body.extend_from_slice(op.operator_id.as_bytes());
        put_u32(&mut body, op.parallelism);
        put_u32(&mut body, op.max_parallelism);
        let mut flags = 0;
        if op.finished {
            flags |= OPERATOR_FINISHED;
        }
        if op.key_group_scheme == KeyGroupScheme::Flink {
            flags |= OPERATOR_FLINK_KEY_GROUPS;
        }
        body.push(flags);
        put_varint(&mut body, op.keyed_states.len() as u64);
        for d in &op.keyed_states {
            put_state_descriptor(&mut body, d);
        }
        put_varint(&mut body, op.operator_states.len() as u64);
        for d in &op.operator_states {
            put_operator_descriptor(&mut body, d);
        }
        put_varint(&mut body, op.subtasks.len() as u64);
        for st in &op.subtasks {
            put_u32(&mut body, st.index);
            put_u32(
                &mut body,
                if st.key_groups.is_empty() {
                    0
                } else {
                    st.key_groups.start()
                },
            );
            put_u32(
                &mut body,
                if st.key_groups.is_empty() {
                    0
                } else {
                    st.key_groups.end_exclusive()
                },
            );
            let mut flags = 0;
            if st.finished {
                flags |= SUBTASK_FINISHED;
            }
            flags |= match &st.keyed {
                KeyedHandle::None => 0,
                KeyedHandle::Canonical(_) => SUBTASK_HAS_KEYED,
                KeyedHandle::Native(_) => SUBTASK_HAS_NATIVE,
                KeyedHandle::Changelog(_) => SUBTASK_HAS_CHANGELOG,
            };
            if st.operator.is_some() {
                flags |= SUBTASK_HAS_OPERATOR;
            }
            if st.keyed_stats.is_some() {
                flags |= SUBTASK_HAS_KEYED_STATS;
            }
            body.push(flags);
            for f in [st.keyed.canonical(), st.operator.as_ref()].into_iter().flatten() {
                put_file_ref(&mut body, f);
            }
            if let Some(ks) = &st.keyed_stats {
                put_keyed_stats(&mut body, ks);
            }
            if let Some(n) = st.keyed.native() {
                put_native_handle(&mut body, n);
            }
            if let Some(c) = st.keyed.changelog() {
                put_changelog_handle(&mut body, c);
            }
        }
    }
    let mut out = Vec::with_capacity(PREFIX_LEN + body.len() + 4);
    out.extend_from_slice(&METADATA_MAGIC);
    put_u32(&mut out, FORMAT_VERSION);
    put_u32(&mut out, 0);
    // A body over 4 GiB cannot be described; such metadata is far beyond any real snapshot
    // and the decoder rejects the truncated length.
    put_u32(&mut out, u32::try_from(body.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(&body);
    let crc = crc32fast::hash(&out);
    put_u32(&mut out, crc);
    out
}

/// Decodes `_metadata`; `file` names it in errors.
pub fn decode_metadata(bytes: &[u8], file: &str) -> std::result::Result<SnapshotMetadata, FormatError> {
    decode_with_offsets(bytes, file).map(|(m, _)| m)
}

/// Reads and decodes the `_metadata` file at `path` of `storage`, and checks it for
/// structural problems ([`crate::check_metadata`]): what it returns is safe to act on.
pub fn read_metadata(storage: &dyn Storage, path: &str) -> std::result::Result<SnapshotMetadata, FormatError> {
    let blob = storage.open(path)?;
    let file = storage.describe(path);
    let r = crate::verify::check_metadata(blob.bytes(), &file);
    if r.is_err() {
        statekit_core::storage::check_intact(blob.as_ref(), &file)?;
    }
    r
}

/// Encodes `meta` and writes it atomically to `path` of `storage`; returns the size.
pub fn write_metadata(
    storage: &dyn Storage,
    path: &str,
    meta: &SnapshotMetadata,
) -> std::result::Result<u64, FormatError> {
    Ok(storage.put_atomic(path, &encode_metadata(meta))?)
}

pub(crate) fn decode_with_offsets(bytes: &[u8], file: &str) -> Result<(SnapshotMetadata, MetadataOffsets)> {
    check_magic_and_version(bytes, file, &METADATA_MAGIC, "metadata")?;
    let size = bytes.len() as u64;
    if bytes.len() < PREFIX_LEN + 4 {
        return Err(FormatError::corrupt(
            file,
            size,
            "file size",
            format!("{size} bytes is too short; truncated?"),
        ));
    }
    let flags = le_u32(bytes, 8).unwrap_or(0);
    if flags != 0 {
        return Err(FormatError::corrupt(
            file,
            8,
            "flags",
            format!("unknown feature flags {flags:#x}"),
        ));
    }
    let body_len = u64::from(le_u32(bytes, 12).unwrap_or(0));
    let expected = PREFIX_LEN as u64 + body_len + 4;
    if expected != size {
        return Err(FormatError::corrupt(
            file,
            12,
            "body_len",
            format!(
                "body of {body_len} bytes means a {expected}-byte file, but it has {size} bytes ({})",
                if size < expected { "truncated" } else { "trailing data" }
            ),
        ));
    }
    let crc_pos = bytes.len() - 4;
    // At least `PREFIX_LEN + 4` bytes (checked above): the prefix, the body and the CRC.
    let (Some((covered, crc)), Some(body)) = (bytes.split_last_chunk::<4>(), bytes.get(PREFIX_LEN..crc_pos)) else {
        return Err(FormatError::corrupt(
            file,
            size,
            "file size",
            format!("{size} bytes is too short; truncated?"),
        ));
    };
    let stored = u32::from_le_bytes(*crc);
    let actual = crc32fast::hash(covered);
    if stored != actual {
        return Err(FormatError::corrupt(
            file,
            crc_pos as u64,
            "crc32",
            format!("checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"),
        ));
    }
    let mut c = Cursor::new(body, PREFIX_LEN as u64, file);
    let mut offsets = MetadataOffsets::default();
    let at = c.offset();
    let kind = match c.u8("kind")? {
        0 => SnapshotKind::Checkpoint,
        1 => SnapshotKind::Savepoint,
        k => return Err(c.err_at(at, "kind", format!("unknown snapshot kind {k}"))),
    };
    let at = c.offset();
    let format = match c.u8("format")? {
        0 => SnapshotFormat::Canonical,
        1 => SnapshotFormat::Native,
        2 => SnapshotFormat::Changelog,
        k => return Err(c.err_at(at, "format", format!("unknown snapshot format {k}"))),
    };
    let checkpoint_id = c.u64("checkpoint_id")?;
    let job_id = c.string("job_id")?;
    let timestamp_ms = c.i64("timestamp_ms")?;
    let n = c.count("properties.count")?;
    let mut properties = BTreeMap::new();
    let mut last: Option<String> = None;
    for i in 0..n {
        let at = c.offset();
        let k = c.string(&format!("properties[{i}].key"))?;
        let v = c.string(&format!("properties[{i}].value"))?;
        if last.as_ref().is_some_and(|l| *l >= k) {
            return Err(c.err_at(
                at,
                &format!("properties[{i}].key"),
                format!("key {k:?} is not in strictly ascending order"),
            ));
        }
        last = Some(k.clone());
        properties.insert(k, v);
    }
    let n = c.count("operators.count")?;
    let mut operators = Vec::with_capacity(n);
    for i in 0..n {
        offsets.operators.push(c.offset());
        let f = |s: &str| format!("operators[{i}].{s}");
        let uid = c.string(&f("uid"))?;
        let id = c.take(16, &f("operator_id"))?;
        let mut operator_id = [0u8; 16];
        operator_id.copy_from_slice(id);
        let parallelism = c.u32(&f("parallelism"))?;
        let max_parallelism = c.u32(&f("max_parallelism"))?;
        let op_flags = c.flags(OPERATOR_FINISHED | OPERATOR_FLINK_KEY_GROUPS, &f("flags"))?;
        let finished = op_flags & OPERATOR_FINISHED != 0;
        let key_group_scheme = if op_flags & OPERATOR_FLINK_KEY_GROUPS != 0 {
            KeyGroupScheme::Flink
        } else {
            KeyGroupScheme::Statekit
        };
        let nk = c.count(&f("keyed_states.count"))?;
        let mut keyed_states = Vec::with_capacity(nk);
        for j in 0..nk {
            keyed_states.push(get_state_descriptor(&mut c, &f(&format!("keyed_states[{j}]")))?);
        }
        let no = c.count(&f("operator_states.count"))?;
        let mut operator_states = Vec::with_capacity(no);
        for j in 0..no {
            operator_states.push(get_operator_descriptor(&mut c, &f(&format!("operator_states[{j}]")))?);
        }
        let ns = c.count(&f("subtasks.count"))?;
        let mut subtasks = Vec::with_capacity(ns);
        let mut sub_offsets = Vec::with_capacity(ns);
        for j in 0..ns {
            sub_offsets.push(c.offset());
            let g = |s: &str| format!("operators[{i}].subtasks[{j}].{s}");
            let index = c.u32(&g("index"))?;
            let at = c.offset();
            let start = c.u32(&g("key_group_start"))?;
            let end = c.u32(&g("key_group_end"))?;
            let key_groups = if start == 0 && end == 0 {
                KeyGroupRange::EMPTY
            } else if start < end {
                KeyGroupRange::new(start, end - 1)
            } else {
                return Err(c.err_at(
                    at,
                    &g("key_groups"),
                    format!("[{start}, {end}) is not a valid key group range"),
                ));
            };
            let flags = c.flags(
                SUBTASK_FINISHED
                    | SUBTASK_HAS_KEYED
                    | SUBTASK_HAS_OPERATOR
                    | SUBTASK_HAS_KEYED_STATS
                    | SUBTASK_HAS_NATIVE
                    | SUBTASK_HAS_CHANGELOG,
                &g("flags"),
            )?;
            let keyed_kinds = [SUBTASK_HAS_KEYED, SUBTASK_HAS_NATIVE, SUBTASK_HAS_CHANGELOG]
                .iter()
                .filter(|b| flags & **b != 0)
                .count();
            if keyed_kinds > 1 {
                return Err(c.err_at(
                    at + 8,
                    &g("flags"),
                    "more than one of a keyed data file, a native handle and a changelog handle".to_string(),
                ));
            }
            let keyed = if flags & SUBTASK_HAS_KEYED != 0 {
                Some(get_file_ref(&mut c, &g("keyed"))?)
            } else {
                None
            };
            let operator = if flags & SUBTASK_HAS_OPERATOR != 0 {
                Some(get_file_ref(&mut c, &g("operator"))?)
            } else {
                None
            };
            let keyed_stats = if flags & SUBTASK_HAS_KEYED_STATS != 0 {
                Some(get_keyed_stats(&mut c, &g("keyed_stats"))?)
            } else {
                None
            };
            // At most one of the three (checked above), in the order they are written.
            let keyed = match keyed {
                Some(f) => KeyedHandle::Canonical(f),
                None if flags & SUBTASK_HAS_NATIVE != 0 => {
                    KeyedHandle::Native(get_native_handle(&mut c, &g("native"))?)
                }
                None if flags & SUBTASK_HAS_CHANGELOG != 0 => {
                    KeyedHandle::Changelog(get_changelog_handle(&mut c, &g("changelog"))?)
                }
                None => KeyedHandle::None,
            };
            subtasks.push(SubtaskMetadata {
                index,
                key_groups,
                finished: flags & SUBTASK_FINISHED != 0,
                keyed,
                keyed_stats,
                operator,
            });
        }
        offsets.subtasks.push(sub_offsets);
        operators.push(OperatorMetadata {
            uid,
            operator_id: OperatorId(operator_id),
            parallelism,
            max_parallelism,
            finished,
            key_group_scheme,
            keyed_states,
            operator_states,
            subtasks,
        });
    }
    c.finish("body")?;
    Ok((
        SnapshotMetadata {
            kind,
            format,
            checkpoint_id,
            job_id,
            timestamp_ms,
            properties,
            operators,
        },
        offsets,
    ))
}

fn put_keyed_stats(out: &mut Vec<u8>, ks: &KeyedStats) {
    put_varint(out, ks.entries);
    put_varint(out, ks.raw_bytes);
    put_varint(out, ks.states.len() as u64);
    for st in &ks.states {
        put_str(out, &st.name);
        put_varint(out, st.entries);
        put_varint(out, st.raw_bytes);
    }
    put_varint(out, ks.key_groups.len() as u64);
    for kg in &ks.key_groups {
        put_varint(out, u64::from(kg.key_group));
        put_varint(out, kg.stored_bytes);
        put_varint(out, kg.entries);
    }
}

fn get_keyed_stats(c: &mut Cursor<'_>, field: &str) -> Result<KeyedStats> {
    let entries = c.varint(&format!("{field}.entries"))?;
    let raw_bytes = c.varint(&format!("{field}.raw_bytes"))?;
    let n = c.count(&format!("{field}.states.count"))?;
    let mut states = Vec::with_capacity(n);
    for j in 0..n {
        states.push(StateStats {
            name: c.string(&format!("{field}.states[{j}].name"))?,
            entries: c.varint(&format!("{field}.states[{j}].entries"))?,
            raw_bytes: c.varint(&format!("{field}.states[{j}].raw_bytes"))?,
        });
    }
    let n = c.count(&format!("{field}.key_groups.count"))?;
    let mut key_groups: Vec<KeyGroupStats> = Vec::with_capacity(n);
    for j in 0..n {
        let at = c.offset();
        let kg = c.varint(&format!("{field}.key_groups[{j}].key_group"))?;
        let key_group = u32::try_from(kg)
            .ok()
            .filter(|kg| key_groups.last().is_none_or(|prev| prev.key_group < *kg))
            .ok_or_else(|| {
                c.err_at(
                    at,
                    &format!("{field}.key_groups[{j}].key_group"),
                    format!("key group {kg} is not ascending or out of range"),
                )
            })?;
        key_groups.push(KeyGroupStats {
            key_group,
            stored_bytes: c.varint(&format!("{field}.key_groups[{j}].stored_bytes"))?,
            entries: c.varint(&format!("{field}.key_groups[{j}].entries"))?,
        });
    }
    Ok(KeyedStats {
        entries,
        raw_bytes,
        states,
        key_groups,
    })
}

fn put_file_ref(out: &mut Vec<u8>, f: &FileRef) {
    out.push(match f.scope {
        FileScope::Exclusive => 0,
        FileScope::Shared => 1,
        FileScope::Absolute => 2,
        FileScope::Url => 3,
    });
    put_str(out, &f.path);
    put_u64(out, f.size);
}

/// True for `scheme://bucket/key`: a lowercase scheme of letters, digits, `+`, `-`, `.`, a
/// bucket without `/`, and a key that is a clean relative path.
pub(crate) fn is_clean_url(url: &str) -> bool {
    let Some((scheme, rest)) = url.split_once("://") else {
        return false;
    };
    let scheme_ok = scheme.starts_with(|c: char| c.is_ascii_lowercase())
        && scheme
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '+' | '-' | '.'));
    let Some((bucket, key)) = rest.split_once('/') else {
        return false;
    };
    scheme_ok && !bucket.is_empty() && !key.is_empty() && check_path(key).is_ok()
}

/// True for an absolute `/`-separated path without `.`, `..` or empty components.
pub(crate) fn is_clean_absolute_path(path: &str) -> bool {
    path.strip_prefix('/')
        .is_some_and(|rest| !rest.is_empty() && check_path(rest).is_ok())
}

fn get_file_ref(c: &mut Cursor<'_>, field: &str) -> Result<FileRef> {
    let at = c.offset();
    let scope = match c.u8(&format!("{field}.scope"))? {
        0 => FileScope::Exclusive,
        1 => FileScope::Shared,
        2 => FileScope::Absolute,
        3 => FileScope::Url,
        s => return Err(c.err_at(at, &format!("{field}.scope"), format!("unknown file scope {s}"))),
    };
    let at = c.offset();
    let path = c.string(&format!("{field}.path"))?;
    if scope == FileScope::Url {
        if !is_clean_url(&path) {
            return Err(c.err_at(
                at,
                &format!("{field}.path"),
                format!(
                    "{path:?} is not an object-store URL (scheme://bucket/key, no '.', '..' or empty key components)"
                ),
            ));
        }
    } else if scope == FileScope::Absolute {
        if !is_clean_absolute_path(&path) {
            return Err(c.err_at(
                at,
                &format!("{field}.path"),
                format!("{path:?} is not an absolute '/'-separated path without '.', '..' or empty components"),
            ));
        }
    } else if path.is_empty() || check_path(&path).is_err() {
        return Err(c.err_at(
            at,
            &format!("{field}.path"),
            format!("{path:?} is not a relative '/'-separated path without '.', '..' or empty components"),
        ));
    }
    let size = c.u64(&format!("{field}.size"))?;
    Ok(FileRef { scope, path, size })
}

fn put_native_handle(out: &mut Vec<u8>, n: &NativeKeyedHandle) {
    put_str(out, &n.backend);
    put_str(out, &n.layout);
    put_str(out, &n.backend_id);
    put_u64(out, n.checkpoint_id);
    put_u64(out, n.clock_ms as u64);
    put_varint(out, n.files.len() as u64);
    for f in &n.files {
        put_str(out, &f.name);
        put_file_ref(out, &f.file);
        put_u32(out, f.crc32);
    }
    put_varint(out, n.uploaded_bytes);
    put_varint(out, n.stats.states.len() as u64);
    for s in &n.stats.states {
        put_str(out, &s.name);
        put_varint(out, s.bytes);
        put_varint(out, s.estimated_keys);
    }
    put_varint(out, n.stats.key_groups.len() as u64);
    for (kg, bytes) in &n.stats.key_groups {
        put_varint(out, u64::from(*kg));
        put_varint(out, *bytes);
    }
}

/// True for a plain file name: non-empty, no slash, backslash or NUL, and not `.` or `..`.
fn is_plain_file_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

fn get_native_handle(c: &mut Cursor<'_>, field: &str) -> Result<NativeKeyedHandle> {
    let backend = c.string(&format!("{field}.backend"))?;
    let layout = c.string(&format!("{field}.layout"))?;
    let backend_id = c.string(&format!("{field}.backend_id"))?;
    let checkpoint_id = c.u64(&format!("{field}.checkpoint_id"))?;
    let clock_ms = c.i64(&format!("{field}.clock_ms"))?;
    let n = c.count(&format!("{field}.files.count"))?;
    let mut files: Vec<NativeFile> = Vec::with_capacity(n);
    for j in 0..n {
        let at = c.offset();
        let name = c.string(&format!("{field}.files[{j}].name"))?;
        if !is_plain_file_name(&name) {
            return Err(c.err_at(
                at,
                &format!("{field}.files[{j}].name"),
                format!("{name:?} is not a plain file name"),
            ));
        }
        if files.iter().any(|f| f.name == name) {
            return Err(c.err_at(
                at,
                &format!("{field}.files[{j}].name"),
                format!("{name:?} appears twice"),
            ));
        }
        let file = get_file_ref(c, &format!("{field}.files[{j}].file"))?;
        let crc32 = c.u32(&format!("{field}.files[{j}].crc32"))?;
        files.push(NativeFile { name, file, crc32 });
    }
    let uploaded_bytes = c.varint(&format!("{field}.uploaded_bytes"))?;
    let n = c.count(&format!("{field}.stats.states.count"))?;
    let mut states = Vec::with_capacity(n);
    for j in 0..n {
        states.push(NativeStateStats {
            name: c.string(&format!("{field}.stats.states[{j}].name"))?,
            bytes: c.varint(&format!("{field}.stats.states[{j}].bytes"))?,
            estimated_keys: c.varint(&format!("{field}.stats.states[{j}].estimated_keys"))?,
        });
    }
    let n = c.count(&format!("{field}.stats.key_groups.count"))?;
    let mut key_groups: Vec<(u32, u64)> = Vec::with_capacity(n);
    for j in 0..n {
        let at = c.offset();
        let kg = c.varint(&format!("{field}.stats.key_groups[{j}].key_group"))?;
        let key_group = u32::try_from(kg)
            .ok()
            .filter(|kg| key_groups.last().is_none_or(|prev| prev.0 < *kg))
            .ok_or_else(|| {
                c.err_at(
                    at,
                    &format!("{field}.stats.key_groups[{j}].key_group"),
                    format!("key group {kg} is not ascending or out of range"),
                )
            })?;
        let bytes = c.varint(&format!("{field}.stats.key_groups[{j}].bytes"))?;
        key_groups.push((key_group, bytes));
    }
    Ok(NativeKeyedHandle {
        backend,
        layout,
        backend_id,
        checkpoint_id,
        clock_ms,
        files,
        uploaded_bytes,
        stats: NativeStats { states, key_groups },
    })
}

fn put_range(out: &mut Vec<u8>, r: &KeyGroupRange) {
    let (a, b) = if r.is_empty() {
        (0, 0)
    } else {
        (r.start(), r.end_exclusive())
    };
    put_u32(out, a);
    put_u32(out, b);
}

fn get_range(c: &mut Cursor<'_>, field: &str) -> Result<KeyGroupRange> {
    let at = c.offset();
    let start = c.u32(&format!("{field}.start"))?;
    let end = c.u32(&format!("{field}.end"))?;
    if start == 0 && end == 0 {
        Ok(KeyGroupRange::EMPTY)
    } else if start < end {
        Ok(KeyGroupRange::new(start, end - 1))
    } else {
        Err(c.err_at(at, field, format!("[{start}, {end}) is not a valid key group range")))
    }
}

fn put_changelog_handle(out: &mut Vec<u8>, h: &ChangelogKeyedHandle) {
    out.extend_from_slice(&h.log);
    put_u64(out, h.materialization_id);
    put_varint(out, h.materialized.len() as u64);
    for m in &h.materialized {
        put_file_ref(out, &m.file);
        put_range(out, &m.key_groups);
        out.push(if m.stats.is_some() { PART_HAS_STATS } else { 0 });
        if let Some(s) = &m.stats {
            put_keyed_stats(out, s);
        }
    }
    put_varint(out, h.tail.len() as u64);
    for t in &h.tail {
        put_file_ref(out, &t.file);
        put_varint(out, t.offset);
        put_varint(out, t.length);
        out.extend_from_slice(&t.log);
        put_varint(out, t.sqn);
        put_varint(out, u64::from(t.records));
        put_range(out, &t.key_groups);
    }
}

fn get_changelog_handle(c: &mut Cursor<'_>, field: &str) -> Result<ChangelogKeyedHandle> {
    let mut log = [0u8; 16];
    log.copy_from_slice(c.take(16, &format!("{field}.log"))?);
    let materialization_id = c.u64(&format!("{field}.materialization_id"))?;
    let n = c.count(&format!("{field}.materialized.count"))?;
    let mut materialized = Vec::with_capacity(n);
    for j in 0..n {
        let f = |s: &str| format!("{field}.materialized[{j}].{s}");
        let file = get_file_ref(c, &f("file"))?;
        let key_groups = get_range(c, &f("key_groups"))?;
        let flags = c.flags(PART_HAS_STATS, &f("flags"))?;
        let stats = if flags & PART_HAS_STATS != 0 {
            Some(get_keyed_stats(c, &f("stats"))?)
        } else {
            None
        };
        materialized.push(MaterializedPart {
            file,
            key_groups,
            stats,
        });
    }
    let n = c.count(&format!("{field}.tail.count"))?;
    let mut tail = Vec::with_capacity(n);
    for j in 0..n {
        let f = |s: &str| format!("{field}.tail[{j}].{s}");
        let file = get_file_ref(c, &f("file"))?;
        let offset = c.varint(&f("offset"))?;
        let length = c.varint(&f("length"))?;
        let mut log = [0u8; 16];
        log.copy_from_slice(c.take(16, &f("log"))?);
        let sqn = c.varint(&f("sqn"))?;
        let at = c.offset();
        let records = u32::try_from(c.varint(&f("records"))?)
            .map_err(|_| c.err_at(at, &f("records"), "does not fit 32 bits".to_string()))?;
        let key_groups = get_range(c, &f("key_groups"))?;
        tail.push(LogSegmentRef {
            file,
            offset,
            length,
            log,
            sqn,
            records,
            key_groups,
        });
    }
    Ok(ChangelogKeyedHandle {
        log,
        materialization_id,
        materialized,
        tail,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_references_must_be_clean_object_urls() {
        for good in ["s3://b/k", "s3a://bucket-1/dstl/a.skcl", "gs://b/x/y", "az://c/p/q"] {
            assert!(is_clean_url(good), "{good}");
        }
        for bad in [
            "",
            "s3://",
            "s3://b",
            "s3://b/",
            "s3:///k",
            "s3://b/a/../k",
            "s3://b/a//k",
            "S3://b/k",
            "3s://b/k",
            "/local/path",
            "s3:b/k",
        ] {
            assert!(!is_clean_url(bad), "{bad}");
        }
        // A decoded reference: scope 3 with a clean URL reads back; with a bad one it is an
        // error naming the field.
        let mut out = Vec::new();
        let f = FileRef {
            scope: FileScope::Url,
            path: "s3://b/dstl/x".into(),
            size: 7,
        };
        put_file_ref(&mut out, &f);
        let mut c = Cursor::new(&out, 0, "m");
        assert_eq!(get_file_ref(&mut c, "f").expect("url ref"), f);
        let mut bad = Vec::new();
        put_file_ref(
            &mut bad,
            &FileRef {
                path: "s3://b/../x".into(),
                ..f
            },
        );
        let e = get_file_ref(&mut Cursor::new(&bad, 0, "m"), "f").expect_err("bad url");
        assert!(e.to_string().contains("f.path"), "{e}");
    }
}
