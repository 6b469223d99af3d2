//! # statekit-query
//!
//! SQL over a snapshot with [Apache DataFusion](https://datafusion.apache.org)
//! (`docs/design/0012-tables.md`): every keyed state is a table `"<uid>"."<state>"` of the
//! typed Arrow batches [`statekit_table::StateBatches`] builds, read straight from the
//! snapshot (canonical, native, incremental or changelog) when a query runs; every operator
//! state a table too, and `states` and `operators` list what the snapshot holds.
//!
//! A predicate on `key` (`key = 'a'`, `key IN (…)`) reads only the key groups those keys
//! belong to, and one on `key_group` (`=`, `IN`, `<`, `<=`, `>`, `>=`, `BETWEEN`, combined
//! with `AND`/`OR`) only those key groups: `EXPLAIN` shows them in the `StateScanExec` line.
//!
//! ```no_run
//! use statekit_query::SnapshotQuery;
//! let reader = statekit_checkpoint::SnapshotReader::open("savepoint-1")?;
//! let q = SnapshotQuery::new(std::sync::Arc::new(reader))?;
//! let batches = q.sql(r#"SELECT value FROM "counter"."count" WHERE key = 'a'"#)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod prune;
mod scan;
mod tables;

pub use error::QueryError;
pub use scan::{ScanStats, StateScanExec, StateTable};

use datafusion::prelude::SessionContext;
use statekit_checkpoint::SnapshotReader;
use std::sync::Arc;

/// Re-exported: the batches results come in.
pub use arrow_array::RecordBatch;

/// Re-exported: DataFusion's Arrow (pretty printing, CSV and JSON writers for results).
pub use datafusion::arrow;

/// A snapshot opened for SQL: a DataFusion session with the snapshot's tables registered,
/// and the runtime queries run on.
pub struct SnapshotQuery {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    stats: Arc<ScanStats>,
}

impl std::fmt::Debug for SnapshotQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotQuery").field("stats", &self.stats).finish()
    }
}

impl SnapshotQuery {
    /// Registers the snapshot's tables: `"<uid>"."<state>"` per keyed state (scanned when a
    /// query runs), `"<uid>"."<state>"` per operator state (`"<state>.operator"` when a keyed
    /// state has the name), `states` and `operators`.
    pub fn new(reader: Arc<SnapshotReader>) -> Result<Self, QueryError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(std::thread::available_parallelism().map_or(2, usize::from))
            .thread_name("statekit-query")
            .build()
            .map_err(QueryError::Runtime)?;
        let ctx = SessionContext::new();
        let stats = Arc::new(ScanStats::default());
        tables::register(&ctx, &reader, &stats)?;
        Ok(SnapshotQuery { ctx, runtime, stats })
    }

    /// Runs one SQL statement and collects its result.
    pub fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>, QueryError> {
        self.runtime.block_on(async {
            let df = self.ctx.sql(sql).await?;
            Ok(df.collect().await?)
        })
    }

    /// Runs one SQL statement and hands its result to `f` batch by batch, as it is computed
    /// (a large result is never held whole).
    pub fn sql_each(
        &self,
        sql: &str,
        mut f: impl FnMut(&RecordBatch) -> Result<(), QueryError>,
    ) -> Result<arrow_schema::SchemaRef, QueryError> {
        use futures::StreamExt;
        self.runtime.block_on(async {
            let df = self.ctx.sql(sql).await?;
            let schema: arrow_schema::SchemaRef = Arc::new(df.schema().as_arrow().clone());
            let mut stream = df.execute_stream().await?;
            while let Some(b) = stream.next().await {
                f(&b?)?;
            }
            Ok(schema)
        })
    }

    /// What the scans of this session read so far.
    pub fn stats(&self) -> &ScanStats {
        &self.stats
    }
}
