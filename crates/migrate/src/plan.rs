//! Edits and the plan they make: what the output holds, found from `_metadata` alone before
//! anything is read or written.

use crate::MigrateError;
use statekit_core::{keygroup, OperatorStateDescriptor, StateDescriptor};
use statekit_format::{Compression, OperatorMetadata, SnapshotMetadata};
use statekit_snapshot::Snapshot;
use std::collections::BTreeSet;
use std::sync::Arc;

/// One change to a snapshot. Edits compose: each applies to what the edits before it left
/// (rename a uid, then drop a state of the new uid).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Edit {
    /// The operator `from` gets uid `to` (and the operator id that uid hashes to).
    RenameUid {
        /// The current uid.
        from: String,
        /// The new uid.
        to: String,
    },
    /// The operator and all its state are left out.
    DropOperator {
        /// The operator.
        uid: String,
    },
    /// A keyed or operator state of the operator is left out.
    DropState {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
    },
    /// A keyed or operator state is renamed (its entries keep everything else).
    RenameState {
        /// The operator.
        uid: String,
        /// The current name.
        from: String,
        /// The new name.
        to: String,
    },
    /// The operator's state is split for `parallelism` subtasks (keyed state by key-group
    /// ranges, operator state by Flink's redistribution rules).
    Parallelism {
        /// The operator.
        uid: String,
        /// The new parallelism (1..=its max parallelism).
        parallelism: u32,
    },
    /// Values, list elements and map entries of TTL'd states that had expired at the time
    /// given by [`PlanOptions::now_ms`] are left out.
    PurgeExpired,
    /// The operator whose id (32 hex digits, as `show` prints it) is `operator_id` gets uid
    /// `uid` — for an operator whose uid was generated (Flink's auto-generated ids) that a
    /// new version of the job names.
    SetUid {
        /// The operator's id.
        operator_id: String,
        /// Its new uid.
        uid: String,
    },
    /// Every key moves to its key group under `max_parallelism` key groups: split without
    /// sorting when it is 2 to 4 times the input's (each input key group becomes several),
    /// otherwise re-bucketed by an external sort bounded by [`PlanOptions::memory`].
    MaxParallelism {
        /// The operator.
        uid: String,
        /// The new max parallelism (1..=32768, at least the operator's parallelism).
        max_parallelism: u32,
    },
    /// Only the keyed state of these keys (serialized, as stored) is kept.
    KeepKeys {
        /// The operator.
        uid: String,
        /// The keys.
        keys: Arc<BTreeSet<Vec<u8>>>,
    },
    /// The keyed state of these keys (serialized, as stored) is left out.
    DropKeys {
        /// The operator.
        uid: String,
        /// The keys.
        keys: Arc<BTreeSet<Vec<u8>>>,
    },
}

/// Which keys of an operator's keyed state are kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyFilter {
    /// Only these (all when `None`).
    pub keep: Option<Arc<BTreeSet<Vec<u8>>>>,
    /// Not these.
    pub drop: Option<Arc<BTreeSet<Vec<u8>>>>,
}

impl KeyFilter {
    /// Whether `key` is kept.
    pub fn keeps(&self, key: &[u8]) -> bool {
        self.keep.as_ref().is_none_or(|k| k.contains(key)) && self.drop.as_ref().is_none_or(|d| !d.contains(key))
    }

    /// Whether every key is kept.
    pub fn keeps_all(&self) -> bool {
        self.keep.is_none() && self.drop.is_none()
    }
}

/// How the output is written.
#[derive(Clone, Debug)]
pub struct PlanOptions {
    /// The output's format.
    pub format: OutputFormat,
    /// Codec of the output's data blocks (native output: of its SST files; Zstandard at
    /// RocksDB's default level).
    pub compression: Compression,
    /// Target uncompressed block size of the output's data files (a plain copy of a
    /// canonical file is transcoded block by block and keeps the input's blocks).
    pub block_size: usize,
    /// The "now" of [`Edit::PurgeExpired`] (milliseconds since the epoch).
    pub now_ms: i64,
    /// Hard-link (or, across file systems, copy) the data files of operators whose state the
    /// edits leave as it is — a renamed or kept operator at the same parallelism, from a
    /// canonical input — instead of rewriting them. The input and the output then share
    /// those files' inodes (snapshot files are never modified once written).
    pub link: bool,
    /// Bytes of entries [`Edit::MaxParallelism`] holds in memory before it spills a sorted
    /// run to disk.
    pub memory: usize,
    /// Where spilled runs go (default: beside the output, removed when done).
    pub spill_dir: Option<std::path::PathBuf>,
}

impl Default for PlanOptions {
    /// LZ4, 64 KiB blocks (the writer's defaults), now = the system clock.
    fn default() -> Self {
        let w = statekit_format::WriteOptions::default();
        PlanOptions {
            format: OutputFormat::Canonical,
            compression: w.compression,
            block_size: w.block_size,
            now_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                .unwrap_or(0),
            link: false,
            memory: 256 << 20,
            spill_dir: None,
        }
    }
}

/// The format a migration writes keyed state in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputFormat {
    /// statekit's canonical data files: restore into any backend, at any parallelism.
    #[default]
    Canonical,
    /// RocksDB's own files (`statekit-rocksdb`'s native handle, written by bulk-loading SST
    /// files): a RocksDB backend restores them by linking the files in, without a put per
    /// entry. Needs the `rocksdb` feature.
    Native,
}

impl OutputFormat {
    /// `canonical` or `native`.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Canonical => "canonical",
            OutputFormat::Native => "native",
        }
    }
}

/// A keyed state of the output and the input state it comes from.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyedStatePlan {
    /// The state's name in the input.
    pub source: String,
    /// Its descriptor in the output.
    pub target: StateDescriptor,
}

/// An operator state of the output and the input state it comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OperatorStatePlan {
    /// The state's name in the input.
    pub source: String,
    /// Its descriptor in the output.
    pub target: OperatorStateDescriptor,
}

/// One operator of the output.
#[derive(Clone, Debug, PartialEq)]
pub struct OperatorPlan {
    /// Its uid in the input.
    pub source_uid: String,
    /// Its uid in the output.
    pub uid: String,
    /// Its parallelism in the input.
    pub source_parallelism: u32,
    /// Its parallelism in the output.
    pub parallelism: u32,
    /// Its max parallelism in the input.
    pub source_max_parallelism: u32,
    /// Its max parallelism in the output.
    pub max_parallelism: u32,
    /// Whether all its subtasks had finished (kept).
    pub finished: bool,
    /// Its keyed states, in the input's order.
    pub keyed_states: Vec<KeyedStatePlan>,
    /// Its operator states, in the input's order.
    pub operator_states: Vec<OperatorStatePlan>,
    /// States of the input left out.
    pub dropped_states: Vec<String>,
    /// Bytes of the input's files it reads.
    pub input_bytes: u64,
    /// The input's operator id (hex).
    pub operator_id: String,
    /// Whether its data files are linked from the input instead of rewritten
    /// ([`PlanOptions::link`]).
    pub linked: bool,
    /// The keys kept ([`Edit::KeepKeys`], [`Edit::DropKeys`]).
    pub keys: KeyFilter,
    /// The rule its keys are in key groups by: the input's, kept (Apache Flink's for state
    /// that came from Flink), so a rescale places every key where the same job would.
    pub key_group_scheme: statekit_core::KeyGroupScheme,
}

impl OperatorPlan {
    /// Its id in the output: the input's while its uid is unchanged (Apache Flink matches
    /// state to operators by id; a Flink 1.x snapshot names operators by id alone), else the
    /// hash of its new uid, as Flink computes it for a job that declares that uid.
    pub fn output_id(&self) -> statekit_core::OperatorId {
        match self.operator_id.parse() {
            Ok(id) if self.uid == self.source_uid => id,
            _ => statekit_core::OperatorId::from_uid(&self.uid),
        }
    }

    /// Whether the operator comes out as it went in: same uid, parallelism and states.
    pub fn is_unchanged(&self) -> bool {
        self.uid == self.source_uid && self.is_unchanged_but_uid()
    }

    /// Whether its state comes out as it went in (its uid may change: data files do not
    /// name their operator).
    pub fn is_unchanged_but_uid(&self) -> bool {
        self.parallelism == self.source_parallelism
            && self.max_parallelism == self.source_max_parallelism
            && self.keys.keeps_all()
            && self.dropped_states.is_empty()
            && self.keyed_states.iter().all(|s| s.source == s.target.name)
            && self.operator_states.iter().all(|s| s.source == s.target.name)
    }
}

/// What a migration writes: the output's operators, each traced to its input, and what is
/// left out. Made by [`Plan::new`] from `_metadata` alone.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The output's operators, in the input's order.
    pub operators: Vec<OperatorPlan>,
    /// Input operators left out (their input uids).
    pub dropped_operators: Vec<String>,
    /// With [`Edit::PurgeExpired`]: the time TTL'd data is judged against.
    pub purge_expired_at: Option<i64>,
    /// How data files are written.
    pub options: PlanOptions,
    /// The input's `_metadata` (checkpoint id, job id and properties are kept).
    pub input: SnapshotMetadata,
}

impl Plan {
    /// Applies `edits` in order to the operators of `snapshot`. Every edit is
    /// checked against what the edits before it left: unknown uids and states, renames onto
    /// names in use and parallelism outside `1..=max parallelism` are refused
    /// ([`MigrateError::kind`] is [`statekit_core::ErrorKind::Caller`]).
    pub fn new(snapshot: &Snapshot, edits: &[Edit], options: PlanOptions) -> Result<Plan, MigrateError> {
        if options.format == OutputFormat::Native && !cfg!(feature = "rocksdb") {
            return Err(MigrateError::NotSupported {
                what: "native output in a build without the `rocksdb` feature".into(),
            });
        }
        let meta = snapshot.metadata();
        let mut ops: Vec<OperatorPlan> = meta.operators.iter().map(|o| operator_plan(meta, o)).collect();
        let mut dropped_operators = Vec::new();
        let mut purge = None;
        for edit in edits {
            match edit {
                Edit::RenameUid { from, to } => {
                    if from != to && ops.iter().any(|o| &o.uid == to) {
                        return Err(MigrateError::UidTaken {
                            from: from.clone(),
                            to: to.clone(),
                        });
                    }
                    find(&mut ops, from)?.uid = to.clone();
                }
                Edit::DropOperator { uid } => {
                    find(&mut ops, uid)?;
                    let i = ops.iter().position(|o| &o.uid == uid).unwrap_or_default();
                    dropped_operators.push(ops.remove(i).source_uid);
                }
                Edit::DropState { uid, state } => {
                    let op = find(&mut ops, uid)?;
                    // Names are unique within each list; a name both lists hold goes from both.
                    let source = op
                        .operator_states
                        .iter()
                        .find(|s| &s.target.name == state)
                        .map(|s| s.source.clone())
                        .or_else(|| {
                            op.keyed_states
                                .iter()
                                .find(|s| &s.target.name == state)
                                .map(|s| s.source.clone())
                        });
                    let Some(source) = source else {
                        return Err(MigrateError::UnknownState {
                            uid: uid.clone(),
                            state: state.clone(),
                            known: state_names(op),
                        });
                    };
                    op.keyed_states.retain(|s| &s.target.name != state);
                    op.operator_states.retain(|s| &s.target.name != state);
                    op.dropped_states.push(source);
                }
                Edit::RenameState { uid, from, to } => {
                    let op = find(&mut ops, uid)?;
                    let known = state_names(op);
                    if !known.contains(from) {
                        return Err(MigrateError::UnknownState {
                            uid: uid.clone(),
                            state: from.clone(),
                            known,
                        });
                    }
                    if from != to && known.contains(to) {
                        return Err(MigrateError::StateNameTaken {
                            uid: uid.clone(),
                            from: from.clone(),
                            to: to.clone(),
                        });
                    }
                    for s in op.keyed_states.iter_mut().filter(|s| &s.target.name == from) {
                        s.target.name = to.clone();
                    }
                    for s in op.operator_states.iter_mut().filter(|s| &s.target.name == from) {
                        s.target.name = to.clone();
                    }
                }
                Edit::Parallelism { uid, parallelism } => {
                    let op = find(&mut ops, uid)?;
                    if keygroup::check_parallelism(*parallelism, op.max_parallelism).is_err() {
                        return Err(MigrateError::BadParallelism {
                            uid: uid.clone(),
                            parallelism: *parallelism,
                            max_parallelism: op.max_parallelism,
                        });
                    }
                    op.parallelism = *parallelism;
                }
                Edit::PurgeExpired => purge = Some(options.now_ms),
                Edit::SetUid { operator_id, uid } => {
                    let known: Vec<String> = ops.iter().map(|o| o.operator_id.clone()).collect();
                    let Some(i) = ops.iter().position(|o| o.operator_id.eq_ignore_ascii_case(operator_id)) else {
                        return Err(MigrateError::UnknownOperatorId {
                            operator_id: operator_id.clone(),
                            known,
                        });
                    };
                    if ops.iter().enumerate().any(|(j, o)| j != i && &o.uid == uid) {
                        return Err(MigrateError::UidTaken {
                            from: ops.get(i).map(|o| o.uid.clone()).unwrap_or_default(),
                            to: uid.clone(),
                        });
                    }
                    if let Some(o) = ops.get_mut(i) {
                        o.uid = uid.clone();
                    }
                }
                Edit::MaxParallelism { uid, max_parallelism } => {
                    let op = find(&mut ops, uid)?;
                    if keygroup::check_max_parallelism(*max_parallelism).is_err() {
                        return Err(MigrateError::BadMaxParallelism {
                            uid: uid.clone(),
                            max_parallelism: *max_parallelism,
                        });
                    }
                    // A new max parallelism puts every key anew: its rule must place it.
                    if let Some(d) = op
                        .keyed_states
                        .iter()
                        .find(|d| !op.key_group_scheme.supports(&d.target.key_schema))
                    {
                        return Err(MigrateError::NotSupported {
                            what: format!(
                                "a new max parallelism for operator {uid:?}: its keys are in Apache Flink's key \
                                 groups, and statekit cannot compute the Java hashCode of its {} keys (state {:?}) \
                                 that places them",
                                d.target.key_schema, d.target.name
                            ),
                        });
                    }
                    op.max_parallelism = *max_parallelism;
                }
                Edit::KeepKeys { uid, keys } => {
                    let op = keyed(find(&mut ops, uid)?, "--keep-keys")?;
                    op.keys.keep = Some(match &op.keys.keep {
                        Some(k) => Arc::new(k.intersection(keys).cloned().collect()),
                        None => keys.clone(),
                    });
                }
                Edit::DropKeys { uid, keys } => {
                    let op = keyed(find(&mut ops, uid)?, "--drop-keys")?;
                    op.keys.drop = Some(match &op.keys.drop {
                        Some(d) => Arc::new(d.union(keys).cloned().collect()),
                        None => keys.clone(),
                    });
                }
            }
        }
        // The parallelism must fit the max parallelism both ends up with, whatever order they
        // were set in.
        if let Some(op) = ops.iter().find(|o| o.parallelism > o.max_parallelism) {
            return Err(MigrateError::BadParallelism {
                uid: op.uid.clone(),
                parallelism: op.parallelism,
                max_parallelism: op.max_parallelism,
            });
        }
        for op in &mut ops {
            let canonical = meta.operator(&op.source_uid).is_some_and(|o| {
                o.subtasks
                    .iter()
                    .all(|s| s.keyed.native().is_none() && s.keyed.changelog().is_none())
            });
            op.linked = options.link
                && options.format == OutputFormat::Canonical
                && purge.is_none()
                && canonical
                && snapshot.statekit_files().is_some()
                && op.is_unchanged_but_uid();
        }
        Ok(Plan {
            operators: ops,
            dropped_operators,
            purge_expired_at: purge,
            options,
            input: meta.clone(),
        })
    }

    /// What the plan changes, a line each (empty: a plain copy into the canonical format).
    pub fn changes(&self) -> Vec<String> {
        let mut out = Vec::new();
        for uid in &self.dropped_operators {
            out.push(format!("drop operator {uid:?}"));
        }
        for o in &self.operators {
            if o.uid != o.source_uid {
                out.push(format!("rename operator {:?} to {:?}", o.source_uid, o.uid));
            }
            for s in &o.dropped_states {
                out.push(format!("operator {:?}: drop state {s:?}", o.uid));
            }
            let renamed = o
                .keyed_states
                .iter()
                .map(|s| (&s.source, &s.target.name))
                .chain(o.operator_states.iter().map(|s| (&s.source, &s.target.name)));
            for (from, to) in renamed.filter(|(from, to)| from != to) {
                out.push(format!("operator {:?}: rename state {from:?} to {to:?}", o.uid));
            }
            if let Some(k) = &o.keys.keep {
                out.push(format!(
                    "operator {:?}: keep the keyed state of {} keys only",
                    o.uid,
                    k.len()
                ));
            }
            if let Some(d) = &o.keys.drop {
                out.push(format!(
                    "operator {:?}: drop the keyed state of {} keys",
                    o.uid,
                    d.len()
                ));
            }
            if o.max_parallelism != o.source_max_parallelism {
                out.push(format!(
                    "operator {:?}: max parallelism {} -> {} ({})",
                    o.uid,
                    o.source_max_parallelism,
                    o.max_parallelism,
                    if crate::view::splits(o) {
                        "each key group split, no sort"
                    } else {
                        "every key re-bucketed by an external sort"
                    }
                ));
            }
            if o.parallelism != o.source_parallelism {
                out.push(format!(
                    "operator {:?}: parallelism {} -> {}",
                    o.uid, o.source_parallelism, o.parallelism
                ));
            }
        }
        if let Some(t) = self.purge_expired_at {
            out.push(format!("purge TTL-expired state as of {t} ms"));
        }
        out
    }

    /// Bytes of the input's files the migration reads (and rewrites).
    pub fn input_bytes(&self) -> u64 {
        self.operators
            .iter()
            .filter(|o| !o.linked)
            .map(|o| o.input_bytes)
            .fold(0, u64::saturating_add)
    }

    /// Bytes of the input's files linked (or copied) into the output as they are.
    pub fn linked_bytes(&self) -> u64 {
        self.operators
            .iter()
            .filter(|o| o.linked)
            .map(|o| o.input_bytes)
            .fold(0, u64::saturating_add)
    }
}

fn operator_plan(meta: &SnapshotMetadata, o: &OperatorMetadata) -> OperatorPlan {
    let alone = SnapshotMetadata {
        operators: vec![o.clone()],
        ..meta.clone()
    };
    OperatorPlan {
        source_uid: o.uid.clone(),
        uid: o.uid.clone(),
        operator_id: o.operator_id.to_string(),
        source_parallelism: o.parallelism,
        parallelism: o.parallelism,
        source_max_parallelism: o.max_parallelism,
        max_parallelism: o.max_parallelism,
        finished: o.finished,
        keyed_states: o
            .keyed_states
            .iter()
            .map(|d| KeyedStatePlan {
                source: d.name.clone(),
                target: d.clone(),
            })
            .collect(),
        operator_states: o
            .operator_states
            .iter()
            .map(|d| OperatorStatePlan {
                source: d.name.clone(),
                target: d.clone(),
            })
            .collect(),
        dropped_states: Vec::new(),
        input_bytes: statekit_snapshot::referenced_bytes(&alone).0,
        linked: false,
        keys: KeyFilter::default(),
        key_group_scheme: o.key_group_scheme,
    }
}

fn find<'p>(ops: &'p mut [OperatorPlan], uid: &str) -> Result<&'p mut OperatorPlan, MigrateError> {
    let known: Vec<String> = ops.iter().map(|o| o.uid.clone()).collect();
    ops.iter_mut()
        .find(|o| o.uid == uid)
        .ok_or_else(|| MigrateError::UnknownOperator {
            uid: uid.to_string(),
            known,
        })
}

/// `op`, if it has keyed state for the key edit `edit` to apply to.
fn keyed<'p>(op: &'p mut OperatorPlan, edit: &str) -> Result<&'p mut OperatorPlan, MigrateError> {
    if op.keyed_states.is_empty() {
        let why = if op.operator_states.is_empty() {
            "the operator has no state".to_string()
        } else {
            format!(
                "the operator has no keyed state, only operator state ({}): keys are kept or dropped in keyed state",
                op.operator_states
                    .iter()
                    .map(|s| s.target.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        return Err(MigrateError::NotApplicable {
            edit: edit.to_string(),
            uid: op.uid.clone(),
            why,
        });
    }
    Ok(op)
}

fn state_names(op: &OperatorPlan) -> Vec<String> {
    op.keyed_states
        .iter()
        .map(|s| s.target.name.clone())
        .chain(op.operator_states.iter().map(|s| s.target.name.clone()))
        .collect()
}
