//! Restores "whatever snapshot the user points at" — canonical or changelog, savepoint or
//! checkpoint, at any parallelism — into heap backends, the way an engine embeds statekit,
//! and prints what each new subtask got.
//!
//! ```sh
//! cargo run -p statekit-snapshot --example restore_any -- SNAPSHOT UID [PARALLELISM]
//! ```
//! (Native RocksDB snapshots need the `rocksdb` feature and `BackendChoice::RocksDb`.)

use statekit_checkpoint::RestoreMode;
use statekit_core::{BackendConfig, KeyGroupRange};
use statekit_snapshot::Snapshot;
use statekit_snapshot::{open_keyed, BackendChoice, RestoreFrom};
use std::ops::ControlFlow;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), Some(uid)) = (args.first(), args.get(1)) else {
        return Err("usage: restore_any SNAPSHOT UID [PARALLELISM]".into());
    };
    let reader = Snapshot::open(path)?;
    let op = reader.operator(uid)?;
    let max_p = op.max_parallelism;
    let p: u32 = match args.get(2) {
        Some(n) => n.parse()?,
        None => op.parallelism,
    };
    println!("{path}: operator {uid:?}, {} subtasks -> {p}", op.parallelism);
    for i in 0..p {
        let from = RestoreFrom {
            snapshot: &reader,
            uid,
            mode: RestoreMode::NoClaim,
        };
        let config = BackendConfig::for_subtask(max_p, p, i)?;
        let mut backend = open_keyed(&BackendChoice::HashMap, config, None, Some(from))?;
        let b = backend.as_dyn();
        let range: KeyGroupRange = b.key_group_range();
        let view = b.snapshot(1)?;
        let mut entries = 0u64;
        for kg in range {
            let _ = view.visit_key_group(kg, &mut |_| {
                entries += 1;
                Ok(ControlFlow::Continue(()))
            })?;
        }
        let states: Vec<&str> = view.states().iter().map(|s| s.name.as_str()).collect();
        println!("  subtask {i}: key groups {range}, {entries} entries, states {states:?}");
    }
    Ok(())
}
