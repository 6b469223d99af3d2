//! Offline savepoint migration (`docs/design/0011-migration.md`): any snapshot statekit reads
//! (a savepoint or checkpoint, canonical, native RocksDB, incremental or changelog) becomes a
//! self-contained savepoint — canonical, or RocksDB's native files built by bulk-loading SST
//! files ([`OutputFormat`]) — with edits applied in the same streaming pass: renamed or
//! dropped operators and states, a new parallelism or max parallelism, TTL-expired data
//! purged, keys kept or dropped.
//!
//! ```no_run
//! use statekit_migrate::{migrate, Edit, MigrateOptions, Plan, PlanOptions};
//! use statekit_snapshot::Snapshot;
//! use std::path::Path;
//!
//! let input = Path::new("savepoint-1");
//! let reader = Snapshot::open(input)?;
//! let edits = [Edit::RenameUid { from: "counter".into(), to: "word-counter".into() }];
//! let plan = Plan::new(&reader, &edits, PlanOptions::default())?;
//! for change in plan.changes() {
//!     println!("{change}");
//! }
//! let summary = migrate(&reader, input, &plan, Path::new("savepoint-2"), &MigrateOptions::default(), &|_| {})?;
//! println!("{} files, {} bytes", summary.files, summary.bytes);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The input is only read. The output is written under a temporary name beside it and renamed
//! into place once `_metadata` is committed, so it is either absent or complete.

mod error;
mod plan;
mod rebucket;
mod replace;
mod run;
pub mod schema;
pub mod syntax;
mod view;

pub use error::MigrateError;
pub use plan::{Edit, KeyFilter, KeyedStatePlan, OperatorPlan, OperatorStatePlan, OutputFormat, Plan, PlanOptions};
pub use rebucket::{EntrySorter, SortedEntries, SortedView};
pub use replace::{check_local_replaceable, check_stored_replaceable};
pub use run::{finish_shards, migrate, migrate_to, MigrateOptions, OutputTarget, Progress, Summary, SHARDS_DIR};
pub use schema::{check, CheckReport, Finding, JobSchema};
pub use syntax::{EditParseError, EditSyntax};
