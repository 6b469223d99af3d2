//! A database read from its files: CURRENT names the MANIFEST, the MANIFEST lists each
//! column family's live tables, and the tables' entries merge into what a read sees.

use crate::error::{Error, Result};
use crate::manifest::{read_manifest, ColumnFamily, Manifest};
use crate::table::{
    read_entries, read_tombstones, table_global_seqno, table_layout, RangeTombstone, TableEntry, TableLayout,
};
use crate::{EntryKind, Limits, BYTEWISE_COMPARATOR};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Bytes shared with the caller (a memory-mapped file, a downloaded object).
pub type SharedBytes = std::sync::Arc<dyn AsRef<[u8]> + Send + Sync>;

/// Where one file of a database is.
#[derive(Clone)]
pub enum FileData {
    /// A local file, read when needed.
    Path(PathBuf),
    /// The file's bytes.
    Bytes(Vec<u8>),
    /// The file's bytes, shared.
    Shared(SharedBytes),
}

impl std::fmt::Debug for FileData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FileData::Path(p) => f.debug_tuple("Path").field(p).finish(),
            FileData::Bytes(b) => write!(f, "Bytes({} bytes)", b.len()),
            FileData::Shared(b) => write!(f, "Shared({} bytes)", (**b).as_ref().len()),
        }
    }
}

/// A file's bytes as read.
enum Loaded {
    Owned(Vec<u8>),
    Shared(SharedBytes),
}

impl Loaded {
    fn bytes(&self) -> &[u8] {
        match self {
            Loaded::Owned(v) => v,
            Loaded::Shared(s) => (**s).as_ref(),
        }
    }
}

fn load(f: &DbFile) -> Result<Loaded> {
    match &f.data {
        FileData::Bytes(b) => Ok(Loaded::Owned(b.clone())),
        FileData::Shared(s) => Ok(Loaded::Shared(s.clone())),
        FileData::Path(p) => std::fs::read(p).map(Loaded::Owned).map_err(|source| Error::Io {
            path: f.display.clone(),
            source,
        }),
    }
}

/// One table of a column family, opened: its bytes and where its blocks are.
struct OpenTable {
    display: String,
    bytes: Loaded,
    layout: TableLayout,
    global_seqno: Option<u64>,
    level: u32,
    rank: u64,
}

/// A column family's tables opened (footers, indexes and range deletions read), for reads of
/// key ranges that decode only the data blocks the range needs.
pub struct ColumnFamilyReader {
    name: String,
    manifest_name: String,
    last_sequence: u64,
    limits: Limits,
    tables: Vec<OpenTable>,
    tombstones: Vec<RangeTombstone>,
}

impl std::fmt::Debug for ColumnFamilyReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColumnFamilyReader")
            .field("name", &self.name)
            .field("tables", &self.tables.iter().map(|t| &t.display).collect::<Vec<_>>())
            .finish()
    }
}

/// One file of a database: its name in the database directory (`000042.sst`, `CURRENT`,
/// `MANIFEST-000005`), how errors name it, and where its bytes are.
#[derive(Debug, Clone)]
pub struct DbFile {
    /// The name RocksDB knows it by.
    pub name: String,
    /// How errors name it (e.g. its path).
    pub display: String,
    /// Its bytes.
    pub data: FileData,
}

/// Merges a key's operands: `(key, existing value, operands oldest first)` to the value, or
/// a reason it cannot.
pub type MergeFn<'m> = dyn Fn(&[u8], Option<&[u8]>, &[&[u8]]) -> std::result::Result<Vec<u8>, String> + 'm;

/// RocksDB's string-append merge (`StringAppendOperator`; Flink's list state registers it as
/// `stringappendtest` with `,`): the existing value, then each operand oldest first, joined by
/// `delimiter`. Wrap it in a [`MergeFn`] for a database that uses it.
pub fn string_append(existing: Option<&[u8]>, operands: &[&[u8]], delimiter: u8) -> Vec<u8> {
    let mut out = existing.map(<[u8]>::to_vec);
    for op in operands {
        match &mut out {
            Some(v) => {
                v.push(delimiter);
                v.extend_from_slice(op);
            }
            None => out = Some(op.to_vec()),
        }
    }
    out.unwrap_or_default()
}

/// A database opened read-only from its files (no C++ involved, nothing written).
#[derive(Debug)]
pub struct Db {
    files: BTreeMap<String, DbFile>,
    manifest: Manifest,
    manifest_name: String,
    limits: Limits,
}

fn read_file(f: &DbFile) -> Result<std::borrow::Cow<'_, [u8]>> {
    match &f.data {
        FileData::Bytes(b) => Ok(std::borrow::Cow::Borrowed(b)),
        FileData::Shared(s) => Ok(std::borrow::Cow::Borrowed((**s).as_ref())),
        FileData::Path(p) => std::fs::read(p)
            .map(std::borrow::Cow::Owned)
            .map_err(|source| Error::Io {
                path: f.display.clone(),
                source,
            }),
    }
}

impl Db {
    /// Opens the database of `files`: reads CURRENT and the MANIFEST it names.
    pub fn open(files: Vec<DbFile>, limits: Limits) -> Result<Db> {
        let files: BTreeMap<String, DbFile> = files.into_iter().map(|f| (f.name.clone(), f)).collect();
        let current = files
            .get("CURRENT")
            .ok_or_else(|| Error::corrupt("CURRENT", 0, "database files", "no CURRENT file"))?;
        let text = read_file(current)?;
        let name = std::str::from_utf8(&text)
            .ok()
            .and_then(|t| t.strip_suffix('\n'))
            .filter(|n| n.starts_with("MANIFEST-") && !n.contains('/'))
            .ok_or_else(|| Error::corrupt(&current.display, 0, "CURRENT", "does not name a MANIFEST file"))?
            .to_string();
        let mf = files.get(&name).ok_or_else(|| {
            Error::corrupt(
                &current.display,
                0,
                "CURRENT",
                format!("names {name}, which is not among the files"),
            )
        })?;
        let bytes = read_file(mf)?;
        let manifest_name = mf.display.clone();
        let manifest = read_manifest(&manifest_name, &bytes)?;
        drop(bytes);
        for cf in manifest.column_families.values() {
            if let Some(c) = &cf.comparator {
                if c != BYTEWISE_COMPARATOR {
                    return Err(Error::unsupported(
                        &manifest_name,
                        0,
                        "comparator",
                        format!("column family {:?} uses comparator {c:?}", cf.name),
                    ));
                }
            }
        }
        // Write-ahead logs still needed by a column family would hold entries its tables do
        // not: refuse them rather than read a partial state.
        let live_log = manifest
            .column_families
            .values()
            .map(|c| c.log_number)
            .min()
            .unwrap_or(0);
        for f in files.values() {
            let Some(num) = f.name.strip_suffix(".log").and_then(|n| n.parse::<u64>().ok()) else {
                continue;
            };
            if num < live_log {
                continue;
            }
            let len = match &f.data {
                FileData::Bytes(b) => b.len() as u64,
                FileData::Shared(b) => (**b).as_ref().len() as u64,
                FileData::Path(p) => std::fs::metadata(p)
                    .map_err(|source| Error::Io {
                        path: f.display.clone(),
                        source,
                    })?
                    .len(),
            };
            if len > 0 {
                return Err(Error::unsupported(
                    &f.display,
                    0,
                    "write-ahead log",
                    format!("a live write-ahead log of {len} bytes (entries not yet in tables)"),
                ));
            }
        }
        Ok(Db {
            files,
            manifest,
            manifest_name,
            limits,
        })
    }

    /// The MANIFEST's state.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The live column families.
    pub fn column_families(&self) -> impl Iterator<Item = &ColumnFamily> {
        self.manifest.column_families.values()
    }

    /// The column family named `name`.
    pub fn column_family(&self, name: &str) -> Option<&ColumnFamily> {
        self.manifest.column_families.values().find(|c| c.name == name)
    }

    /// What a read of column family `name` sees, in user-key order: the newest entry of each
    /// key (merge operands resolved with `merge`), deleted keys left out.
    pub fn read_column_family(&self, name: &str, merge: &MergeFn<'_>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        self.column_family_reader(name)?.read_range(&[], None, merge)
    }

    /// Opens column family `name`'s tables: reads each one's footer, index and range
    /// deletions (their data blocks are read by [`ColumnFamilyReader::read_range`]).
    pub fn column_family_reader(&self, name: &str) -> Result<ColumnFamilyReader> {
        let cf = self.column_family(name).ok_or_else(|| {
            Error::corrupt(
                &self.manifest_name,
                0,
                "column family",
                format!("no column family {name:?}"),
            )
        })?;
        let mut tables = Vec::new();
        let mut tombstones = Vec::new();
        for f in cf.files.values() {
            let local = format!("{:06}.sst", f.number);
            let file = self.files.get(&local).ok_or_else(|| {
                Error::corrupt(
                    &self.manifest_name,
                    0,
                    "live table file",
                    format!("{local} of column family {name:?} is not among the files"),
                )
            })?;
            let bytes = load(file)?;
            let data = bytes.bytes();
            if data.len() as u64 != f.size {
                return Err(Error::corrupt(
                    &file.display,
                    0,
                    "table file size",
                    format!("{} bytes, the MANIFEST says {}", data.len(), f.size),
                ));
            }
            let layout = table_layout(&file.display, data, &self.limits)?;
            let global_seqno = table_global_seqno(&file.display, &layout, Some(f.largest_seqno))?;
            tombstones.extend(read_tombstones(
                &file.display,
                data,
                &layout,
                global_seqno,
                &self.limits,
            )?);
            tables.push(OpenTable {
                display: file.display.clone(),
                bytes,
                layout,
                global_seqno,
                level: f.level,
                rank: u64::MAX - f.largest_seqno.max(f.epoch_number),
            });
        }
        let last = self.manifest.last_sequence;
        tombstones.retain(|t| t.sequence <= last && t.start < t.end);
        tombstones.sort_by(|a, b| a.start.cmp(&b.start));
        Ok(ColumnFamilyReader {
            name: name.to_string(),
            manifest_name: self.manifest_name.clone(),
            last_sequence: self.manifest.last_sequence,
            limits: self.limits,
            tables,
            tombstones,
        })
    }
}

impl ColumnFamilyReader {
    /// What a read of user keys in `[lower, upper)` (`upper` `None`: no end) sees, in
    /// user-key order, as [`Db::read_column_family`] does for the whole column family.
    pub fn read_range(
        &self,
        lower: &[u8],
        upper: Option<&[u8]>,
        merge: &MergeFn<'_>,
    ) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        let name = &self.name;
        // (entry, level, L0 age rank) of every table.
        let mut all: Vec<(TableEntry, u32, u64)> = Vec::new();
        for t in &self.tables {
            let entries = read_entries(
                &t.display,
                t.bytes.bytes(),
                &t.layout,
                t.global_seqno,
                Some((lower, upper)),
                &self.limits,
            )?;
            all.extend(entries.into_iter().map(|e| (e, t.level, t.rank)));
        }
        let last = self.last_sequence;
        all.retain(|(e, _, _)| e.sequence <= last);
        all.sort_by(|a, b| {
            a.0.user_key
                .cmp(&b.0.user_key)
                .then(b.0.sequence.cmp(&a.0.sequence))
                .then(a.1.cmp(&b.1))
                .then(a.2.cmp(&b.2))
        });
        let tombstones = &self.tombstones;
        let mut out = Vec::new();
        let mut i = 0;
        while i < all.len() {
            let key = all.get(i).map(|e| e.0.user_key.clone()).unwrap_or_default();
            let mut j = i;
            while all.get(j).is_some_and(|e| e.0.user_key == key) {
                j += 1;
            }
            let group = all.get(i..j).unwrap_or(&[]);
            i = j;
            // Newest range deletion covering the key.
            let covered = tombstones
                .iter()
                .take_while(|t| t.start <= key)
                .filter(|t| key < t.end)
                .map(|t| t.sequence)
                .max();
            let mut operands: Vec<&[u8]> = Vec::new();
            let mut base: Option<&[u8]> = None;
            for (e, _, _) in group {
                if covered.is_some_and(|s| e.sequence < s) {
                    break;
                }
                match e.kind {
                    EntryKind::Put => {
                        base = Some(&e.value);
                        break;
                    }
                    EntryKind::Delete | EntryKind::SingleDelete => break,
                    EntryKind::Merge => operands.push(&e.value),
                }
            }
            if operands.is_empty() {
                if let Some(v) = base {
                    out.push((key, v.to_vec()));
                }
                continue;
            }
            operands.reverse();
            let v = merge(&key, base, &operands).map_err(|reason| {
                Error::corrupt(
                    &self.manifest_name,
                    0,
                    format!("merge operands of column family {name:?}"),
                    reason,
                )
            })?;
            out.push((key, v));
        }
        Ok(out)
    }
}
