//! A whole snapshot's keyed state as tables on disk: one directory per (uid, state), one
//! Parquet file per subtask's key-group range, and `_tables.json` listing them.

use crate::{state_schema, write_state_parquet, ParquetOptions, TableError};
use statekit_checkpoint::SnapshotReader;
use statekit_core::KeyGroupRange;
use std::path::{Path, PathBuf};

/// What [`export_snapshot`] writes.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Only this operator (by uid).
    pub uid: Option<String>,
    /// Only this state.
    pub state: Option<String>,
    /// Only these key groups.
    pub key_groups: Option<KeyGroupRange>,
    /// How each file is written (its key-value metadata is filled in per file).
    pub parquet: ParquetOptions,
}

/// One table written.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ExportedTable {
    /// The operator's uid.
    pub uid: String,
    /// The operator's id (hex).
    pub operator_id: String,
    /// The state.
    pub state: String,
    /// Its kind (`value`, `list`, `map`, `reducing`, `aggregating`).
    pub kind: String,
    /// The table's directory, relative to the output.
    pub path: String,
    /// Its files, relative to the table's directory, in key-group order.
    pub files: Vec<String>,
    /// Rows in all files.
    pub rows: u64,
    /// Columns: (name, Arrow type, statekit type where typed).
    pub columns: Vec<(String, String, Option<String>)>,
}

/// What [`export_snapshot`] wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ExportSummary {
    /// The output directory.
    pub output: PathBuf,
    /// The tables.
    pub tables: Vec<ExportedTable>,
}

/// Writes the keyed state of the snapshot `reader` opened as tables under `out`:
/// `out/<uid>/<state>/part-<first>-<last>.parquet`, one file per subtask (its key groups,
/// cut to [`ExportOptions::key_groups`]), rows in key-group order; each file's key-value
/// metadata names the snapshot (`statekit.checkpoint_id`, `statekit.job_id`), the operator
/// (`statekit.uid`, `statekit.operator_id`), the state (`statekit.state`, `statekit.kind`)
/// and the writer (`statekit.version`). Then `out/_tables.json` lists every table with its
/// columns. Every file is written under a temporary name and renamed. `out` must be absent or
/// an empty directory. An unknown uid or state is refused before anything is written.
pub fn export_snapshot(
    reader: &SnapshotReader,
    out: &Path,
    options: &ExportOptions,
    progress: &mut dyn FnMut(&ExportedTable),
) -> Result<ExportSummary, TableError> {
    let meta = reader.metadata();
    let operators: Vec<_> = meta
        .operators
        .iter()
        .filter(|o| options.uid.as_ref().is_none_or(|u| &o.uid == u))
        .collect();
    if let Some(uid) = &options.uid {
        if operators.is_empty() {
            return Err(TableError::Unknown {
                what: format!("operator {uid:?}"),
            });
        }
    }
    if let Some(state) = &options.state {
        if !operators
            .iter()
            .any(|o| o.keyed_states.iter().any(|d| &d.name == state))
        {
            return Err(TableError::Unknown {
                what: format!("keyed state {state:?}"),
            });
        }
    }
    let io = |p: &Path, e: std::io::Error| TableError::Io {
        path: p.to_path_buf(),
        source: e,
    };
    match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(TableError::OutputExists {
                    path: out.to_path_buf(),
                });
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(out, e)),
    }
    let mut tables = Vec::new();
    for op in operators {
        let descs: Vec<_> = op
            .keyed_states
            .iter()
            .filter(|d| options.state.as_ref().is_none_or(|s| &d.name == s))
            .collect();
        let mut op_tables: Vec<ExportedTable> = Vec::with_capacity(descs.len());
        for desc in &descs {
            let schema = state_schema(desc);
            let table = ExportedTable {
                uid: op.uid.clone(),
                operator_id: op.operator_id.to_string(),
                state: desc.name.clone(),
                kind: desc.kind.to_string(),
                path: format!("{}/{}", path_part(&op.uid), path_part(&desc.name)),
                files: Vec::new(),
                rows: 0,
                columns: schema
                    .fields()
                    .iter()
                    .map(|f| {
                        (
                            f.name().clone(),
                            f.data_type().to_string(),
                            f.metadata().get("statekit.type").cloned(),
                        )
                    })
                    .collect(),
            };
            let dir = out.join(&table.path);
            std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
            op_tables.push(table);
        }
        // Each subtask's views are opened once (a native or changelog view builds a
        // database or replays a log) and serve every state's table.
        for s in &op.subtasks {
            let range = match options.key_groups {
                Some(r) => s.key_groups.intersection(&r),
                None => s.key_groups,
            };
            if range.is_empty() {
                continue;
            }
            for view in statekit_snapshot::keyed_views(reader, &op.uid, range)? {
                let part = view.key_group_range().intersection(&range);
                if part.is_empty() {
                    continue;
                }
                let name = format!("part-{}-{}.parquet", part.start(), part.end_exclusive() - 1);
                for (desc, table) in descs.iter().zip(op_tables.iter_mut()) {
                    if !view.states().iter().any(|d| d.name == desc.name) {
                        continue;
                    }
                    let mut parquet = options.parquet.clone();
                    parquet.metadata.extend([
                        ("statekit.checkpoint_id".into(), meta.checkpoint_id.to_string()),
                        ("statekit.job_id".into(), meta.job_id.clone()),
                        ("statekit.uid".into(), op.uid.clone()),
                        ("statekit.operator_id".into(), op.operator_id.to_string()),
                        ("statekit.state".into(), desc.name.clone()),
                        ("statekit.kind".into(), desc.kind.to_string()),
                        ("statekit.version".into(), env!("CARGO_PKG_VERSION").into()),
                    ]);
                    let path = out.join(&table.path).join(&name);
                    table.rows += write_state_parquet(view.as_ref(), &desc.name, part, &path, &parquet)?;
                    table.files.push(name.clone());
                }
            }
        }
        for table in op_tables {
            progress(&table);
            tables.push(table);
        }
    }
    let summary = ExportSummary {
        output: out.to_path_buf(),
        tables,
    };
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| io(out, std::io::Error::other(e)))?;
    std::fs::create_dir_all(out).map_err(|e| io(out, e))?;
    let list = out.join("_tables.json");
    let tmp = out.join(format!("._tables.json.{}.tmp", std::process::id()));
    std::fs::write(&tmp, json)
        .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|()| std::fs::rename(&tmp, &list))
        .map_err(|e| io(&list, e))?;
    Ok(summary)
}

/// A uid or state name as one path component: `/`, `\`, NUL and a leading `.` escaped as
/// `%XX`, so no name can leave its directory or hide.
fn path_part(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for (i, c) in name.chars().enumerate() {
        match c {
            '/' | '\\' | '\0' | '%' => out.push_str(&format!("%{:02X}", c as u32)),
            '.' if i == 0 => out.push_str("%2E"),
            c => out.push(c),
        }
    }
    if out.is_empty() {
        out.push_str("%00");
    }
    out
}
