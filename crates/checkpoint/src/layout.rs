//! Names of directories and files.

use rand::Rng;

/// Directory (under the job directory) for files shared between checkpoints.
pub const SHARED_DIR: &str = "shared";
/// Changelog (DSTL) log files of a job, when its checkpoints and logs share a base directory.
pub const DSTL_DIR: &str = "dstl";
/// Directory (under the job directory) for files whose lifetime tasks manage.
pub const TASK_OWNED_DIR: &str = "taskowned";
/// Length of a job id in hex characters.
pub const JOB_ID_HEX_LEN: usize = 32;

/// `chk-<N>`.
pub fn checkpoint_dir_name(checkpoint_id: u64) -> String {
    format!("chk-{checkpoint_id}")
}

/// The N of `chk-<N>`, if `name` is such a directory name.
pub fn parse_checkpoint_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("chk-")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A random 32-hex-character job id.
pub fn new_job_id() -> String {
    let mut rng = rand::thread_rng();
    (0..JOB_ID_HEX_LEN)
        .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0'))
        .collect()
}

/// `savepoint-<first 6 chars of the job id>-<12 random hex chars>`, as Flink names them.
pub fn new_savepoint_dir_name(job_id: &str) -> String {
    let mut rng = rand::thread_rng();
    let suffix: String = (0..12)
        .map(|_| char::from_digit(rng.gen_range(0..16), 16).unwrap_or('0'))
        .collect();
    let prefix: String = job_id.chars().take(6).collect();
    format!("savepoint-{prefix}-{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(parse_checkpoint_dir_name(&checkpoint_dir_name(42)), Some(42));
        assert_eq!(parse_checkpoint_dir_name("chk-"), None);
        assert_eq!(parse_checkpoint_dir_name("chk-1x"), None);
        assert_eq!(parse_checkpoint_dir_name("savepoint-1"), None);
        let job = new_job_id();
        assert_eq!(job.len(), 32);
        let sp = new_savepoint_dir_name(&job);
        assert!(sp.starts_with(&format!("savepoint-{}-", &job[..6])));
        assert_eq!(sp.len(), "savepoint-".len() + 6 + 1 + 12);
    }
}
