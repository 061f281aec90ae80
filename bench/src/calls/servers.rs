//! The server processes `calls` measures, each started from the calling thread (so it inherits
//! that thread's CPU mask): ours (the real `agent-bridge` on a seeded store, then `mcp-front`,
//! both at the production log level), the Python reference under uvicorn, and the two floors
//! (this binary again, on a hidden subcommand). Every one is stopped when dropped.

use std::io::BufRead as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tempfile::TempDir;

use e2e::front::TestFront;
use e2e::{Options, TestBridge};

use crate::seed;

/// The front's log filter in production (`SERVERFS_LOG_LEVEL=info`: rmcp's own lines at `warn`
/// at most; the harness's `debug`, or a bare `info`, would log rmcp's lines of every request).
const FRONT_LOG: &str = "info,rmcp=warn";
use crate::wire::{HttpConn, mcp_call};

/// The name of the API key the load uses; it is also the seeded tasks' principal (a key's
/// principal is its name).
pub const KEY_NAME: &str = "bench";

/// The binaries under test.
#[derive(Debug, Clone)]
pub struct Bins {
    /// `agent-bridge`.
    pub bridge: PathBuf,
    /// `mcp-front`.
    pub front: PathBuf,
}

/// Ours: the real bridge on a store seeded with `tasks` tasks of [`KEY_NAME`], the real front
/// before it, and the key the load presents.
pub struct Ours {
    /// The bridge.
    pub bridge: TestBridge,
    /// The front.
    pub front: TestFront,
    /// `Bearer <secret>`.
    pub authorization: String,
    /// How long seeding the store took.
    pub seeded_in: Duration,
}

impl Ours {
    /// Seeds, starts the bridge (no sandbox: no task runs), creates the key, starts the front.
    pub async fn start(bins: &Bins, tasks: usize, extra_events: usize) -> anyhow::Result<Ours> {
        let options = Options { bin: Some(bins.bridge.clone()), ..Options::default() }
            .with("SERVERFS_AGENT_SANDBOX=off")
            // The harness logs at debug; a benchmark runs at the production default.
            .var("AGENT_BRIDGE_LOG", "info");
        let mut bridge = TestBridge::prepare(options);
        let seeded_in = seed::bridge_store(&bridge.state_dir, KEY_NAME, tasks, extra_events)?;
        bridge.spawn().await;
        let secret = bridge.create_key(KEY_NAME, "operator").await;
        let front =
            TestFront::start_bin_with_env(&bins.front, &bridge.socket, &[], &[("MCP_FRONT_LOG", FRONT_LOG)]).await;
        Ok(Ours { bridge, front, authorization: format!("Bearer {secret}"), seeded_in })
    }

    /// The bridge's process id.
    pub fn bridge_pid(&self) -> anyhow::Result<u32> {
        self.bridge.pid().context("the bridge has no pid")
    }

    /// The front's process id.
    pub fn front_pid(&self) -> anyhow::Result<u32> {
        self.front.pid().context("the front has no pid")
    }
}

/// A server process this binary started, killed when dropped.
pub struct Server {
    /// The process.
    child: Child,
    /// Its private directory (the socket, its log).
    pub dir: TempDir,
    /// Where it listens, when on TCP.
    pub addr: Option<SocketAddr>,
}

impl Server {
    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The UDS floor's socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("echo.sock")
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn private_dir(prefix: &str) -> anyhow::Result<TempDir> {
    tempfile::Builder::new().prefix(prefix).tempdir().context("a temporary directory")
}

/// Starts this executable's hidden `subcommand` and waits (bounded) for its first stdout line.
async fn start_self(subcommand: &[&str], dir: TempDir) -> anyhow::Result<(Server, String)> {
    let exe = std::env::current_exe().context("this executable's path")?;
    let log = std::fs::File::create(dir.path().join("server.log")).context("the server's log")?;
    let mut child = Command::new(exe)
        .args(subcommand)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .with_context(|| format!("start `calls {}`", subcommand.join(" ")))?;
    let stdout = child.stdout.take().context("the server's stdout")?;
    let server = Server { child, dir, addr: None };
    let read = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = match tokio::time::timeout(Duration::from_secs(20), read).await {
        Ok(Ok(Ok(line))) if !line.is_empty() => line.trim().to_owned(),
        _ => bail!("`calls {}` did not say it was ready in 20 s:\n{}", subcommand.join(" "), server.log()),
    };
    Ok((server, line))
}

/// The HTTP floor: a fixed-reply axum server on a loopback port.
pub async fn http_floor() -> anyhow::Result<Server> {
    let (mut server, line) =
        start_self(&["serve-http-floor", "--listen", "127.0.0.1:0"], private_dir("calls-http-")?).await?;
    server.addr = Some(line.parse().with_context(|| format!("the HTTP floor said {line:?}, not its address"))?);
    Ok(server)
}

/// The UDS floor: an NDJSON echo on a socket in its private directory.
pub async fn uds_floor() -> anyhow::Result<Server> {
    let dir = private_dir("calls-uds-")?;
    let socket = dir.path().join("echo.sock").display().to_string();
    let (server, line) = start_self(&["serve-uds-floor", "--socket", &socket], dir).await?;
    if line != "ready" {
        bail!("the UDS floor said {line:?}, not `ready`");
    }
    Ok(server)
}

/// The reference's SQLite file, seeded with `tasks` tasks, in a private directory.
pub fn reference_db(tasks: usize) -> anyhow::Result<(TempDir, PathBuf)> {
    let dir = private_dir("calls-ref-")?;
    let path = dir.path().join("tasks.sqlite3");
    seed::reference_db(&path, KEY_NAME, tasks).context("seed the reference's SQLite file")?;
    Ok((dir, path))
}

/// The reference's script, in this crate's sources.
pub fn reference_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("reference/server.py")
}

/// The interpreter `.ci/install-node-tools` installs the `mcp` SDK for.
pub fn default_python() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/oauth-venv/bin/python")
}

/// Fails, saying what to do, when the reference's interpreter is missing.
pub fn check_python(python: &Path) -> anyhow::Result<()> {
    if !python.is_file() {
        bail!(
            "the Python reference's interpreter {} is missing: run `bash .ci/install-node-tools` (it makes \
             .tools/oauth-venv with mcp==2.3.0 and uvicorn), pass --python, or leave the reference out with \
             --skip python",
            python.display()
        );
    }
    Ok(())
}

/// Starts the Python reference on a free loopback port over `db` with `python`, and waits
/// (bounded) until a real call answers.
pub async fn python(python: &Path, db: &Path) -> anyhow::Result<Server> {
    check_python(python)?;
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").context("find a free loopback port")?;
        probe.local_addr()?.port()
    };
    let dir = private_dir("calls-py-")?;
    let log = std::fs::File::create(dir.path().join("server.log")).context("the reference's log")?;
    let child = Command::new(python)
        .arg(reference_script())
        .args(["--port", &port.to_string(), "--db"])
        .arg(db)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("start {}", python.display()))?;
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    let mut server = Server { child, dir, addr: Some(addr) };
    let call = mcp_call(0, addr, None);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(mut conn) = HttpConn::connect(addr).await {
            match conn.exchange(&call.wire).await {
                Ok(answer) if answer.status == 200 => return Ok(server),
                Ok(answer) => bail!(
                    "the Python reference answered {}: {}\n{}",
                    answer.status,
                    String::from_utf8_lossy(answer.body),
                    server.log()
                ),
                Err(_) => {}
            }
        }
        if let Ok(Some(status)) = server.child.try_wait() {
            bail!("the Python reference exited ({status}) before it answered:\n{}", server.log());
        }
        if Instant::now() > deadline {
            bail!("the Python reference did not answer in 60 s:\n{}", server.log());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
