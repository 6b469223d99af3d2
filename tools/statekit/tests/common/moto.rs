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
        self.exchange(method, path, body).map(|(status, _)| status)
    }

    /// The body of the object `/bucket/key` (`None` unless the server answers 200).
    pub fn get(&self, path: &str) -> Option<Vec<u8>> {
        match self.exchange("GET", path, b"")? {
            (200, body) => Some(body),
            _ => None,
        }
    }

    /// One request (a plain HTTP/1.1 exchange, at most 16 MiB of answer): its status and body.
    fn exchange(&self, method: &str, path: &str, body: &[u8]) -> Option<(u16, Vec<u8>)> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        // moto serves anonymous reads of objects with 403; it does not check signatures, so
        // any well-formed Authorization header will do.
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nAuthorization: AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0\r\nConnection: close\r\n\r\n",
            self.port,
            body.len()
        );
        s.write_all(head.as_bytes()).ok()?;
        s.write_all(body).ok()?;
        let _ = s.shutdown(Shutdown::Write);
        let mut resp = Vec::new();
        s.take(16 << 20).read_to_end(&mut resp).ok()?;
        let split = resp.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&resp[..split]).to_ascii_lowercase();
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let mut rest = &resp[split + 4..];
        if !head.contains("transfer-encoding: chunked") {
            return Some((status, rest.to_vec()));
        }
        let mut out = Vec::new();
        loop {
            let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
            let size = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).ok()?.trim(), 16).ok()?;
            rest = &rest[line_end + 2..];
            if size == 0 {
                return Some((status, out));
            }
            out.extend_from_slice(rest.get(..size)?);
            rest = rest.get(size + 2..)?;
        }
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

    /// Uploads `files` (below the local directory `dir`) under `prefix` of `bucket`, each at
    /// its path relative to `dir`.
    pub fn upload_files(
        &self,
        dir: &Path,
        files: impl IntoIterator<Item = std::path::PathBuf>,
        bucket: &str,
        prefix: &str,
    ) {
        for p in files {
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

/// A fault to inject: requests whose method is `method` and whose request line contains
/// `contains` get `status` (0: the connection is dropped without an answer, as when the server
/// dies mid-request), `times` times (`usize::MAX`: always).
#[derive(Clone, Debug)]
pub struct Fault {
    /// `PUT`, `POST`, `GET`, …
    pub method: &'static str,
    /// A substring of the request target (`/_metadata`, `partNumber=2`).
    pub contains: String,
    /// The HTTP status to answer, or 0 to drop the connection.
    pub status: u16,
    /// How many matching requests fail.
    pub times: usize,
}

/// An HTTP proxy in front of a [`Moto`] server that fails chosen requests: how the tests make
/// the server answer 500/503 or vanish mid-upload, mid-multipart and mid-`_metadata`.
/// Loopback only; one upstream connection per request.
pub struct FaultProxy {
    /// Its port on 127.0.0.1.
    pub port: u16,
    faults: std::sync::Arc<std::sync::Mutex<Vec<Fault>>>,
    /// Request lines that were failed.
    pub injected: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl FaultProxy {
    /// A proxy to the server on `upstream` (a port on 127.0.0.1).
    pub fn start(upstream: u16) -> FaultProxy {
        use std::sync::{atomic::AtomicBool, Arc, Mutex};
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("addr").port();
        let faults: Arc<Mutex<Vec<Fault>>> = Arc::default();
        let injected: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, i, s) = (faults.clone(), injected.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(std::sync::atomic::Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let (f, i) = (f.clone(), i.clone());
                std::thread::spawn(move || {
                    let _ = proxy_one(conn, upstream, &f, &i);
                });
            }
        });
        FaultProxy {
            port,
            faults,
            injected,
            stop,
        }
    }

    /// Adds a fault.
    pub fn fail(&self, method: &'static str, contains: &str, status: u16, times: usize) {
        self.faults.lock().expect("faults").push(Fault {
            method,
            contains: contains.to_string(),
            status,
            times,
        });
    }

    /// Removes every fault (the server is "back").
    pub fn clear(&self) {
        self.faults.lock().expect("faults").clear();
    }

    /// The environment a `statekit` child needs to reach the server through this proxy.
    pub fn env(&self, moto: &Moto) -> Vec<(&'static str, String)> {
        let mut env = moto.env();
        for (k, v) in env.iter_mut() {
            if *k == "AWS_ENDPOINT_URL" {
                *v = format!("http://127.0.0.1:{}", self.port);
            }
        }
        env
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads one request from `client`, fails it or forwards it (with `Connection: close`) and
/// copies the answer back; the connection is closed after one request.
fn proxy_one(
    mut client: TcpStream,
    upstream: u16,
    faults: &std::sync::Mutex<Vec<Fault>>,
    injected: &std::sync::Mutex<Vec<String>>,
) -> std::io::Result<()> {
    client.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte)? == 0 || head.len() > 64 * 1024 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let request_line = text.lines().next().unwrap_or("").to_string();
    let method = request_line.split(' ').next().unwrap_or("").to_string();
    let mut length = 0usize;
    let mut forwarded = String::new();
    for (n, line) in text.split("\r\n").enumerate() {
        if line.is_empty() {
            continue;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if n > 0 && lower.starts_with("connection:") {
            continue;
        }
        forwarded.push_str(line);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("Connection: close\r\n\r\n");
    let mut body = vec![0u8; length];
    client.read_exact(&mut body)?;
    let fault = {
        let mut fs = faults.lock().unwrap_or_else(|p| p.into_inner());
        let hit = fs
            .iter_mut()
            .find(|f| f.times > 0 && f.method == method && request_line.contains(&f.contains));
        hit.map(|f| {
            f.times = f.times.saturating_sub(1);
            f.status
        })
    };
    if let Some(status) = fault {
        injected.lock().unwrap_or_else(|p| p.into_inner()).push(request_line);
        if status == 0 {
            return client.shutdown(Shutdown::Both);
        }
        let answer = format!("HTTP/1.1 {status} Injected\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        client.write_all(answer.as_bytes())?;
        return client.shutdown(Shutdown::Both);
    }
    let mut up = TcpStream::connect(("127.0.0.1", upstream))?;
    up.write_all(forwarded.as_bytes())?;
    up.write_all(&body)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    client.write_all(&answer)?;
    client.shutdown(Shutdown::Both)
}
