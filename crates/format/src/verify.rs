//! Whole-snapshot verification.

use crate::error::FormatError;
use crate::keyed::KeyedFileReader;
use crate::metadata::SnapshotMetadata;
use crate::metadata::{
    FileRef, FileScope, KeyedStats, NativeFile, OperatorMetadata, SnapshotFormat, SnapshotKind, METADATA_FILE_NAME,
};
use crate::metadata_codec::{decode_with_offsets, MetadataOffsets};
use crate::operator::read_operator_file;
use crate::resolve::FileResolver;
use statekit_core::keygroup::{check_max_parallelism, check_parallelism};
use statekit_core::storage::Storage;
use statekit_core::{KeyGroupRange, KeyedStateView, OperatorStateData};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The result of [`verify_snapshot`].
#[derive(Debug, Default)]
pub struct SnapshotVerifyReport {
    /// Data files read in full (exclusive keyed and operator files).
    pub files: u64,
    /// Bytes of those files plus `_metadata`.
    pub bytes: u64,
    /// Keyed entries plus operator state elements and broadcast entries read.
    pub entries: u64,
    /// Every problem found, each naming its file (and offset where it has one). Empty when
    /// the snapshot is sound.
    pub problems: Vec<FormatError>,
}

impl SnapshotVerifyReport {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Verifies a whole snapshot directory; `storage` is rooted at the directory holding
/// `_metadata`.
///
/// Reads `_metadata`, checks that its operators are consistent (parallelism, subtask indices,
/// key-group ranges inside `[0, max parallelism)` and disjoint, no file referenced twice), then
/// reads every referenced [`FileScope::Exclusive`] file in full: its size must equal the
/// recorded one, every CRC must match and every record must decode; the key groups of a keyed
/// file must lie within its subtask's range and its max parallelism must be the operator's;
/// the states a file names must be among the operator's states, with the same kind and
/// schemas (keyed) or mode (operator). Shared files are outside the directory and are not
/// read.
///
/// Returns `Err` only when `_metadata` itself cannot be read or decoded; every other problem
/// is collected in [`SnapshotVerifyReport::problems`].
///
/// Files of native keyed handles ([`crate::NativeKeyedHandle`]) are checked for size and
/// CRC32; their content is the backend's (the backend crate verifies it).
pub fn verify_snapshot(storage: &dyn Storage) -> Result<SnapshotVerifyReport, FormatError> {
    verify_impl(storage, None)
}

/// [`verify_snapshot`], also reading the shared and absolute files the snapshot references
/// (resolved by `resolver`, whose snapshot storage is the one verified). A reference that
/// does not resolve is a problem.
pub fn verify_snapshot_files(resolver: &FileResolver) -> Result<SnapshotVerifyReport, FormatError> {
    verify_impl(resolver.snapshot().as_ref(), Some(resolver))
}

/// A located file: the storage holding it (`None`: the verified storage itself) and its path.
type Located = (Option<Arc<dyn Storage>>, String);

/// Where `file` is: `(None, path)` for an exclusive file (read from the verified storage
/// itself), `(Some(storage), path)` for one found through `resolver`; `None` when it lives
/// outside the snapshot and there is no resolver (it is then not read).
fn locate(resolver: Option<&FileResolver>, file: &FileRef) -> Option<Result<Located, FormatError>> {
    match (file.scope, resolver) {
        (FileScope::Exclusive, _) => Some(Ok((None, file.path.clone()))),
        (_, None) => None,
        (_, Some(r)) => Some(r.resolve(file).map(|(s, p)| (Some(s), p))),
    }
}

/// Checks one native file's size and CRC32.
fn verify_native_file(
    storage: &dyn Storage,
    path: &str,
    file: &NativeFile,
    report: &mut SnapshotVerifyReport,
) -> Result<(), FormatError> {
    let blob = storage.open(path)?;
    let bytes = blob.bytes();
    let shown = storage.describe(path);
    if bytes.len() as u64 != file.file.size {
        return Err(FormatError::corrupt(
            &shown,
            bytes.len() as u64,
            "size",
            format!(
                "native file {:?} has {} bytes but _metadata records {} ({})",
                file.name,
                bytes.len(),
                file.file.size,
                if (bytes.len() as u64) < file.file.size {
                    "truncated"
                } else {
                    "trailing data"
                }
            ),
        ));
    }
    let crc = crc32fast::hash(bytes);
    if crc != file.crc32 {
        return Err(FormatError::corrupt(
            &shown,
            0,
            "crc32",
            format!(
                "native file {:?}: checksum mismatch: recorded {:#010x}, computed {crc:#010x}",
                file.name, file.crc32
            ),
        ));
    }
    report.files += 1;
    report.bytes = report.bytes.saturating_add(file.file.size);
    Ok(())
}

/// Every structural problem of a decoded `_metadata`, found from its content alone (no data
/// file is read): operators and their parallelism, subtask indices, key-group ranges inside
/// `[0, max parallelism)` and disjoint, no exclusive file referenced by two subtasks, handles
/// that fit the snapshot's format and kind (a savepoint is self-contained: every file it
/// references is exclusive), change sets inside their files, and recorded sizes and counts
/// that add up within 64 bits. [`check_metadata`] applies it to every snapshot that is read;
/// [`verify_snapshot`] lists it with the problems of the data files.
pub(crate) fn structural_problems(
    meta: &SnapshotMetadata,
    offsets: &MetadataOffsets,
    meta_file: &str,
) -> Vec<FormatError> {
    let mut problems = Vec::new();
    let mut seen: BTreeMap<&str, String> = BTreeMap::new();
    let mut bytes_total: u128 = 0;
    let mut entries_total: u128 = 0;
    for (i, op) in meta.operators.iter().enumerate() {
        let op_offset = offsets.operators.get(i).copied().unwrap_or(0);
        let meta_problem = |field: String, reason: String| FormatError::corrupt(meta_file, op_offset, field, reason);
        if meta.operators[..i].iter().any(|o| o.uid == op.uid) {
            problems.push(meta_problem(
                format!("operators[{i}].uid"),
                format!("uid {:?} appears twice", op.uid),
            ));
        }
        if let Err(e) = check_max_parallelism(op.max_parallelism) {
            problems.push(meta_problem(format!("operators[{i}].max_parallelism"), e.to_string()));
        } else if let Err(e) = check_parallelism(op.parallelism, op.max_parallelism) {
            problems.push(meta_problem(format!("operators[{i}].parallelism"), e.to_string()));
        }
        if op.subtasks.len() as u64 != u64::from(op.parallelism) {
            problems.push(meta_problem(
                format!("operators[{i}].subtasks"),
                format!(
                    "{} subtasks recorded for parallelism {}",
                    op.subtasks.len(),
                    op.parallelism
                ),
            ));
        }
        let mut prev_end = 0u32;
        for (j, st) in op.subtasks.iter().enumerate() {
            let st_offset = offsets
                .subtasks
                .get(i)
                .and_then(|v| v.get(j))
                .copied()
                .unwrap_or(op_offset);
            let field = |s: &str| format!("operators[{i}].subtasks[{j}].{s}");
            let sub_problem = |s: &str, reason: String| FormatError::corrupt(meta_file, st_offset, field(s), reason);
            if st.index as usize != j {
                problems.push(sub_problem(
                    "index",
                    format!("subtask at position {j} has index {}", st.index),
                ));
            }
            if !st.key_groups.is_empty() {
                if st.key_groups.end_exclusive() > op.max_parallelism {
                    problems.push(sub_problem(
                        "key_groups",
                        format!("{} exceeds max parallelism {}", st.key_groups, op.max_parallelism),
                    ));
                }
                if st.key_groups.start() < prev_end {
                    problems.push(sub_problem(
                        "key_groups",
                        format!("{} overlaps or precedes the previous subtask's range", st.key_groups),
                    ));
                }
                prev_end = st.key_groups.end_exclusive();
            }
            for (what, f) in [("keyed", st.keyed.canonical()), ("operator", st.operator.as_ref())] {
                let Some(f) = f else { continue };
                bytes_total += u128::from(f.size);
                if f.scope == FileScope::Exclusive {
                    if let Some(other) = seen.insert(&f.path, field(what)) {
                        problems.push(sub_problem(
                            &format!("{what}.path"),
                            format!("file {:?} is also referenced by {other}", f.path),
                        ));
                    }
                } else if meta.kind == SnapshotKind::Savepoint {
                    problems.push(sub_problem(
                        what,
                        format!(
                            "a savepoint must be self-contained, but {:?} is a {} reference",
                            f.path,
                            f.scope.as_str()
                        ),
                    ));
                }
            }
            if let Some(stats) = &st.keyed_stats {
                entries_total += u128::from(stats.entries);
                bytes_total += u128::from(stats.raw_bytes);
                for s in &stats.states {
                    entries_total += u128::from(s.entries);
                    bytes_total += u128::from(s.raw_bytes);
                }
                for g in &stats.key_groups {
                    entries_total += u128::from(g.entries);
                    bytes_total += u128::from(g.stored_bytes);
                }
            }
            if let Some(native) = st.keyed.native() {
                if meta.format != SnapshotFormat::Native {
                    problems.push(sub_problem(
                        "native",
                        "a native keyed handle in a snapshot whose format is canonical".to_string(),
                    ));
                }
                bytes_total += u128::from(native.uploaded_bytes);
                for s in &native.stats.states {
                    entries_total += u128::from(s.estimated_keys);
                    bytes_total += u128::from(s.bytes);
                }
                for (_, b) in &native.stats.key_groups {
                    bytes_total += u128::from(*b);
                }
                for (k, nf) in native.files.iter().enumerate() {
                    let what = format!("native.files[{k}]");
                    bytes_total += u128::from(nf.file.size);
                    if nf.file.scope == FileScope::Exclusive {
                        if let Some(other) = seen.insert(&nf.file.path, field(&what)) {
                            problems.push(sub_problem(
                                &format!("{what}.path"),
                                format!("file {:?} is also referenced by {other}", nf.file.path),
                            ));
                        }
                    }
                    if meta.kind == SnapshotKind::Savepoint && nf.file.scope != FileScope::Exclusive {
                        problems.push(sub_problem(
                            &what,
                            format!(
                                "a savepoint must be self-contained, but {:?} is a {} reference",
                                nf.file.path,
                                nf.file.scope.as_str()
                            ),
                        ));
                    }
                }
            }
            if let Some(cl) = st.keyed.changelog() {
                if meta.format != SnapshotFormat::Changelog {
                    problems.push(sub_problem(
                        "changelog",
                        "a changelog handle in a snapshot whose format is not changelog".to_string(),
                    ));
                }
                if meta.kind == SnapshotKind::Savepoint {
                    problems.push(sub_problem(
                        "changelog",
                        "a savepoint holds canonical state, not a changelog handle".to_string(),
                    ));
                }
                for (k, part) in cl.materialized.iter().enumerate() {
                    bytes_total += u128::from(part.file.size);
                    for g in part.stats.iter().flat_map(|s| &s.key_groups) {
                        entries_total += u128::from(g.entries);
                        bytes_total += u128::from(g.stored_bytes);
                    }
                    for s in part.stats.iter().flat_map(|s| &s.states) {
                        entries_total += u128::from(s.entries);
                        bytes_total += u128::from(s.raw_bytes);
                    }
                    if !part.key_groups.is_empty() && part.key_groups.end_exclusive() > op.max_parallelism {
                        problems.push(sub_problem(
                            &format!("changelog.materialized[{k}].key_groups"),
                            format!("{} exceeds max parallelism {}", part.key_groups, op.max_parallelism),
                        ));
                    }
                }
                for (k, seg) in cl.tail.iter().enumerate() {
                    bytes_total += u128::from(seg.file.size) + u128::from(seg.length);
                    entries_total += u128::from(seg.records);
                    if seg.offset.checked_add(seg.length).is_none_or(|end| end > seg.file.size) {
                        problems.push(sub_problem(
                            &format!("changelog.tail[{k}]"),
                            format!(
                                "change set at {} of {} bytes lies outside its {}-byte file",
                                seg.offset, seg.length, seg.file.size
                            ),
                        ));
                    }
                }
            }
        }
    }
    if bytes_total > u128::from(u64::MAX) || entries_total > u128::from(u64::MAX) {
        problems.push(FormatError::corrupt(
            meta_file,
            0,
            "operators",
            "the sizes and counts recorded for the subtasks add up to more than 2^64: implausible".to_string(),
        ));
    }
    problems
}

/// Checks a decoded `_metadata` for structural problems ([`verify_snapshot`]'s checks that
/// need no data file): the first one is returned as the error, naming the file, offset and
/// field, with how many more there are. Every reader of a snapshot applies it before trusting
/// the metadata ([`crate::read_metadata`]), so a restore, a dump or a diff never silently
/// reads half the state of a snapshot `verify` rejects.
pub fn check_metadata(bytes: &[u8], file: &str) -> Result<SnapshotMetadata, FormatError> {
    let (meta, offsets) = decode_with_offsets(bytes, file)?;
    let mut problems = structural_problems(&meta, &offsets, file).into_iter();
    match problems.next() {
        None => Ok(meta),
        Some(FormatError::Corrupt {
            file,
            offset,
            field,
            reason,
        }) => {
            let more = problems.count();
            let reason = if more == 0 {
                format!("{reason} (`statekit verify` lists the problems)")
            } else {
                format!("{reason} (and {more} more problems; `statekit verify` lists them)")
            };
            Err(FormatError::Corrupt {
                file,
                offset,
                field,
                reason,
            })
        }
        Some(other) => Err(other),
    }
}

fn verify_impl(storage: &dyn Storage, resolver: Option<&FileResolver>) -> Result<SnapshotVerifyReport, FormatError> {
    let blob = storage.open(METADATA_FILE_NAME)?;
    let meta_file = storage.describe(METADATA_FILE_NAME);
    let (meta, offsets) = decode_with_offsets(blob.bytes(), &meta_file)?;
    let mut report = SnapshotVerifyReport {
        bytes: blob.bytes().len() as u64,
        problems: structural_problems(&meta, &offsets, &meta_file),
        ..SnapshotVerifyReport::default()
    };
    for (i, op) in meta.operators.iter().enumerate() {
        for (j, st) in op.subtasks.iter().enumerate() {
            if let Some(native) = st.keyed.native() {
                for nf in &native.files {
                    match locate(resolver, &nf.file) {
                        None => {}
                        Some(Err(e)) => report.problems.push(e),
                        Some(Ok((s, path))) => {
                            let s: &dyn Storage = s.as_deref().unwrap_or(storage);
                            if let Err(e) = verify_native_file(s, &path, nf, &mut report) {
                                report.problems.push(e);
                            }
                        }
                    }
                }
            }
            if let Some(cl) = st.keyed.changelog() {
                for part in &cl.materialized {
                    match locate(resolver, &part.file) {
                        None => {}
                        Some(Err(e)) => report.problems.push(e),
                        Some(Ok((s, path))) => {
                            let s: &dyn Storage = s.as_deref().unwrap_or(storage);
                            // A materialization may hold more key groups than the part
                            // applies to (it was inherited and narrowed).
                            let all = KeyGroupRange::all(op.max_parallelism);
                            verify_keyed(s, op, all, &path, part.file.size, &mut report);
                        }
                    }
                }
                let mut seen_logs: Vec<&str> = Vec::new();
                for seg in &cl.tail {
                    if seen_logs.contains(&seg.file.path.as_str()) {
                        continue;
                    }
                    seen_logs.push(&seg.file.path);
                    // Sizes here; the changelog crate decodes the files.
                    match locate(resolver, &seg.file) {
                        None => {}
                        Some(Err(e)) => report.problems.push(e),
                        Some(Ok((s, path))) => {
                            let s: &dyn Storage = s.as_deref().unwrap_or(storage);
                            match s.open(&path) {
                                Ok(b) if log_size_agrees(b.bytes(), seg.file.size) => {
                                    report.files += 1;
                                    report.bytes = report.bytes.saturating_add(seg.file.size);
                                }
                                Ok(b) => report.problems.push(FormatError::corrupt(
                                    &s.describe(&path),
                                    b.bytes().len() as u64,
                                    "size",
                                    format!(
                                        "log file has {} bytes but _metadata records {}{}",
                                        b.bytes().len(),
                                        seg.file.size,
                                        if log_padded(b.bytes()) {
                                            " (padded: at most that)"
                                        } else {
                                            ""
                                        }
                                    ),
                                )),
                                Err(e) => report.problems.push(e.into()),
                            }
                        }
                    }
                }
            }
            let keyed = st.keyed.canonical().and_then(|f| locate(resolver, f).map(|r| (f, r)));
            let keyed = match keyed {
                Some((_, Err(e))) => {
                    report.problems.push(e);
                    None
                }
                Some((f, Ok((s, path)))) => Some((f, s, path)),
                None => None,
            };
            if let Some((f, s, path)) = &keyed {
                let storage: &dyn Storage = s.as_deref().unwrap_or(storage);
                if let Some(stats) = &st.keyed_stats {
                    if let Ok(reader) = KeyedFileReader::open(storage, path, Some(f.size)) {
                        if *stats != KeyedStats::from_info(reader.info()) {
                            let st_offset = offsets.subtasks.get(i).and_then(|v| v.get(j)).copied().unwrap_or(0);
                            report.problems.push(FormatError::corrupt(
                                &meta_file,
                                st_offset,
                                format!("operators[{i}].subtasks[{j}].keyed_stats"),
                                format!(
                                    "the recorded statistics disagree with the index of {}",
                                    storage.describe(path)
                                ),
                            ));
                        }
                    }
                }
                verify_keyed(storage, op, st.key_groups, path, f.size, &mut report);
            }
            if let Some(f) = &st.operator {
                match locate(resolver, f) {
                    None => {}
                    Some(Err(e)) => report.problems.push(e),
                    Some(Ok((s, path))) => {
                        let s: &dyn Storage = s.as_deref().unwrap_or(storage);
                        verify_operator(s, op, &path, f.size, &mut report);
                    }
                }
            }
        }
    }
    Ok(report)
}

fn verify_keyed(
    storage: &dyn Storage,
    op: &OperatorMetadata,
    subtask_range: KeyGroupRange,
    path: &str,
    size: u64,
    report: &mut SnapshotVerifyReport,
) {
    let file = storage.describe(path);
    let reader = match KeyedFileReader::open(storage, path, Some(size)) {
        Ok(r) => r,
        Err(e) => return report.problems.push(e),
    };
    report.files += 1;
    report.bytes = report.bytes.saturating_add(size);
    let problem = |field: &str, reason: String| FormatError::corrupt(&file, 16, field, reason);
    if reader.max_parallelism() != op.max_parallelism {
        report.problems.push(problem(
            "header.max_parallelism",
            format!(
                "file says {} but operator {:?} has max parallelism {}",
                reader.max_parallelism(),
                op.uid,
                op.max_parallelism
            ),
        ));
    }
    let range = reader.key_group_range();
    if !range.is_empty() && range.intersection(&subtask_range) != range {
        report.problems.push(problem(
            "header.key_group_range",
            format!("file covers key groups {range}, outside the subtask's {subtask_range}"),
        ));
    }
    for kg in reader.key_groups() {
        if !subtask_range.contains(kg.key_group) {
            report.problems.push(FormatError::corrupt(
                &file,
                kg.offset,
                "key_group",
                format!(
                    "key group {} is outside the subtask's range {subtask_range}",
                    kg.key_group
                ),
            ));
        }
    }
    for d in reader.states() {
        match op.keyed_states.iter().find(|m| m.name == d.name) {
            None => report.problems.push(problem(
                "header.states",
                format!("state {:?} is not among operator {:?}'s keyed states", d.name, op.uid),
            )),
            Some(m) => {
                if let Err(why) = m.check_compatible(d) {
                    report
                        .problems
                        .push(problem("header.states", format!("disagrees with _metadata: {why}")));
                }
            }
        }
    }
    match reader.verify_values() {
        Ok(v) => report.entries = report.entries.saturating_add(v.entries),
        Err(e) => report.problems.push(e),
    }
}

fn verify_operator(
    storage: &dyn Storage,
    op: &OperatorMetadata,
    path: &str,
    size: u64,
    report: &mut SnapshotVerifyReport,
) {
    let file = storage.describe(path);
    let snap = match read_operator_file(storage, path, Some(size)) {
        Ok(s) => s,
        Err(e) => return report.problems.push(e),
    };
    report.files += 1;
    report.bytes = report.bytes.saturating_add(size);
    for (d, data) in &snap.states {
        report.entries = report.entries.saturating_add(match data {
            OperatorStateData::List(l) => l.len() as u64,
            OperatorStateData::Broadcast(m) => m.len() as u64,
        });
        match op.operator_states.iter().find(|m| m.name == d.name) {
            None => report.problems.push(FormatError::corrupt(
                &file,
                16,
                "header.states",
                format!(
                    "operator state {:?} is not among operator {:?}'s operator states",
                    d.name, op.uid
                ),
            )),
            Some(m) if m.mode != d.mode => report.problems.push(FormatError::corrupt(
                &file,
                16,
                "header.states",
                format!(
                    "operator state {:?} is {} here but {} in _metadata",
                    d.name, d.mode, m.mode
                ),
            )),
            Some(_) => {}
        }
    }
}

/// True when a changelog log file's header says zeros follow its trailer (magic `SKCL`, flag
/// bit 0 of the `u32` at offset 8; `docs/changelog-format.md#padding`).
fn log_padded(b: &[u8]) -> bool {
    b.get(..4) == Some(b"SKCL".as_slice()) && crate::le_u32(b, 8).is_some_and(|f| f & 1 != 0)
}

/// True when a log file of these bytes can be the one a reference of `recorded` bytes names:
/// exactly that long, or, padded, at least that long with only zeros after it (the changelog
/// crate decodes the rest).
fn log_size_agrees(b: &[u8], recorded: u64) -> bool {
    let len = b.len() as u64;
    len == recorded
        || (len > recorded
            && log_padded(b)
            && usize::try_from(recorded)
                .ok()
                .and_then(|r| b.get(r..))
                .is_some_and(|pad| pad.iter().all(|&x| x == 0)))
}
