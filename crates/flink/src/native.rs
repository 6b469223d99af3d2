//! Keyed state of Flink's RocksDB native savepoints and (incremental) checkpoints
//! (`IncrementalRemoteKeyedStateHandle`), read with the safe-Rust RocksDB file reader
//! (`statekit-rocksdb-files`), never with RocksDB's C++, which trusts its files.
//!
//! The handle lists every file of the database by its local name (`000042.sst`,
//! `MANIFEST-000004`, `CURRENT`, `OPTIONS-…`), private ones in the checkpoint's directory
//! and shared ones (incremental checkpoints) in `shared/`, some inline in `_metadata`. They
//! are read in place (or from the inline bytes): CURRENT names the MANIFEST, whose version
//! edits give each column family's live tables. The meta data stream holds the keyed
//! proxy; each state is the column family of its name, its tables' indexes read when the
//! view opens and a key group's data blocks when it is visited. Keys
//! and values are the canonical format's (`[key group][key][namespace][user key]`; a list is
//! its elements joined by `,`, un-merged operands included, which RocksDB's merge operator
//! `stringappendtest` joins the same way), so records decode as in a canonical savepoint.

use crate::canonical::{decode_record, decoded_keyed_view, layouts, Layout};
use crate::error::FlinkError;
use crate::meta::KeyedProxy;
use statekit_core::{KeyGroupRange, OwnedEntry, StateDescriptor};
use statekit_rocksdb_files::{ColumnFamilyReader, Db, DbFile, FileData, Limits};

/// One subtask's RocksDB database, read from a snapshot's files.
pub struct NativeKeyedView {
    /// Each state's column family (by state id), its tables opened; `None` when the
    /// database has no such column family.
    families: Vec<Option<(String, ColumnFamilyReader)>>,
    proxy: KeyedProxy,
    layouts: Vec<Layout>,
    states: Vec<StateDescriptor>,
    max_parallelism: u32,
    range: KeyGroupRange,
    name: String,
}

impl std::fmt::Debug for NativeKeyedView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NativeKeyedView")
            .field("name", &self.name)
            .field("range", &self.range)
            .field(
                "families",
                &self
                    .families
                    .iter()
                    .map(|f| f.as_ref().map(|(n, _)| n))
                    .collect::<Vec<_>>(),
            )
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

/// The reader's error as this crate's, `name` (the database) added to the reason.
fn files_err(name: &str, e: statekit_rocksdb_files::Error) -> FlinkError {
    match e {
        statekit_rocksdb_files::Error::Corrupt {
            file,
            offset,
            field,
            reason,
        } => FlinkError::Corrupt {
            file,
            offset,
            field,
            reason: format!("{reason} (RocksDB files of {name})"),
        },
        statekit_rocksdb_files::Error::Unsupported {
            file,
            offset,
            field,
            what,
        } => FlinkError::Unsupported {
            file,
            offset,
            field,
            what: format!("{what} (RocksDB files of {name})"),
        },
        statekit_rocksdb_files::Error::Io { path, source } => FlinkError::Io { path, source },
        other => FlinkError::Corrupt {
            file: name.to_string(),
            offset: 0,
            field: "RocksDB files".into(),
            reason: other.to_string(),
        },
    }
}

impl NativeKeyedView {
    /// Reads `files` (local name and bytes) as a database whose states `proxy` describes.
    /// `name` names the database in errors (the `_metadata` file and the handle).
    pub(crate) fn open(
        name: &str,
        proxy: KeyedProxy,
        files: &[(String, Source)],
        max_parallelism: u32,
        range: KeyGroupRange,
    ) -> Result<Self, FlinkError> {
        let mut db_files = Vec::with_capacity(files.len());
        for (local, src) in files {
            // A local name is a plain file name.
            if local.is_empty() || local.contains('/') || local.contains('\\') || local == ".." || local == "." {
                return Err(FlinkError::Corrupt {
                    file: name.to_string(),
                    offset: 0,
                    field: "native file name".into(),
                    reason: format!("{local:?} is not a file name"),
                });
            }
            let (display, data) = match src {
                Source::File(p) => (format!("{} ({local})", p.display()), FileData::Path(p.clone())),
                Source::Bytes(b) => (format!("{name}: inline {local}"), FileData::Bytes(b.clone())),
            };
            db_files.push(DbFile {
                name: local.clone(),
                display,
                data,
            });
        }
        let (layouts, states) = layouts(&proxy, name)?;
        let db = Db::open(db_files, Limits::default()).map_err(|e| files_err(name, e))?;
        let mut families = Vec::with_capacity(proxy.states.len());
        for m in &proxy.states {
            if db.column_family(&m.name).is_none() {
                families.push(None);
                continue;
            }
            let reader = db.column_family_reader(&m.name).map_err(|e| files_err(name, e))?;
            families.push(Some((m.name.clone(), reader)));
        }
        Ok(NativeKeyedView {
            families,
            proxy,
            layouts,
            states,
            max_parallelism,
            range,
            name: name.to_string(),
        })
    }

    fn key_group_entries(&self, kg: u32) -> Result<Vec<OwnedEntry>, FlinkError> {
        let wide = self.max_parallelism > 128;
        let prefix: Vec<u8> = if wide {
            (kg as u16).to_be_bytes().to_vec()
        } else {
            vec![kg as u8]
        };
        // The first key after the key group's: its prefix plus one (none after the last).
        let next: Option<Vec<u8>> = if wide {
            u16::try_from(kg + 1).ok().map(|n| n.to_be_bytes().to_vec())
        } else {
            u8::try_from(kg + 1).ok().map(|n| vec![n])
        };
        let mut out = Vec::new();
        for (state, family) in self.families.iter().enumerate() {
            let (Some((family, reader)), Some(layout)) = (family, self.layouts.get(state)) else {
                continue;
            };
            let entries = reader
                .read_range(&prefix, next.as_deref(), &join_operands)
                .map_err(|e| files_err(&self.name, e))?;
            for (key, value) in &entries {
                let Some(rest) = key.strip_prefix(prefix.as_slice()) else {
                    break;
                };
                decode_record(&self.proxy.key, kg, state as u32, layout, rest, value, &mut out).map_err(|reason| {
                    FlinkError::Corrupt {
                        file: self.name.clone(),
                        offset: 0,
                        field: format!("state {family:?}, key group {kg}"),
                        reason: reason.to_string(),
                    }
                })?;
            }
        }
        out.sort_by(|a, b| a.as_entry().canonical_cmp(&b.as_entry()));
        Ok(out)
    }
}

/// `stringappendtest`: the existing value and each operand, joined by `,`.
fn join_operands(_key: &[u8], existing: Option<&[u8]>, operands: &[&[u8]]) -> Result<Vec<u8>, String> {
    Ok(statekit_rocksdb_files::string_append(existing, operands, b','))
}

decoded_keyed_view!(NativeKeyedView);
