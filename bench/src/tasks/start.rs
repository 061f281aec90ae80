//! `tasks start`: how long from `submit_agent_task` until the agent's first model request, for
//! the `fake`, `codex` and `claude` runtimes, against the same agent started bare on the same
//! prompt in the same run; on a generated git repository (`--files`, 100,000 files of 10 KiB by
//! default: about 1 GB) and a non-git directory (`--plain-files`, 10,000); in place and in a
//! worktree; and split, for `fake`, into what each part of the bridge adds (layouts that switch
//! one part off at a time).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::json;

use e2e::model::{ModelServer, messages, responses};
use e2e::{Options, TestBridge};

use crate::bins::BinArgs;
use crate::common::{self, Arrivals, median, quantile};
use crate::workdirs;

/// The flags of `tasks start`.
#[derive(clap::Args, Debug)]
pub struct StartArgs {
    /// Files in the generated git repository.
    #[arg(long, default_value_t = 100_000)]
    files: usize,
    /// Bytes per file of the git repository.
    #[arg(long, default_value_t = 10_240)]
    file_bytes: usize,
    /// Files in the generated non-git directory (1 KiB each).
    #[arg(long, default_value_t = 10_000)]
    plain_files: usize,
    /// Timed rounds of every measure (each round takes one sample of each, side by side).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// The runtimes measured (fake, codex, claude; the real CLIs from `.runtimes/`).
    #[arg(long, value_delimiter = ',', default_value = "fake,codex,claude")]
    runtimes: Vec<String>,
    /// Leave out the worktree measures (each checks out the whole repository).
    #[arg(long)]
    no_worktree: bool,
    /// An `agent-bridge` of an earlier build, measured as one more layout `before` (its default
    /// layout, every runtime measured), for a before-and-after in one run.
    #[arg(long)]
    before: Option<PathBuf>,
    #[command(flatten)]
    bins: BinArgs,
}

/// How long one task may take to start and end.
const TASK_LIMIT: Duration = Duration::from_secs(600);
/// The prompt the real CLIs get, bare and through the bridge.
const PROMPT: &str = "Say hello.";

/// One bridge layout for the fake runtime: its name, what it switches off and its `.env` lines.
const LAYOUTS: [(&str, &str, &[&str]); 3] = [
    ("proxy", "the default: sandbox, own network namespace, egress gate", &[]),
    ("host", "the sandbox on the host's network", &["SERVERFS_AGENT_EGRESS=host"]),
    ("none", "no sandbox", &["SERVERFS_AGENT_SANDBOX=off"]),
];

/// The samples of every measure, in the order they were first taken.
#[derive(Default)]
struct Samples(Vec<(String, Vec<f64>)>);

impl Samples {
    fn add(&mut self, name: &str, ms: f64) {
        eprintln!("tasks start: {name}: {ms:.0} ms");
        match self.0.iter_mut().find(|(n, _)| n == name) {
            Some((_, v)) => v.push(ms),
            None => self.0.push((name.to_owned(), vec![ms])),
        }
    }
    fn median(&self, name: &str) -> Option<f64> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| median(v))
    }
}

/// The workdirs, the model servers and the CLI homes every bridge of the run shares.
pub struct Scene {
    /// The generated git repository.
    pub big: PathBuf,
    /// The generated non-git directory.
    pub plain: PathBuf,
    arrivals: Arrivals,
    codex_server: ModelServer,
    claude_server: ModelServer,
    codex_home: PathBuf,
    claude_home: PathBuf,
    home: PathBuf,
    _root: tempfile::TempDir,
}

impl Scene {
    async fn new(args: &StartArgs) -> anyhow::Result<Scene> {
        // Outside /tmp (Codex's own sandbox does not show a CODEX_HOME under /tmp to its
        // helper): in the target directory's `tmp/`, beside the build.
        let base = std::env::current_exe()
            .context("this executable's path")?
            .parent()
            .and_then(Path::parent)
            .context("the target directory")?
            .join("tmp");
        std::fs::create_dir_all(&base).with_context(|| format!("create {}", base.display()))?;
        let root = tempfile::Builder::new().prefix("tasks-start-").tempdir_in(&base).context("a scratch directory")?;
        let dir = root.path().canonicalize().context("canonical root")?;
        let arrivals = Arrivals::start()?;
        let probe = common::probe_script(arrivals.port);
        let (big, plain) = (dir.join("big"), dir.join("plain"));
        let t = Instant::now();
        workdirs::generate(&big, args.files, args.file_bytes, &probe, true)?;
        eprintln!(
            "tasks start: generated a git repository of {} files of {} bytes in {:.1} s",
            args.files,
            args.file_bytes,
            t.elapsed().as_secs_f64()
        );
        workdirs::generate(&plain, args.plain_files, 1024, &probe, false)?;
        let (codex_home, claude_home, home) = (dir.join("codex-home"), dir.join("claude-home"), dir.join("home"));
        for d in [&codex_home, &claude_home, &home] {
            std::fs::create_dir_all(d).with_context(|| format!("create {}", d.display()))?;
        }
        let codex_server = responses::start().await;
        let claude_server = messages::start().await;
        std::fs::write(
            codex_home.join("config.toml"),
            responses::codex_config(&codex_server, e2e::real::CODEX_KEY_VAR),
        )
        .context("codex config.toml")?;
        Ok(Scene { big, plain, arrivals, codex_server, claude_server, codex_home, claude_home, home, _root: root })
    }

    /// A bridge with the three workdirs (`big`, `plain`, and `big_ro`: the repository again,
    /// read-only, which takes no writer lease and no change-set baseline), every runtime in
    /// `runtimes`, and `extra` `.env` lines.
    async fn bridge(&self, bin: &Path, runtimes: &[String], extra: &[&str]) -> anyhow::Result<TestBridge> {
        let list = runtimes.join(",");
        let mut options = Options { bin: Some(bin.to_owned()), ..Options::default() }
            .with(&format!("SERVERFS_AGENT_EGRESS_ALLOW=127.0.0.1:{}", self.arrivals.port))
            .var("AGENT_BRIDGE_LOG", "warn")
            .var("HOME", &self.home.display().to_string());
        let dirs = [("big", &self.big, false), ("plain", &self.plain, false), ("big_ro", &self.big, true)];
        for (i, (alias, path, read_only)) in dirs.into_iter().enumerate() {
            let slot = i + 3;
            options = options
                .with(&format!("WORKDIR_{slot:02}_ALIAS={alias}"))
                .with(&format!("WORKDIR_{slot:02}_PATH={}", path.display()))
                .with(&format!("WORKDIR_{slot:02}_READ_ONLY={read_only}"))
                .with(&format!("WORKDIR_{slot:02}_AGENT_MODE={}", if read_only { "review" } else { "workspace-write" }))
                .with(&format!("WORKDIR_{slot:02}_AGENT_RUNTIMES={}", if read_only { "fake" } else { &list }));
        }
        if runtimes.iter().any(|r| r == "codex") {
            let bin =
                e2e::real::installed(e2e::real::Cli::Codex).context("codex is not installed: run .ci/install-clis")?;
            options = options
                .with(&format!("SERVERFS_CODEX_BIN={}", bin.display()))
                .with(&format!("SERVERFS_CODEX_HOME={}", self.codex_home.display()))
                .var(e2e::real::CODEX_KEY_VAR, "scripted-key");
        }
        if runtimes.iter().any(|r| r == "claude") {
            let bin = e2e::real::installed(e2e::real::Cli::Claude)
                .context("claude is not installed: run .ci/install-clis")?;
            options = options
                .with(&format!("SERVERFS_CLAUDE_BIN={}", bin.display()))
                .with(&format!("SERVERFS_CLAUDE_CONFIG_DIR={}", self.claude_home.display()))
                .var("ANTHROPIC_BASE_URL", &self.claude_server.url())
                .var("ANTHROPIC_API_KEY", "scripted-key");
        }
        for line in extra {
            options = options.with(line);
        }
        let mut b = TestBridge::prepare(options);
        b.spawn().await;
        Ok(b)
    }

    /// The time of the next first request of `runtime` after `before` requests, waiting for it.
    async fn next_request(&self, runtime: &str, before: usize, since: Instant) -> anyhow::Result<Instant> {
        let deadline = since + TASK_LIMIT;
        loop {
            let at = match runtime {
                "fake" => self.arrivals.wait_for(before, Duration::from_millis(50)).await.ok(),
                "codex" => self.codex_server.posts("/responses").get(before).map(|r| r.at),
                _ => self.claude_server.posts("/messages").get(before).map(|r| r.at),
            };
            if let Some(at) = at {
                return Ok(at);
            }
            if Instant::now() > deadline {
                bail!("no model request from {runtime} within {TASK_LIMIT:?}");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn requests_so_far(&self, runtime: &str) -> usize {
        match runtime {
            "fake" => self.arrivals.count(),
            "codex" => self.codex_server.posts("/responses").len(),
            _ => self.claude_server.posts("/messages").len(),
        }
    }

    /// The prompt `runtime` gets.
    fn prompt(runtime: &str) -> String {
        match runtime {
            "fake" => format!("exec:{} probe.py", common::python()),
            _ => PROMPT.to_owned(),
        }
    }

    /// Submits a task and returns submit → its first model request, in ms, and for a worktree
    /// task how long making the worktree took; waits until it succeeded and let go.
    async fn task(
        &self,
        b: &TestBridge,
        runtime: &str,
        workdir: &str,
        isolation: &str,
    ) -> anyhow::Result<(f64, Option<f64>)> {
        let before = self.requests_so_far(runtime);
        let t = Instant::now();
        let mut args = json!({ "runtime": runtime, "workdir": workdir, "prompt": Scene::prompt(runtime) });
        if isolation != "in_place" {
            args["isolation"] = json!(isolation);
        }
        if workdir == "big_ro" {
            args["profile"] = json!("review");
        }
        let id = common::submit(b, args).await?;
        let first = self.next_request(runtime, before, t).await.with_context(|| format!("task {id}:\n{}", b.log()))?;
        let end = common::wait_until(b, &id, TASK_LIMIT, |t| t["terminal"] == true).await?;
        if end["status"] != "succeeded" {
            bail!("task {id} ({runtime} in {workdir}, {isolation}) did not succeed: {end:#}");
        }
        b.wait_released(&id, if workdir == "plain" { 4 } else { 3 }).await;
        let took = common::ms_since(t, first);
        if isolation == "worktree" {
            // Split: the worktree's making (from the task's events), and the rest after it.
            let events = common::call(b, "read_agent_task_events", json!({ "task_id": id })).await?;
            let at = |kind: &str| {
                events["events"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|e| e["event_type"] == kind)
                    .and_then(|e| humantime::parse_rfc3339(e["created_at"].as_str()?).ok())
            };
            // The worktree is removed after the task ended; the next measure waits for that, as
            // a removal of 100,000 files slows any checkout that runs beside it.
            let tree = b.state_dir.join("worktrees").join(&id);
            let gone = Instant::now();
            while tree.exists() {
                if gone.elapsed() > TASK_LIMIT {
                    bail!("the worktree of task {id} was not removed within {TASK_LIMIT:?}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            eprintln!(
                "tasks start: {runtime} worktree removed {:.1} s after the task let go",
                gone.elapsed().as_secs_f64()
            );
            if let (Some(started), Some(made)) = (at("task.started"), at("worktree.created")) {
                let making = made.duration_since(started).map(|d| d.as_secs_f64() * 1000.0).unwrap_or(0.0);
                return Ok((took, Some(making)));
            }
        }
        Ok((took, None))
    }

    /// Starts `runtime` bare in `dir` on the same prompt (no bridge) and returns spawn → its first
    /// model request, in ms; waits for it to exit.
    async fn bare(&self, bridge_bin: &Path, runtime: &str, dir: &Path) -> anyhow::Result<f64> {
        let fake_home = self.home.join("fake-home");
        std::fs::create_dir_all(fake_home.join("sessions")).context("the fake runtime's home")?;
        if runtime == "fake" {
            return common::fake_bare(bridge_bin, &fake_home, dir, &Scene::prompt(runtime), &self.arrivals).await;
        }
        let mut cmd = match runtime {
            "codex" => {
                let launcher = e2e::real::installed(e2e::real::Cli::Codex).context("codex is not installed")?;
                let native = agent_bridge::provider::codex::native_binary(&launcher);
                let mut c = tokio::process::Command::new(native);
                c.args(["exec", "--skip-git-repo-check", PROMPT])
                    .env("CODEX_HOME", &self.codex_home)
                    .env(e2e::real::CODEX_KEY_VAR, "scripted-key");
                c
            }
            _ => {
                let bin = e2e::real::installed(e2e::real::Cli::Claude).context("claude is not installed")?;
                let mut c = tokio::process::Command::new(bin);
                c.args(["-p", PROMPT, "--setting-sources", "", "--strict-mcp-config"])
                    .env("CLAUDE_CONFIG_DIR", &self.claude_home)
                    .env("ANTHROPIC_BASE_URL", self.claude_server.url())
                    .env("ANTHROPIC_API_KEY", "scripted-key");
                c
            }
        };
        cmd.current_dir(dir)
            .env("HOME", &self.home)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        let before = self.requests_so_far(runtime);
        let t = Instant::now();
        let mut child = cmd.spawn().with_context(|| format!("start {runtime} bare"))?;
        drop(child.stdin.take());
        let first = self.next_request(runtime, before, t).await?;
        let status = tokio::time::timeout(TASK_LIMIT, child.wait()).await.context("the bare run did not end")??;
        if !status.success() {
            bail!("{runtime} bare exited with {status}");
        }
        Ok(common::ms_since(t, first))
    }
}

/// Runs `tasks start` and prints its report.
pub async fn main(args: &StartArgs) -> anyhow::Result<()> {
    let bridge_bin = args.bins.locate("cargo build --release -p agent-bridge -p mcp-front")?.0;
    for r in &args.runtimes {
        if !["fake", "codex", "claude"].contains(&r.as_str()) {
            bail!("unknown runtime {r:?}: fake, codex or claude");
        }
    }
    let scene = Scene::new(args).await?;
    let real: Vec<String> = args.runtimes.clone();
    let fake_only = vec!["fake".to_owned()];
    let mut bridges = Vec::new();
    for (name, _, env) in LAYOUTS {
        let runtimes = if name == "proxy" { &real } else { &fake_only };
        bridges.push((name, scene.bridge(&bridge_bin, runtimes, env).await.with_context(|| format!("layout {name}"))?));
    }
    if let Some(before) = &args.before {
        bridges.push(("before", scene.bridge(before, &real, &[]).await.context("the earlier build")?));
    }
    let scratch = scene.big.parent().context("root")?.join("scratch-tree");
    let mut s = Samples::default();
    // Each round takes one sample of every measure, side by side: the disk and the CPU of these
    // machines vary from one minute to the next, and only measures taken together compare.
    for round in 0..args.rounds {
        eprintln!("tasks start: round {}/{}", round + 1, args.rounds);
        for runtime in &args.runtimes {
            for (dir, path) in [("big", &scene.big), ("plain", &scene.plain)] {
                s.add(&format!("{runtime} bare, {dir}"), scene.bare(&bridge_bin, runtime, path).await?);
                for (layout, b) in &bridges {
                    if runtime == "fake" || *layout == "proxy" || *layout == "before" {
                        s.add(
                            &format!("{runtime} {layout} in_place, {dir}"),
                            scene.task(b, runtime, dir, "in_place").await?.0,
                        );
                    }
                }
            }
            if runtime == "fake" {
                // Read-only (no writer lease, no baseline) in each layout: the split's steps.
                for (layout, b) in &bridges {
                    s.add(
                        &format!("fake {layout} read-only, big"),
                        scene.task(b, "fake", "big_ro", "in_place").await?.0,
                    );
                }
            }
            if !args.no_worktree {
                // Each checkout writes the whole repository: the dirty pages of the one before
                // are flushed first (untimed), or whichever measure comes later waits for them.
                settle();
                if runtime == "fake" {
                    let t = Instant::now();
                    workdirs::git(&scene.big, &["worktree", "add", "-q", "--detach", path_str(&scratch)?, "HEAD"])?;
                    s.add("git worktree add alone, big", common::ms_since(t, Instant::now()));
                    workdirs::git(&scene.big, &["worktree", "remove", "--force", path_str(&scratch)?])?;
                    settle();
                }
                let (took, making) = scene.task(&bridges[0].1, runtime, "big", "worktree").await?;
                s.add(&format!("{runtime} proxy worktree, big"), took);
                if let Some(making) = making {
                    s.add(&format!("{runtime} worktree: its making, big"), making);
                }
            }
        }
    }
    for (_, mut b) in bridges {
        b.stop().await;
    }
    report(args, &s);
    Ok(())
}

/// Writes every dirty page to the disk (`sync`), untimed.
fn settle() {
    let t = Instant::now();
    nix::unistd::sync();
    eprintln!("tasks start: sync took {:.1} s", t.elapsed().as_secs_f64());
}

fn path_str(p: &Path) -> anyhow::Result<&str> {
    p.to_str().context("a path that is not UTF-8")
}

fn report(args: &StartArgs, s: &Samples) {
    println!(
        "# tasks start: submit → the agent's first model request ({} rounds; git repository {} files of {} bytes, plain directory {} files)\n",
        args.rounds, args.files, args.file_bytes, args.plain_files
    );
    println!("| measure | median ms | p90 ms | ÷ bare, same runtime and workdir |");
    println!("|---|---:|---:|---:|");
    for (name, v) in &s.0 {
        let runtime = name.split_whitespace().next().unwrap_or_default();
        let dir = name.rsplit(", ").next().unwrap_or_default();
        let bare = s
            .median(&format!("{runtime} bare, {dir}"))
            .filter(|_| !name.contains(" bare,") && !name.contains("making"));
        let ratio = bare.map(|b| format!("{:.2}×", median(v) / b)).unwrap_or_default();
        println!("| {name} | {:.0} | {:.0} | {ratio} |", median(v), quantile(v, 0.9));
    }
    println!();
    let m = |n: &str| s.median(n);
    let diff = |a: &str, b: &str| Some(m(a)? - m(b)?);
    println!("Where a fake task's start goes, on the git repository (differences of medians, ms):");
    let parts = [
        ("the agent itself (bare)", m("fake bare, big")),
        (
            "the bridge: submit, store, spawn (read-only, no sandbox, against bare)",
            diff("fake none read-only, big", "fake bare, big"),
        ),
        ("the sandbox (read-only: host against none)", diff("fake host read-only, big", "fake none read-only, big")),
        (
            "the egress proxy (read-only: proxy against host)",
            diff("fake proxy read-only, big", "fake host read-only, big"),
        ),
        (
            "the writer lease and change-set baseline (read-write against read-only)",
            diff("fake proxy in_place, big", "fake proxy read-only, big"),
        ),
        ("the worktree (worktree against in place)", diff("fake proxy worktree, big", "fake proxy in_place, big")),
    ];
    for (what, ms) in parts {
        if let Some(ms) = ms {
            println!("- {what}: {ms:.0}");
        }
    }
    println!();
    println!("Against the targets (in place ≤ 1.3 × bare + 100 ms; a worktree ≤ 1.5 × `git worktree add` alone):");
    for runtime in &args.runtimes {
        for dir in ["big", "plain"] {
            if let (Some(task), Some(bare)) =
                (m(&format!("{runtime} proxy in_place, {dir}")), m(&format!("{runtime} bare, {dir}")))
            {
                let bound = 1.3 * bare + 100.0;
                println!(
                    "- {runtime} in place, {dir}: {task:.0} ms against a bound of {bound:.0} ms: {}",
                    if task <= bound { "within" } else { "OVER" }
                );
            }
        }
        if let (Some(task), Some(alone)) =
            (m(&format!("{runtime} proxy worktree, big")), m("git worktree add alone, big"))
        {
            println!(
                "- {runtime} worktree: {:.2}× `git worktree add` alone: {}",
                task / alone,
                if task <= 1.5 * alone { "within" } else { "OVER" }
            );
        }
    }
}
