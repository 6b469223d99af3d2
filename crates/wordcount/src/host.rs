//! What the program running the job provides ([`Host`]) and what the job reports to it
//! ([`Event`]): the job decides, the host renders.

use statekit_changelog::UploadStats;
use statekit_checkpoint::RestoreMode;
use statekit_core::location::Location;
use statekit_runtime::LostCommit;
use statekit_snapshot::Snapshot;
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

/// An error of the host's own code ([`Host::open_snapshot`], [`Host::stop_flag`]), carried in
/// [`crate::WordcountError::Host`] unchanged.
pub type HostError = Box<dyn std::error::Error + Send + Sync>;

/// The program around the job: where the job's reports go, how it opens a snapshot by the
/// path a user gave, and how it learns to stop.
pub trait Host {
    /// The job reports `event` (a note, a warning, progress, a line of output, the summary).
    /// An error (a closed standard output, say) ends the run with
    /// [`crate::WordcountError::Output`].
    fn event(&mut self, event: Event<'_>) -> std::io::Result<()>;

    /// Opens the snapshot `path` names (`--restore`: a directory or `_metadata`, local or an
    /// object-store URL). The default opens it with default options.
    fn open_snapshot(&mut self, path: &Path) -> Result<Snapshot, HostError> {
        Ok(Snapshot::open_location(
            &crate::job::location(path)?,
            &Default::default(),
        )?)
    }

    /// The flag that stops the run when set (SIGTERM, say): asked once, when the record loop
    /// starts. The run stops as at the end of the input, with a last checkpoint (or the
    /// savepoint [`crate::Settings::stop_with_savepoint`] asks for). The default is never set.
    fn stop_flag(&mut self) -> Result<Arc<AtomicBool>, HostError> {
        Ok(Arc::new(AtomicBool::new(false)))
    }
}

/// What the job reports, in the order it happens.
#[derive(Debug)]
#[non_exhaustive]
pub enum Event<'a> {
    /// The job's state schema ([`crate::job_schema`]), asked for by
    /// [`crate::Settings::print_schema`]; nothing else runs.
    Schema(&'a statekit_migrate::JobSchema),
    /// A changelog configuration key was accepted but changes nothing in statekit.
    ConfigNote {
        /// The key as given.
        key: &'a str,
        /// Why it changes nothing.
        note: &'a str,
    },
    /// Configuration keys the word count does not use, each with why: (key, reason).
    IgnoredKeys(&'a [(String, &'static str)]),
    /// `--restore latest` restores the newest complete checkpoint.
    RestoringLatest {
        /// Its id.
        checkpoint_id: u64,
        /// Where it is.
        location: &'a Location,
    },
    /// `--restore latest` found no complete checkpoint: the job starts from scratch.
    NoCheckpointYet {
        /// The checkpoint base directory searched.
        checkpoint_base: &'a Location,
    },
    /// State of these operators of the snapshot is not restored (the job has no such
    /// operator; allowed by [`crate::Settings::allow_non_restored_state`]).
    NotRestored {
        /// The operators' uids (or ids) as the snapshot names them.
        operators: &'a [&'a str],
    },
    /// The job restored a snapshot.
    Restored {
        /// The snapshot as given.
        path: &'a Path,
        /// Its format (`canonical`, `native`, …).
        format: &'a str,
        /// Its checkpoint id.
        checkpoint_id: u64,
        /// The counter's parallelism in the snapshot.
        from_parallelism: u32,
        /// The counter's parallelism now.
        parallelism: u32,
        /// The restore mode.
        mode: RestoreMode,
        /// Whether the changelog is on.
        changelog: bool,
    },
    /// A transaction the sink committed before is gone from the output directory.
    LostCommit(&'a LostCommit),
    /// The sink's recovery after a restore committed and aborted transactions.
    SinkRecovery {
        /// Transactions committed.
        committed: usize,
        /// Transactions aborted.
        aborted: usize,
    },
    /// The restored job reads a stream, which cannot replay what it sent before the snapshot.
    StreamNotReplayed {
        /// The source's name.
        source: &'a str,
        /// The offset the snapshot recorded.
        offset: u64,
    },
    /// The record loop starts.
    Counting {
        /// The input's size in bytes (`None`: a stream).
        input_len: Option<u64>,
    },
    /// How far the loop is: the input's byte offset (an input of known size) or the records
    /// counted (a stream).
    Progress(u64),
    /// The stop flag ([`Host::stop_flag`]) was seen: the run stops.
    Stopping,
    /// A line the sink emitted ([`crate::Settings::echo`]).
    Echo(&'a str),
    /// The run's summary.
    Summary {
        /// Records (words) processed.
        records: u64,
        /// The source's name.
        source: &'a str,
        /// Checkpoints completed.
        checkpoints: u64,
        /// This run's checkpoint directory.
        run_dir: &'a Path,
        /// The output directory.
        output: &'a Path,
    },
    /// The changelog's upload figures of the run.
    ChangelogUploads(&'a UploadStats),
    /// The savepoint taken at the end ([`crate::Settings::stop_with_savepoint`]).
    Savepoint(&'a Path),
    /// The run is over (nothing follows).
    Finished,
}
