//! A keyed state as a DataFusion table: [`StateTable`] plans a [`StateScanExec`] over the key
//! groups the pushed predicates leave, one partition per subtask, each streaming batches
//! from the snapshot on its own thread (two batches in flight: memory stays bounded).

use crate::prune;
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use async_trait::async_trait;
use datafusion::catalog::Session;
use datafusion::datasource::{TableProvider, TableType};
use datafusion::error::{DataFusionError, Result};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::{Expr, TableProviderFilterPushDown};
use datafusion::physical_expr::EquivalenceProperties;
use datafusion::physical_plan::execution_plan::{Boundedness, EmissionType};
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{
    DisplayAs, DisplayFormatType, ExecutionPlan, Partitioning, PlanProperties, SendableRecordBatchStream,
};
use statekit_core::{Entry, KeyGroupAssigner, KeyGroupRange, StateDescriptor, StateError};
use statekit_snapshot::cursor::{CursorError, EntryFilter, KeyedEntries, Walked};
use statekit_snapshot::Snapshot;
use statekit_table::{state_schema, StateBatches, TableError};
use std::any::Any;
use std::collections::BTreeSet;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What scans read: key groups visited and rows produced, over a session's queries.
#[derive(Debug, Default)]
pub struct ScanStats {
    key_groups: AtomicU64,
    rows: AtomicU64,
}

impl ScanStats {
    /// Key groups the scans read.
    pub fn key_groups(&self) -> u64 {
        self.key_groups.load(Ordering::Relaxed)
    }

    /// Rows the scans produced.
    pub fn rows(&self) -> u64 {
        self.rows.load(Ordering::Relaxed)
    }
}

/// One keyed state of a snapshot as a table.
#[derive(Debug)]
pub struct StateTable {
    reader: Snapshot,
    uid: String,
    desc: StateDescriptor,
    max_parallelism: u32,
    /// The operator's key-group rule for the state's key type: where a key predicate looks.
    groups: KeyGroupAssigner,
    /// Each subtask's key groups.
    subtasks: Vec<KeyGroupRange>,
    schema: SchemaRef,
    stats: Arc<ScanStats>,
}

impl StateTable {
    /// The table of state `desc` of operator `uid`.
    pub(crate) fn new(reader: Snapshot, uid: &str, desc: &StateDescriptor, stats: Arc<ScanStats>) -> Result<Self> {
        let op = reader
            .operator(uid)
            .map_err(|e| DataFusionError::External(Box::new(e)))?;
        Ok(StateTable {
            uid: uid.to_string(),
            max_parallelism: op.max_parallelism,
            groups: op.key_group_scheme.assigner(&desc.key_schema, op.max_parallelism),
            subtasks: op.subtasks.iter().map(|s| s.key_groups).collect(),
            schema: Arc::new(state_schema(desc)),
            desc: desc.clone(),
            reader,
            stats,
        })
    }
}

#[async_trait]
impl TableProvider for StateTable {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    fn table_type(&self) -> TableType {
        TableType::Base
    }

    fn supports_filters_pushdown(&self, filters: &[&Expr]) -> Result<Vec<TableProviderFilterPushDown>> {
        Ok(filters
            .iter()
            .map(|f| {
                if prune::prunes(f, &self.desc.key_schema, &self.groups) {
                    // Rows of other keys in the same key group still come: DataFusion
                    // filters them.
                    TableProviderFilterPushDown::Inexact
                } else {
                    TableProviderFilterPushDown::Unsupported
                }
            })
            .collect())
    }

    async fn scan(
        &self,
        _state: &dyn Session,
        projection: Option<&Vec<usize>>,
        filters: &[Expr],
        _limit: Option<usize>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let mut wanted: Option<BTreeSet<u32>> = None;
        for f in filters {
            if let Some(kgs) = prune::key_groups(f, &self.desc.key_schema, &self.groups) {
                wanted = Some(match wanted {
                    Some(w) => w.intersection(&kgs).copied().collect(),
                    None => kgs,
                });
            }
        }
        let parts: Vec<(KeyGroupRange, Vec<u32>)> = self
            .subtasks
            .iter()
            .map(|r| {
                let kgs: Vec<u32> = match &wanted {
                    Some(w) => w.iter().copied().filter(|kg| r.contains(*kg)).collect(),
                    None => r.iter().collect(),
                };
                (*r, kgs)
            })
            .filter(|(_, kgs)| !kgs.is_empty())
            .collect();
        let projected = match projection {
            Some(p) => Arc::new(self.schema.project(p)?),
            None => self.schema.clone(),
        };
        let partitions = parts.len().max(1);
        Ok(Arc::new(StateScanExec {
            reader: self.reader.clone(),
            uid: self.uid.clone(),
            state: self.desc.name.clone(),
            desc: self.desc.clone(),
            max_parallelism: self.max_parallelism,
            pruned: wanted.is_some(),
            parts,
            projection: projection.cloned(),
            props: PlanProperties::new(
                EquivalenceProperties::new(projected.clone()),
                Partitioning::UnknownPartitioning(partitions),
                EmissionType::Incremental,
                Boundedness::Bounded,
            ),
            schema: projected,
            stats: self.stats.clone(),
        }))
    }
}

/// The scan of one keyed state: the key groups it reads, per subtask (a partition each).
#[derive(Debug)]
pub struct StateScanExec {
    reader: Snapshot,
    uid: String,
    state: String,
    desc: StateDescriptor,
    max_parallelism: u32,
    /// Whether predicates narrowed the key groups.
    pruned: bool,
    /// (subtask key groups, the key groups of it to read).
    parts: Vec<(KeyGroupRange, Vec<u32>)>,
    projection: Option<Vec<usize>>,
    schema: SchemaRef,
    props: PlanProperties,
    stats: Arc<ScanStats>,
}

impl StateScanExec {
    /// The key groups this scan reads, ascending.
    pub fn key_groups(&self) -> Vec<u32> {
        self.parts.iter().flat_map(|(_, kgs)| kgs.iter().copied()).collect()
    }
}

impl DisplayAs for StateScanExec {
    fn fmt_as(&self, _t: DisplayFormatType, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kgs = self.key_groups();
        write!(
            f,
            "StateScanExec: uid={}, state={}, key_groups={} of {}",
            self.uid,
            self.state,
            kgs.len(),
            self.max_parallelism
        )?;
        if self.pruned {
            let shown: Vec<String> = kgs.iter().take(16).map(u32::to_string).collect();
            write!(f, " [{}{}]", shown.join(", "), if kgs.len() > 16 { ", …" } else { "" })?;
        }
        if self.projection.is_some() {
            let names: Vec<&str> = self.schema.fields().iter().map(|f| f.name().as_str()).collect();
            write!(f, ", projection=[{}]", names.join(", "))?;
        }
        Ok(())
    }
}

impl ExecutionPlan for StateScanExec {
    fn name(&self) -> &str {
        "StateScanExec"
    }

    fn as_any(&self) -> &dyn Any {
        self
    }

    fn properties(&self) -> &PlanProperties {
        &self.props
    }

    fn children(&self) -> Vec<&Arc<dyn ExecutionPlan>> {
        Vec::new()
    }

    fn with_new_children(self: Arc<Self>, _children: Vec<Arc<dyn ExecutionPlan>>) -> Result<Arc<dyn ExecutionPlan>> {
        Ok(self)
    }

    fn execute(&self, partition: usize, _context: Arc<TaskContext>) -> Result<SendableRecordBatchStream> {
        let (range, kgs) = match self.parts.get(partition) {
            Some((r, k)) => (*r, k.clone()),
            None => (KeyGroupRange::new(0, 0), Vec::new()),
        };
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<RecordBatch>>(2);
        let (reader, uid, desc, projection, stats) = (
            self.reader.clone(),
            self.uid.clone(),
            self.desc.clone(),
            self.projection.clone(),
            self.stats.clone(),
        );
        if !kgs.is_empty() {
            std::thread::Builder::new()
                .name(format!("scan-{}-{partition}", desc.name))
                .spawn(move || {
                    let send = |b: RecordBatch| -> bool {
                        let b = match &projection {
                            Some(p) => b.project(p).map_err(DataFusionError::from),
                            None => Ok(b),
                        };
                        tx.blocking_send(b).is_ok()
                    };
                    if let Err(e) = scan_part(&reader, &uid, &desc, range, &kgs, &stats, send) {
                        let _ = tx.blocking_send(Err(DataFusionError::External(Box::new(e))));
                    }
                })
                .map_err(|e| DataFusionError::External(Box::new(e)))?;
        }
        let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
        Ok(Box::pin(RecordBatchStreamAdapter::new(self.schema.clone(), stream)))
    }
}

/// Streams key groups `kgs` (of subtask range `range`) of state `desc` into `send` (which
/// returns false once nobody listens), read by an [`EntryCursor`](statekit_snapshot::EntryCursor)
/// (the walk `dump` and the inspector read too). A damaged key group fails the query: a
/// table with rows missing would be a silent partial answer.
fn scan_part(
    reader: &Snapshot,
    uid: &str,
    desc: &StateDescriptor,
    range: KeyGroupRange,
    kgs: &[u32],
    stats: &ScanStats,
    mut send: impl FnMut(RecordBatch) -> bool,
) -> std::result::Result<(), TableError> {
    let first = kgs.first().copied().unwrap_or(range.start());
    let last = kgs.last().copied().unwrap_or(range.start());
    let span = KeyGroupRange::new(first, last).intersection(&range);
    let mut cursor = KeyedEntries::open(reader, uid, span)
        .map_err(cursor_error)?
        .cursor(&desc.name, EntryFilter::default());
    let mut batches = StateBatches::new(desc, 8192);
    for &kg in kgs.iter().filter(|kg| span.contains(**kg)) {
        stats.key_groups.fetch_add(1, Ordering::Relaxed);
        cursor.seek_key_group(kg);
        let mut failure = None;
        let mut gone = false;
        // The walk ends at the key group's end (or where a batch could not be sent).
        let _ = cursor
            .walk(&mut |w| match w {
                Walked::Entry(e) => {
                    let entry = Entry {
                        state: 0,
                        key: e.key,
                        namespace: e.namespace,
                        user_key: e.user_key,
                        value: e.value,
                        timestamp: e.ttl_timestamp,
                    };
                    match batches.push(kg, &entry) {
                        Ok(Some(b)) => {
                            stats.rows.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
                            if send(b) {
                                ControlFlow::Continue(())
                            } else {
                                gone = true;
                                ControlFlow::Break(())
                            }
                        }
                        Ok(None) => ControlFlow::Continue(()),
                        Err(err) => {
                            failure = Some(err);
                            ControlFlow::Break(())
                        }
                    }
                }
                Walked::Damaged(d) => {
                    failure = Some(cursor_error(CursorError::Damaged(d)));
                    ControlFlow::Break(())
                }
                Walked::KeyGroupDone(_) => ControlFlow::Break(()),
            })
            .map_err(cursor_error)?;
        if let Some(e) = failure {
            return Err(e);
        }
        if gone {
            return Ok(());
        }
    }
    if let Some(b) = batches.finish()? {
        stats.rows.fetch_add(b.num_rows() as u64, Ordering::Relaxed);
        send(b);
    }
    Ok(())
}

/// A cursor's failure as the table layer's: the snapshot's or the state's error itself (a
/// damaged key group's names its file, offset and field).
fn cursor_error(e: CursorError) -> TableError {
    match e {
        CursorError::Snapshot(e) => TableError::Snapshot(*e),
        CursorError::State(e) => TableError::State(e),
        CursorError::Damaged(d) => match std::sync::Arc::try_unwrap(d.error) {
            Ok(e) => TableError::State(e),
            Err(shared) => TableError::State(StateError::Other(Box::new(SharedStateError(shared)))),
        },
        other => TableError::State(StateError::Other(Box::new(other))),
    }
}

/// A state error still shared elsewhere, shown as itself.
#[derive(Debug)]
struct SharedStateError(std::sync::Arc<StateError>);

impl std::fmt::Display for SharedStateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for SharedStateError {}

impl statekit_core::HasErrorKind for SharedStateError {
    fn kind(&self) -> statekit_core::ErrorKind {
        self.0.kind()
    }
}
