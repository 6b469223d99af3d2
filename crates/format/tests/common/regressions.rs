//! The inputs the fuzzer once crashed on (`fuzz/regressions/<target>/`), for the tests that
//! replay them (this crate's `fuzz_regressions`, statekit-changelog's `bounded_alloc`, which
//! includes this file by path).

use std::path::Path;

/// The regression inputs of `target`, (file name, bytes), sorted by name (none when the
/// directory does not exist).
pub fn regression_inputs(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/regressions")
        .join(target);
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, Vec<u8>)> = rd
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().to_string(),
                std::fs::read(e.path()).expect("read"),
            )
        })
        .collect();
    out.sort();
    out
}
