//! The inspector's errors: opening what a path names ([`OpenError`]) and running the
//! inspector ([`InspectError`]). Each says its [`ErrorKind`].

use statekit_core::location::Location;
use statekit_core::storage::StorageError;
use statekit_core::{ErrorKind, HasErrorKind};
use statekit_objstore::LocationError;
use statekit_snapshot::SnapshotError;
use std::path::PathBuf;
use std::time::Duration;

/// Why what a path names could not be opened as a snapshot.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// The path is a URL statekit does not read (or a bad one).
    #[error(transparent)]
    Location(#[from] LocationError),
    /// The snapshot could not be opened (not a snapshot, bad `_metadata`, unreadable).
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// A directory without `_metadata` that holds snapshots: not one snapshot.
    #[error(
        "{} has no _metadata: it is a directory of snapshots ({}), not one: list them with `statekit ls {}`, then name one (or browse them with `statekit inspect {}`)",
        path.display(),
        statekit_core::text::count(*snapshots as u64, "snapshot"),
        path.display(),
        path.display()
    )]
    DirectoryOfSnapshots {
        /// The directory.
        path: PathBuf,
        /// How many snapshots are under it.
        snapshots: usize,
    },
    /// One side of a comparison did not open: the message names its path once (the cause's
    /// own message when that starts with the path, else `path: message`).
    #[error("{}", side_message(shown, cause))]
    Side {
        /// The path as given.
        shown: String,
        /// Why it did not open.
        cause: Box<OpenError>,
    },
}

/// `cause`'s message, naming `shown` once.
fn side_message(shown: &str, cause: &OpenError) -> String {
    let msg = cause.to_string();
    if msg.starts_with(shown) {
        msg
    } else {
        format!("{shown}: {msg}")
    }
}

impl HasErrorKind for OpenError {
    fn kind(&self) -> ErrorKind {
        match self {
            OpenError::Location(e) => e.kind(),
            OpenError::Snapshot(e) => e.kind(),
            OpenError::DirectoryOfSnapshots { .. } => ErrorKind::Caller,
            OpenError::Side { cause, .. } => cause.kind(),
        }
    }
}

impl OpenError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        HasErrorKind::kind(self)
    }
}

/// Why the inspector could not start or stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InspectError {
    /// A local path that does not exist.
    #[error("{}: no such file or directory", .0.display())]
    NoSuchPath(PathBuf),
    /// An object-store location with nothing below it.
    #[error("{0}: nothing there (no _metadata, no objects below it)")]
    NothingThere(Location),
    /// `--diff` given with something that is not a snapshot.
    #[error("--diff compares two snapshots (directories with a _metadata file, or the files)")]
    DiffNeedsSnapshots,
    /// Standard output is not a terminal.
    #[error("statekit inspect needs a terminal; in scripts use `statekit show` and `statekit dump`")]
    NotATerminal,
    /// The path could not be read as a location.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// An object store could not be reached or listed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// Starting the worker or setting up the terminal failed.
    #[error("{what}")]
    Setup {
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Drawing or reading the terminal failed.
    #[error(transparent)]
    Terminal(#[from] std::io::Error),
    /// The worker did not answer in time ([`headless`](crate::headless)).
    #[error("{what}")]
    NoAnswer {
        /// What was awaited.
        what: &'static str,
        /// The cause.
        #[source]
        source: std::sync::mpsc::RecvTimeoutError,
    },
    /// The background verifications did not finish in time ([`headless`](crate::headless)).
    #[error("verification did not finish in {0:?}")]
    VerifyTimeout(Duration),
    /// A headless step that does not fit the screen shown ([`headless`](crate::headless)):
    /// no snapshot open, no such operator or state.
    #[error("{0}")]
    NotOnScreen(NotOnScreen),
}

/// What a [`headless`](crate::headless) step looked for and did not find.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotOnScreen {
    /// A state was asked for in the snapshot list.
    #[error("opening a state needs a snapshot, not a directory of them")]
    NoSnapshotOpen,
    /// `_metadata` did not read.
    #[error("the snapshot did not open")]
    NotOpened,
    /// No operator with this uid.
    #[error("no operator {0:?}")]
    Operator(String),
    /// No keyed state of this name in the operator.
    #[error("no keyed state {state:?} in {uid:?}")]
    KeyedState {
        /// The operator.
        uid: String,
        /// The state.
        state: String,
    },
}

impl HasErrorKind for InspectError {
    fn kind(&self) -> ErrorKind {
        match self {
            InspectError::NoSuchPath(_) | InspectError::NothingThere(_) => ErrorKind::NotFound,
            InspectError::DiffNeedsSnapshots | InspectError::NotATerminal | InspectError::NotOnScreen(_) => {
                ErrorKind::Caller
            }
            InspectError::Open(e) => e.kind(),
            InspectError::Storage(e) => ErrorKind::of_dyn(e),
            InspectError::Setup { source, .. } | InspectError::Terminal(source) => ErrorKind::of_io(source),
            InspectError::NoAnswer { .. } | InspectError::VerifyTimeout(_) => ErrorKind::Transient,
        }
    }
}

impl InspectError {
    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        HasErrorKind::kind(self)
    }
}

/// A read the worker could not do, as the inspector shows it: the message of its cause (its
/// whole chain, the paths named as the user named them) and the cause's kind. A screen keeps
/// it, so it holds the text (cloned with the screen), not the cause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ReadError {
    message: String,
    kind: ErrorKind,
}

impl ReadError {
    /// A failed read of `kind`, shown as `message`.
    pub(crate) fn new(message: impl Into<String>, kind: ErrorKind) -> Self {
        ReadError {
            message: message.into(),
            kind,
        }
    }

    /// `err` with its whole chain ([`chain_text`]).
    pub(crate) fn chain(err: &(dyn std::error::Error + 'static), kind: ErrorKind) -> Self {
        ReadError::new(chain_text(err), kind)
    }

    /// A request that needs an open snapshot came without one.
    pub(crate) fn no_snapshot_open() -> Self {
        ReadError::new("no snapshot is open", ErrorKind::Caller)
    }

    /// What the screen shows.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The same error, its message rewritten by `f` (paths replaced by what the user typed).
    pub(crate) fn map_message(self, f: impl FnOnce(&str) -> String) -> Self {
        ReadError {
            message: f(&self.message),
            kind: self.kind,
        }
    }
}

impl HasErrorKind for ReadError {
    fn kind(&self) -> ErrorKind {
        self.kind
    }
}

/// What a verification found wrong, one problem a line, or why it could not run
/// ([`crate::open::verify_status`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problems {
    text: String,
}

impl Problems {
    /// The problems, one per line.
    pub(crate) fn new(lines: impl IntoIterator<Item = String>) -> Self {
        Problems {
            text: lines.into_iter().collect::<Vec<_>>().join("\n"),
        }
    }

    /// The problems, a line each.
    pub fn lines(&self) -> std::str::Lines<'_> {
        self.text.lines()
    }

    /// The same problems, their text rewritten by `f` (paths replaced by what the user typed).
    pub(crate) fn map_text(self, f: impl FnOnce(&str) -> String) -> Self {
        Problems { text: f(&self.text) }
    }
}

/// An error and all its causes on one line, `: `-separated (what a report shows of a failed
/// read: the whole chain, as `anyhow`'s `{:#}` prints it).
pub(crate) fn chain_text(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(cause) = cur {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        cur = cause.source();
    }
    out
}
