//! MANIFEST files: version edits (RocksDB's `VersionEdit` tags) applied in order to get each
//! column family's live table files.

use crate::coding::Cursor;
use crate::error::{Error, Result};
use std::collections::BTreeMap;

/// A table file of a column family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMeta {
    /// LSM level.
    pub level: u32,
    /// File number: the file is `{number:06}.sst`.
    pub number: u64,
    /// Its size in bytes.
    pub size: u64,
    /// Smallest sequence number in it.
    pub smallest_seqno: u64,
    /// Largest sequence number in it (`MAX_SEQUENCE` when unknown).
    pub largest_seqno: u64,
    /// `epoch_number` (newer L0 files have larger ones), 0 when not recorded.
    pub epoch_number: u64,
}

/// A column family of the database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnFamily {
    /// Its id (0 is `default`).
    pub id: u32,
    /// Its name.
    pub name: String,
    /// Its comparator's name, if the MANIFEST records it.
    pub comparator: Option<String>,
    /// Its live table files by (level, number).
    pub files: BTreeMap<(u32, u64), FileMeta>,
    /// Its entries in write-ahead logs numbered below this are all in its tables.
    pub log_number: u64,
}

/// The database state a MANIFEST describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Live column families by id.
    pub column_families: BTreeMap<u32, ColumnFamily>,
    /// Last sequence number used.
    pub last_sequence: u64,
    /// The largest log number an edit recorded (each column family's is in
    /// [`ColumnFamily::log_number`]).
    pub log_number: u64,
    /// Next file number.
    pub next_file_number: u64,
}

/// One decoded edit.
#[derive(Debug, Default)]
struct Edit {
    comparator: Option<String>,
    log_number: Option<u64>,
    next_file: Option<u64>,
    last_sequence: Option<u64>,
    deleted: Vec<(u32, u64)>,
    added: Vec<FileMeta>,
    column_family: u32,
    cf_add: Option<String>,
    cf_drop: bool,
}

/// Levels RocksDB allows at most.
const MAX_LEVELS: u32 = 64;

fn level(c: &mut Cursor<'_>) -> Result<u32> {
    let l = c.varint32("level")?;
    if l >= MAX_LEVELS {
        return Err(c.corrupt("level", format!("level {l}")));
    }
    Ok(l)
}

fn internal_key<'a>(c: &mut Cursor<'a>, field: &str) -> Result<&'a [u8]> {
    let k = c.length_prefixed(field)?;
    if k.len() < 8 {
        return Err(c.corrupt(field, format!("internal key of {} bytes (< 8)", k.len())));
    }
    Ok(k)
}

fn decode_edit(file: &str, record: &[u8], offset: u64) -> Result<Edit> {
    let mut c = Cursor::new(file, record, offset);
    let mut e = Edit::default();
    while !c.is_empty() {
        let tag_at = c.offset();
        let tag = c.varint32("version edit tag")?;
        match tag {
            1 => e.comparator = Some(String::from_utf8_lossy(c.length_prefixed("comparator name")?).into_owned()),
            2 => e.log_number = Some(c.varint64("log number")?),
            3 => e.next_file = Some(c.varint64("next file number")?),
            4 => e.last_sequence = Some(c.varint64("last sequence")?),
            5 => {
                level(&mut c)?;
                internal_key(&mut c, "compact cursor")?;
            }
            6 => {
                let l = level(&mut c)?;
                let n = c.varint64("deleted file number")?;
                e.deleted.push((l, n));
            }
            7 | 100 | 102 | 103 => {
                let l = level(&mut c)?;
                let number = c.varint64("new file number")?;
                if tag == 102 {
                    c.varint32("new file path id")?;
                }
                let size = c.varint64("new file size")?;
                internal_key(&mut c, "new file smallest key")?;
                internal_key(&mut c, "new file largest key")?;
                let (smallest_seqno, largest_seqno) = if tag == 7 {
                    (0, crate::table::MAX_SEQUENCE)
                } else {
                    (
                        c.varint64("new file smallest seqno")?,
                        c.varint64("new file largest seqno")?,
                    )
                };
                let mut epoch_number = 0;
                if tag == 103 {
                    loop {
                        let ctag_at = c.offset();
                        let ctag = c.varint32("new file custom tag")?;
                        if ctag == 1 {
                            break;
                        }
                        let field = c.length_prefixed("new file custom field")?;
                        match ctag {
                            13 => {
                                epoch_number = Cursor::new(file, field, ctag_at).varint64("new file epoch number")?;
                            }
                            // kPathId: only path 0 (the database directory) is read here.
                            65 if field != [0] => {
                                return Err(Error::unsupported(
                                    file,
                                    ctag_at,
                                    "new file path id",
                                    "tables in other db_paths",
                                ));
                            }
                            65 => {}
                            t if t & 64 != 0 => {
                                return Err(Error::unsupported(
                                    file,
                                    ctag_at,
                                    "new file custom tag",
                                    format!("non-ignorable custom field {t}"),
                                ));
                            }
                            _ => {}
                        }
                    }
                }
                e.added.push(FileMeta {
                    level: l,
                    number,
                    size,
                    smallest_seqno,
                    largest_seqno,
                    epoch_number,
                });
            }
            9 => {
                c.varint64("previous log number")?;
            }
            10 => {
                c.varint64("min log number to keep")?;
            }
            200 => e.column_family = c.varint32("column family id")?,
            201 => e.cf_add = Some(String::from_utf8_lossy(c.length_prefixed("column family name")?).into_owned()),
            202 => e.cf_drop = true,
            203 => {
                c.varint32("max column family")?;
            }
            300 => {
                c.varint32("atomic group remaining entries")?;
            }
            400 | 401 => {
                return Err(Error::unsupported(
                    file,
                    tag_at,
                    "version edit tag",
                    "BlobDB blob files",
                ));
            }
            t if t & (1 << 13) != 0 => {
                // Forward-compatible tags (db id, WAL additions, ...): length-prefixed, ignorable.
                c.length_prefixed("ignorable version edit field")?;
            }
            t => {
                return Err(Error::unsupported(file, tag_at, "version edit tag", format!("tag {t}")));
            }
        }
    }
    Ok(e)
}

/// Applies the MANIFEST's edits from the start.
pub fn read_manifest(file: &str, data: &[u8]) -> Result<Manifest> {
    let mut m = Manifest {
        column_families: BTreeMap::new(),
        last_sequence: 0,
        log_number: 0,
        next_file_number: 0,
    };
    m.column_families.insert(
        0,
        ColumnFamily {
            id: 0,
            name: "default".into(),
            comparator: None,
            files: BTreeMap::new(),
            log_number: 0,
        },
    );
    let mut dropped: std::collections::BTreeSet<u32> = std::collections::BTreeSet::new();
    let records = crate::log::records(file, data)?;
    if records.is_empty() {
        return Err(Error::corrupt(file, 0, "MANIFEST", "no version edits"));
    }
    for (at, rec) in records {
        let e = decode_edit(file, &rec, at)?;
        if let Some(v) = e.log_number {
            m.log_number = m.log_number.max(v);
        }
        if let Some(v) = e.next_file {
            m.next_file_number = v;
        }
        if let Some(v) = e.last_sequence {
            m.last_sequence = v;
        }
        let id = e.column_family;
        if let Some(name) = e.cf_add {
            if m.column_families.contains_key(&id) {
                return Err(Error::corrupt(
                    file,
                    at,
                    "column family add",
                    format!("id {id} exists already"),
                ));
            }
            m.column_families.insert(
                id,
                ColumnFamily {
                    id,
                    name,
                    comparator: e.comparator.clone(),
                    files: BTreeMap::new(),
                    log_number: 0,
                },
            );
            dropped.remove(&id);
        }
        if e.cf_drop {
            if m.column_families.remove(&id).is_none() {
                return Err(Error::corrupt(
                    file,
                    at,
                    "column family drop",
                    format!("no column family {id}"),
                ));
            }
            dropped.insert(id);
            continue;
        }
        let Some(cf) = m.column_families.get_mut(&id) else {
            if dropped.contains(&id) {
                continue;
            }
            return Err(Error::corrupt(
                file,
                at,
                "column family",
                format!("edit of unknown column family {id}"),
            ));
        };
        if let Some(c) = e.comparator {
            cf.comparator = Some(c);
        }
        if let Some(v) = e.log_number {
            cf.log_number = cf.log_number.max(v);
        }
        for (l, n) in e.deleted {
            if cf.files.remove(&(l, n)).is_none() {
                return Err(Error::corrupt(
                    file,
                    at,
                    "deleted file",
                    format!("file {n} is not at level {l} of column family {:?}", cf.name),
                ));
            }
        }
        for f in e.added {
            if cf.files.values().any(|g| g.number == f.number) {
                return Err(Error::corrupt(
                    file,
                    at,
                    "new file",
                    format!("file {} added twice", f.number),
                ));
            }
            cf.files.insert((f.level, f.number), f);
        }
    }
    Ok(m)
}
