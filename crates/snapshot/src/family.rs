//! The adapters of the snapshot families statekit ships ([`crate::open::SnapshotSource`]):
//! statekit's own files and Apache Flink's snapshots.

use crate::error::SnapshotError;
use crate::open::{Family, SnapshotSource};
use statekit_checkpoint::SnapshotReader;
use statekit_core::storage::Storage;
use statekit_core::{KeyGroupRange, KeyedStateView, OperatorStateSnapshot};
use statekit_format::{OperatorMetadata, SnapshotMetadata, SnapshotVerifyReport};
use std::sync::Arc;

/// statekit's own snapshots: canonical keyed and operator data files, a backend's native
/// files, changelog handles (materializations plus a log tail).
#[derive(Debug)]
pub(crate) struct StatekitSource {
    reader: SnapshotReader,
}

impl StatekitSource {
    pub(crate) fn new(reader: SnapshotReader) -> Self {
        StatekitSource { reader }
    }
}

impl SnapshotSource for StatekitSource {
    fn family(&self) -> Family {
        Family::Statekit
    }

    fn metadata(&self) -> &SnapshotMetadata {
        self.reader.metadata()
    }

    fn storage(&self) -> &Arc<dyn Storage> {
        self.reader.storage()
    }

    fn keyed_views(
        &self,
        op: &OperatorMetadata,
        range: KeyGroupRange,
    ) -> Result<Vec<Box<dyn KeyedStateView>>, SnapshotError> {
        crate::views::keyed_views(&self.reader, &op.uid, range)
    }

    fn stored_operator_state(&self, op: &OperatorMetadata, index: u32) -> Result<OperatorStateSnapshot, SnapshotError> {
        Ok(self.reader.stored_operator_state(&op.uid, index)?)
    }

    fn verify(&self) -> Result<SnapshotVerifyReport, SnapshotError> {
        Ok(self.reader.verify()?)
    }

    fn statekit_files(&self) -> Option<&SnapshotReader> {
        Some(&self.reader)
    }
}

/// Apache Flink's savepoints and checkpoints (every kind Flink 1.15 to 2.3 writes), read by
/// `statekit-flink` and mapped onto the metadata model.
#[derive(Debug)]
pub(crate) struct FlinkSource {
    flink: statekit_flink::FlinkSnapshot,
    metadata: SnapshotMetadata,
    storage: Arc<dyn Storage>,
}

impl FlinkSource {
    /// The snapshot `flink` opened, its files in `storage`. `checked`: a handle that leads
    /// outside the snapshot by its text alone is refused (as `_metadata`'s structural
    /// problems are; only `verify` opens unchecked, to list them). `state_schema`: the keyed
    /// and operator state descriptors are read from the heads of the state streams.
    pub(crate) fn new(
        flink: statekit_flink::FlinkSnapshot,
        storage: Arc<dyn Storage>,
        checked: bool,
        state_schema: bool,
    ) -> Result<Self, SnapshotError> {
        if checked {
            if let Some(e) = flink.handle_problems().into_iter().next() {
                return Err(e.into());
            }
        }
        let mut metadata = flink.to_statekit();
        if state_schema {
            for (op, meta) in flink.metadata().operators.iter().zip(metadata.operators.iter_mut()) {
                meta.keyed_states = flink.keyed_descriptors(op)?;
                meta.operator_states = flink.operator_descriptors(op)?;
            }
        }
        Ok(FlinkSource {
            flink,
            metadata,
            storage,
        })
    }

    /// Flink's operator behind `op` (the same id).
    fn operator(&self, op: &OperatorMetadata) -> Result<&statekit_flink::FlinkOperator, SnapshotError> {
        self.flink.metadata().operator(&op.operator_id).ok_or_else(|| {
            SnapshotError::Checkpoint(statekit_checkpoint::CheckpointError::UnknownOperator {
                snapshot: self.flink.metadata_file().display().to_string(),
                uid: op.uid.clone(),
                known: self.metadata.operators.iter().map(|o| o.uid.clone()).collect(),
            })
        })
    }
}

impl SnapshotSource for FlinkSource {
    fn family(&self) -> Family {
        Family::Flink
    }

    fn metadata(&self) -> &SnapshotMetadata {
        &self.metadata
    }

    fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    fn keyed_views(
        &self,
        op: &OperatorMetadata,
        range: KeyGroupRange,
    ) -> Result<Vec<Box<dyn KeyedStateView>>, SnapshotError> {
        Ok(self.flink.keyed_views(self.operator(op)?, range)?)
    }

    fn stored_operator_state(&self, op: &OperatorMetadata, index: u32) -> Result<OperatorStateSnapshot, SnapshotError> {
        Ok(self.flink.operator_state(self.operator(op)?, index)?)
    }

    fn verify(&self) -> Result<SnapshotVerifyReport, SnapshotError> {
        Ok(self.flink.verify().into_format_report())
    }

    fn describe(&self) -> crate::describe::Description {
        crate::describe::Description::of(&self.metadata, Some(&self.flink))
    }

    fn opaque_parts(&self) -> Result<Vec<crate::open::OpaquePart>, SnapshotError> {
        let mut out = Vec::new();
        for (op, meta) in self
            .flink
            .metadata()
            .operators
            .iter()
            .zip(self.metadata.operators.iter())
        {
            for p in self.flink.opaque_parts(op)? {
                out.push(crate::open::OpaquePart {
                    uid: meta.uid.clone(),
                    state: p.state,
                    part: p.part,
                    serializer: p.serializer,
                });
            }
        }
        Ok(out)
    }
}

/// The Apache Flink snapshot whose `_metadata` `m` began to read: refused by its size before
/// the rest of its bytes are fetched, then opened with `options`, its files fetched from the
/// storage when first read ([`statekit_flink::FlinkSnapshot::open_stored`]).
pub(crate) fn open_stored_flink(
    m: &statekit_checkpoint::StoredMetadata,
    options: &statekit_flink::FlinkOpenOptions,
) -> Result<statekit_flink::FlinkSnapshot, SnapshotError> {
    statekit_flink::check_metadata_size(m.size(), &m.storage.describe(statekit_format::METADATA_FILE_NAME))?;
    m.fetch_all()?;
    Ok(statekit_flink::FlinkSnapshot::open_stored(
        m.root.clone(),
        &m.dir,
        &m.storage.describe(""),
        m.blob.bytes(),
        m.written_ms(),
        options,
    )?)
}
