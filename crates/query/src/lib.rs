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
//! A session is read-only by default ([`QueryOptions`]): queries over the snapshot's tables,
//! never a file — `CREATE EXTERNAL TABLE`, `COPY … TO`, `INSERT`, `CREATE VIEW`, `SET` and
//! the like fail with [`QueryError::ReadOnly`] (DataFusion's own `SQLOptions` check), and a
//! path is not a table (`SELECT * FROM '/etc/passwd'`: no such table). DataFusion's
//! operators share a memory pool ([`QueryOptions::memory_limit`], 1 GiB by default; sorts
//! and aggregates spill past it, anything else fails with [`QueryError::MemoryLimit`]), and
//! a statement may be given a [`QueryOptions::timeout`] ([`QueryError::Timeout`]).
//!
//! ```no_run
//! use statekit_query::SnapshotQuery;
//! let snapshot = statekit_snapshot::Snapshot::open("savepoint-1")?;
//! let q = SnapshotQuery::new(snapshot)?;
//! let batches = q.sql(r#"SELECT value FROM "counter"."count" WHERE key = 'a'"#)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
mod prune;
mod refused;
mod scan;
mod tables;

pub use error::QueryError;
pub use scan::{ScanStats, StateScanExec, StateTable};

use datafusion::dataframe::DataFrame;
use datafusion::error::DataFusionError;
use datafusion::execution::context::SQLOptions;
use datafusion::execution::disk_manager::{DiskManagerBuilder, DiskManagerMode};
use datafusion::execution::memory_pool::{FairSpillPool, TrackConsumersPool};
use datafusion::execution::runtime_env::RuntimeEnvBuilder;
use datafusion::prelude::{SessionConfig, SessionContext};
use statekit_snapshot::Snapshot;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

/// Re-exported: the batches results come in.
pub use arrow_array::RecordBatch;

/// Re-exported: DataFusion's Arrow (pretty printing, CSV and JSON writers for results).
pub use datafusion::arrow;

/// The default memory limit of a session's operators: 1 GiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 1 << 30;

/// The default bound on what a session spills to temporary files: 16 GiB.
pub const DEFAULT_SPILL_LIMIT: u64 = 16 << 30;

/// What a session accepts and the resources a statement may use.
///
/// The default is read-only SQL (queries over the snapshot's tables: no DDL, DML, `COPY`,
/// `SET` or file paths as tables), 1 GiB of operator memory, 16 GiB of spill files and no
/// timeout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueryOptions {
    /// Bytes DataFusion's operators (sorts, aggregates, joins, windows) may hold at once, all
    /// running statements together (a `FairSpillPool`): a sort or aggregate that would grow
    /// past its share spills to temporary files, anything else fails with
    /// [`QueryError::MemoryLimit`]. The snapshot's scans are not counted: they hold two
    /// batches per subtask.
    pub memory_limit: usize,
    /// Bytes of temporary files (in the system's temporary directory) a session's sorts and
    /// aggregates may spill; 0: no spilling, a sort or aggregate that does not fit in
    /// `memory_limit` fails. Past it a statement fails with [`QueryError::SpillLimit`].
    pub spill_limit: u64,
    /// How long one statement may run, its result's delivery included; `None`: no limit.
    /// A statement stopped by it fails with [`QueryError::Timeout`].
    pub timeout: Option<Duration>,
    /// Accept every statement DataFusion runs: DDL (`CREATE EXTERNAL TABLE` over any file,
    /// `CREATE VIEW`, `DROP`), DML (`COPY … TO` and `INSERT INTO` any path), statements
    /// (`SET`, which can also lift the memory limit) and file paths as tables
    /// (`SELECT * FROM '/path/file.csv'`). Dangerous with SQL from anyone who should not
    /// read and write this process's files. Off: such statements fail with
    /// [`QueryError::ReadOnly`].
    pub unrestricted: bool,
}

impl Default for QueryOptions {
    fn default() -> Self {
        QueryOptions {
            memory_limit: DEFAULT_MEMORY_LIMIT,
            spill_limit: DEFAULT_SPILL_LIMIT,
            timeout: None,
            unrestricted: false,
        }
    }
}

/// A snapshot opened for SQL: a DataFusion session with the snapshot's tables registered,
/// and the runtime queries run on.
pub struct SnapshotQuery {
    ctx: SessionContext,
    runtime: tokio::runtime::Runtime,
    stats: Arc<ScanStats>,
    options: QueryOptions,
}

impl std::fmt::Debug for SnapshotQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotQuery")
            .field("stats", &self.stats)
            .field("options", &self.options)
            .finish()
    }
}

impl SnapshotQuery {
    /// Registers the snapshot's tables: `"<uid>"."<state>"` per keyed state (scanned when a
    /// query runs), `"<uid>"."<state>"` per operator state (`"<state>.operator"` when a keyed
    /// state has the name), `states` and `operators`. Read-only, with the default limits
    /// ([`QueryOptions::default`]).
    pub fn new(snapshot: Snapshot) -> Result<Self, QueryError> {
        Self::with_options(snapshot, QueryOptions::default())
    }

    /// As [`SnapshotQuery::new`], with `options`' rules and limits.
    pub fn with_options(snapshot: Snapshot, options: QueryOptions) -> Result<Self, QueryError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(std::thread::available_parallelism().map_or(2, usize::from))
            .thread_name("statekit-query")
            .enable_time()
            .build()
            .map_err(QueryError::Runtime)?;
        let pool = TrackConsumersPool::new(
            FairSpillPool::new(options.memory_limit),
            NonZeroUsize::new(3).unwrap_or(NonZeroUsize::MIN),
        );
        let disk = if options.spill_limit == 0 {
            DiskManagerBuilder::default().with_mode(DiskManagerMode::Disabled)
        } else {
            DiskManagerBuilder::default()
                .with_mode(DiskManagerMode::OsTmpDirectory)
                .with_max_temp_directory_size(options.spill_limit)
        };
        let env = RuntimeEnvBuilder::new()
            .with_memory_pool(Arc::new(pool))
            .with_disk_manager_builder(disk)
            .build_arc()?;
        // No information schema, no catalog location to load from: the snapshot's tables only.
        let ctx = SessionContext::new_with_config_rt(SessionConfig::new(), env);
        let ctx = if options.unrestricted {
            ctx.enable_url_table()
        } else {
            ctx
        };
        let stats = Arc::new(ScanStats::default());
        tables::register(&ctx, &snapshot, &stats)?;
        Ok(SnapshotQuery {
            ctx,
            runtime,
            stats,
            options,
        })
    }

    /// The rules and limits of this session.
    pub fn options(&self) -> &QueryOptions {
        &self.options
    }

    /// Runs one SQL statement and collects its result.
    pub fn sql(&self, sql: &str) -> Result<Vec<RecordBatch>, QueryError> {
        self.block_on(async {
            let df = self.plan(sql).await?;
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
        self.block_on(async {
            let df = self.plan(sql).await?;
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

    /// Plans `sql`, refusing what a read-only session does not run (DataFusion's own
    /// [`SQLOptions`] check: DDL, DML, `COPY`, statements).
    async fn plan(&self, sql: &str) -> Result<DataFrame, QueryError> {
        let plan = self.ctx.state().create_logical_plan(sql).await?;
        if !self.options.unrestricted {
            let read_only = SQLOptions::new()
                .with_allow_ddl(false)
                .with_allow_dml(false)
                .with_allow_statements(false);
            if let Err(e) = read_only.verify_plan(&plan) {
                return Err(QueryError::ReadOnly {
                    statement: refused::describe(&plan).unwrap_or_else(|| e.strip_backtrace()),
                });
            }
        }
        Ok(self.ctx.execute_logical_plan(plan).await?)
    }

    /// Runs `work` on the session's runtime, within the timeout; the memory pool's
    /// exhaustion becomes [`QueryError::MemoryLimit`].
    fn block_on<T>(&self, work: impl std::future::Future<Output = Result<T, QueryError>>) -> Result<T, QueryError> {
        let result = self.runtime.block_on(async {
            match self.options.timeout {
                // Dropping `work` cancels the statement: DataFusion's tasks are aborted and
                // the scans' threads stop at their next batch.
                Some(limit) => tokio::time::timeout(limit, work)
                    .await
                    .unwrap_or(Err(QueryError::Timeout(limit))),
                None => work.await,
            }
        });
        result.map_err(|e| match e {
            QueryError::DataFusion(d) => match d.find_root() {
                // DataFusion's disk manager says so in words only.
                DataFusionError::ResourcesExhausted(detail) if detail.contains("spilling process has exceeded") => {
                    QueryError::SpillLimit {
                        limit: self.options.spill_limit,
                    }
                }
                DataFusionError::ResourcesExhausted(detail) => QueryError::MemoryLimit {
                    limit: self.options.memory_limit,
                    detail: detail.clone(),
                },
                _ => QueryError::DataFusion(d),
            },
            other => other,
        })
    }
}
