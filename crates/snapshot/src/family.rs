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
    // Transitional: the checkpoint reader still holds the Flink snapshot; the adapter will
    // hold `statekit_flink::FlinkSnapshot` itself once the commands use the façade.
    reader: SnapshotReader,
}

impl FlinkSource {
    pub(crate) fn new(reader: SnapshotReader) -> Self {
        FlinkSource { reader }
    }
}

impl SnapshotSource for FlinkSource {
    fn family(&self) -> Family {
        Family::Flink
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
        Ok(self.reader.flink_keyed_views(&op.uid, range)?.unwrap_or_default())
    }

    fn stored_operator_state(&self, op: &OperatorMetadata, index: u32) -> Result<OperatorStateSnapshot, SnapshotError> {
        Ok(self.reader.stored_operator_state(&op.uid, index)?)
    }

    fn verify(&self) -> Result<SnapshotVerifyReport, SnapshotError> {
        Ok(self.reader.verify()?)
    }
}
