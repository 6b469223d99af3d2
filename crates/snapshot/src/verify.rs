//! Whole-snapshot verification of any kind: the format's checks of `_metadata` and every data
//! file ([`statekit_format::verify_snapshot_files`]), native RocksDB state decoded through
//! RocksDB (with the `rocksdb` feature), and changelog state
//! ([`statekit_changelog::verify::verify_operator`]: log files decoded in full, the tail walked
//! as a restore replays it). Every problem is a [`Problem`] naming file, offset and field;
//! a file several subtasks reference is reported once.
//!
//! [`report`]: what `statekit verify` prints ([`VerifyReport`]), serialised by serde.

use crate::open::{OpenOptions, Snapshot};
use crate::SnapshotError;
use statekit_changelog::tail::LogFiles;
use statekit_changelog::verify::{verify_operator, LogCheck};
use statekit_checkpoint::SnapshotReader;
use statekit_core::location::Location;
#[cfg(not(feature = "rocksdb"))]
use statekit_core::ErrorKind;
use statekit_core::KeyGroupRange;
use statekit_format::Problem;
use std::collections::HashSet;
use std::path::Path;

pub mod report;
pub use report::{LogCheckReport, ProblemReport, VerifyReport};

/// The result of verifying a snapshot.
#[derive(Clone, Debug, Default)]
pub struct Verification {
    /// Data files read in full.
    pub files: u64,
    /// Bytes of those files plus `_metadata`.
    pub bytes: u64,
    /// Keyed entries (canonical and native), operator state elements and broadcast entries
    /// read.
    pub entries: u64,
    /// What the changelog checks read, when an operator holds changelog state.
    pub changelog: Option<LogCheck>,
    /// Whether `_metadata` passed its structural checks. When it did not, its problems are
    /// listed with those of the files it references, but state is not decoded further (native
    /// databases, the changelog replay) from metadata that cannot be trusted.
    pub metadata_sound: bool,
    /// Every problem found, each once, in the order found. Empty when the snapshot is sound.
    pub problems: Vec<Problem>,
}

impl Verification {
    /// True when no problem was found.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Opens the snapshot at `path` (a directory holding `_metadata`, or the file) and verifies
/// it. A `_metadata` that decodes but is structurally unsound (which every other reader
/// refuses) is still verified: see [`Verification::metadata_sound`]. Returns `Err` only when
/// `_metadata` itself cannot be read or decoded.
pub fn verify_path(path: &Path) -> Result<(Snapshot, Verification), SnapshotError> {
    verify_path_with(path, &OpenOptions::default())
}

/// [`verify_path`] with `options` (for an Apache Flink snapshot: the places named with
/// `--flink-root` its handles may be read from, and uids to name its operators by).
pub fn verify_path_with(path: &Path, options: &OpenOptions) -> Result<(Snapshot, Verification), SnapshotError> {
    verify_location_with(&Location::Local(path.to_path_buf()), options)
}

/// [`verify_path`] for a snapshot at any [`Location`]: a local path, or a snapshot directory
/// on an object store.
pub fn verify_location(location: &Location) -> Result<(Snapshot, Verification), SnapshotError> {
    verify_location_with(location, &OpenOptions::default())
}

/// [`verify_location`] with `options` ([`verify_path_with`]).
pub fn verify_location_with(
    location: &Location,
    options: &OpenOptions,
) -> Result<(Snapshot, Verification), SnapshotError> {
    let unchecked = OpenOptions {
        unchecked: true,
        ..options.clone()
    };
    let (snapshot, sound) = match Snapshot::open_location(
        location,
        &OpenOptions {
            unchecked: false,
            ..options.clone()
        },
    ) {
        Ok(s) => (s, true),
        Err(strict) => match Snapshot::open_location(location, &unchecked) {
            Ok(s) => (s, false),
            Err(_) => return Err(strict),
        },
    };
    let v = verify_snapshot(&snapshot, sound)?;
    Ok((snapshot, v))
}

/// Verifies `snapshot`; `sound` says whether its `_metadata` passed the structural checks
/// (a checked [`Snapshot::open`] checks them; [`OpenOptions::unchecked`] does not): state is
/// decoded beyond the format's checks only when it did.
pub fn verify_snapshot(snapshot: &Snapshot, sound: bool) -> Result<Verification, SnapshotError> {
    let report = snapshot.verify()?;
    let mut v = Verification {
        files: report.files,
        bytes: report.bytes,
        entries: report.entries,
        changelog: None,
        metadata_sound: sound,
        problems: report.problems.iter().map(Problem::from).collect(),
    };
    // statekit's own files: native state decoded, changelog handles checked.
    if let Some(reader) = snapshot.statekit_files() {
        let has_changelog = reader
            .metadata()
            .operators
            .iter()
            .any(|o| o.subtasks.iter().any(|s| s.keyed.changelog().is_some()));
        if sound {
            let native = verify_native_state(reader, &mut v.problems)?;
            v.entries = v.entries.saturating_add(native);
            let log = verify_changelog(reader, &mut v.problems);
            if has_changelog {
                v.changelog = Some(log);
            }
        } else if has_changelog {
            v.changelog = Some(LogCheck::default());
        }
    }
    // A file several subtasks reference (a shared log file, an inherited materialization) is
    // reported once.
    let mut seen = HashSet::new();
    v.problems.retain(|p| seen.insert(p.clone()));
    Ok(v)
}

/// Decodes every entry of the native keyed state of `reader` (the format checked sizes and
/// CRCs); returns the entries read, adds what is wrong to `problems`.
fn verify_native_state(reader: &SnapshotReader, problems: &mut Vec<Problem>) -> Result<u64, SnapshotError> {
    #[cfg_attr(not(feature = "rocksdb"), allow(unused_mut))]
    let mut entries = 0;
    for o in &reader.metadata().operators {
        if !o.subtasks.iter().any(|s| s.keyed.native().is_some()) {
            continue;
        }
        #[cfg(feature = "rocksdb")]
        for h in reader.native_handles(&o.uid, KeyGroupRange::all(o.max_parallelism))? {
            match statekit_rocksdb::verify_native(&h, &statekit_rocksdb::RocksDbOptions::default()) {
                Ok(r) => entries += r.entries,
                Err(e) => problems.push(
                    native_problem(reader, &h, &e).within(format!("operator {:?}, subtask {}", o.uid, h.subtask)),
                ),
            }
        }
        #[cfg(not(feature = "rocksdb"))]
        problems.push(
            Problem::of_file(
                reader.storage().describe(statekit_format::METADATA_FILE_NAME),
                "native state not decoded (this build has no `rocksdb` feature)",
                ErrorKind::Unsupported,
            )
            .within(format!("operator {:?}", o.uid)),
        );
    }
    Ok(entries)
}

/// A native handle's problem, naming the file RocksDB's error names (the table or manifest
/// file), else the snapshot's `_metadata`.
#[cfg(feature = "rocksdb")]
fn native_problem(
    reader: &SnapshotReader,
    h: &statekit_format::ResolvedNativeHandle,
    e: &statekit_core::StateError,
) -> Problem {
    let text = e.to_string();
    let named = h
        .files
        .iter()
        .map(|f| f.storage.describe(&f.path))
        .find(|shown| text.contains(shown.as_str()));
    let file = named.unwrap_or_else(|| reader.storage().describe(statekit_format::METADATA_FILE_NAME));
    Problem::of_file(file, text, e.kind())
}

/// The changelog checks of every operator holding changelog state.
fn verify_changelog(reader: &SnapshotReader, problems: &mut Vec<Problem>) -> LogCheck {
    let mut check = LogCheck::default();
    let mut files = LogFiles::new();
    for op in &reader.metadata().operators {
        if !op.subtasks.iter().any(|s| s.keyed.changelog().is_some()) {
            continue;
        }
        match reader.changelog_handles(&op.uid, KeyGroupRange::all(op.max_parallelism)) {
            Ok(handles) => verify_operator(op, &handles, &mut files, &mut check, problems),
            // The format's verify reports unresolvable references with their files; this
            // says the operator's changelog state went unchecked.
            Err(e) => problems.push(
                Problem::of_file(
                    reader.storage().describe(statekit_format::METADATA_FILE_NAME),
                    e.to_string(),
                    e.kind(),
                )
                .within(format!("operator {:?}", op.uid)),
            ),
        }
    }
    check
}
