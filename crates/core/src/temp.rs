//! Temporary files and directories of a run, named so that what a killed run left behind can
//! be recognised later and removed.
//!
//! Every temporary a statekit command makes beside its output (a savepoint written under a
//! hidden name and renamed into place, an export's staging directory, a sort's spill
//! directory) or in the system's temporary directory (scratch space) carries a **run tag** in
//! its name: `statekit-tmp-<pid>-<start>-…`, where `<pid>` is the process id and `<start>`
//! the process's start time (clock ticks since boot, `/proc/<pid>/stat` field 22). A run is
//! alive exactly when a process with that pid exists *and* started at that time, so a reused
//! pid does not keep a dead run's leftovers alive. A SIGKILL cannot clean up, so the next run
//! that writes to the same directory ([`remove_dead_leftovers`]) removes them; `statekit gc`
//! and `ls` list them ([`dead_leftovers`]).
//!
//! Liveness is read from `/proc`; where there is none, every run counts as alive and nothing
//! is removed. Names of older versions (`statekit-tmp-<pid>-<nanos>`, no start time) are
//! judged by their pid alone.

use std::path::{Path, PathBuf};

/// The marker every run-tagged name contains.
pub const MARKER: &str = "statekit-tmp-";

/// The start time of process `pid` (clock ticks since boot), from `/proc/<pid>/stat`.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command) is in parentheses and may hold spaces: count from the last `)`.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    // After `)` come fields 3, 4, …: the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// This process's run tag: `statekit-tmp-<pid>-<start>`.
pub fn run_tag() -> String {
    let pid = std::process::id();
    format!("{MARKER}{pid}-{}", start_time(pid).unwrap_or(0))
}

/// A hidden, run-tagged name for a temporary beside `name`:
/// `.<name>.statekit-tmp-<pid>-<start>-<nanos>`. Unique within the process (nanoseconds of
/// the clock) and recognisable by [`is_dead_leftover`] once the process is gone.
pub fn temp_name(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(".{name}.{}-{nanos}", run_tag())
}

/// A scratch directory in the system's temporary directory, run-tagged
/// (`.statekit-tmp-<pid>-<start>-<what>-<random>`), removed when dropped. Dead runs' scratch
/// directories there are removed first.
pub fn scratch_dir(what: &str) -> std::io::Result<tempfile::TempDir> {
    let tmp = std::env::temp_dir();
    remove_dead_leftovers(&tmp);
    tempfile::Builder::new()
        .prefix(&format!(".{}-{what}-", run_tag()))
        .tempdir_in(tmp)
}

/// The process id and (when the name has one) start time in a run-tagged name.
fn parse(file_name: &str) -> Option<(u32, Option<u64>)> {
    let at = file_name.rfind(MARKER)?;
    let rest = file_name.get(at + MARKER.len()..)?;
    let mut parts = rest.split(['-', '.']);
    let pid: u32 = parts.next()?.parse().ok()?;
    let second: &str = parts.next()?;
    let second: u64 = second.parse().ok()?;
    // `<pid>-<start>-<more>`: a start time; `<pid>-<nanos>` (older versions): none. A start
    // time in clock ticks is far below a wall-clock time in nanoseconds.
    let start = (second < 1 << 50).then_some(second);
    Some((pid, start))
}

/// True when `file_name` is a run-tagged temporary of a run that is no longer alive (and
/// `/proc` can tell).
pub fn is_dead_leftover(file_name: &str) -> bool {
    if !Path::new("/proc/self/stat").exists() {
        return false;
    }
    let Some((pid, start)) = parse(file_name) else {
        return false;
    };
    match (start_time(pid), start) {
        (None, _) => true,
        // Started at another time: the pid was reused.
        (Some(now), Some(then)) => now != then,
        (Some(_), None) => false,
    }
}

/// A temporary a dead run left behind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leftover {
    /// The file or directory.
    pub path: PathBuf,
    /// Bytes of the files in it (symbolic links not followed).
    pub bytes: u64,
}

impl Leftover {
    /// The leftover at `path`, its bytes counted.
    pub fn at(path: PathBuf) -> Leftover {
        Leftover {
            bytes: tree_bytes(&path),
            path,
        }
    }
}

/// The run-tagged entries directly in `dir` whose run is dead (symbolic links are not
/// leftovers: they are never followed or removed).
pub fn dead_leftovers(dir: &Path) -> Vec<Leftover> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<Leftover> = rd
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_symlink()))
        .filter(|e| is_dead_leftover(&e.file_name().to_string_lossy()))
        .map(|e| Leftover::at(e.path()))
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

/// Removes [`dead_leftovers`] of `dir`; returns what was removed. Best effort: one that cannot
/// be removed stays (and is listed again next time).
pub fn remove_dead_leftovers(dir: &Path) -> Vec<Leftover> {
    let mut removed = Vec::new();
    for l in dead_leftovers(dir) {
        let r = match std::fs::symlink_metadata(&l.path) {
            Ok(md) if md.is_dir() => std::fs::remove_dir_all(&l.path),
            Ok(_) => std::fs::remove_file(&l.path),
            Err(e) => Err(e),
        };
        match r {
            Ok(()) => {
                tracing::debug!(path = %l.path.display(), "removed a dead run's temporary");
                removed.push(l);
            }
            Err(e) => tracing::debug!(path = %l.path.display(), error = %e, "could not remove a dead run's temporary"),
        }
    }
    removed
}

/// Bytes of the regular files below `path` (or of `path` itself), symbolic links not followed.
fn tree_bytes(path: &Path) -> u64 {
    let mut total = 0u64;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(md) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if md.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if md.is_file() {
            total = total.saturating_add(md.len());
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_this_run_is_alive() {
        let n = temp_name("out");
        assert!(n.starts_with(".out.statekit-tmp-"), "{n}");
        let (pid, start) = parse(&n).expect("parses");
        assert_eq!(pid, std::process::id());
        assert!(start.is_some());
        assert!(!is_dead_leftover(&n));
        assert!(!is_dead_leftover(&format!("{n}.spill")));
        assert!(!is_dead_leftover("out"));
        assert!(!is_dead_leftover(".out.statekit-tmp-x-1"));
    }

    #[test]
    fn a_reused_pid_does_not_keep_a_dead_run_alive() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let pid = std::process::id();
        let start = start_time(pid).expect("start time");
        assert!(is_dead_leftover(&format!(".o.statekit-tmp-{pid}-{}-1", start + 1)));
        // An older version's name (pid and nanoseconds): by pid alone.
        assert!(!is_dead_leftover(&format!(".o.statekit-tmp-{pid}-1765000000000000000")));
    }

    #[test]
    fn dead_leftovers_are_listed_and_removed_others_kept() {
        if !Path::new("/proc/self/stat").exists() {
            return;
        }
        let d = tempfile::tempdir().expect("tempdir");
        // pid_max is at most 2^22: this pid does not exist.
        let dead = d.path().join(".out.statekit-tmp-4194305-7-1");
        std::fs::create_dir_all(dead.join("sub")).expect("mkdir");
        std::fs::write(dead.join("sub/f"), b"12345").expect("write");
        let alive = d.path().join(temp_name("out"));
        std::fs::create_dir(&alive).expect("mkdir");
        std::fs::write(d.path().join("keep"), b"x").expect("write");
        let found = dead_leftovers(d.path());
        assert_eq!(
            found,
            vec![Leftover {
                path: dead.clone(),
                bytes: 5
            }]
        );
        assert_eq!(remove_dead_leftovers(d.path()).len(), 1);
        assert!(!dead.exists() && alive.exists() && d.path().join("keep").exists());
    }
}
