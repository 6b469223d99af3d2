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
}

impl QueryError {
    /// What kind of failure this is: bad SQL or an unknown name is the caller's; a scan's
    /// failure is its cause's (corrupt data, I/O); the rest is this crate's.
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
        }
    }
}
