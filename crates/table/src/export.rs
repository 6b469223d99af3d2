//! A whole snapshot's state as tables on disk: one directory per (uid, state), one file per
//! subtask's key-group range of a keyed state and one per operator state, and `_tables.json`
//! listing them. Subtasks are exported in parallel; the whole output appears at once.

use crate::operator_table::{operator_state_batch, operator_state_schema};
use crate::{state_schema, write_state_table, write_table_file, TableError, TableFileOptions, TableFormat};
use arrow_schema::Schema;
use statekit_core::KeyGroupRange;
use statekit_format::OperatorMetadata;
use statekit_snapshot::Snapshot;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// What [`export_snapshot`] writes.
#[derive(Clone, Debug)]
pub struct ExportOptions {
    /// Only this operator (by uid).
    pub uid: Option<String>,
    /// Only this state (keyed or operator state).
    pub state: Option<String>,
    /// Only these key groups (operator state, which has none, is exported unless this is set).
    pub key_groups: Option<KeyGroupRange>,
    /// How each file is written (its key-value metadata is filled in per file).
    pub file: TableFileOptions,
    /// Subtasks exported at once (0: one per core).
    pub threads: usize,
    /// Export only shard `I` of `N` ([`export_shard_to`]): every `N`th subtask's key groups
    /// from the `I`th, and (shard 0) the operator state; `None`: everything.
    pub shard: Option<(u32, u32)>,
}

impl Default for ExportOptions {
    /// Everything, as Parquet with zstd, one thread per core.
    fn default() -> Self {
        ExportOptions {
            uid: None,
            state: None,
            key_groups: None,
            file: TableFileOptions::default(),
            threads: 0,
            shard: None,
        }
    }
}

/// Whether a table holds keyed or operator state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TableScope {
    /// Keyed state: rows by key group.
    Keyed,
    /// Operator state: rows by subtask.
    Operator,
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
    /// Keyed or operator state.
    pub scope: TableScope,
    /// Its kind (`value`, `list`, `map`, `reducing`, `aggregating`; for operator state its
    /// mode: `list`, `union`, `broadcast`).
    pub kind: String,
    /// The files' format.
    pub format: TableFormat,
    /// The table's directory, relative to the output.
    pub path: String,
    /// Its files, relative to the table's directory, in key-group (or subtask) order.
    pub files: Vec<String>,
    /// Rows in all files.
    pub rows: u64,
    /// Columns: (name, Arrow type, statekit type where typed).
    pub columns: Vec<(String, String, Option<String>)>,
    /// The key-value metadata every file of the table carries (Parquet, Arrow IPC).
    pub metadata: BTreeMap<String, String>,
}

/// What [`export_snapshot`] wrote.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ExportSummary {
    /// The output directory.
    pub output: PathBuf,
    /// The tables, keyed states before operator states per operator.
    pub tables: Vec<ExportedTable>,
    /// For a shard ([`export_shard_to`]): which part of the work it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shard: Option<ExportShard>,
}

/// The part of an export one shard wrote ([`ExportOptions::shard`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ExportShard {
    /// This shard (`I` of `--shard I/N`).
    pub shard: u32,
    /// How many shards share the export (`N`).
    pub shards: u32,
    /// Files of keyed state the whole export writes (one per subtask and operator).
    pub work_total: usize,
    /// The indexes of those this shard wrote.
    pub work: Vec<usize>,
}

/// One file to write: a subtask's key groups of an operator's keyed states.
struct KeyedWork<'a> {
    op: &'a OperatorMetadata,
    /// Indexes into the table list, per state of `op` exported (same order as `descs`).
    tables: Vec<usize>,
    range: KeyGroupRange,
}

/// Writes the state of the snapshot `reader` opened as tables under `out`: keyed state as
/// `out/<uid>/<state>/part-<first>-<last>.<ext>`, one file per subtask's key groups (cut to
/// [`ExportOptions::key_groups`]), rows in key-group order; operator state as
/// `out/<uid>/<state>/subtasks-<first>-<last>.<ext>`, one file for all subtasks. Each
/// Parquet or Arrow file's key-value metadata names the snapshot
/// (`statekit.checkpoint_id`, `statekit.job_id`), the operator (`statekit.uid`,
/// `statekit.operator_id`), the state (`statekit.state`, `statekit.kind`,
/// `statekit.descriptor`: its descriptor as JSON) and the writer (`statekit.version`); then
/// `out/_tables.json` lists every table with its columns.
///
/// `out` must be absent or an empty directory. Everything is written into a hidden
/// directory beside it, fsynced and renamed to `out` at the end: a failure or a kill leaves
/// no `out` (or the empty one) behind. An unknown uid or state is refused before anything is
/// written. `progress` is called (from any thread) with the rows each batch added.
pub fn export_snapshot(
    reader: &Snapshot,
    out: &Path,
    options: &ExportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExportSummary, TableError> {
    if options.shard.is_some() {
        return Err(TableError::Unsupported {
            what: "a shard of an export writes a manifest, not _tables.json: use export_shard_to".into(),
        });
    }
    let operators = selection(reader, options)?;
    let wanted = |name: &str| options.state.as_deref().is_none_or(|s| s == name);
    let io = |p: &Path, e: std::io::Error| TableError::Io {
        path: p.to_path_buf(),
        source: e,
    };
    let out_exists = match std::fs::read_dir(out) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(TableError::OutputExists {
                    path: out.to_path_buf(),
                });
            }
            true
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(io(out, e)),
    };
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| io(out, std::io::Error::other("the output needs a directory name")))?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    // Staged under a run-tagged name: what killed runs left here is removed first.
    statekit_core::temp::remove_dead_leftovers(parent);
    let staging = parent.join(statekit_core::temp::temp_name(&name));
    std::fs::create_dir_all(&staging).map_err(|e| io(&staging, e))?;
    let result = (|| {
        let summary = export_into(reader, &staging, &operators, options, &wanted, progress)?;
        let json = serde_json::to_vec_pretty(&summary).map_err(|e| io(out, std::io::Error::other(e)))?;
        let list = staging.join("_tables.json");
        std::fs::write(&list, json)
            .and_then(|()| std::fs::File::open(&list)?.sync_all())
            .map_err(|e| io(&list, e))?;
        sync_tree(&staging)?;
        if out_exists {
            // rename(2) replaces an empty directory.
            std::fs::remove_dir(out).map_err(|e| io(out, e))?;
        }
        std::fs::rename(&staging, out).map_err(|e| io(out, e))?;
        std::fs::File::open(parent)
            .and_then(|d| d.sync_all())
            .map_err(|e| io(parent, e))?;
        Ok(ExportSummary {
            output: out.to_path_buf(),
            ..summary
        })
    })();
    if result.is_err() && staging.exists() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result
}

/// The operators an export writes, after checking the options: a compression the format
/// has, a uid and a state that exist.
fn selection<'r>(reader: &'r Snapshot, options: &ExportOptions) -> Result<Vec<&'r OperatorMetadata>, TableError> {
    let meta = reader.metadata();
    if !options.file.format.supports(options.file.compression) {
        return Err(TableError::Unsupported {
            what: format!(
                "{:?} compression of {} files",
                options.file.compression, options.file.format
            ),
        });
    }
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
        if !operators.iter().any(|o| {
            o.keyed_states.iter().any(|d| &d.name == state) || o.operator_states.iter().any(|d| &d.name == state)
        }) {
            return Err(TableError::Unknown {
                what: format!("state {state:?}"),
            });
        }
    }
    Ok(operators)
}

/// [`export_snapshot`] to an output at any [`Location`](statekit_core::location::Location):
/// a local path as [`export_snapshot`]; on an object store the tables are exported into a
/// local temporary directory first, then uploaded under the output prefix four files at a
/// time, `_tables.json` last (and only if none is there): the tables are complete exactly
/// when `_tables.json` exists. The prefix must hold no object yet.
pub fn export_to(
    reader: &Snapshot,
    out: &statekit_core::location::Location,
    options: &ExportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExportSummary, TableError> {
    use statekit_core::location::Location;
    let (storage, prefix, url) = match out {
        Location::Local(p) => return export_snapshot(reader, p, options, progress),
        Location::Stored { storage, path, url } => (storage.clone(), path.clone(), url.clone()),
    };
    if !storage.list(&prefix)?.is_empty() {
        return Err(TableError::OutputExists {
            path: PathBuf::from(&url),
        });
    }
    let scratch = crate::scratch_dir("export")?;
    let local = scratch.path().join("tables");
    let summary = export_snapshot(reader, &local, options, progress)?;
    // On a failure the upload deletes what it wrote.
    statekit_core::storage::upload_tree(&local, storage.as_ref(), &prefix, "_tables.json", 4)?;
    Ok(ExportSummary {
        output: PathBuf::from(url),
        ..summary
    })
}

/// Where shard `i` of `n` of an export records what it wrote, relative to the output.
fn export_manifest(i: u32, n: u32) -> String {
    format!("{}/{i}-of-{n}{EXPORT_MANIFEST_SUFFIX}", statekit_migrate::SHARDS_DIR)
}

/// The name ending of an export shard's manifest in `_shards/` (a snapshot shard's has none).
pub const EXPORT_MANIFEST_SUFFIX: &str = ".tables.json";

/// Shard `I` of `N` of an export ([`ExportOptions::shard`]), to an output at any location:
/// every `N`th file of keyed state (one per subtask and operator) from the `I`th, and in shard
/// 0 the operator state. The shard exports into a local temporary directory, then writes its
/// files into the output beside the other shards' (on local disk each file crash-safely, on an
/// object store as objects) and last its manifest `_shards/I-of-N.tables.json`; it never
/// writes `_tables.json`: [`finish_export_shards`] does, once every shard is there. A shard
/// that failed is run again. Shards read only the key groups of their subtasks (range reads
/// on an object store), so they can run on different machines.
pub fn export_shard_to(
    reader: &Snapshot,
    out: &statekit_core::location::Location,
    options: &ExportOptions,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExportSummary, TableError> {
    let Some((i, n)) = options.shard else {
        return export_to(reader, out, options, progress);
    };
    let shown = PathBuf::from(out.display());
    if n == 0 || i >= n {
        return Err(TableError::Unsupported {
            what: format!("--shard {i}/{n}: shards are 0/N to N-1/N, N at least 1"),
        });
    }
    let operators = selection(reader, options)?;
    let wanted = |name: &str| options.state.as_deref().is_none_or(|s| s == name);
    let (storage, prefix) = out.storage_and_path()?;
    if storage.exists(&statekit_core::storage::join(&prefix, "_tables.json"))? {
        return Err(TableError::OutputExists { path: shown });
    }
    let io = |p: &Path, e: std::io::Error| TableError::Io {
        path: p.to_path_buf(),
        source: e,
    };
    let scratch = crate::scratch_dir("export-shard")?;
    let local = scratch.path().join("tables");
    std::fs::create_dir_all(&local).map_err(|e| io(&local, e))?;
    let summary = export_into(reader, &local, &operators, options, &wanted, progress)?;
    let manifest = export_manifest(i, n);
    let manifest_path = local.join(&manifest);
    let json = serde_json::to_vec_pretty(&summary).map_err(|e| io(&manifest_path, std::io::Error::other(e)))?;
    if let Some(dir) = manifest_path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
    }
    std::fs::write(&manifest_path, json).map_err(|e| io(&manifest_path, e))?;
    // A shard run again replaces its manifest: only its own objects are at stake.
    let _ = storage.delete_file(&statekit_core::storage::join(&prefix, &manifest));
    statekit_core::storage::upload_tree(&local, storage.as_ref(), &prefix, &manifest, 4)?;
    Ok(ExportSummary {
        output: shown,
        ..summary
    })
}

/// The final step of an export written by `n` shards ([`export_shard_to`]): reads every
/// shard's manifest, checks that together they wrote every file exactly once, for the same
/// tables, then writes `_tables.json` (only if none is there) and deletes the manifests. A
/// shard that has not finished is named. Cheap: reads `n` small objects and writes one.
pub fn finish_export_shards(out: &statekit_core::location::Location, n: u32) -> Result<serde_json::Value, TableError> {
    use serde_json::Value;
    let shown = PathBuf::from(out.display());
    let bad = |reason: String| TableError::Shards {
        output: shown.clone(),
        reason,
    };
    if n == 0 {
        return Err(bad("--shards must be at least 1".into()));
    }
    let (storage, prefix) = out.storage_and_path()?;
    let mut merged: Option<Value> = None;
    let mut done: Vec<usize> = Vec::new();
    let mut total = None;
    for i in 0..n {
        let path = statekit_core::storage::join(&prefix, &export_manifest(i, n));
        let blob = match storage.open(&path) {
            Ok(b) => b,
            Err(statekit_core::storage::StorageError::NotFound(_)) => {
                return Err(bad(format!(
                    "shard {i} of {n} has not finished (no {}): run it, then finish again",
                    export_manifest(i, n)
                )))
            }
            Err(e) => return Err(e.into()),
        };
        let part: Value = serde_json::from_slice(blob.bytes()).map_err(|e| {
            bad(format!(
                "{}: not an export shard's manifest: {e}",
                storage.describe(&path)
            ))
        })?;
        let sh = &part["shard"];
        if sh["shard"].as_u64() != Some(u64::from(i)) || sh["shards"].as_u64() != Some(u64::from(n)) {
            return Err(bad(format!(
                "{}: written by another shard or --shards",
                storage.describe(&path)
            )));
        }
        let t = sh["work_total"].as_u64();
        if total.is_some() && total != t {
            return Err(bad(format!("{}: shards of different exports", storage.describe(&path))));
        }
        total = t;
        done.extend(
            sh["work"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .map(|w| w as usize),
        );
        let tables = part["tables"].as_array().cloned().unwrap_or_default();
        match merged.as_mut() {
            None => merged = Some(Value::Array(tables)),
            Some(Value::Array(into)) => {
                let paths = |v: &[Value]| v.iter().map(|t| t["path"].clone()).collect::<Vec<_>>();
                if paths(into) != paths(&tables) {
                    return Err(bad(format!(
                        "{}: the shards list different tables",
                        storage.describe(&path)
                    )));
                }
                for (a, b) in into.iter_mut().zip(tables) {
                    let files: Vec<Value> = b["files"].as_array().cloned().unwrap_or_default();
                    if let Some(f) = a["files"].as_array_mut() {
                        f.extend(files);
                    }
                    let rows = a["rows"].as_u64().unwrap_or(0) + b["rows"].as_u64().unwrap_or(0);
                    a["rows"] = Value::from(rows);
                }
            }
            Some(_) => {}
        }
    }
    done.sort_unstable();
    let want: Vec<usize> = (0..total.unwrap_or(0) as usize).collect();
    if done != want {
        return Err(bad(format!(
            "the shards wrote files {done:?} of 0..{}: each exactly once is needed",
            want.len()
        )));
    }
    let mut tables = merged.unwrap_or(Value::Array(Vec::new()));
    // Files in key-group order: `part-<first>-<last>.<ext>` by first key group.
    let first = |f: &Value| -> (u64, String) {
        let name = f.as_str().unwrap_or_default().to_string();
        let kg = name
            .strip_prefix("part-")
            .and_then(|r| r.split('-').next())
            .and_then(|k| k.parse().ok())
            .unwrap_or(0);
        (kg, name)
    };
    for t in tables.as_array_mut().into_iter().flatten() {
        if let Some(f) = t["files"].as_array_mut() {
            f.sort_by_key(first);
        }
    }
    let doc = serde_json::json!({ "output": out.display(), "tables": tables });
    let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| bad(e.to_string()))?;
    storage.put_new(&statekit_core::storage::join(&prefix, "_tables.json"), &bytes)?;
    let _ = storage.delete_dir_all(&statekit_core::storage::join(&prefix, statekit_migrate::SHARDS_DIR));
    Ok(doc)
}

/// fsyncs every directory under `dir` (files were synced when written).
fn sync_tree(dir: &Path) -> Result<(), TableError> {
    let io = |p: &Path, e: std::io::Error| TableError::Io {
        path: p.to_path_buf(),
        source: e,
    };
    for e in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
        let e = e.map_err(|e| io(dir, e))?;
        if e.file_type().map_err(|err| io(&e.path(), err))?.is_dir() {
            sync_tree(&e.path())?;
        }
    }
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io(dir, e))
}

/// The columns of a table as listed in `_tables.json`.
fn columns_of(schema: &Schema) -> Vec<(String, String, Option<String>)> {
    schema
        .fields()
        .iter()
        .map(|f| {
            (
                f.name().clone(),
                f.data_type().to_string(),
                f.metadata().get("statekit.type").cloned(),
            )
        })
        .collect()
}

/// [`export_snapshot`] into the (new, empty) directory `out`.
fn export_into(
    reader: &Snapshot,
    out: &Path,
    operators: &[&OperatorMetadata],
    options: &ExportOptions,
    wanted: &(dyn Fn(&str) -> bool + Sync),
    progress: &(dyn Fn(u64) + Sync),
) -> Result<ExportSummary, TableError> {
    let meta = reader.metadata();
    let ext = options.file.format.extension();
    let io = |p: &Path, e: std::io::Error| TableError::Io {
        path: p.to_path_buf(),
        source: e,
    };
    let mut tables: Vec<ExportedTable> = Vec::new();
    let mut work: Vec<KeyedWork<'_>> = Vec::new();
    let mut operator_tables: Vec<(usize, &OperatorMetadata, usize)> = Vec::new();
    for op in operators {
        let base = |state: &str, kind: String, scope, descriptor: String| {
            let metadata: BTreeMap<String, String> = [
                ("statekit.checkpoint_id", meta.checkpoint_id.to_string()),
                ("statekit.job_id", meta.job_id.clone()),
                ("statekit.uid", op.uid.clone()),
                ("statekit.operator_id", op.operator_id.to_string()),
                ("statekit.state", state.to_string()),
                ("statekit.kind", kind.clone()),
                ("statekit.descriptor", descriptor),
                ("statekit.version", env!("CARGO_PKG_VERSION").to_string()),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
            ExportedTable {
                uid: op.uid.clone(),
                operator_id: op.operator_id.to_string(),
                state: state.to_string(),
                scope,
                kind,
                format: options.file.format,
                path: format!("{}/{}", path_part(&op.uid), path_part(state)),
                files: Vec::new(),
                rows: 0,
                columns: Vec::new(),
                metadata,
            }
        };
        let mut keyed = Vec::new();
        for desc in op.keyed_states.iter().filter(|d| wanted(&d.name)) {
            let json = serde_json::json!({
                "name": desc.name,
                "kind": desc.kind.to_string(),
                "key": desc.key_schema.to_string(),
                "namespace": desc.namespace_schema.to_string(),
                "user_key": desc.user_key_schema.as_ref().map(ToString::to_string),
                "value": desc.value_schema.to_string(),
                "ttl_ms": desc.ttl.map(|t| t.ttl_ms),
            })
            .to_string();
            let mut t = base(&desc.name, desc.kind.to_string(), TableScope::Keyed, json);
            t.columns = columns_of(&state_schema(desc));
            keyed.push(tables.len());
            tables.push(t);
        }
        if options.key_groups.is_none() {
            for (i, desc) in op.operator_states.iter().enumerate().filter(|(_, d)| wanted(&d.name)) {
                let json = serde_json::json!({
                    "name": desc.name,
                    "mode": desc.mode.to_string(),
                    "key": desc.key_schema.as_ref().map(ToString::to_string),
                    "value": desc.value_schema.to_string(),
                })
                .to_string();
                let mut t = base(&desc.name, desc.mode.to_string(), TableScope::Operator, json);
                if op.keyed_states.iter().any(|d| d.name == desc.name) {
                    // A keyed state of the same name has the directory.
                    t.path = format!(
                        "{}/{}",
                        path_part(&op.uid),
                        path_part(&format!("{}.operator", desc.name))
                    );
                }
                t.columns = columns_of(&operator_state_schema(desc));
                operator_tables.push((tables.len(), op, i));
                tables.push(t);
            }
        }
        if keyed.is_empty() {
            continue;
        }
        for s in &op.subtasks {
            let range = match options.key_groups {
                Some(r) => s.key_groups.intersection(&r),
                None => s.key_groups,
            };
            if !range.is_empty() {
                work.push(KeyedWork {
                    op,
                    tables: keyed.clone(),
                    range,
                });
            }
        }
    }
    for t in &tables {
        let dir = out.join(&t.path);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
    }
    // A shard: every `n`th file of keyed state from the `i`th; the operator state (small, one
    // file per state) in shard 0.
    let shard = options.shard.map(|(i, n)| {
        let total = work.len();
        let mine: Vec<usize> = (0..total)
            .filter(|k| *k as u64 % u64::from(n) == u64::from(i))
            .collect();
        ExportShard {
            shard: i,
            shards: n,
            work_total: total,
            work: mine,
        }
    });
    if let Some(sh) = &shard {
        let mut k = 0;
        work.retain(|_| {
            k += 1;
            sh.work.contains(&(k - 1))
        });
        if sh.shard != 0 {
            operator_tables.clear();
        }
    }

    // Keyed state: subtasks in parallel, each opening its views once for all its states.
    let threads = match options.threads {
        0 => std::thread::available_parallelism().map_or(1, usize::from),
        n => n,
    }
    .clamp(1, work.len().max(1));
    let next = AtomicUsize::new(0);
    let written: Mutex<Vec<(usize, u32, String, u64)>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<TableError>> = Mutex::new(None);
    let tables_ref = &tables;
    std::thread::scope(|sc| {
        for _ in 0..threads {
            sc.spawn(|| loop {
                if failure.lock().map_or(true, |f| f.is_some()) {
                    return;
                }
                let Some(w) = work.get(next.fetch_add(1, Ordering::Relaxed)) else {
                    return;
                };
                match export_subtask(reader, out, w, tables_ref, &options.file, ext, progress) {
                    Ok(files) => written.lock().unwrap_or_else(|p| p.into_inner()).extend(files),
                    Err(e) => {
                        failure.lock().unwrap_or_else(|p| p.into_inner()).get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut written = written.into_inner().unwrap_or_else(|p| p.into_inner());
    written.sort_by_key(|(t, first, _, _)| (*t, *first));
    for (t, _, name, rows) in written {
        if let Some(table) = tables.get_mut(t) {
            table.files.push(name);
            table.rows += rows;
        }
    }

    // Operator state: one file per state for all subtasks (it is small: it lives on heap).
    for (t, op, i) in operator_tables {
        let Some(desc) = op.operator_states.get(i) else {
            continue;
        };
        let mut stored = Vec::with_capacity(op.subtasks.len());
        for s in 0..op.subtasks.len() {
            stored.push(
                reader
                    .stored_operator_state(&op.uid, s as u32)
                    .map_err(TableError::Snapshot)?,
            );
        }
        let batch = operator_state_batch(desc, &stored)?;
        let Some(table) = tables.get_mut(t) else {
            continue;
        };
        let last = op.subtasks.len().saturating_sub(1);
        let name = format!("subtasks-0-{last}.{ext}");
        let path = out.join(&table.path).join(&name);
        let file = TableFileOptions {
            metadata: table.metadata.clone().into_iter().collect(),
            ..options.file.clone()
        };
        let rows = write_table_file(&path, batch.schema(), &file, |write| {
            write(&batch)?;
            Ok(batch.num_rows() as u64)
        })?;
        progress(rows);
        table.files.push(name);
        table.rows = rows;
    }
    Ok(ExportSummary {
        output: out.to_path_buf(),
        tables,
        shard,
    })
}

/// Writes one subtask's key groups of every exported keyed state of `w.op`; returns (table,
/// first key group, file name, rows) per file.
fn export_subtask(
    reader: &Snapshot,
    out: &Path,
    w: &KeyedWork<'_>,
    tables: &[ExportedTable],
    file: &TableFileOptions,
    ext: &str,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<Vec<(usize, u32, String, u64)>, TableError> {
    let mut files = Vec::new();
    // A native or changelog view builds a database or replays a log: opened once, it
    // serves every state's table.
    for view in reader.keyed_views(&w.op.uid, w.range)? {
        let part = view.key_group_range().intersection(&w.range);
        if part.is_empty() {
            continue;
        }
        let name = format!("part-{}-{}.{ext}", part.start(), part.end_exclusive() - 1);
        for &t in &w.tables {
            let Some(table) = tables.get(t) else { continue };
            if !view.states().iter().any(|d| d.name == table.state) {
                continue;
            }
            let options = TableFileOptions {
                metadata: table.metadata.clone().into_iter().collect(),
                ..file.clone()
            };
            let path = out.join(&table.path).join(&name);
            let rows = write_state_table(view.as_ref(), &table.state, part, &path, &options, progress)?;
            files.push((t, part.start(), name.clone(), rows));
        }
    }
    Ok(files)
}

/// A uid or state name as one path component: `/`, `\`, NUL, `%` and a leading `.`
/// escaped as `%XX`, so no name can leave its directory or hide.
pub(crate) fn path_part(name: &str) -> String {
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
