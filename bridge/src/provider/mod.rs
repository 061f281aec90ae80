//! Providers: the agent runtimes the bridge drives, behind one interface.
//!
//! Only this module spawns processes, and only its [`spawner`] builds a `Command`. A provider turns a task into a
//! [`Session`]: a child process in its own group, an ordered stream of normalized
//! [`ProviderEvent`]s that ends when the child's output ends, a command channel for answers,
//! steering and interrupts, and a bounded stop that returns a [`supervise::StopProof`].
//! The set of runtimes is closed (`codex`, `claude`, `fake`), so dispatch is a `match`.
//! The events every runtime emits share one vocabulary, documented in [`events`].

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::config::{BridgeConfig, RuntimeName};
use crate::model::Profile;
pub use crate::model::Usage;

pub mod cgroup;
pub mod claude;
pub mod codex;
pub mod env;
pub mod events;
pub mod fake;
pub mod fake_agent;
pub mod gitrun;
pub mod handback;
pub mod io;
pub mod leftovers;
#[cfg(test)]
mod map_tests;
pub mod peers;
pub mod probe;
pub mod process;
pub mod procfs;
pub mod relay;
pub mod sandbox;
pub mod seccomp;
pub mod snapshot;
pub mod spawner;
pub mod supervise;
pub mod tether;
pub mod usage;
pub mod view;
pub mod worktree;
pub mod worktree_include;

use supervise::{ProofMaterial, StopProof, Supervised};

/// A normalized event from a provider, in the order the provider produced it.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderEvent {
    /// The provider's native session id (private; used to continue the session).
    Session(String),
    /// Something the agent did (`agent.message`, `command.started`, …); recorded as an event.
    Event {
        /// Dotted event type.
        event_type: String,
        /// Normalized payload (host paths are redacted by the caller).
        payload: Value,
    },
    /// The agent asks for approval; `payload` is the normalized approval.
    Approval {
        /// The provider's id for the request (private).
        native_id: String,
        /// Normalized approval payload.
        payload: Value,
    },
    /// The agent asks a question; `payload` holds `questions[]`.
    Question {
        /// The provider's id for the request (private).
        native_id: String,
        /// Normalized question payload.
        payload: Value,
    },
    /// The provider withdrew a pending request itself.
    Withdrawn {
        /// The provider's id for the request.
        native_id: String,
    },
    /// Token usage for this task so far, cumulative: each report replaces the previous one.
    Usage(Usage),
    /// The turn ended.
    Finished(TurnOutcome),
}

/// How a turn ended, as the provider tells it.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnOutcome {
    /// Completed with a final response.
    Completed(String),
    /// Failed with a code and a message.
    Failed {
        /// Error code.
        code: &'static str,
        /// Provider's explanation.
        message: String,
    },
    /// Stopped because we interrupted it (or it was cancelled by a decision).
    Interrupted,
}

/// What the bridge tells a provider.
#[derive(Debug, Clone, PartialEq)]
pub enum ProviderCommand {
    /// The caller's decision on an approval.
    Approval {
        /// The provider's request id.
        native_id: String,
        /// `approve_once`, `approve_session`, `deny` or `cancel_task`.
        decision: String,
        /// Permissions granted (a subset of the requested ones).
        granted_permission_ids: Vec<String>,
    },
    /// The caller's answers to a question (`[{question_id, selected_option_ids, text?}]`).
    Answers {
        /// The provider's request id.
        native_id: String,
        /// The validated answers.
        answers: Value,
    },
    /// Steering text for the running turn.
    Steer(String),
    /// Interrupt the running turn.
    Interrupt,
}

/// What a provider needs to start a turn.
#[derive(Debug, Clone)]
pub struct StartSpec {
    /// The bridge task id (also the process marker).
    pub task_id: String,
    /// The resolved host cwd.
    pub cwd: PathBuf,
    /// The workdir's root (the task sandbox mounts it read-write for `workspace-write`,
    /// read-only for `review`).
    pub workdir: PathBuf,
    /// The task's profile.
    pub profile: Profile,
    /// The prompt.
    pub prompt: String,
    /// The requested model.
    pub model: Option<String>,
    /// A native session to resume (continuations).
    pub resume_session: Option<String>,
    /// A worktree task's view of its repository (its `workdir` is then its worktree).
    pub git: Option<worktree::TreeGit>,
    /// Holds the agent's egress gate until released: given when the change-set baseline is
    /// still being recorded as the agent starts ([`Providers::starts_beside_baseline`]).
    pub hold: Option<crate::egress::Hold>,
}

impl StartSpec {
    /// The workdir as the task's sandbox mounts it: its root, and whether the task may write it.
    pub fn workdir_view(&self) -> Option<(PathBuf, bool)> {
        Some((self.workdir.clone(), self.profile == Profile::WorkspaceWrite))
    }
}

/// Why a provider could not start.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    /// Error code for the task.
    pub code: &'static str,
    /// Explanation.
    pub message: String,
}

impl StartError {
    /// `AGENT_RUNTIME_UNAVAILABLE` for `runtime`.
    pub fn unavailable(runtime: &str) -> StartError {
        StartError {
            code: crate::error::code::AGENT_RUNTIME_UNAVAILABLE,
            message: format!("the {runtime} runtime is not available"),
        }
    }
}

/// A runtime's availability and capabilities, as `list_agent_runtimes` reports them.
#[derive(Debug, Clone, PartialEq)]
pub struct RuntimeInfo {
    /// Runtime name.
    pub name: RuntimeName,
    /// Whether a task can be started now.
    pub available: bool,
    /// Version string, when known.
    pub version: Option<String>,
    /// Why it is unavailable, when it is.
    pub detail: Option<String>,
    /// The kind of reason, when it is unavailable.
    pub reason: Option<probe::Reason>,
    /// Whether steering a running turn is supported.
    pub live_steer: bool,
    /// Whether a task may name a model.
    pub model_override: bool,
    /// What `list_agent_models` can tell: `runtime_catalog` or `unsupported`.
    pub model_discovery: &'static str,
}

impl RuntimeInfo {
    /// An unavailable runtime with no capabilities.
    pub fn unavailable(name: RuntimeName, reason: probe::Reason, detail: &str) -> RuntimeInfo {
        RuntimeInfo {
            name,
            available: false,
            version: None,
            detail: Some(detail.to_owned()),
            reason: Some(reason),
            live_steer: false,
            model_override: false,
            model_discovery: "unsupported",
        }
    }

    /// Takes a probe's answer: available with its version, or not and why.
    pub fn apply(&mut self, probed: probe::Probed) {
        match probed {
            probe::Probed::Version(v) => {
                self.available = true;
                self.version = Some(v);
                self.detail = None;
                self.reason = None;
            }
            probe::Probed::Unavailable(reason, why) => {
                self.available = false;
                self.reason = Some(reason);
                self.detail = Some(why);
            }
        }
    }

    /// The JSON view (capabilities included).
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name.as_str(),
            "available": self.available,
            "version": self.version,
            "detail": self.detail,
            "reason": self.reason.map(probe::Reason::as_str),
            "persistent_session": true,
            "live_steer": self.live_steer,
            "interactive_approval": true,
            "interactive_question": true,
            "in_flight_recovery": "none",
            "model_override": self.model_override,
            "model_discovery": self.model_discovery,
        })
    }
}

/// A running turn.
pub struct Session {
    events: mpsc::Receiver<ProviderEvent>,
    commands: mpsc::Sender<ProviderCommand>,
    process: Supervised,
    io_tasks: Vec<JoinHandle<()>>,
    stderr_tail: Arc<Mutex<String>>,
}

impl Session {
    /// The next event; `None` once the provider's output has ended.
    pub async fn next_event(&mut self) -> Option<ProviderEvent> {
        self.events.recv().await
    }

    /// The next event if one is already waiting.
    pub fn ready_event(&mut self) -> Option<ProviderEvent> {
        self.events.try_recv().ok()
    }

    /// A sender for commands to the provider.
    pub fn commands(&self) -> mpsc::Sender<ProviderCommand> {
        self.commands.clone()
    }

    /// What the recovery guard must record to re-check this provider's stop later.
    pub fn proof_material(&self) -> ProofMaterial {
        self.process.proof_material()
    }

    /// The last lines the provider wrote to stderr (bounded).
    pub fn stderr_tail(&self) -> String {
        self.stderr_tail.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// Stops the provider: closes its input, gives it `grace` to exit, then escalates
    /// (see [`Supervised::stop`]); drains the I/O tasks; returns the proof.
    pub async fn stop(self, grace: Duration) -> StopProof {
        let Session { events, commands, mut process, io_tasks, .. } = self;
        drop(commands);
        drop(events);
        // Timed in two parts for the log: the provider's own exit, then the bridge's proof.
        let t0 = tokio::time::Instant::now();
        let exited = tokio::time::timeout(grace, process.wait()).await.is_ok();
        let t1 = tokio::time::Instant::now();
        let proof = process.stop(grace.saturating_sub(t1 - t0), Duration::from_secs(5)).await;
        for task in io_tasks {
            task.abort();
            let _ = task.await;
        }
        tracing::debug!(
            exited_on_its_own = exited,
            exit_ms = (t1 - t0).as_millis() as u64,
            proof_ms = t1.elapsed().as_millis() as u64,
            proven = proof.proven(),
            proof = proof.proof,
            survivors_killed = proof.survivors_killed,
            "provider stopped"
        );
        proof
    }
}

/// The configured runtimes.
#[derive(Debug, Clone)]
pub struct Providers {
    fake: Option<fake::FakeRuntime>,
    codex: codex::CodexRuntime,
    claude: claude::ClaudeRuntime,
    containment: sandbox::Containment,
    snapshots: snapshot::Snapshots,
    worktrees: worktree::Worktrees,
}

impl Providers {
    /// Builds the runtimes from the config. `self_exe` is the bridge executable, which also
    /// carries the fake runtime's child program. A CLI whose executable the config leaves
    /// unset is looked up once, here, on the bridge's `PATH` (the quick start's case).
    pub fn new(
        config: &BridgeConfig,
        self_exe: PathBuf,
        base_env: env::BaseEnv,
        containment: sandbox::Containment,
    ) -> Providers {
        let fake = config.enable_fake_runtime.then(|| {
            let home = config.state_dir.join("runtimes").join("fake");
            fake::FakeRuntime::new(self_exe, home, base_env.clone(), containment.clone(), config.fake_exec)
        });
        // A runtime that is not configured is looked up on PATH at each probe: one installed
        // after start is seen without a restart.
        let locate = |binary: &crate::config::RuntimeBinary, name: &'static str| match &binary.bin {
            Some(bin) => probe::Locator::Configured(bin.clone()),
            None => probe::Locator::OnPath { name, path: base_env.get("PATH").map(ToOwned::to_owned) },
        };
        let codex = codex::CodexRuntime::new(
            locate(&config.codex, "codex"),
            config.codex.home.clone(),
            base_env.clone(),
            containment.clone(),
        );
        let git = env::which("git", base_env.get("PATH"));
        let snapshots = snapshot::Snapshots::new(git.clone(), containment.clone());
        let worktrees = worktree::Worktrees::new(git, containment.clone(), &config.state_dir);
        let claude = claude::ClaudeRuntime::new(
            locate(&config.claude, "claude"),
            config.claude.home.clone(),
            base_env,
            containment.clone(),
        );
        Providers { fake, codex, claude, containment, snapshots, worktrees }
    }

    /// What tasks run under (decided at startup).
    pub fn containment(&self) -> &sandbox::Containment {
        &self.containment
    }

    /// The change-set snapshots of writer tasks.
    pub fn snapshots(&self) -> &snapshot::Snapshots {
        &self.snapshots
    }

    /// The worktrees of worktree tasks.
    pub fn worktrees(&self) -> &worktree::Worktrees {
        &self.worktrees
    }

    /// Probes a runtime (a real CLI's probe is cached briefly; it never starts inference).
    pub async fn probe(&self, runtime: RuntimeName) -> RuntimeInfo {
        match runtime {
            RuntimeName::Fake => match &self.fake {
                Some(fake) => fake.info(),
                None => RuntimeInfo::unavailable(
                    runtime,
                    probe::Reason::Disabled,
                    "the fake runtime is not enabled (SERVERFS_AGENT_ENABLE_FAKE_RUNTIME)",
                ),
            },
            RuntimeName::Codex => self.codex.info().await,
            RuntimeName::Claude => self.claude.info().await,
        }
    }

    /// Refuses, before anything is created, a prompt the runtime will not run (the fake
    /// runtime's `exec:` while `SERVERFS_AGENT_FAKE_EXEC` is off).
    pub fn check_prompt(&self, runtime: RuntimeName, prompt: &str) -> Result<(), String> {
        match (runtime, &self.fake) {
            (RuntimeName::Fake, Some(fake)) => fake.check_prompt(prompt),
            _ => Ok(()),
        }
    }

    /// Whether `runtime`'s agent may start while its change-set baseline is still recorded:
    /// only a real CLI, which acts on nothing before its model has answered, and only in a
    /// sandbox whose one way out is its egress gate, which holds that first request until the
    /// baseline is on record (the baseline's git runs beside it in the same sandbox identity).
    /// The fake agent acts on its prompt at once; with no gate nothing could hold a CLI.
    pub fn starts_beside_baseline(&self, runtime: RuntimeName) -> bool {
        runtime != RuntimeName::Fake
            && self.containment.contained()
            && self.containment.network_mode() == crate::config::EgressMode::Proxy
    }

    /// Starts a turn.
    pub async fn start(&self, runtime: RuntimeName, spec: StartSpec) -> Result<Session, StartError> {
        match (runtime, &self.fake) {
            (RuntimeName::Fake, Some(fake)) => fake.start(spec).await,
            (RuntimeName::Fake, None) => Err(StartError::unavailable("fake")),
            (RuntimeName::Codex, _) => self.codex.start(spec).await,
            (RuntimeName::Claude, _) => self.claude.start(spec).await,
        }
    }

    /// The model catalog a runtime can tell without starting inference.
    pub async fn models(&self, runtime: RuntimeName) -> Value {
        match (runtime, &self.fake) {
            (RuntimeName::Fake, Some(_)) => json!({
                "runtime": "fake",
                "status": "ok",
                "scope": "runtime_catalog",
                "models": [{"id": "fake-scripted", "display_name": "Scripted fake model", "is_default": true}],
            }),
            (RuntimeName::Codex, _) => self.codex.models().await,
            (RuntimeName::Claude, _) => self.claude.models().await,
            _ => json!({
                "runtime": runtime.as_str(),
                "status": "unavailable",
                "scope": "none",
                "models": [],
                "detail": "the runtime is not available in this bridge",
            }),
        }
    }
}
