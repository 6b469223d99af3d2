//! Changelog (DSTL) state: what `show` says about a changelog checkpoint (from `_metadata`
//! only), the change records `dump --changes` lists (of a checkpoint's tails, in replay order,
//! or of one log file), and the checks `verify` adds to the format crate's (which cannot decode
//! log files): every log file decoded, every tail segment matched against its file's index,
//! every record the replay would apply checked against the operator's states.

use crate::render;
use anyhow::{anyhow, bail, Result};
use serde_json::{json, Value as Json};
use statekit_changelog::{IndexEntry, LogFileReader, LogId, Op, ReadKind, Record};
use statekit_checkpoint::SnapshotReader;
use statekit_core::{key_group_for_key, KeyGroupRange, KeyedStateKind, StateDescriptor, TypeSchema};
use statekit_format::{
    ChangelogKeyedHandle, FileScope, FormatError, KeyedFileReader, KeyedStats, LogSegmentRef, OperatorMetadata,
    ResolvedChangelogHandle, ResolvedFile, SubtaskMetadata,
};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::Arc;

/// True when `path` is a lone changelog log file (named `*.skcl`, or starting with its magic)
/// rather than a snapshot.
pub fn is_log_file(path: &Path) -> bool {
    if !path.is_file() {
        return false;
    }
    if path.extension().is_some_and(|e| e == "skcl") {
        return true;
    }
    use std::io::Read;
    let mut magic = [0u8; 4];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == statekit_changelog::file::FILE_MAGIC)
}

/// A format error as one problem line, always naming file, offset and field (the version and
/// magic errors carry no offset of their own).
pub fn problem_text(e: &FormatError) -> String {
    match e {
        FormatError::UnsupportedVersion { file, found, supported } => {
            format!(
                "{file}: offset 4: header.version: unsupported format version {found} (this build reads {supported})"
            )
        }
        FormatError::BadMagic { file, what } => {
            format!("{file}: offset 0: header.magic: not a statekit {what} file (bad magic)")
        }
        other => other.to_string(),
    }
}

/// Maps a log file given on the command line (named in errors as given): mapped, not read,
/// so a huge file that is not a log file costs nothing before its magic is checked.
fn map_lone(path: &Path) -> Result<Arc<dyn statekit_core::storage::Blob>> {
    use statekit_core::storage::Storage as _;
    let (dir, name) = match (path.parent(), path.file_name()) {
        (Some(d), Some(n)) => (if d.as_os_str().is_empty() { Path::new(".") } else { d }, n),
        _ => anyhow::bail!("{}: not a file", path.display()),
    };
    let storage = statekit_core::storage::LocalStorage::new(dir);
    Ok(storage.open(&name.to_string_lossy())?)
}

/// Opens a log file given on the command line (named in errors as given).
fn open_lone(path: &Path) -> Result<LogFileReader> {
    let shown = path.display().to_string();
    LogFileReader::from_blob(map_lone(path)?, &shown, None).map_err(|e| anyhow!(problem_text(&e)))
}

// ----------------------------------------------------------------------------------------
// show

/// Sizes of the changelog state of one subtask, an operator or a whole checkpoint, from
/// `_metadata` alone. Files and change sets referenced several times (log files are shared by
/// the subtasks of an upload, inherited parts by the subtasks of a rescale) count once; the
/// projected replay counts what each subtask's restore reads.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Materialized parts (entries of the handles).
    pub parts: u64,
    /// Distinct materialization files.
    pub materialized_files: u64,
    /// Their bytes.
    pub materialized_bytes: u64,
    /// Entries a restore loads from them (the key groups each part applies to); `None` when
    /// some part has no statistics.
    pub materialized_entries: Option<u64>,
    /// Distinct change sets of the tails.
    pub change_sets: u64,
    /// Runs of change sets adjacent in one log file (one range read each).
    pub segments: u64,
    /// Distinct log files.
    pub log_files: u64,
    /// Bytes of the distinct change sets.
    pub log_bytes: u64,
    /// Bytes of the distinct log files (what storage keeps for them).
    pub log_file_bytes: u64,
    /// Records of the distinct change sets.
    pub records: u64,
    /// Change sets a restore reads (per subtask: those whose key groups meet its range).
    pub replay_change_sets: u64,
    /// Their records (after a rescale some belong to other key groups and are skipped).
    pub replay_records: u64,
    /// Their bytes.
    pub replay_bytes: u64,
}

impl Summary {
    /// Log bytes per materialized byte, when there is a materialization.
    pub fn space_amplification(&self) -> Option<f64> {
        (self.materialized_bytes > 0).then(|| self.log_bytes as f64 / self.materialized_bytes as f64)
    }

    /// The summary of these subtasks' changelog handles (subtasks without one are skipped).
    pub fn of<'a>(subtasks: impl IntoIterator<Item = &'a SubtaskMetadata>) -> Summary {
        let mut s = Summary {
            materialized_entries: Some(0),
            ..Summary::default()
        };
        let mut mat_files: BTreeMap<(u8, &str), u64> = BTreeMap::new();
        let mut log_files: BTreeMap<(u8, &str), u64> = BTreeMap::new();
        let mut sets: BTreeMap<(u8, &str, u64), (u64, u32)> = BTreeMap::new();
        for st in subtasks {
            let Some(h) = &st.changelog else { continue };
            for part in &h.materialized {
                s.parts += 1;
                mat_files.insert((scope_code(part.file.scope), &part.file.path), part.file.size);
                let range = part.key_groups.intersection(&st.key_groups);
                s.materialized_entries = match (s.materialized_entries, &part.stats) {
                    (Some(n), Some(stats)) => Some(n + entries_in(stats, range)),
                    _ => None,
                };
            }
            for seg in &h.tail {
                let file = (scope_code(seg.file.scope), seg.file.path.as_str());
                log_files.insert(file, seg.file.size);
                sets.insert((file.0, file.1, seg.offset), (seg.length, seg.records));
                if !seg.key_groups.intersection(&st.key_groups).is_empty() {
                    s.replay_change_sets += 1;
                    s.replay_records += u64::from(seg.records);
                    s.replay_bytes += seg.length;
                }
            }
        }
        s.materialized_files = mat_files.len() as u64;
        s.materialized_bytes = mat_files.values().sum();
        s.log_files = log_files.len() as u64;
        s.log_file_bytes = log_files.values().sum();
        s.change_sets = sets.len() as u64;
        let mut prev: Option<(u8, &str, u64)> = None;
        for (&(scope, path, offset), &(length, records)) in &sets {
            s.log_bytes += length;
            s.records += u64::from(records);
            if prev != Some((scope, path, offset)) {
                s.segments += 1;
            }
            prev = Some((scope, path, offset + length));
        }
        s
    }

    /// The summary as JSON (stable field names).
    pub fn json(&self) -> Json {
        json!({
            "materialized": {
                "parts": self.parts,
                "files": self.materialized_files,
                "bytes": self.materialized_bytes,
                "entries": self.materialized_entries,
            },
            "tail": {
                "change_sets": self.change_sets,
                "segments": self.segments,
                "log_files": self.log_files,
                "log_bytes": self.log_bytes,
                "log_file_bytes": self.log_file_bytes,
                "records": self.records,
            },
            "replay": {
                "change_sets": self.replay_change_sets,
                "records": self.replay_records,
                "bytes": self.replay_bytes,
            },
            "space_amplification": self.space_amplification(),
        })
    }

    /// Three indented lines: materialized part, tail, projected replay.
    pub fn text(&self, indent: &str) -> String {
        let entries = self
            .materialized_entries
            .map_or_else(|| "? entries".to_string(), |n| format!("{n} entries"));
        let amp = self
            .space_amplification()
            .map_or_else(|| "n/a (no materialization)".to_string(), |a| format!("{a:.2}"));
        format!(
            "{indent}materialized {} ({} part{}, {} file{}): {} B, {entries}\n\
             {indent}tail         {} change set{} in {} segment{} of {} log file{} ({} B of files): {} B, {} records\n\
             {indent}replay       {} change sets, {} records, {} B; space amplification (log/materialized bytes) {amp}",
            if self.parts == 0 { "none" } else { "yes" },
            self.parts,
            plural(self.parts),
            self.materialized_files,
            plural(self.materialized_files),
            self.materialized_bytes,
            self.change_sets,
            plural(self.change_sets),
            self.segments,
            plural(self.segments),
            self.log_files,
            plural(self.log_files),
            self.log_file_bytes,
            self.log_bytes,
            self.records,
            self.replay_change_sets,
            self.replay_records,
            self.replay_bytes,
        )
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

fn scope_code(s: FileScope) -> u8 {
    match s {
        FileScope::Exclusive => 0,
        FileScope::Shared => 1,
        FileScope::Absolute => 2,
    }
}

/// Entries of `stats` in the key groups of `range`.
fn entries_in(stats: &KeyedStats, range: KeyGroupRange) -> u64 {
    stats
        .key_groups
        .iter()
        .filter(|g| range.contains(g.key_group))
        .map(|g| g.entries)
        .sum()
}

/// Entries per state a restore of operator `o` loads from its materializations, and whether
/// the figures are estimates (a part applied to fewer key groups than its file holds: its
/// per-state totals are scaled by the share of its entries in those key groups).
pub fn materialized_state_totals(o: &OperatorMetadata) -> (BTreeMap<String, (u64, u64)>, bool) {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut approx = false;
    for st in &o.subtasks {
        let Some(h) = &st.changelog else { continue };
        for part in &h.materialized {
            let Some(stats) = &part.stats else {
                approx = true;
                continue;
            };
            let range = part.key_groups.intersection(&st.key_groups);
            let inside = entries_in(stats, range);
            let share = if inside == stats.entries {
                1.0
            } else {
                approx = true;
                if stats.entries == 0 {
                    0.0
                } else {
                    inside as f64 / stats.entries as f64
                }
            };
            for s in &stats.states {
                let e = m.entry(s.name.clone()).or_default();
                e.0 += (s.entries as f64 * share).round() as u64;
                e.1 += (s.raw_bytes as f64 * share).round() as u64;
            }
        }
    }
    (m, approx)
}

/// The per-subtask JSON of a changelog handle (`show --json`).
pub fn subtask_json(st: &SubtaskMetadata, h: &ChangelogKeyedHandle) -> Json {
    let mut j = Summary::of([st]).json();
    j["log"] = json!(LogId(h.log).to_string());
    j["materialization_id"] = json!(h.materialization_id);
    j["materialized"]["files_list"] = h
        .materialized
        .iter()
        .map(|p| {
            json!({
                "path": p.file.path, "scope": p.file.scope.as_str(), "bytes": p.file.size,
                "key_groups": p.key_groups.to_string(),
                "entries": p.stats.as_ref().map(|s| entries_in(s, p.key_groups.intersection(&st.key_groups))),
            })
        })
        .collect();
    let mut files: Vec<&str> = h.tail.iter().map(|t| t.file.path.as_str()).collect();
    files.sort_unstable();
    files.dedup();
    j["tail"]["files_list"] = json!(files);
    j["tail"]["sqns"] = sqn_ranges(&h.tail);
    j
}

/// Per log, the lowest and highest sequence number of the tail.
fn sqn_ranges(tail: &[LogSegmentRef]) -> Json {
    let mut m: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for t in tail {
        let e = m.entry(LogId(t.log).to_string()).or_insert((t.sqn, t.sqn));
        e.0 = e.0.min(t.sqn);
        e.1 = e.1.max(t.sqn);
    }
    m.into_iter()
        .map(|(log, (a, b))| json!({"log": log, "from": a, "to": b}))
        .collect()
}

// ----------------------------------------------------------------------------------------
// Walking tails in replay order

/// Log files, each opened once (by where it is); a file that does not open (or, for verify,
/// does not verify) is kept as the problem it has.
#[derive(Default)]
struct LogFiles {
    files: HashMap<String, std::result::Result<LogFileReader, String>>,
}

impl LogFiles {
    /// The reader of `file`, and whether this call opened it (errors are reported once).
    fn get(&mut self, file: &ResolvedFile) -> (std::result::Result<&LogFileReader, &str>, bool) {
        let id = file.storage.describe(&file.path);
        let mut fresh = false;
        let entry = self.files.entry(id).or_insert_with(|| {
            fresh = true;
            LogFileReader::open(file.storage.as_ref(), &file.path, Some(file.size)).map_err(|e| problem_text(&e))
        });
        (entry.as_ref().map_err(String::as_str), fresh)
    }
}

/// Where a replayed record comes from.
struct Pos<'a> {
    subtask: u32,
    tail_index: usize,
    /// The log file as `_metadata` references it.
    file: &'a str,
    /// The file as errors name it.
    shown: &'a str,
    offset: u64,
    log: LogId,
    sqn: u64,
}

/// Walks the tail of `h` as a restore of `range` replays it: each change set whose key groups
/// (narrowed to the handle's and `range`) meet `range`, checked against the index of its file,
/// then its metadata records and the records of those key groups, in order. `problem` gets
/// what is wrong with a segment (its `Err` stops the walk; an `Ok` skips the segment).
fn walk_tail(
    h: &ResolvedChangelogHandle,
    uid: &str,
    range: KeyGroupRange,
    files: &mut LogFiles,
    problem: &mut dyn FnMut(String) -> Result<()>,
    f: &mut dyn FnMut(&Pos<'_>, u32, Record<'_>) -> Result<()>,
) -> Result<()> {
    let handle_range = h.key_groups.intersection(&range);
    let who = format!("operator {uid:?}, subtask {}", h.subtask);
    for (k, (seg, file)) in h.handle.tail.iter().zip(&h.tail).enumerate() {
        let effective = seg.key_groups.intersection(&handle_range);
        if effective.is_empty() {
            continue;
        }
        let (reader, fresh) = files.get(file);
        let reader = match reader {
            Ok(r) => r,
            Err(e) => {
                if fresh {
                    problem(e.to_string())?;
                }
                continue;
            }
        };
        let Some(entry) = find_entry(reader, seg, &who, k, problem)? else {
            continue;
        };
        if !entry.concerns(&effective) {
            continue;
        }
        let data = match reader.read(entry) {
            Ok(d) => d,
            Err(e) => {
                problem(problem_text(&e))?;
                continue;
            }
        };
        let pos = Pos {
            subtask: h.subtask,
            tail_index: k,
            file: &seg.file.path,
            shown: reader.file(),
            offset: seg.offset,
            log: entry.log,
            sqn: entry.sqn,
        };
        let mut failed: Option<anyhow::Error> = None;
        let r = data.for_each_record(Some(&effective), &mut |kg, rec| {
            f(&pos, kg, rec).map_err(|e| {
                failed = Some(e);
                FormatError::corrupt(reader.file(), seg.offset, "record", "stopped")
            })
        });
        if let Some(e) = failed {
            return Err(e);
        }
        if let Err(e) = r {
            problem(problem_text(&e))?;
        }
    }
    Ok(())
}

/// The index entry of the change set tail segment `k` references, checked against it (log,
/// sequence number, length, records); `None` (after telling `problem`) when it does not match.
fn find_entry<'r>(
    reader: &'r LogFileReader,
    seg: &LogSegmentRef,
    who: &str,
    k: usize,
    problem: &mut dyn FnMut(String) -> Result<()>,
) -> Result<Option<&'r IndexEntry>> {
    let file = reader.file();
    let at = |field: &str, why: String| format!("{file}: offset {}: {field}: {why} ({who}, tail[{k}])", seg.offset);
    let Some(e) = reader.index().iter().find(|e| e.offset == seg.offset) else {
        problem(at(
            "change_set",
            "no change set starts here (the checkpoint references one)".into(),
        ))?;
        return Ok(None);
    };
    let mut ok = true;
    if e.log.0 != seg.log {
        problem(at(
            "change_set.log",
            format!(
                "the change set is of log {}, the checkpoint references log {}",
                e.log,
                LogId(seg.log)
            ),
        ))?;
        ok = false;
    }
    if e.sqn != seg.sqn {
        problem(at(
            "change_set.sqn",
            format!(
                "the change set has sequence number {}, the checkpoint references {}",
                e.sqn, seg.sqn
            ),
        ))?;
        ok = false;
    }
    if e.length != seg.length {
        problem(at(
            "change_set.length",
            format!(
                "the change set is {} bytes, the checkpoint references {}",
                e.length, seg.length
            ),
        ))?;
        ok = false;
    }
    if e.records != seg.records {
        problem(at(
            "change_set.records",
            format!(
                "the change set has {} records, the checkpoint references {}",
                e.records, seg.records
            ),
        ))?;
        ok = false;
    }
    Ok(ok.then_some(e))
}

// ----------------------------------------------------------------------------------------
// verify

/// What [`verify_changelog`] and [`verify_log_file`] read.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogCheck {
    /// Log files decoded in full.
    pub log_files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their change sets.
    pub change_sets: u64,
    /// Their records.
    pub records: u64,
    /// Records a restore would replay, checked against their states.
    pub replayed: u64,
}

/// Checks the changelog state of a snapshot beyond what the format crate checks: every
/// referenced log file decoded in full (CRCs, index, trailer, every record), every tail
/// segment found at its offset with the log, sequence number, length and record count the
/// checkpoint records, no change set replayed twice over the same key groups, every
/// materialization's statistics equal to its file's, and every record a restore would replay
/// declared by a metadata record, of the operator's state (compatible descriptor), of an
/// operation that state's kind has, timed iff the state has a TTL, in the key group of its key.
pub fn verify_changelog(reader: &SnapshotReader, problems: &mut Vec<String>) -> Result<LogCheck> {
    let mut check = LogCheck::default();
    let mut files = LogFiles::default();
    for op in &reader.metadata().operators {
        if !op.subtasks.iter().any(|s| s.changelog.is_some()) {
            continue;
        }
        let handles = match reader.changelog_handles(&op.uid, KeyGroupRange::all(op.max_parallelism)) {
            Ok(h) => h,
            // The format's verify reports unresolvable references.
            Err(e) => {
                problems.push(format!("operator {:?}: {e}", op.uid));
                continue;
            }
        };
        // Every log file once, in full.
        for h in &handles {
            for file in &h.tail {
                let id = file.storage.describe(&file.path);
                if files.files.contains_key(&id) {
                    continue;
                }
                let r = LogFileReader::open(file.storage.as_ref(), &file.path, Some(file.size))
                    .and_then(|r| r.verify().map(|counts| (r, counts)));
                let r = match r {
                    Ok((r, (sets, records))) => {
                        check.log_files += 1;
                        check.bytes += r.size();
                        check.change_sets += sets;
                        check.records += records;
                        Ok(r)
                    }
                    Err(e) => {
                        let text = problem_text(&e);
                        problems.push(text.clone());
                        Err(text)
                    }
                };
                files.files.insert(id, r);
            }
        }
        for h in &handles {
            let who = format!("operator {:?}, subtask {}", op.uid, h.subtask);
            verify_materializations(h, &who, problems);
            verify_tail_refs(h, op.max_parallelism, &who, problems);
            check.replayed += verify_replay(h, op, &mut files, problems)?;
        }
    }
    Ok(check)
}

/// Each materialization's recorded statistics equal its file's index.
fn verify_materializations(h: &ResolvedChangelogHandle, who: &str, problems: &mut Vec<String>) {
    for (k, (part, file)) in h.handle.materialized.iter().zip(&h.materialized).enumerate() {
        let Some(stats) = &part.stats else { continue };
        // Errors opening it are the format's verify's to report.
        if let Ok(r) = KeyedFileReader::open(file.storage.as_ref(), &file.path, Some(file.size)) {
            if *stats != KeyedStats::from_info(r.info()) {
                problems.push(format!(
                    "{}: offset 0: stats: the statistics _metadata records for it disagree with its index ({who}, materialized[{k}])",
                    file.storage.describe(&file.path)
                ));
            }
        }
    }
}

/// Tail references that make sense without the files: key groups below max parallelism, no
/// change set replayed twice over the same key groups.
fn verify_tail_refs(h: &ResolvedChangelogHandle, max_p: u32, who: &str, problems: &mut Vec<String>) {
    // (log, sqn) → the tail entries replaying it, with their key groups.
    type Uses = Vec<(usize, KeyGroupRange)>;
    let mut seen: HashMap<([u8; 16], u64), Uses> = HashMap::new();
    for (k, seg) in h.handle.tail.iter().enumerate() {
        if !seg.key_groups.is_empty() && seg.key_groups.end_exclusive() > max_p {
            problems.push(format!(
                "_metadata: {who}: changelog.tail[{k}].key_groups: {} exceeds max parallelism {max_p}",
                seg.key_groups
            ));
        }
        let earlier = seen.entry((seg.log, seg.sqn)).or_default();
        for (j, kgs) in earlier.iter() {
            if !kgs.intersection(&seg.key_groups).is_empty() {
                problems.push(format!(
                    "_metadata: {who}: changelog.tail[{k}]: change set {} of log {} is also tail[{j}], over key groups {} (replayed twice)",
                    seg.sqn,
                    LogId(seg.log),
                    kgs.intersection(&seg.key_groups)
                ));
            }
        }
        earlier.push((k, seg.key_groups));
    }
}

/// Which operations a state of `kind` is changed (or read) by.
fn op_fits(kind: KeyedStateKind, op: &Op<'_>) -> bool {
    use KeyedStateKind as K;
    let single = matches!(kind, K::Value | K::Reducing | K::Aggregating);
    match op {
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

/// Walks the replay of `h` and checks every record; returns the records checked.
fn verify_replay(
    h: &ResolvedChangelogHandle,
    op: &OperatorMetadata,
    files: &mut LogFiles,
    problems: &mut Vec<String>,
) -> Result<u64> {
    let mut declared: HashMap<(LogId, u32), StateDescriptor> = HashMap::new();
    let mut records = 0u64;
    // One problem per change set at most: a damaged writer would repeat it for every record.
    let mut flagged: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut found: Vec<String> = Vec::new();
    let mut segment_problems: Vec<String> = Vec::new();
    let who = |p: &Pos<'_>| format!("operator {:?}, subtask {}, tail[{}]", op.uid, p.subtask, p.tail_index);
    walk_tail(
        h,
        &op.uid,
        KeyGroupRange::all(op.max_parallelism),
        files,
        &mut |p| {
            segment_problems.push(p);
            Ok(())
        },
        &mut |pos, kg, rec| {
            records += 1;
            let problem = match rec {
                Record::Metadata { state, descriptor } => {
                    let p = match op.keyed_states.iter().find(|d| d.name == descriptor.name) {
                        None => Some(format!(
                            "metadata record declares state {:?}, which is not among the operator's keyed states",
                            descriptor.name
                        )),
                        Some(d) => d
                            .check_compatible(&descriptor)
                            .err()
                            .map(|why| format!("metadata record disagrees with _metadata: {why}")),
                    };
                    declared.insert((pos.log, state), descriptor);
                    p
                }
                Record::Change(c) => match declared.get(&(pos.log, c.state)) {
                    None => Some(format!(
                        "key group {kg}: a change of state {} that no earlier metadata record of log {} declared",
                        c.state, pos.log
                    )),
                    Some(d) if !op_fits(d.kind, &c.op) => Some(format!(
                        "key group {kg}: a {} record on {} state {:?}",
                        op_name(&c.op),
                        d.kind,
                        d.name
                    )),
                    Some(d) if d.ttl.is_some() != c.time.is_some() => Some(format!(
                        "key group {kg}: a record of state {:?} {} a time, but the state {} a TTL",
                        d.name,
                        if c.time.is_some() { "has" } else { "lacks" },
                        if d.ttl.is_some() { "has" } else { "has no" }
                    )),
                    Some(_) if key_group_for_key(c.key, op.max_parallelism) != kg => Some(format!(
                        "key group {kg}: the record's key belongs to key group {}",
                        key_group_for_key(c.key, op.max_parallelism)
                    )),
                    Some(_) => None,
                },
            };
            if let Some(why) = problem {
                if flagged.insert((pos.tail_index, pos.offset)) {
                    found.push(format!(
                        "{}: offset {}: record: {why} ({})",
                        pos.shown,
                        pos.offset,
                        who(pos)
                    ));
                }
            }
            Ok(())
        },
    )?;
    problems.extend(segment_problems);
    problems.extend(found);
    Ok(records)
}

/// `statekit verify <file.skcl>`: decodes a lone log file in full.
pub fn verify_log_file(path: &Path, problems: &mut Vec<String>) -> Result<LogCheck> {
    let shown = path.display().to_string();
    let blob = map_lone(path)?;
    let size = blob.bytes().len() as u64;
    let mut check = LogCheck {
        bytes: size,
        ..LogCheck::default()
    };
    match LogFileReader::from_blob(blob, &shown, None).and_then(|r| r.verify()) {
        Ok((sets, records)) => {
            check.log_files = 1;
            check.change_sets = sets;
            check.records = records;
        }
        Err(e) => problems.push(problem_text(&e)),
    }
    Ok(check)
}

// ----------------------------------------------------------------------------------------
// dump --changes

/// What `dump --changes` lists.
pub struct ChangeFilter {
    /// Only these key groups (metadata records are then left out).
    pub key_groups: Option<KeyGroupRange>,
    /// Only this state (by name).
    pub state: Option<String>,
    /// Only this key (stored bytes).
    pub key: Option<Vec<u8>>,
}

impl ChangeFilter {
    fn keeps(&self, kg: u32, rec: &Record<'_>, desc: Option<&StateDescriptor>) -> bool {
        if let Some(s) = &self.state {
            let name = match rec {
                Record::Metadata { descriptor, .. } => Some(&descriptor.name),
                Record::Change(_) => desc.map(|d| &d.name),
            };
            if name != Some(s) {
                return false;
            }
        }
        match rec {
            Record::Metadata { .. } => self.key_groups.is_none() && self.key.is_none(),
            Record::Change(c) => {
                self.key_groups.is_none_or(|r| r.contains(kg)) && self.key.as_deref().is_none_or(|k| k == c.key)
            }
        }
    }
}

/// Where a listed record comes from.
struct Origin<'a> {
    subtask: Option<u32>,
    file: &'a str,
    offset: u64,
    log: LogId,
    sqn: u64,
}

fn op_name(op: &Op<'_>) -> &'static str {
    match op {
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

fn read_kind_name(k: ReadKind) -> &'static str {
    match k {
        ReadKind::Get => "get",
        ReadKind::List => "list",
        ReadKind::MapAll => "map-all",
        ReadKind::MapEntry => "map-entry",
    }
}

/// One record as a text line and a JSON object, decoded per its state's schemas (as hex when
/// no metadata record declared its state).
fn render_record(o: &Origin<'_>, kg: u32, rec: &Record<'_>, desc: Option<&StateDescriptor>) -> (String, Json) {
    let mut text = String::new();
    if let Some(s) = o.subtask {
        text.push_str(&format!("subtask={s} "));
    }
    text.push_str(&format!("file={} offset={} sqn={} ", o.file, o.offset, o.sqn));
    let mut j = json!({
        "subtask": o.subtask, "file": o.file, "offset": o.offset, "log": o.log.to_string(), "sqn": o.sqn,
    });
    match rec {
        Record::Metadata { state, descriptor: d } => {
            text.push_str(&format!(
                "kg=meta op=metadata state={} id={state} kind={} key {} ns {}{} value {}{}",
                d.name,
                d.kind,
                d.key_schema,
                d.namespace_schema,
                d.user_key_schema
                    .as_ref()
                    .map(|t| format!(" user-key {t}"))
                    .unwrap_or_default(),
                d.value_schema,
                d.ttl.map(|t| format!(" ttl {}ms", t.ttl_ms)).unwrap_or_default()
            ));
            j["key_group"] = Json::Null;
            j["op"] = json!("metadata");
            j["state"] = json!(d.name);
            j["state_id"] = json!(state);
            j["descriptor"] = json!({
                "kind": d.kind.to_string(), "key": d.key_schema.to_string(),
                "namespace": d.namespace_schema.to_string(), "value": d.value_schema.to_string(),
                "user_key": d.user_key_schema.as_ref().map(|t| t.to_string()),
                "ttl_ms": d.ttl.map(|t| t.ttl_ms),
            });
        }
        Record::Change(c) => {
            let bytes = TypeSchema::Bytes;
            let (ks, ns, vs, uks) = match desc {
                Some(d) => (
                    &d.key_schema,
                    &d.namespace_schema,
                    &d.value_schema,
                    d.user_key_schema.as_ref().unwrap_or(&bytes),
                ),
                None => (&bytes, &bytes, &bytes, &bytes),
            };
            let state = desc.map_or_else(|| format!("#{}", c.state), |d| d.name.clone());
            text.push_str(&format!(
                "kg={kg} state={state} op={} key={} ns={}",
                op_name(&c.op),
                render::text(ks, c.key),
                render::text(ns, c.namespace)
            ));
            j["key_group"] = json!(kg);
            j["op"] = json!(op_name(&c.op));
            j["state"] = desc.map_or(Json::Null, |d| json!(d.name));
            j["state_id"] = json!(c.state);
            j["key"] = render::json_of(ks, c.key);
            j["namespace"] = render::json_of(ns, c.namespace);
            match &c.op {
                Op::Clear => {}
                Op::Put(v) => {
                    text.push_str(&format!(" value={}", render::text(vs, v)));
                    j["value"] = render::json_of(vs, v);
                }
                Op::AddElement(v) => {
                    text.push_str(&format!(" element={}", render::text(vs, v)));
                    j["element"] = render::json_of(vs, v);
                }
                Op::SetList(items) => {
                    let t: Vec<String> = items.iter().map(|i| render::text(vs, i)).collect();
                    text.push_str(&format!(" elements=[{}]", t.join(", ")));
                    j["elements"] = items.iter().map(|i| render::json_of(vs, i)).collect();
                }
                Op::MapPut { user_key, value } => {
                    text.push_str(&format!(
                        " user_key={} value={}",
                        render::text(uks, user_key),
                        render::text(vs, value)
                    ));
                    j["user_key"] = render::json_of(uks, user_key);
                    j["value"] = render::json_of(vs, value);
                }
                Op::MapRemove(uk) => {
                    text.push_str(&format!(" user_key={}", render::text(uks, uk)));
                    j["user_key"] = render::json_of(uks, uk);
                }
                Op::MergeList(sources) => {
                    let t: Vec<String> = sources.iter().map(|s| render::text(ns, s)).collect();
                    text.push_str(&format!(" sources=[{}]", t.join(", ")));
                    j["sources"] = sources.iter().map(|s| render::json_of(ns, s)).collect();
                }
                Op::Read { kind, user_key } => {
                    text.push_str(&format!(" read={}", read_kind_name(*kind)));
                    j["read"] = json!(read_kind_name(*kind));
                    if *kind == ReadKind::MapEntry {
                        text.push_str(&format!(" user_key={}", render::text(uks, user_key)));
                        j["user_key"] = render::json_of(uks, user_key);
                    }
                }
            }
            if let Some(t) = c.time {
                text.push_str(&format!(" time={t}"));
                j["time_ms"] = json!(t);
            }
        }
    }
    (text, j)
}

/// Lists the change records of a snapshot's tails in replay order (subtask by subtask, each
/// tail in order, each change set's metadata first, then its key groups ascending), or of a
/// lone log file in file order. Everything is decoded and checked before the first line is
/// emitted: a damaged file is an error, never partial output.
pub fn dump_changes(
    path: &Path,
    uid: Option<&str>,
    filter: &ChangeFilter,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<()> {
    if is_log_file(path) {
        if uid.is_some() {
            bail!("{}: a lone log file has no operators: drop --uid", path.display());
        }
        let reader = open_lone(path)?;
        reader.verify().map_err(|e| anyhow!(problem_text(&e)))?;
        let shown = path.display().to_string();
        let mut declared: HashMap<(LogId, u32), StateDescriptor> = HashMap::new();
        for e in reader.index() {
            let data = reader.read(e).map_err(|e| anyhow!(problem_text(&e)))?;
            let origin = Origin {
                subtask: None,
                file: &shown,
                offset: e.offset,
                log: e.log,
                sqn: e.sqn,
            };
            if !for_each_listed(&data, &origin, filter, &mut declared, emit)? {
                return Ok(());
            }
        }
        return Ok(());
    }
    let reader = SnapshotReader::open(path)?;
    let m = reader.metadata();
    let ops: Vec<&OperatorMetadata> = m
        .operators
        .iter()
        .filter(|o| uid.is_none_or(|u| u == o.uid))
        .filter(|o| o.subtasks.iter().any(|s| s.changelog.is_some()))
        .collect();
    if ops.is_empty() {
        match uid {
            Some(u) => {
                reader.operator(u)?;
                bail!(
                    "{}: operator {u:?} holds no changelog state (format {}): --changes lists the change records of changelog checkpoints",
                    path.display(),
                    m.format.as_str()
                );
            }
            None => bail!(
                "{}: no operator holds changelog state (format {}): --changes lists the change records of changelog checkpoints and log files",
                path.display(),
                m.format.as_str()
            ),
        }
    }
    let mut all = Vec::new();
    for o in &ops {
        let mut range = KeyGroupRange::all(o.max_parallelism);
        if let Some(r) = filter.key_groups {
            if r.end_exclusive() > o.max_parallelism {
                bail!(
                    "key group {} does not exist: operator {:?} has {} key groups",
                    r.end_exclusive() - 1,
                    o.uid,
                    o.max_parallelism
                );
            }
            range = range.intersection(&r);
        }
        if let Some(k) = &filter.key {
            let kg = key_group_for_key(k, o.max_parallelism);
            range = range.intersection(&KeyGroupRange::new(kg, kg));
        }
        let mut handles = reader.changelog_handles(&o.uid, range)?;
        handles.sort_by_key(|h| h.subtask);
        all.push((o, range, handles));
    }
    // First pass: decode everything a restore would replay (errors before any output).
    let mut files = LogFiles::default();
    for (o, range, handles) in &all {
        for h in handles {
            walk_tail(
                h,
                &o.uid,
                *range,
                &mut files,
                &mut |p| Err(anyhow!(p)),
                &mut |_, _, _| Ok(()),
            )?;
        }
    }
    // Second pass: list.
    for (o, range, handles) in &all {
        for h in handles {
            let mut declared: HashMap<(LogId, u32), StateDescriptor> = HashMap::new();
            let mut more = true;
            walk_tail(
                h,
                &o.uid,
                *range,
                &mut files,
                &mut |p| Err(anyhow!(p)),
                &mut |pos, kg, rec| {
                    if !more {
                        return Ok(());
                    }
                    if let Record::Metadata { state, descriptor } = &rec {
                        declared.insert((pos.log, *state), descriptor.clone());
                    }
                    let desc = match &rec {
                        Record::Change(c) => declared.get(&(pos.log, c.state)),
                        Record::Metadata { .. } => None,
                    };
                    if filter.keeps(kg, &rec, desc) {
                        let origin = Origin {
                            subtask: Some(pos.subtask),
                            file: pos.file,
                            offset: pos.offset,
                            log: pos.log,
                            sqn: pos.sqn,
                        };
                        let (t, j) = render_record(&origin, kg, &rec, desc);
                        more = emit(t, j)?;
                    }
                    Ok(())
                },
            )?;
            if !more {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// Lists the records of one change set that `filter` keeps; false when `emit` wants no more.
fn for_each_listed(
    data: &statekit_changelog::ChangeSetData,
    origin: &Origin<'_>,
    filter: &ChangeFilter,
    declared: &mut HashMap<(LogId, u32), StateDescriptor>,
    emit: &mut dyn FnMut(String, Json) -> Result<bool>,
) -> Result<bool> {
    let mut more = true;
    let mut failed: Option<anyhow::Error> = None;
    let r = data.for_each_record(filter.key_groups.as_ref(), &mut |kg, rec| {
        if !more {
            return Ok(());
        }
        if let Record::Metadata { state, descriptor } = &rec {
            declared.insert((origin.log, *state), descriptor.clone());
        }
        let desc = match &rec {
            Record::Change(c) => declared.get(&(origin.log, c.state)),
            Record::Metadata { .. } => None,
        };
        if filter.keeps(kg, &rec, desc) {
            let (t, j) = render_record(origin, kg, &rec, desc);
            match emit(t, j) {
                Ok(m) => more = m,
                Err(e) => {
                    failed = Some(e);
                    return Err(FormatError::corrupt(origin.file, origin.offset, "record", "stopped"));
                }
            }
        }
        Ok(())
    });
    if let Some(e) = failed {
        return Err(e);
    }
    r.map_err(|e| anyhow!(problem_text(&e)))?;
    Ok(more)
}

/// The state names the log file's or snapshot's metadata records declare don't need to be
/// known in advance; but `--key` needs the key's schema: the `--state`'s, looked up in the
/// snapshot's `_metadata` or the log file's metadata records.
pub fn key_schema_for(path: &Path, uid: Option<&str>, state: &str) -> Result<TypeSchema> {
    if is_log_file(path) {
        let reader = open_lone(path)?;
        for e in reader.index().iter().filter(|e| e.has_meta) {
            let data = reader.read(e).map_err(|e| anyhow!(problem_text(&e)))?;
            let mut found = None;
            // An empty range: the metadata records only.
            data.for_each_record(Some(&KeyGroupRange::EMPTY), &mut |_, rec| {
                if let Record::Metadata { descriptor, .. } = rec {
                    if descriptor.name == state && found.is_none() {
                        found = Some(descriptor.key_schema.clone());
                    }
                }
                Ok(())
            })
            .map_err(|e| anyhow!(problem_text(&e)))?;
            if let Some(s) = found {
                return Ok(s);
            }
        }
        bail!("{}: no metadata record declares a state {state:?}", path.display());
    }
    let reader = SnapshotReader::open(path)?;
    let m = reader.metadata();
    let found = m
        .operators
        .iter()
        .filter(|o| uid.is_none_or(|u| u == o.uid))
        .flat_map(|o| &o.keyed_states)
        .find(|d| d.name == state);
    match found {
        Some(d) => Ok(d.key_schema.clone()),
        None => bail!("{}: no operator has a keyed state {state:?}", path.display()),
    }
}
