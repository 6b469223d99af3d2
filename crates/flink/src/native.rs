//! Keyed state of Flink's RocksDB native savepoints and (incremental) checkpoints
//! (`IncrementalRemoteKeyedStateHandle`), opened read-only with RocksDB itself.
//!
//! The handle lists every file of the database by its local name (`000042.sst`,
//! `MANIFEST-000004`, `CURRENT`, `OPTIONS-…`), private ones in the checkpoint's directory
//! and shared ones (incremental checkpoints) in `shared/`, some inline in `_metadata`. They
//! are gathered into a temporary directory (hard links where the file system allows, else
//! copies; inline bytes written), which RocksDB opens read-only. The meta data stream holds
//! the keyed proxy; each state is the column family of its name. Keys and values are
//! the canonical format's (`[key group][key][namespace][user key]`; a list is its elements
//! joined by `,`, un-merged operands included, which RocksDB's merge operator
//! `stringappendtest` joins the same way), so records decode as in a canonical savepoint.

use crate::canonical::{decode_record, layout, visit_decoded, Layout};
use crate::error::FlinkError;
use crate::meta::KeyedProxy;
use statekit_core::{EntryVisitor, KeyGroupRange, KeyedStateView, OwnedEntry, StateDescriptor, StateError};
use std::ops::ControlFlow;
use std::path::Path;

/// Flink's merge operator for list state: operands joined with one `,` byte.
const MERGE_OPERATOR: &str = "stringappendtest";

/// One subtask's RocksDB database, opened read-only from a snapshot's files.
pub struct NativeKeyedView {
    db: rocksdb::DB,
    /// Column family of each state (by state id); `None` when the database has none.
    families: Vec<Option<String>>,
    proxy: KeyedProxy,
    layouts: Vec<Layout>,
    states: Vec<StateDescriptor>,
    max_parallelism: u32,
    range: KeyGroupRange,
    name: String,
    // Dropped after the database: the directory its files are in.
    _dir: tempfile::TempDir,
}

impl std::fmt::Debug for NativeKeyedView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeKeyedView")
            .field("name", &self.name)
            .field("range", &self.range)
            .field("families", &self.families)
            .finish()
    }
}

/// Where a native file's bytes are.
pub(crate) enum Source {
    /// A local file.
    File(std::path::PathBuf),
    /// Bytes inline in `_metadata` (or a segment of a merged file).
    Bytes(Vec<u8>),
}

fn rocks_err(name: &str, e: rocksdb::Error) -> FlinkError {
    FlinkError::Corrupt {
        file: name.to_string(),
        offset: 0,
        field: "RocksDB database".into(),
        reason: e.to_string(),
    }
}

impl NativeKeyedView {
    /// Gathers `files` (local name and bytes) into a temporary directory and opens them as
    /// a read-only database whose states `proxy` describes. `name` names the database in
    /// errors (the `_metadata` file and the handle).
    pub(crate) fn open(
        name: &str,
        proxy: KeyedProxy,
        files: &[(String, Source)],
        max_parallelism: u32,
        range: KeyGroupRange,
    ) -> Result<Self, FlinkError> {
        let io = |path: &Path, source: std::io::Error| FlinkError::Io {
            path: path.display().to_string(),
            source,
        };
        let dir = tempfile::Builder::new()
            .prefix("statekit-flink-db-")
            .tempdir()
            .map_err(|e| io(&std::env::temp_dir(), e))?;
        for (local, src) in files {
            // A local name is a plain file name; anything else would leave the directory.
            if local.is_empty() || local.contains('/') || local.contains('\\') || local == ".." || local == "." {
                return Err(FlinkError::Corrupt {
                    file: name.to_string(),
                    offset: 0,
                    field: "native file name".into(),
                    reason: format!("{local:?} is not a file name"),
                });
            }
            let to = dir.path().join(local);
            match src {
                Source::File(p) => {
                    if std::fs::hard_link(p, &to).is_err() {
                        std::fs::copy(p, &to).map_err(|e| io(p, e))?;
                    }
                }
                Source::Bytes(b) => std::fs::write(&to, b).map_err(|e| io(&to, e))?,
            }
        }
        let mut layouts = Vec::with_capacity(proxy.states.len());
        let mut states = Vec::with_capacity(proxy.states.len());
        for m in &proxy.states {
            let (l, d) = layout(&proxy.key, m).map_err(|what| FlinkError::Unsupported {
                file: name.to_string(),
                offset: 0,
                field: format!("state {:?}", m.name),
                what,
            })?;
            layouts.push(l);
            states.push(d);
        }
        let mut opts = rocksdb::Options::default();
        opts.set_merge_operator_associative(MERGE_OPERATOR, join_operands);
        let present = rocksdb::DB::list_cf(&opts, dir.path()).map_err(|e| rocks_err(name, e))?;
        // Each column family needs the merge operator (list state may hold unmerged operands).
        let cfs = present
            .iter()
            .map(|c| rocksdb::ColumnFamilyDescriptor::new(c, opts.clone()));
        let db = rocksdb::DB::open_cf_descriptors_read_only(&opts, dir.path(), cfs, false)
            .map_err(|e| rocks_err(name, e))?;
        let families = proxy
            .states
            .iter()
            .map(|m| present.iter().find(|c| **c == m.name).cloned())
            .collect();
        Ok(NativeKeyedView {
            db,
            families,
            proxy,
            layouts,
            states,
            max_parallelism,
            range,
            name: name.to_string(),
            _dir: dir,
        })
    }

    fn key_group_entries(&self, kg: u32) -> Result<Vec<OwnedEntry>, FlinkError> {
        let wide = self.max_parallelism > 128;
        let prefix: Vec<u8> = if wide {
            (kg as u16).to_be_bytes().to_vec()
        } else {
            vec![kg as u8]
        };
        let mut out = Vec::new();
        for (state, family) in self.families.iter().enumerate() {
            let Some(family) = family else { continue };
            let (Some(cf), Some(layout)) = (self.db.cf_handle(family), self.layouts.get(state)) else {
                continue;
            };
            let mut it = self.db.raw_iterator_cf(&cf);
            it.seek(&prefix);
            while it.valid() {
                let (Some(key), Some(value)) = (it.key(), it.value()) else {
                    break;
                };
                let Some(rest) = key.strip_prefix(prefix.as_slice()) else {
                    break;
                };
                decode_record(&self.proxy.key, kg, state as u32, layout, rest, value, &mut out).map_err(|reason| {
                    FlinkError::Corrupt {
                        file: self.name.clone(),
                        offset: 0,
                        field: format!("state {family:?}, key group {kg}"),
                        reason,
                    }
                })?;
                it.next();
            }
            it.status().map_err(|e| rocks_err(&self.name, e))?;
        }
        out.sort_by(|a, b| a.as_entry().canonical_cmp(&b.as_entry()));
        Ok(out)
    }
}

/// `stringappendtest`: the existing value and each operand, joined by `,`.
fn join_operands(_key: &[u8], existing: Option<&[u8]>, operands: &rocksdb::MergeOperands) -> Option<Vec<u8>> {
    let mut out = existing.map(<[u8]>::to_vec);
    for op in operands {
        match &mut out {
            Some(v) => {
                v.push(b',');
                v.extend_from_slice(op);
            }
            None => out = Some(op.to_vec()),
        }
    }
    out
}

impl KeyedStateView for NativeKeyedView {
    fn max_parallelism(&self) -> u32 {
        self.max_parallelism
    }

    fn key_group_range(&self) -> KeyGroupRange {
        self.range
    }

    fn states(&self) -> &[StateDescriptor] {
        &self.states
    }

    fn visit_key_group(&self, key_group: u32, visitor: &mut EntryVisitor<'_>) -> Result<ControlFlow<()>, StateError> {
        visit_decoded(self.range, key_group, || self.key_group_entries(key_group), visitor)
    }
}
