//! The `codex` runtime: OpenAI Codex CLI driven as `codex app-server` over stdio JSON-RPC,
//! one child per task.
//!
//! The child is the native binary (a configured or PATH-found npm launcher `bin/codex.js` is
//! resolved to the vendored executable, so the pid the bridge supervises is the agent). Its
//! home (`CODEX_HOME`) is the configured one, or the operator's default `~/.codex`: stable
//! across tasks, so continuations find their threads. Options on the command line switch off
//! the plugin marketplace, the connectors and analytics, the CLI's non-essential network
//! traffic (notes §2), and offer the model the question tool the bridge relays.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::BufReader;
use tokio::sync::mpsc;

use super::env::{BaseEnv, CODEX_PREFIXES};
use super::io;
use super::probe::{self, ProbeCache};
use super::process::{SpawnSpec, spawn};
use super::sandbox::Containment;
use super::tether::SpawnKind;
use super::{RuntimeInfo, Session, StartError, StartSpec};
use crate::config::RuntimeName;
use crate::error::code;

mod account;
mod driver;
#[cfg(test)]
mod driver_tests;
pub mod map;
#[cfg(test)]
mod map_fuzz;
pub mod rpc;

pub use driver::policy;

/// `-c` overrides every Codex child gets.
pub const CONFIG_OVERRIDES: [&str; 5] = [
    "features.plugins=false",
    "features.apps=false",
    "analytics.enabled=false",
    "features.default_mode_request_user_input=true",
    "suppress_unstable_features_warning=true",
];

/// The Codex runtime.
#[derive(Debug, Clone)]
pub struct CodexRuntime {
    bin: probe::Locator,
    home: Option<PathBuf>,
    base_env: BaseEnv,
    probe: Arc<ProbeCache>,
    catalog: Arc<tokio::sync::Mutex<Option<(std::time::Instant, Value)>>>,
    containment: Containment,
}

/// How long a model catalog is reused (each listing starts a short-lived app-server).
const CATALOG_TTL: Duration = Duration::from_secs(60);

/// What a `codex app-server` child is for.
enum Purpose {
    /// A task's agent, in the task sandbox; its egress gate held until released when given a
    /// hold.
    Task(Option<crate::egress::Hold>),
    /// A short-lived helper (the login check, the model listing), uncontained.
    Helper,
}

/// Codex's own endpoints: OpenAI's API and sign-in hosts, `OPENAI_BASE_URL` when its
/// environment `env` sets it, and every model provider's `base_url` in its `config.toml`
/// (under its home).
async fn endpoints(env: &[(OsString, OsString)], home: Option<PathBuf>) -> Vec<crate::egress::Rule> {
    let mut rules: Vec<crate::egress::Rule> = ["api.openai.com", "chatgpt.com", "auth.openai.com"]
        .into_iter()
        .filter_map(|h| crate::egress::Rule::parse(&format!("{h}:443")).ok())
        .collect();
    if let Some((_, url)) = env.iter().find(|(k, _)| k == "OPENAI_BASE_URL") {
        rules.extend(url.to_str().and_then(crate::egress::Rule::for_url));
    }
    if let Some(home) = home {
        #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
        let text = tokio::task::spawn_blocking(move || std::fs::read_to_string(home.join("config.toml")))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or_default();
        rules.extend(base_urls(&text).iter().filter_map(|u| crate::egress::Rule::for_url(u)));
    }
    rules
}

/// The values of `base_url = "…"` (or `'…'`) assignments in a `config.toml`, whatever table
/// they are in (each model provider has one).
fn base_urls(toml: &str) -> Vec<String> {
    toml.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            (key.trim() == "base_url").then_some(value.trim())
        })
        .filter_map(|v| {
            let quote = v.chars().next().filter(|c| *c == '"' || *c == '\'')?;
            let rest = &v[1..];
            rest.find(quote).map(|end| rest[..end].to_owned())
        })
        .collect()
}

impl CodexRuntime {
    /// From where its executable is and its home (`SERVERFS_CODEX_HOME`).
    pub fn new(
        bin: probe::Locator,
        home: Option<PathBuf>,
        base_env: BaseEnv,
        containment: Containment,
    ) -> CodexRuntime {
        CodexRuntime { containment, bin, home, base_env, probe: Arc::default(), catalog: Arc::default() }
    }

    fn env(&self) -> Vec<(OsString, OsString)> {
        let mut env = self.base_env.for_child(CODEX_PREFIXES);
        if let Some(home) = &self.home {
            env.retain(|(k, _)| k != "CODEX_HOME");
            env.push((OsString::from("CODEX_HOME"), home.clone().into_os_string()));
        }
        env
    }

    fn args(&self) -> Vec<OsString> {
        let mut args = Vec::new();
        for o in CONFIG_OVERRIDES {
            args.push(OsString::from("-c"));
            args.push(OsString::from(o));
        }
        args.push(OsString::from("app-server"));
        args
    }

    /// The executable to run now (the native binary behind an npm launcher), or `None` when
    /// there is none.
    async fn locate(&self) -> Option<PathBuf> {
        let bin = self.bin.resolve().await?;
        tokio::task::spawn_blocking(move || native_binary(&bin)).await.ok()
    }

    /// Availability, version and login (cached briefly).
    pub async fn info(&self) -> RuntimeInfo {
        let missing = self.bin.missing("npm install -g @openai/codex", "SERVERFS_CODEX_BIN");
        let mut info = RuntimeInfo::unavailable(RuntimeName::Codex, probe::Reason::NotInstalled, &missing);
        info.live_steer = true;
        info.model_override = true;
        info.model_discovery = "runtime_catalog";
        let Some(bin) = self.locate().await else { return info };
        let probed = self
            .probe
            .get(&bin, async || {
                probe::version_and_login(&bin, self.env(), probe::parse_codex, async || self.logged_out(&bin).await)
                    .await
            })
            .await;
        info.apply(probed);
        info
    }

    /// Why Codex cannot work for want of a login, when its app-server says so (`account/read`:
    /// its configured provider needs an OpenAI login and it has none); `None` when it is logged
    /// in, needs no login, or cannot tell.
    async fn logged_out(&self, bin: &Path) -> Option<String> {
        let cwd = self.home.clone().filter(|h| h.is_dir()).unwrap_or_else(|| PathBuf::from("/"));
        let marker = format!("probe-codex-{}", crate::ids::request_id());
        let (session, rpc, ch) = self.spawn_child(bin, &marker, &cwd, None, None, Purpose::Helper).await.ok()?;
        drop(ch);
        let read = account::logged_out(&rpc).await;
        drop(rpc);
        let proof = session.stop(Duration::from_secs(2)).await;
        if !proof.proven() {
            tracing::warn!(?proof, "the codex login-check child did not stop cleanly");
        }
        match read {
            Ok(why) => why,
            Err(e) => {
                tracing::info!(cause = %e, "codex could not tell whether it is logged in");
                None
            }
        }
    }

    /// `-c mcp_servers.<name>.enabled=false` for every MCP server the operator's own Codex
    /// configuration (its home, and a trusted project's `.codex/config.toml` above `cwd`)
    /// would start, as `codex mcp list --json` in `cwd` reports them: a remote caller's task
    /// gets the bridge's tools, never the operator's. (An empty `mcp_servers={}` override is
    /// merged, not replacing.) Fails closed: a list it cannot read, or a server name that the
    /// `-c` syntax cannot address, refuses the task.
    async fn operator_mcp_off(&self, bin: &Path, cwd: &Path) -> Result<Vec<OsString>, StartError> {
        let fail = |message: String| StartError { code: code::AGENT_PROVIDER_ERROR, message };
        let (out, exit) = probe::output(bin, &["mcp", "list", "--json"], self.env(), cwd, 1024 * 1024)
            .await
            .map_err(|e| fail(format!("cannot list the operator's Codex MCP servers: {e}")))?;
        if exit != Some(0) {
            let text = String::from_utf8_lossy(&out);
            return Err(fail(format!(
                "`codex mcp list --json` failed (exit {exit:?}): {}",
                super::io::clip(text.trim(), 200)
            )));
        }
        let names = enabled_mcp_servers(&out).map_err(fail)?;
        Ok(names
            .into_iter()
            .flat_map(|name| [OsString::from("-c"), OsString::from(format!("mcp_servers.{name}.enabled=false"))])
            .collect())
    }

    /// Spawns `codex app-server`; a task's child runs in the task sandbox, with the operator's
    /// own MCP servers switched off.
    async fn spawn_child(
        &self,
        bin: &Path,
        task_id: &str,
        cwd: &Path,
        workdir: Option<(PathBuf, bool)>,
        git: Option<super::worktree::TreeGit>,
        purpose: Purpose,
    ) -> Result<(Session, rpc::Rpc, Channels), StartError> {
        let (contained, hold) = match purpose {
            Purpose::Task(hold) => (true, hold),
            Purpose::Helper => (false, None),
        };
        let mut args = self.args();
        if contained {
            // Before the subcommand: `-c` is a global option.
            let at = args.len() - 1;
            args.splice(at..at, self.operator_mcp_off(bin, cwd).await?);
        }
        let env = self.env();
        let home = super::env::runtime_home(&env, "CODEX_HOME", ".codex");
        if let Some(home) = home.as_ref().filter(|_| contained) {
            super::env::ensure_home(home).await;
        }
        let egress = match contained {
            true => Some(endpoints(&env, home.clone()).await),
            false => None,
        };
        let spawned = spawn(SpawnSpec {
            program: bin.to_owned(),
            args,
            cwd: cwd.to_owned(),
            env,
            task_id: task_id.to_owned(),
            sandbox: contained.then(|| self.containment.clone()),
            workdir,
            git,
            read: Vec::new(),
            write: home.into_iter().collect(),
            egress,
            // Not contained: the model listing's child, a short-lived helper.
            kind: if contained { SpawnKind::Agent } else { SpawnKind::Probe },
            hold,
            beside: false,
        })
        .await
        .map_err(|e| StartError { code: code::AGENT_PROVIDER_ERROR, message: format!("cannot start codex: {e}") })?;
        let (lines_tx, lines) = mpsc::channel(256);
        let (outbox, outbox_rx) = mpsc::unbounded_channel();
        let reader = io::spawn_reader(BufReader::new(spawned.stdout), lines_tx);
        let writer = io::spawn_writer(spawned.stdin, outbox_rx);
        let stderr_tail = Arc::new(Mutex::new(String::new()));
        let (drain, stderr_done) = io::spawn_stderr(spawned.stderr, Arc::clone(&stderr_tail));
        let (rpc, incoming, router) = rpc::Rpc::start(lines, outbox);
        let (event_tx, events) = mpsc::channel(256);
        let (commands, command_rx) = mpsc::channel(16);
        let session = Session {
            events,
            commands,
            process: spawned.process,
            io_tasks: vec![reader, writer, drain, router],
            stderr_tail,
        };
        Ok((session, rpc, Channels { incoming, command_rx, event_tx, stderr_done }))
    }

    /// Spawns `codex app-server` in the task's cwd and starts (or resumes) the turn. Returns at
    /// once: the handshake runs in the session's driver, so the recovery guard can record the
    /// child before anything else happens.
    pub async fn start(&self, spec: StartSpec) -> Result<Session, StartError> {
        let bin = self.locate().await.ok_or_else(|| StartError::unavailable("codex"))?;
        let (mut session, rpc, ch) = self
            .spawn_child(
                &bin,
                &spec.task_id,
                &spec.cwd,
                spec.workdir_view(),
                spec.git.clone(),
                Purpose::Task(spec.hold.clone()),
            )
            .await?;
        let driver = driver::Driver {
            rpc,
            incoming: ch.incoming,
            commands: ch.command_rx,
            events: ch.event_tx,
            stderr_done: ch.stderr_done,
            spec,
        };
        session.io_tasks.push(super::io::spawn(driver.run()));
        Ok(session)
    }

    /// The model catalog from `model/list` (read from Codex's bundled catalog and its cache;
    /// no inference, no turn). Runs a short-lived app-server in the runtime's home; a good
    /// answer is reused for a minute.
    pub async fn models(&self) -> Value {
        let mut catalog = self.catalog.lock().await;
        if let Some((at, listed)) = catalog.as_ref()
            && at.elapsed() < CATALOG_TTL
        {
            return listed.clone();
        }
        let listed = self.list().await;
        if listed["status"] == "ok" {
            *catalog = Some((std::time::Instant::now(), listed.clone()));
        }
        listed
    }

    async fn list(&self) -> Value {
        let unavailable = |detail: String| json!({ "runtime": "codex", "status": "unavailable", "scope": "none", "models": [], "detail": super::io::without_host_paths(&detail) });
        let info = self.info().await;
        if !info.available {
            return unavailable(info.detail.unwrap_or_default());
        }
        let Some(bin) = self.locate().await else { return unavailable(info.detail.unwrap_or_default()) };
        let cwd = self.home.clone().filter(|h| h.is_dir()).unwrap_or_else(|| PathBuf::from("/"));
        let marker = format!("models-codex-{}", crate::ids::request_id());
        let (session, rpc, ch) = match self.spawn_child(&bin, &marker, &cwd, None, None, Purpose::Helper).await {
            Ok(parts) => parts,
            Err(e) => return unavailable(e.message),
        };
        drop(ch);
        let listed = list_models(&rpc).await;
        drop(rpc);
        let proof = session.stop(Duration::from_secs(2)).await;
        if !proof.proven() {
            tracing::warn!(?proof, "the codex model-listing child did not stop cleanly");
        }
        match listed {
            Ok(models) => json!({
                "runtime": "codex", "status": "ok", "scope": "runtime_catalog", "source": "codex_app_server",
                "version": info.version, "models": models,
            }),
            Err(e) => unavailable(format!("codex could not list its models: {e}")),
        }
    }
}

/// The names of the enabled servers in `codex mcp list --json`; a name the `-c` syntax cannot
/// address (anything but letters, digits, `_` and `-`) is refused.
pub fn enabled_mcp_servers(json: &[u8]) -> Result<Vec<String>, String> {
    let list: Vec<Value> =
        serde_json::from_slice(json).map_err(|e| format!("`codex mcp list --json` printed no list: {e}"))?;
    let mut names = Vec::new();
    for server in list {
        if server.get("enabled") == Some(&Value::Bool(false)) {
            continue;
        }
        let name = server.get("name").and_then(Value::as_str).ok_or("a listed MCP server has no name")?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(format!(
                "the operator's Codex configuration has an MCP server named {:?}, which the bridge cannot switch \
                 off for a task: rename it (letters, digits, _ and -)",
                super::io::clip(name, 64)
            ));
        }
        names.push(name.to_owned());
    }
    Ok(names)
}

struct Channels {
    incoming: mpsc::UnboundedReceiver<rpc::Incoming>,
    command_rx: mpsc::Receiver<super::ProviderCommand>,
    event_tx: mpsc::Sender<super::ProviderEvent>,
    stderr_done: tokio_util::sync::CancellationToken,
}

async fn list_models(rpc: &rpc::Rpc) -> Result<Vec<Value>, rpc::RpcError> {
    let bound = Duration::from_secs(20);
    account::initialize(rpc, bound).await?;
    let mut models = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..8 {
        let params = json!({ "limit": 64, "includeHidden": false, "cursor": cursor });
        let page = rpc.call("model/list", params, bound).await?;
        for m in page.get("data").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
            if models.len() >= 64 {
                break;
            }
            models.push(json!({
                "id": m.get("model").or_else(|| m.get("id")),
                "display_name": m.get("displayName"),
                "description": m.get("description").and_then(Value::as_str).map(|d| io::clip(d, 500)),
                "is_default": m.get("isDefault").and_then(Value::as_bool).unwrap_or(false),
                "reasoning_efforts": m.get("supportedReasoningEfforts").map(|l| {
                    l.as_array().map(|l| l.iter().filter_map(|e| e.get("reasoningEffort").or(Some(e)).cloned()).collect::<Vec<_>>())
                }),
                "default_reasoning_effort": m.get("defaultReasoningEffort"),
            }));
        }
        cursor = page.get("nextCursor").and_then(Value::as_str).map(str::to_owned);
        if cursor.is_none() || models.len() >= 64 {
            break;
        }
    }
    Ok(models)
}

/// The executable to supervise for a configured Codex path: the npm launcher (`bin/codex.js`,
/// a node script) is replaced by the native binary it would start; anything else is kept.
#[expect(clippy::disallowed_methods, reason = "blocking by design: its caller runs it on a blocking thread")]
pub fn native_binary(bin: &Path) -> PathBuf {
    let real = std::fs::canonicalize(bin).unwrap_or_else(|_| bin.to_owned());
    if real.extension().is_none_or(|e| e != "js") {
        return bin.to_owned();
    }
    // <…>/node_modules/@openai/codex/bin/codex.js
    let Some(package) = real.parent().and_then(Path::parent) else { return bin.to_owned() };
    let (arch, triple) = match std::env::consts::ARCH {
        "aarch64" => ("arm64", "aarch64-unknown-linux-musl"),
        _ => ("x64", "x86_64-unknown-linux-musl"),
    };
    let platform = format!("codex-linux-{arch}");
    let candidates = [
        package.join("node_modules/@openai").join(&platform).join("vendor").join(triple).join("bin/codex"),
        package
            .parent()
            .map(|scope| scope.join(&platform).join("vendor").join(triple).join("bin/codex"))
            .unwrap_or_default(),
        package.join("vendor").join(triple).join("codex/codex"),
    ];
    candidates.into_iter().find(|c| c.is_file()).unwrap_or_else(|| bin.to_owned())
}

#[cfg(test)]
#[allow(clippy::disallowed_types, clippy::disallowed_methods, reason = "tests set up files and child processes")]
mod tests {
    use super::*;

    #[test]
    fn the_operators_enabled_mcp_servers_are_read_strictly() {
        let listed = br#"[{"name":"github","enabled":true},{"name":"off","enabled":false},{"name":"a_b-9"}]"#;
        assert_eq!(enabled_mcp_servers(listed).unwrap(), ["github", "a_b-9"]);
        assert_eq!(enabled_mcp_servers(b"[]").unwrap(), Vec::<String>::new());
        let dotted = enabled_mcp_servers(br#"[{"name":"we.ird","enabled":true}]"#).unwrap_err();
        assert!(dotted.contains("we.ird") && dotted.contains("rename"), "{dotted}");
        assert!(enabled_mcp_servers(br#"[{"name":"x=1 -c y","enabled":true}]"#).is_err());
        assert!(enabled_mcp_servers(br#"[{"enabled":true}]"#).is_err());
        assert!(enabled_mcp_servers(b"No MCP servers configured yet.").is_err());
    }

    #[test]
    fn the_npm_launcher_resolves_to_the_vendored_binary() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("node_modules/@openai");
        let launcher = root.join("codex/bin/codex.js");
        std::fs::create_dir_all(launcher.parent().unwrap()).unwrap();
        std::fs::write(&launcher, "#!/usr/bin/env node\n").unwrap();
        let arch = if std::env::consts::ARCH == "aarch64" { "arm64" } else { "x64" };
        let triple = if arch == "arm64" { "aarch64-unknown-linux-musl" } else { "x86_64-unknown-linux-musl" };
        let native = root.join(format!("codex-linux-{arch}/vendor/{triple}/bin/codex"));
        std::fs::create_dir_all(native.parent().unwrap()).unwrap();
        std::fs::write(&native, "").unwrap();
        let link = dir.path().join("codex");
        std::os::unix::fs::symlink(&launcher, &link).unwrap();
        assert_eq!(std::fs::canonicalize(native_binary(&link)).unwrap(), std::fs::canonicalize(&native).unwrap());
        // A native binary is kept as configured.
        assert_eq!(native_binary(&native), native);
    }
}
