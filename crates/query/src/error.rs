//! The errors of querying a snapshot.

use statekit_core::ErrorKind;

/// What can go wrong running SQL over a snapshot.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    /// DataFusion refused or failed the statement (bad SQL, an unknown table or column, or
    /// a scan that failed reading the snapshot).
    #[error("{0}")]
    DataFusion(#[from] datafusion::error::DataFusionError),
    /// Building a table failed.
    #[error(transparent)]
    Table(#[from] statekit_table::TableError),
    /// The query runtime could not start.
    #[error("starting the query runtime: {0}")]
    Runtime(#[source] std::io::Error),
    /// Writing a result failed.
    #[error("writing the result: {0}")]
    Output(#[source] arrow_schema::ArrowError),
    /// A read-only session refused the statement: it defines or drops tables or views
    /// (`CREATE EXTERNAL TABLE` reads any file), writes (`COPY … TO`, `INSERT INTO`) or
    /// changes the session (`SET`). [`crate::QueryOptions::unrestricted`] accepts it.
    #[error(
        "{statement} is refused: SQL over a snapshot is read-only (queries over the snapshot's tables; no \
         CREATE, DROP, COPY, INSERT or SET)"
    )]
    ReadOnly {
        /// What was refused, as SQL names it (`CREATE EXTERNAL TABLE`, `COPY … TO`).
        statement: String,
    },
    /// The statement needed more memory than [`crate::QueryOptions::memory_limit`] and could
    /// not spill (a hash join's build side, a `TopK`, or no spilling allowed).
    #[error("the statement needs more than its memory limit of {} ({detail})", size(*limit))]
    MemoryLimit {
        /// The limit, bytes.
        limit: usize,
        /// DataFusion's account: which operators held how much.
        detail: String,
    },
    /// The statement's sorts and aggregates spilled more than
    /// [`crate::QueryOptions::spill_limit`] bytes to temporary files.
    #[error("the statement spilled more than its spill limit of {} to temporary files", size(*limit as usize))]
    SpillLimit {
        /// The limit, bytes.
        limit: u64,
    },
    /// The statement ran longer than [`crate::QueryOptions::timeout`] and was stopped.
    #[error("the statement was stopped: it reached its timeout of {0:?}")]
    Timeout(std::time::Duration),
}

/// `1073741824` → `1 GiB`, `1536` → `1.5 KiB`.
fn size(bytes: usize) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    let u = UNITS.get(unit).copied().unwrap_or("bytes");
    if v.fract() == 0.0 {
        format!("{v:.0} {u}")
    } else {
        format!("{v:.1} {u}")
    }
}

impl QueryError {
    /// What kind of failure this is: bad SQL, an unknown name, a refused statement or a
    /// limit reached is the caller's; a scan's failure is its cause's (corrupt data, I/O);
    /// the rest is this crate's.
    pub fn kind(&self) -> ErrorKind {
        use datafusion::error::DataFusionError as D;
        match self {
            QueryError::DataFusion(e) => match e.find_root() {
                D::SQL(..) | D::Plan(_) | D::SchemaError(..) | D::NotImplemented(_) => ErrorKind::Caller,
                D::External(inner) => inner
                    .downcast_ref::<statekit_table::TableError>()
                    .map_or(ErrorKind::Internal, statekit_table::TableError::kind),
                D::IoError(io) => ErrorKind::of_io(io),
                _ => ErrorKind::Internal,
            },
            QueryError::Table(e) => e.kind(),
            QueryError::Runtime(io) => ErrorKind::of_io(io),
            QueryError::Output(_) => ErrorKind::Internal,
            QueryError::ReadOnly { .. } => ErrorKind::Caller,
            // A limit the caller set, reached: a higher one may succeed.
            QueryError::MemoryLimit { .. } | QueryError::SpillLimit { .. } | QueryError::Timeout(_) => {
                ErrorKind::Caller
            }
        }
    }
}

impl statekit_core::HasErrorKind for QueryError {
    fn kind(&self) -> statekit_core::ErrorKind {
        QueryError::kind(self)
    }
}
