//! Bounded runs of the binary: a hang fails the test instead of stalling it, and the child's
//! peak memory is measured.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a bounded run of the binary did.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Peak resident memory of the child, kB (from `wait4`).
    pub max_rss_kb: i64,
}

impl Ran {
    /// Everything it said, for an assertion's message.
    pub fn text(&self) -> String {
        format!(
            "exit {:?}, peak RSS {} kB\nstdout:\n{}\nstderr:\n{}",
            self.code, self.max_rss_kb, self.stdout, self.stderr
        )
    }
}

/// Runs `statekit args…` in `dir`, killing it after `limit` (a hang fails the test with what it
/// printed). Output goes to files, so a large one cannot block the child.
pub fn run_bounded(dir: &Path, args: &[&str], limit: Duration) -> Ran {
    run_cmd(Command::new(super::bin()).current_dir(dir).args(args), args, limit)
}

// The child is reaped with `wait4` (for its peak memory), which clippy cannot see.
#[allow(clippy::zombie_processes)]
pub fn run_cmd(cmd: &mut Command, what: &[&str], limit: Duration) -> Ran {
    let out = tempfile::NamedTempFile::new().expect("stdout file");
    let err = tempfile::NamedTempFile::new().expect("stderr file");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(out.reopen().expect("reopen"))
        .stderr(err.reopen().expect("reopen"))
        .spawn()
        .expect("spawn statekit");
    let pid = child.id() as libc::pid_t;
    let start = Instant::now();
    let (status, rss) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is valid; wait4 fills it for our own child.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: waits for our own child without blocking.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break (status, usage.ru_maxrss);
        }
        assert!(r == 0, "wait4 failed");
        if start.elapsed() > limit {
            // SAFETY: kills our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            // SAFETY: reaps it.
            unsafe { libc::waitpid(pid, &mut status, 0) };
            panic!(
                "statekit {what:?} still running after {limit:?} (hang); stderr: {}",
                std::fs::read_to_string(err.path()).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let code = if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else {
        None
    };
    Ran {
        code,
        stdout: std::fs::read_to_string(out.path()).unwrap_or_default(),
        stderr: std::fs::read_to_string(err.path()).unwrap_or_default(),
        max_rss_kb: rss,
    }
}

/// Makes a FIFO at `path` (replacing a file there).
pub fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o644) },
        0,
        "mkfifo {}",
        path.display()
    );
}
