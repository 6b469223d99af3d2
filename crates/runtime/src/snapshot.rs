//! The two halves of one snapshot: what a job freezes in its synchronous part
//! ([`KeyedCut`], [`OperatorStateSnapshot`]) and the asynchronous part that writes it
//! ([`AsyncSnapshot`]).

use crate::RuntimeError;
use statekit_changelog::ChangelogCut;
use statekit_checkpoint::SnapshotWriter;
use statekit_core::{KeyedStateBackend, KeyedStateView, OperatorStateSnapshot, StateDescriptor};
use statekit_format::SnapshotKind;
use statekit_snapshot::KeyedBackend;
use std::sync::Arc;

/// How a snapshot stores keyed state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum KeyedFormat {
    /// The canonical format (restores into any backend); a changelog backend's checkpoint is
    /// its materialization plus log tail either way.
    #[default]
    Canonical,
    /// The backend's own files (RocksDB only; incremental for checkpoints).
    Native,
}

/// The synchronous part of one subtask's keyed snapshot: taken between two records, written
/// later on any thread by [`KeyedCut::write`] (through [`AsyncSnapshot`]).
pub enum KeyedCut {
    /// A frozen copy-on-write view, written in the canonical format.
    View(Arc<dyn KeyedStateView>),
    /// RocksDB's own files, uploaded as they are (and the backend's states).
    #[cfg(feature = "rocksdb")]
    Native(statekit_rocksdb::NativeCut, Vec<StateDescriptor>),
    /// A changelog backend's materialization plus the log tail still uploading (and the
    /// backend's states).
    Changelog(ChangelogCut, Vec<StateDescriptor>),
}

impl std::fmt::Debug for KeyedCut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            KeyedCut::View(_) => "KeyedCut::View",
            #[cfg(feature = "rocksdb")]
            KeyedCut::Native(..) => "KeyedCut::Native",
            KeyedCut::Changelog(..) => "KeyedCut::Changelog",
        })
    }
}

impl KeyedCut {
    /// Cuts `backend` for the snapshot `writer` takes: a changelog backend's checkpoint is
    /// its log; `format` [`KeyedFormat::Native`] takes RocksDB's files (refused for any
    /// other backend: [`RuntimeError::NativeNeedsRocksDb`]); everything else is a frozen
    /// view in the canonical format.
    pub fn take(
        backend: &mut KeyedBackend,
        writer: &SnapshotWriter,
        format: KeyedFormat,
    ) -> Result<Self, RuntimeError> {
        let id = writer.checkpoint_id();
        let checkpoint = writer.kind() == SnapshotKind::Checkpoint;
        let native = format == KeyedFormat::Native;
        match backend {
            KeyedBackend::Changelog(b) if checkpoint => {
                let states = b.descriptors();
                return Ok(KeyedCut::Changelog(b.checkpoint(id)?, states));
            }
            #[cfg(feature = "rocksdb")]
            KeyedBackend::RocksDb(b) if native => {
                let cut = b.native_snapshot(id)?;
                return Ok(KeyedCut::Native(cut, b.descriptors()));
            }
            _ if native => return Err(RuntimeError::NativeNeedsRocksDb),
            _ => {}
        }
        Ok(KeyedCut::View(backend.as_dyn().snapshot(id)?))
    }

    /// Writes the cut as subtask `index` of operator `uid`, with its operator state and
    /// whether its input had ended.
    pub fn write(
        self,
        writer: &SnapshotWriter,
        uid: &str,
        index: u32,
        operator: Option<&OperatorStateSnapshot>,
        finished: bool,
    ) -> Result<(), RuntimeError> {
        match self {
            KeyedCut::View(v) => {
                writer.write_subtask(uid, index, Some(v.as_ref()), operator, finished)?;
            }
            #[cfg(feature = "rocksdb")]
            KeyedCut::Native(cut, states) => {
                let handle = cut.upload(&writer.native_target(uid, index)?)?;
                writer.add_native_subtask(uid, index, handle, states, operator, finished)?;
            }
            KeyedCut::Changelog(cut, states) => {
                // The tail is mostly uploaded already: this waits for the rest.
                let handle = cut.finish()?;
                writer.add_changelog_subtask(uid, index, handle, states, operator, finished)?;
            }
        }
        Ok(())
    }
}

/// The state of one subtask in a snapshot: its keyed cut and operator state, as frozen by
/// the synchronous part.
#[derive(Debug)]
pub struct SubtaskSnapshot {
    uid: String,
    index: u32,
    keyed: Option<KeyedCut>,
    operator: Option<OperatorStateSnapshot>,
    finished: bool,
}

impl SubtaskSnapshot {
    /// Subtask `index` of operator `uid`, holding no state yet.
    pub fn new(uid: &str, index: u32) -> Self {
        SubtaskSnapshot {
            uid: uid.to_string(),
            index,
            keyed: None,
            operator: None,
            finished: false,
        }
    }

    /// With this keyed state.
    pub fn keyed(mut self, cut: KeyedCut) -> Self {
        self.keyed = Some(cut);
        self
    }

    /// With this operator state.
    pub fn operator_state(mut self, state: OperatorStateSnapshot) -> Self {
        self.operator = Some(state);
        self
    }

    /// Records whether the subtask's input had ended (a final checkpoint).
    pub fn finished(mut self, finished: bool) -> Self {
        self.finished = finished;
        self
    }

    fn write(self, writer: &SnapshotWriter) -> Result<(), RuntimeError> {
        let op = self.operator.as_ref();
        match self.keyed {
            Some(cut) => cut.write(writer, &self.uid, self.index, op, self.finished),
            None => {
                writer.write_subtask(&self.uid, self.index, None, op, self.finished)?;
                Ok(())
            }
        }
    }
}

/// The asynchronous part of a snapshot: every subtask's frozen state, written by
/// [`AsyncSnapshot::write`] on background threads while the job goes on processing.
#[derive(Debug, Default)]
pub struct AsyncSnapshot {
    subtasks: Vec<SubtaskSnapshot>,
}

impl AsyncSnapshot {
    /// Nothing to write yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one subtask's state.
    pub fn push(&mut self, subtask: SubtaskSnapshot) {
        self.subtasks.push(subtask);
    }

    /// Writes every subtask into `writer`: the subtasks of one index (one slot of the job:
    /// its chained operators) on one thread, the slots in parallel. The first error wins.
    pub fn write(self, writer: &SnapshotWriter) -> Result<(), RuntimeError> {
        let mut slots: Vec<Vec<SubtaskSnapshot>> = Vec::new();
        for s in self.subtasks {
            let i = s.index as usize;
            if slots.len() <= i {
                slots.resize_with(i + 1, Vec::new);
            }
            if let Some(slot) = slots.get_mut(i) {
                slot.push(s);
            }
        }
        std::thread::scope(|scope| -> Result<(), RuntimeError> {
            let handles: Vec<_> = slots
                .into_iter()
                .filter(|slot| !slot.is_empty())
                .map(|slot| {
                    scope.spawn(move || -> Result<(), RuntimeError> {
                        for s in slot {
                            s.write(writer)?;
                        }
                        Ok(())
                    })
                })
                .collect();
            for h in handles {
                h.join().map_err(|_| RuntimeError::SnapshotPanicked)??;
            }
            Ok(())
        })
    }
}
