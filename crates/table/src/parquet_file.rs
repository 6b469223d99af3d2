//! A state's table streamed from a view into a Parquet file, written under a temporary name,
//! fsynced and renamed (a reader never sees a half-written file under the final name).

use crate::{StateBatches, TableError};
use arrow_array::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use statekit_core::{KeyGroupRange, KeyedStateView, StateDescriptor};
use std::ops::ControlFlow;
use std::path::Path;

/// How Parquet pages are compressed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TableCompression {
    /// Zstandard, level 1 (the default).
    #[default]
    Zstd,
    /// Snappy.
    Snappy,
    /// None.
    None,
}

/// How a table file is written.
#[derive(Clone, Debug)]
pub struct ParquetOptions {
    /// Page compression.
    pub compression: TableCompression,
    /// Rows per row group (and per Arrow batch read from the view).
    pub row_group_rows: usize,
    /// Key-value metadata of the file (snapshot id, uid, operator id, descriptor, version).
    pub metadata: Vec<(String, String)>,
}

impl Default for ParquetOptions {
    /// Zstandard, 64 Ki rows per row group, no metadata.
    fn default() -> Self {
        ParquetOptions {
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

/// Writes state `state`'s table of `view` (key groups `range`) as one Parquet file at `path`:
/// under a temporary name beside it, fsynced, renamed, the directory fsynced. Returns the rows
/// written. Memory: one row group of decoded rows.
pub fn write_state_parquet(
    view: &dyn KeyedStateView,
    state: &str,
    range: KeyGroupRange,
    path: &Path,
    options: &ParquetOptions,
) -> Result<u64, TableError> {
    let (_, desc) = state_of(view, state)?;
    let schema = std::sync::Arc::new(crate::state_schema(desc));
    let io = |e: std::io::Error| TableError::Io {
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
    let parquet = |e: parquet::errors::ParquetError| TableError::Parquet {
        path: path.to_path_buf(),
        source: e,
    };
    let result = (|| {
        let file = std::fs::File::create(&tmp).map_err(io)?;
        let mut writer = ArrowWriter::try_new(file, schema, Some(props)).map_err(parquet)?;
        let rows = visit_state_batches(view, state, range, options.row_group_rows, |b| {
            writer.write(&b).map_err(parquet)?;
            Ok(ControlFlow::Continue(()))
        })?;
        let file = writer.into_inner().map_err(parquet)?;
        file.sync_all().map_err(io)?;
        std::fs::rename(&tmp, path).map_err(io)?;
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)?;
        Ok(rows)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
