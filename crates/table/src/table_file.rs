//! A table streamed into one file — Parquet, Arrow IPC or JSON lines — written under a
//! temporary name, fsynced and renamed (a reader never sees a half-written file under the
//! final name).

use crate::{StateBatches, TableError};
use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use statekit_core::{KeyGroupRange, KeyedStateView, StateDescriptor};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::ops::ControlFlow;
use std::path::Path;

/// The format of a table file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TableFormat {
    /// Apache Parquet (the default): typed columns, compressed pages, key-value metadata.
    #[default]
    Parquet,
    /// The Arrow IPC file format (Feather v2): the batches as they are in memory, optionally
    /// zstd-compressed buffers, custom metadata.
    Arrow,
    /// JSON lines: one object per row (binary as hex, timestamps as ISO 8601), uncompressed.
    Jsonl,
}

impl TableFormat {
    /// The file name extension (`parquet`, `arrow`, `jsonl`).
    pub fn extension(self) -> &'static str {
        match self {
            TableFormat::Parquet => "parquet",
            TableFormat::Arrow => "arrow",
            TableFormat::Jsonl => "jsonl",
        }
    }

    /// The compression a file of this format gets unless asked otherwise: zstd, but none
    /// for JSON lines.
    pub fn default_compression(self) -> TableCompression {
        match self {
            TableFormat::Jsonl => TableCompression::None,
            _ => TableCompression::Zstd,
        }
    }

    /// Whether files of this format can be compressed with `c`: Parquet by all three, Arrow
    /// IPC by zstd or none, JSON lines not at all.
    pub fn supports(self, c: TableCompression) -> bool {
        match self {
            TableFormat::Parquet => true,
            TableFormat::Arrow => c != TableCompression::Snappy,
            TableFormat::Jsonl => c == TableCompression::None,
        }
    }
}

impl std::fmt::Display for TableFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.extension())
    }
}

/// How pages (Parquet) or buffers (Arrow IPC) are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableCompression {
    /// Zstandard, level 1 (the default).
    #[default]
    Zstd,
    /// Snappy (Parquet only).
    Snappy,
    /// None.
    None,
}

/// How a table file is written.
#[derive(Clone, Debug)]
pub struct TableFileOptions {
    /// The file format.
    pub format: TableFormat,
    /// Compression ([`TableFormat::supports`] says which apply).
    pub compression: TableCompression,
    /// Rows per Parquet row group, and per Arrow batch built from the view.
    pub row_group_rows: usize,
    /// Key-value metadata of the file (Parquet key-value metadata, Arrow IPC custom
    /// metadata; JSON lines carry none).
    pub metadata: Vec<(String, String)>,
}

impl Default for TableFileOptions {
    /// Parquet, zstd, 64 Ki rows per row group, no metadata.
    fn default() -> Self {
        TableFileOptions {
            format: TableFormat::Parquet,
            compression: TableCompression::Zstd,
            row_group_rows: 64 << 10,
            metadata: Vec::new(),
        }
    }
}

/// The index and descriptor of `view`'s state `name`.
fn state_of<'v>(view: &'v dyn KeyedStateView, name: &str) -> Result<(u32, &'v StateDescriptor), TableError> {
    view.states()
        .iter()
        .enumerate()
        .find(|(_, d)| d.name == name)
        .map(|(i, d)| (u32::try_from(i).unwrap_or(u32::MAX), d))
        .ok_or_else(|| TableError::UnknownState {
            state: name.to_string(),
        })
}

/// Calls `sink` with the batches of state `state`'s table of `view`, key groups `range ∩ view
/// range` in order, `batch_rows` rows each; stops when `sink` breaks. Returns the rows.
pub fn visit_state_batches(
    view: &dyn KeyedStateView,
    state: &str,
    range: KeyGroupRange,
    batch_rows: usize,
    mut sink: impl FnMut(RecordBatch) -> Result<ControlFlow<()>, TableError>,
) -> Result<u64, TableError> {
    let (state_index, desc) = state_of(view, state)?;
    let mut batches = StateBatches::new(desc, batch_rows);
    let mut rows = 0u64;
    let mut failure: Option<TableError> = None;
    for kg in range.intersection(&view.key_group_range()) {
        let flow = view.visit_key_group(kg, &mut |e| {
            if e.state != state_index {
                return Ok(ControlFlow::Continue(()));
            }
            let r = batches.push(kg, e).and_then(|b| match b {
                Some(b) => {
                    rows += b.num_rows() as u64;
                    sink(b)
                }
                None => Ok(ControlFlow::Continue(())),
            });
            match r {
                Ok(flow) => Ok(flow),
                Err(err) => {
                    failure = Some(err);
                    Ok(ControlFlow::Break(()))
                }
            }
        })?;
        if let Some(e) = failure.take() {
            return Err(e);
        }
        if flow.is_break() {
            return Ok(rows);
        }
    }
    if let Some(b) = batches.finish()? {
        rows += b.num_rows() as u64;
        let _ = sink(b)?;
    }
    Ok(rows)
}

/// Writes state `state`'s table of `view` (key groups `range`) as one file at `path` in
/// `options.format` (see [`write_table_file`]), calling `progress` with the rows of each
/// batch written. Returns the rows written. Memory: one batch
/// of decoded rows and the writer's current row group.
pub fn write_state_table(
    view: &dyn KeyedStateView,
    state: &str,
    range: KeyGroupRange,
    path: &Path,
    options: &TableFileOptions,
    progress: &dyn Fn(u64),
) -> Result<u64, TableError> {
    let (_, desc) = state_of(view, state)?;
    let schema = std::sync::Arc::new(crate::state_schema(desc));
    write_table_file(path, schema, options, |write| {
        visit_state_batches(view, state, range, options.row_group_rows, |b| {
            write(&b)?;
            progress(b.num_rows() as u64);
            Ok(ControlFlow::Continue(()))
        })
    })
}

/// The writer of one table file.
enum Writer {
    Parquet(Box<ArrowWriter<File>>),
    Arrow(Box<arrow_ipc::writer::FileWriter<BufWriter<File>>>),
    Jsonl(arrow_json::LineDelimitedWriter<BufWriter<File>>),
}

/// Writes a table of `schema` at `path` in `options.format`: `fill` is handed a function
/// that writes one batch and returns the rows it wrote. The file is written under a
/// temporary name beside `path`, fsynced, renamed, and the directory fsynced; on any failure
/// the temporary file is removed and nothing is left under `path`. A compression the format
/// does not support is refused before anything is written.
pub fn write_table_file(
    path: &Path,
    schema: SchemaRef,
    options: &TableFileOptions,
    fill: impl FnOnce(&mut dyn FnMut(&RecordBatch) -> Result<(), TableError>) -> Result<u64, TableError>,
) -> Result<u64, TableError> {
    if !options.format.supports(options.compression) {
        return Err(TableError::Unsupported {
            what: format!("{:?} compression of {} files", options.compression, options.format),
        });
    }
    let io = |e: std::io::Error| TableError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let parquet = |e: parquet::errors::ParquetError| TableError::Parquet {
        path: path.to_path_buf(),
        source: e,
    };
    let arrow = |e: arrow_schema::ArrowError| TableError::Write {
        path: path.to_path_buf(),
        source: e,
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| io(std::io::Error::other("the output needs a file name")))?;
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let result = (|| {
        let file = File::create(&tmp).map_err(io)?;
        let mut writer = match options.format {
            TableFormat::Parquet => {
                let compression = match options.compression {
                    TableCompression::Zstd => Compression::ZSTD(ZstdLevel::try_new(1).unwrap_or_default()),
                    TableCompression::Snappy => Compression::SNAPPY,
                    TableCompression::None => Compression::UNCOMPRESSED,
                };
                let props = WriterProperties::builder()
                    .set_compression(compression)
                    .set_max_row_group_size(options.row_group_rows.max(1))
                    .set_key_value_metadata(Some(
                        options
                            .metadata
                            .iter()
                            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
                            .collect(),
                    ))
                    .build();
                Writer::Parquet(Box::new(
                    ArrowWriter::try_new(file, schema, Some(props)).map_err(parquet)?,
                ))
            }
            TableFormat::Arrow => {
                let compression = match options.compression {
                    TableCompression::Zstd => Some(arrow_ipc::CompressionType::ZSTD),
                    _ => None,
                };
                let ipc = arrow_ipc::writer::IpcWriteOptions::default()
                    .try_with_compression(compression)
                    .map_err(arrow)?;
                let mut w = arrow_ipc::writer::FileWriter::try_new_with_options(BufWriter::new(file), &schema, ipc)
                    .map_err(arrow)?;
                for (k, v) in &options.metadata {
                    w.write_metadata(k.clone(), v.clone());
                }
                Writer::Arrow(Box::new(w))
            }
            TableFormat::Jsonl => Writer::Jsonl(arrow_json::LineDelimitedWriter::new(BufWriter::new(file))),
        };
        let rows = fill(&mut |b| match &mut writer {
            Writer::Parquet(w) => w.write(b).map_err(parquet),
            Writer::Arrow(w) => w.write(b).map_err(arrow),
            Writer::Jsonl(w) => w.write(b).map_err(arrow),
        })?;
        let file = match writer {
            Writer::Parquet(w) => w.into_inner().map_err(parquet)?,
            Writer::Arrow(mut w) => {
                w.finish().map_err(arrow)?;
                w.into_inner()
                    .map_err(arrow)?
                    .into_inner()
                    .map_err(|e| io(e.into_error()))?
            }
            Writer::Jsonl(mut w) => {
                w.finish().map_err(arrow)?;
                let mut b = w.into_inner();
                b.flush().map_err(io)?;
                b.into_inner().map_err(|e| io(e.into_error()))?
            }
        };
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(rows)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
