//! End to end: the real `statekit inspect` in an 80×24 tmux session, driven by keys, read
//! back from the screen as a person would see it. Skipped (with a message) without tmux.

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A tmux server on its own socket, killed when dropped.
struct Tmux {
    socket: String,
    session: String,
}

impl Tmux {
    /// A server on the socket `socket-PID` with the session `session`: `statekit args…`
    /// on an 80×24 screen (its start asserted).
    fn start(socket: &str, session: &str, args: &[&str]) -> Tmux {
        let t = Tmux {
            socket: format!("{socket}-{}", std::process::id()),
            session: session.into(),
        };
        let mut new = vec![
            "new-session",
            "-d",
            "-s",
            &t.session,
            "-x",
            "80",
            "-y",
            "24",
            env!("CARGO_BIN_EXE_statekit"),
        ];
        new.extend_from_slice(args);
        let out = t.run(&new);
        assert!(
            out.status.success(),
            "new-session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        t
    }

    /// `q`: the program ends, and so does the session (within 10 s).
    fn quit(&self) {
        self.keys(&["q"]);
        let start = Instant::now();
        while self.alive() {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "q did not end the session:\n{}",
                self.screen()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("running tmux")
    }

    fn screen(&self) -> String {
        let out = self.run(&["capture-pane", "-p", "-t", &self.session]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", &self.session];
        args.extend_from_slice(keys);
        let out = self.run(&args);
        assert!(
            out.status.success(),
            "send-keys: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Waits until the screen satisfies `ok` and is a whole frame (10 s at most); returns it.
    /// tmux shows a frame as it arrives, so a screen that satisfies `ok` is taken only when a
    /// second capture 50 ms later is the same: a frame half drawn (a help overlay with its
    /// title and not yet its last lines) is not.
    fn wait_for(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let start = Instant::now();
        let mut last: Option<String> = None;
        loop {
            let s = self.screen();
            if ok(&s) {
                if last.as_deref() == Some(s.as_str()) {
                    return s;
                }
                last = Some(s.clone());
            } else {
                last = None;
            }
            if start.elapsed() > Duration::from_secs(10) {
                panic!("timed out waiting for {what}; the screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn alive(&self) -> bool {
        self.run(&["has-session", "-t", &self.session]).status.success()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Whether tmux is installed (without it, `test` is skipped with a message).
fn has_tmux(test: &str) -> bool {
    let there = Command::new("tmux").arg("-V").output().is_ok();
    if !there {
        eprintln!("skipping {test}: tmux is not installed (apt-get install tmux)");
    }
    there
}

#[test]
fn inspect_in_tmux() {
    if !has_tmux("inspect_in_tmux") {
        return;
    }
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1/savepoint-basic");
    let fixture = fixture.display().to_string();
    let t = Tmux::start("statekit-tui-test", "inspect", &["inspect", &fixture]);

    // The operators, from _metadata.
    let s = t.wait_for("the operator list", |s| {
        s.contains("word-counter") && s.contains("enricher")
    });
    assert!(
        s.contains("6b8045dea34a1e845b5d3f58ebf57018"),
        "operator id shown:\n{s}"
    );
    assert_eq!(s.lines().count(), 24, "an 80x24 screen:\n{s}");

    // Into word-counter's states, then the entries of `count`; search a key.
    t.keys(&["Enter"]);
    t.wait_for("the states", |s| s.contains("per-window") && s.contains("aggregating"));
    t.keys(&["Enter"]);
    t.wait_for("the entries of count", |s| s.contains("entries 1-8 of 8"));
    t.keys(&["/", "heidi", "Enter"]);
    let s = t.wait_for("heidi found", |s| s.contains("key group 6"));
    let row = s
        .lines()
        .find(|l| l.contains("\"heidi\""))
        .unwrap_or_else(|| panic!("no row of heidi:\n{s}"));
    assert!(row.split_whitespace().any(|w| w == "8"), "heidi's count is 8: {row:?}");
    assert!(s.contains("value: 8"), "the pane shows the selected value:\n{s}");

    // The help overlay lists every key; any key closes it.
    t.keys(&["?"]);
    let s = t.wait_for("the help overlay", |s| s.contains("keys (any key closes)"));
    for k in ["j / Down", "PgDn / PgUp", "n / N", "q / Ctrl-C"] {
        assert!(s.contains(k), "help lists {k}:\n{s}");
    }
    t.keys(&["Escape"]);
    t.wait_for("the help closed", |s| !s.contains("keys (any key closes)"));

    // Back to the states, into the broadcast operator state `rules`: read on the worker.
    t.keys(&["Escape"]);
    t.wait_for("the states again", |s| {
        s.contains("per-window") && !s.contains("entries 1-8")
    });
    t.keys(&["/", "rules", "Enter", "Enter"]);
    let s = t.wait_for("the rules entries", |s| s.contains("rules op broadcast · 1-4 of 4"));
    assert!(s.contains("\"stop-word\"") && s.contains("\"min-length\""), "{s}");
    assert!(s.contains("operator state: rules (op broadcast)"), "the pane:\n{s}");
    t.keys(&["Escape"]);
    t.wait_for("the states after rules", |s| {
        s.contains("per-window") && !s.contains("1-4 of 4")
    });

    // Quit: the program ends, and so does the session.
    t.quit();
}

#[test]
fn inspect_diff_in_tmux() {
    if !has_tmux("inspect_diff_in_tmux") {
        return;
    }
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/v1");
    let a = fixtures.join("savepoint-basic").display().to_string();
    let b = fixtures
        .join("changelog-checkpoint/c4a9e10f0c4a9e10f0c4a9e10f0c4a9e/chk-3")
        .display()
        .to_string();
    let t = Tmux::start("statekit-tui-diff-test", "diff", &["inspect", &a, "--diff", &b]);
    // The comparison runs on the worker; its summary and rows arrive.
    let s = t.wait_for("the diff summary", |s| s.contains("differences:"));
    assert!(s.contains("word-counter"), "{s}");
    // Search a row; the pane shows it in full.
    t.keys(&["/", "followers", "Enter"]);
    t.wait_for("the added state in the pane", |s| {
        s.contains("keyed state: followers added")
    });
    t.quit();
}
