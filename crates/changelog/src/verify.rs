//! Verifying changelog state beyond what the format crate checks (it cannot decode log files):
//! every referenced log file decoded in full, every tail segment matched against its file's
//! index ([`crate::tail::walk_tail`], the walk a restore replays), no change set replayed twice
//! over the same key groups, every materialization's statistics equal to its file's, and every
//! record a restore would replay checked against the operator's states.

use crate::file::{LogFileReader, LogId};
use crate::record::Record;
use crate::tail::{walk_tail, LogFiles, TailPos, TailStats};
use statekit_core::keygroup::KeyGroupError;
use statekit_core::storage::Blob;
use statekit_core::{KeyGroupRange, StateDescriptor};
use statekit_format::{KeyedFileReader, KeyedStats, OperatorMetadata, Problem, ResolvedChangelogHandle};
use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

/// What the changelog verification read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
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

/// Checks the changelog state of operator `op` (its `handles`, every key group resolved):
/// every log file of their tails decoded in full (CRCs, index, trailer, every record; each
/// once across calls sharing `files`), every tail segment found at its offset with the log,
/// sequence number, length and record count the checkpoint records, no change set replayed
/// twice over the same key groups, every materialization's statistics equal to its file's,
/// and every record a restore would replay declared by a metadata record, of the operator's
/// state (compatible descriptor), of an operation that state's kind has, timed iff the state
/// has a TTL, in the key group of its key. Adds to `check` what it read and to `problems`
/// what is wrong.
pub fn verify_operator(
    op: &OperatorMetadata,
    handles: &[ResolvedChangelogHandle],
    files: &mut LogFiles,
    check: &mut LogCheck,
    problems: &mut Vec<Problem>,
) {
    // Every log file once, in full.
    for h in handles {
        for file in &h.tail {
            if files.contains(file) {
                continue;
            }
            let r = LogFileReader::open(file.storage.as_ref(), &file.path, Some(file.size))
                .and_then(|r| r.verify().map(|counts| (r, counts)));
            match r {
                Ok((r, (sets, records))) => {
                    check.log_files += 1;
                    check.bytes += r.size();
                    check.change_sets += sets;
                    check.records += records;
                    files.insert(file, Some(r));
                }
                Err(e) => {
                    problems.push(Problem::from(&e));
                    files.insert(file, None);
                }
            }
        }
    }
    for h in handles {
        let who = format!("operator {:?}, subtask {}", op.uid, h.subtask);
        verify_materializations(h, &who, problems);
        verify_tail_refs(h, op.max_parallelism, &who, problems);
        check.replayed += verify_replay(h, op, files, problems);
    }
}

/// Each materialization's recorded statistics equal its file's index.
fn verify_materializations(h: &ResolvedChangelogHandle, who: &str, problems: &mut Vec<Problem>) {
    for (k, (part, file)) in h.handle.materialized.iter().zip(&h.materialized).enumerate() {
        let Some(stats) = &part.stats else { continue };
        // Errors opening it are the format's verify's to report.
        if let Ok(r) = KeyedFileReader::open(file.storage.as_ref(), &file.path, Some(file.size)) {
            if *stats != KeyedStats::from_info(r.info()) {
                problems.push(
                    Problem::corrupt(
                        file.storage.describe(&file.path),
                        0,
                        "stats",
                        "the statistics _metadata records for it disagree with its index",
                    )
                    .within(format!("{who}, materialized[{k}]")),
                );
            }
        }
    }
}

/// A problem of `_metadata` found from its content (no offset: the decoded metadata keeps
/// none for tail entries).
fn metadata_problem(field: String, reason: String, who: &str) -> Problem {
    Problem {
        file: "_metadata".to_string(),
        offset: None,
        field: Some(field),
        reason,
        context: Some(who.to_string()),
        kind: statekit_core::ErrorKind::Corrupt,
    }
}

/// Tail references that make sense without the files: key groups below max parallelism, no
/// change set replayed twice over the same key groups.
fn verify_tail_refs(h: &ResolvedChangelogHandle, max_p: u32, who: &str, problems: &mut Vec<Problem>) {
    // (log, sqn) → the tail entries replaying it, with their key groups.
    type Uses = Vec<(usize, KeyGroupRange)>;
    let mut seen: HashMap<([u8; 16], u64), Uses> = HashMap::new();
    for (k, seg) in h.handle.tail.iter().enumerate() {
        if !seg.key_groups.is_empty() && seg.key_groups.end_exclusive() > max_p {
            problems.push(metadata_problem(
                format!("changelog.tail[{k}].key_groups"),
                format!("{} exceeds max parallelism {max_p}", seg.key_groups),
                who,
            ));
        }
        let earlier = seen.entry((seg.log, seg.sqn)).or_default();
        for (j, kgs) in earlier.iter() {
            if !kgs.intersection(&seg.key_groups).is_empty() {
                problems.push(metadata_problem(
                    format!("changelog.tail[{k}]"),
                    format!(
                        "change set {} of log {} is also tail[{j}], over key groups {} (replayed twice)",
                        seg.sqn,
                        LogId(seg.log),
                        kgs.intersection(&seg.key_groups)
                    ),
                    who,
                ));
            }
        }
        earlier.push((k, seg.key_groups));
    }
}

/// What is wrong with one record a restore would replay, if anything.
fn record_problem(
    op: &OperatorMetadata,
    declared: &mut HashMap<(LogId, u32), StateDescriptor>,
    pos: &TailPos<'_>,
    kg: u32,
    rec: Record<'_>,
) -> Option<String> {
    match rec {
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
            declared.insert((pos.log(), state), descriptor);
            p
        }
        Record::Change(c) => match declared.get(&(pos.log(), c.state)) {
            None => Some(format!(
                "key group {kg}: a change of state {} that no earlier metadata record of log {} declared",
                c.state,
                pos.log()
            )),
            Some(d) if !c.op.fits(d.kind) => Some(format!(
                "key group {kg}: a {} record on {} state {:?}",
                c.op.name(),
                d.kind,
                d.name
            )),
            Some(d) if d.ttl.is_some() != c.time.is_some() => Some(format!(
                "key group {kg}: a record of state {:?} {} a time, but the state {} a TTL",
                d.name,
                if c.time.is_some() { "has" } else { "lacks" },
                if d.ttl.is_some() { "has" } else { "has no" }
            )),
            Some(d) => match op.key_group_of(c.key, &d.key_schema) {
                // A key type the operator's rule cannot place keeps the group it was logged in.
                Err(KeyGroupError::UnsupportedKeyType { .. }) => None,
                Err(e) => Some(format!("key group {kg}: the record's key: {e}")),
                Ok(actual) if actual != kg => Some(format!(
                    "key group {kg}: the record's key belongs to key group {actual}"
                )),
                Ok(_) => None,
            },
        },
    }
}

/// Walks the replay of `h` and checks every record; returns the records checked.
fn verify_replay(
    h: &ResolvedChangelogHandle,
    op: &OperatorMetadata,
    files: &mut LogFiles,
    problems: &mut Vec<Problem>,
) -> u64 {
    let mut declared: HashMap<(LogId, u32), StateDescriptor> = HashMap::new();
    // One problem per change set at most: a damaged writer would repeat it for every record.
    let mut flagged: BTreeSet<(usize, u64)> = BTreeSet::new();
    let mut found: Vec<Problem> = Vec::new();
    let mut segment_problems: Vec<Problem> = Vec::new();
    let mut stats = TailStats::default();
    let walked: Result<ControlFlow<()>, std::convert::Infallible> = walk_tail(
        h,
        &op.uid,
        KeyGroupRange::all(op.max_parallelism),
        files,
        &mut stats,
        &mut |p| {
            segment_problems.push(p.problem());
            Ok(())
        },
        &mut |pos, kg, rec| {
            if let Some(why) = record_problem(op, &mut declared, pos, kg, rec) {
                if flagged.insert((pos.tail_index, pos.offset())) {
                    found.push(Problem::corrupt(pos.shown, pos.offset(), "record", why).within(format!(
                        "operator {:?}, subtask {}, tail[{}]",
                        op.uid, pos.subtask, pos.tail_index
                    )));
                }
            }
            Ok(ControlFlow::Continue(()))
        },
    );
    // Neither callback fails or stops the walk.
    let _ = walked;
    problems.extend(segment_problems);
    problems.extend(found);
    stats.records
}

/// Decodes a lone log file in full (`shown` names it in problems): what it read, and what is
/// wrong with it.
pub fn verify_log_file(blob: Arc<dyn Blob>, shown: &str) -> (LogCheck, Vec<Problem>) {
    let mut check = LogCheck {
        bytes: blob.bytes().len() as u64,
        ..LogCheck::default()
    };
    let mut problems = Vec::new();
    match LogFileReader::from_blob(blob, shown, None).and_then(|r| r.verify()) {
        Ok((sets, records)) => {
            check.log_files = 1;
            check.change_sets = sets;
            check.records = records;
        }
        Err(e) => problems.push(Problem::from(&e)),
    }
    (check, problems)
}
