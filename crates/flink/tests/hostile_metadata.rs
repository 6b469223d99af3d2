//! `_metadata` files crafted as an attacker would (issue 40 points 9 and 10): whatever follows
//! the operators, and however large the file claims to be, reading one costs a bounded
//! multiple of what a real one does. Each test here failed before its fix.

use statekit_flink::{decode_metadata, FlinkError, FlinkOpenOptions, FlinkSnapshot, MAX_METADATA_BYTES};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/flink")
}

/// Every `_metadata` under `fixtures/flink`.
fn metadata_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).expect("read_dir") {
        let p = e.expect("entry").path();
        if p.is_dir() {
            metadata_files(&p, out);
        } else if p.file_name().is_some_and(|n| n == "_metadata") {
            out.push(p);
        }
    }
}

/// Junk that made the old trailer scan re-check up to 64 KiB at each byte: Java string tags
/// (`t`, 0x74) whose length (`tt` = 29 812) covers valid UTF-8 with a `/` in it, which the
/// scan rejects before moving on by one byte.
fn quadratic_junk(len: usize) -> Vec<u8> {
    (0..len).map(|i| if i % 4096 == 4095 { b'/' } else { b't' }).collect()
}

/// Point 9: the v4+ trailer scan cost ~1 s per MB of whatever followed the operators (a
/// 16 MB `_metadata`: `show` 13–19 s). It looks at a bounded window now, and finds the same
/// properties in every real `_metadata`, whatever follows.
#[test]
fn the_trailer_scan_is_bounded_and_finds_the_same_properties() {
    let mut files = Vec::new();
    metadata_files(&fixtures(), &mut files);
    assert!(files.len() >= 10, "{files:?}");
    files.sort();
    let small = quadratic_junk(256 << 10);
    let large = quadratic_junk(64 << 20);
    let mut timed = false;
    for md in files {
        let bytes = std::fs::read(&md).expect("read");
        let name = md.display().to_string();
        let real = decode_metadata(&bytes, &name).expect("a real _metadata decodes");
        if real.version < 4 {
            continue;
        }
        assert!(real.properties.is_some(), "{name}");
        // 64 MiB after one of them (the old scan: about a minute), 256 KiB after the others.
        let junk = if timed { &small } else { &large };
        let mut grown = bytes.clone();
        grown.extend_from_slice(junk);
        let started = Instant::now();
        let decoded = decode_metadata(&grown, &name).expect("junk after the trailer is ignored");
        let took = started.elapsed();
        assert_eq!(decoded.properties, real.properties, "{name}");
        assert_eq!(decoded.operators, real.operators, "{name}");
        assert!(took < Duration::from_secs(20), "{name}: {took:?}");
        timed = true;
    }
    assert!(timed);
}

/// Point 10: a `_metadata` was read whole with no size check (a 2 GB sparse file: 2.1 GB
/// resident). One larger than `MAX_METADATA_BYTES` is refused by its size, naming the file,
/// before any of it is read.
#[test]
fn a_metadata_larger_than_the_maximum_is_refused_before_it_is_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let md = tmp.path().join("_metadata");
    let real = fixtures().join("flink-1.20.5/savepoint-hashmap-canonical/savepoint/_metadata");
    let head = std::fs::read(real).expect("read");
    let f = std::fs::File::create(&md).expect("create");
    use std::io::Write;
    (&f).write_all(&head).expect("write");
    // Sparse: no disk, and no memory unless read.
    f.set_len(2 << 30).expect("set_len");
    drop(f);
    let started = Instant::now();
    let e = FlinkSnapshot::open(&md, &FlinkOpenOptions::default()).expect_err("too large");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(e.kind(), statekit_core::ErrorKind::Unsupported, "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&md.display().to_string()), "{msg}");
    assert!(msg.contains(&format!("{} bytes", 2u64 << 30)), "{msg}");
    assert!(msg.contains(&MAX_METADATA_BYTES.to_string()), "{msg}");
    assert!(matches!(e, FlinkError::Unsupported { .. }), "{e:?}");
    // At the maximum it is read (and found to be junk after its trailer), not refused.
    let f = std::fs::OpenOptions::new().write(true).open(&md).expect("open");
    f.set_len(head.len() as u64).expect("truncate");
    drop(f);
    FlinkSnapshot::open(&md, &FlinkOpenOptions::default()).expect("the real _metadata opens");
    // An object store's `_metadata` arrives in memory: its size is checked before decoding.
    assert!(statekit_flink::check_metadata_size(MAX_METADATA_BYTES, "x").is_ok());
    let e = statekit_flink::check_metadata_size(MAX_METADATA_BYTES + 1, "s3://b/sp/_metadata").expect_err("too large");
    assert!(e.to_string().contains("s3://b/sp/_metadata"), "{e}");
}

/// A file that is not Flink's (no magic number) is not read past its first bytes, however
/// large: a sparse file of zeros is refused as not a Flink snapshot at once.
#[test]
fn a_large_file_without_the_magic_number_is_not_read() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let md = tmp.path().join("_metadata");
    let f = std::fs::File::create(&md).expect("create");
    f.set_len(MAX_METADATA_BYTES).expect("set_len");
    drop(f);
    let started = Instant::now();
    let e = FlinkSnapshot::open(&md, &FlinkOpenOptions::default()).expect_err("not Flink");
    assert!(matches!(e, FlinkError::NotFlink { .. }), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
}
