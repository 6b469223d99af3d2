//! A real S3 API server on 127.0.0.1 for tests: PyPI `moto[server]` in the venv
//! `scripts/test.sh` makes (`STATEKIT_MOTO` names its `moto_server`). Started on a random free
//! port, waited for (bounded), killed when dropped. Loopback only.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running moto server.
pub struct Moto {
    child: Child,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl Moto {
    /// Starts the server, or `None` (saying so) when `STATEKIT_MOTO` is not set (a bare
    /// `cargo test`; `scripts/test.sh` sets it).
    pub fn start() -> Option<Moto> {
        let Ok(exe) = std::env::var("STATEKIT_MOTO") else {
            eprintln!("skipped: STATEKIT_MOTO is not set (scripts/test.sh sets it to the venv's moto_server)");
            return None;
        };
        Some(Self::start_with(&exe))
    }

    fn start_with(exe: &str) -> Moto {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let child = Command::new(exe)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start moto_server");
        let mut m = Moto { child, port };
        m.wait_ready();
        m
    }

    /// Waits (at most 60 s) until the server answers HTTP.
    fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("moto_server exited early: {status}");
            }
            if self.request("GET", "/", b"").is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("moto_server did not answer on port {} within 60 s", self.port);
    }

    /// One HTTP/1.1 request; the status, or `None` when the server is not reachable.
    pub fn request(&self, method: &str, path: &str, body: &[u8]) -> Option<u16> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        s.write_all(head.as_bytes()).ok()?;
        s.write_all(body).ok()?;
        let _ = s.shutdown(Shutdown::Write);
        let mut resp = Vec::new();
        s.take(1 << 20).read_to_end(&mut resp).ok()?;
        let text = String::from_utf8_lossy(&resp);
        text.split_whitespace().nth(1)?.parse().ok()
    }

    /// The server's URL.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Creates `bucket`.
    pub fn create_bucket(&self, bucket: &str) {
        let status = self.request("PUT", &format!("/{bucket}"), b"").expect("moto answers");
        assert_eq!(status, 200, "creating bucket {bucket}");
    }

    /// Puts one object.
    pub fn put(&self, bucket: &str, key: &str, body: &[u8]) {
        let status = self
            .request("PUT", &format!("/{bucket}/{key}"), body)
            .expect("moto answers");
        assert_eq!(status, 200, "putting {bucket}/{key}");
    }

    /// Uploads every file below the local directory `dir` under `prefix` of `bucket`.
    pub fn upload_dir(&self, dir: &Path, bucket: &str, prefix: &str) {
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("read dir").flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p
                        .strip_prefix(dir)
                        .expect("below dir")
                        .to_string_lossy()
                        .replace('\\', "/");
                    self.put(
                        bucket,
                        &format!("{prefix}/{rel}"),
                        &std::fs::read(&p).expect("read file"),
                    );
                }
            }
        }
    }

    /// The environment a `statekit` child needs to reach this server.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_REGION", "us-east-1".into()),
            // No shared files of the machine's user.
            ("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent".into()),
            ("AWS_CONFIG_FILE", "/nonexistent".into()),
        ]
    }

    /// Stops the server (the port stays closed).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}
