//! The `fake` runtime, bridge side: starts the scripted child (`agent-bridge fake-agent`) and
//! translates its line protocol into provider events and commands.
//!
//! The child speaks newline-delimited JSON on stdio, like a real CLI: the bridge writes
//! [`ToChild`] lines, the child writes [`FromChild`] lines.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use super::env::BaseEnv;
use super::process::{SpawnSpec, spawn};
use super::sandbox::Containment;
use super::tether::SpawnKind;
use super::{ProviderCommand, ProviderEvent, RuntimeInfo, Session, StartError, StartSpec, TurnOutcome};
use crate::config::RuntimeName;
use crate::error::code;
use bridge_proto::framing::{Line, read_line};

/// The longest line the child may write (a result of up to 8 MiB plus JSON escaping).
pub const MAX_CHILD_LINE: usize = 40 * 1024 * 1024;

/// The environment variable naming the fake runtime's home (its session store).
pub const HOME_VAR: &str = "AGENT_BRIDGE_FAKE_HOME";

/// Bridge → child.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ToChild {
    /// Start the turn.
    Start {
        /// The script.
        prompt: String,
        /// A session to resume.
        resume: Option<String>,
        /// The task's profile.
        profile: String,
    },
    /// A decision on an approval.
    Decision {
        /// The child's request id.
        id: String,
        /// The decision.
        decision: String,
    },
    /// Answers to a question.
    Answers {
        /// The child's request id.
        id: String,
        /// The answers.
        answers: Value,
    },
    /// Steering text.
    Steer {
        /// The text.
        text: String,
    },
    /// Interrupt the turn.
    Interrupt,
}

/// Child → bridge.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum FromChild {
    /// The session id.
    Session {
        /// The id.
        id: String,
    },
    /// An event.
    Event {
        /// Dotted type.
        event_type: String,
        /// Payload.
        payload: Value,
    },
    /// An approval request.
    Approval {
        /// The child's request id.
        id: String,
        /// Normalized approval payload.
        payload: Value,
    },
    /// A question.
    Question {
        /// The child's request id.
        id: String,
        /// Normalized question payload.
        payload: Value,
    },
    /// Token usage so far (cumulative), as a real runtime reports it.
    Usage {
        /// Input tokens.
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// Cost in USD.
        cost_usd: Option<f64>,
    },
    /// The child withdrew a request.
    Withdrawn {
        /// The child's request id.
        id: String,
    },
    /// The turn completed.
    Result {
        /// The final response.
        text: String,
    },
    /// The turn failed.
    Failed {
        /// Why.
        message: String,
    },
    /// The turn was interrupted.
    Interrupted,
}

/// The fake runtime.
#[derive(Debug, Clone)]
pub struct FakeRuntime {
    program: PathBuf,
    home: PathBuf,
    base_env: BaseEnv,
    containment: Containment,
    exec: bool,
}

/// Why an `exec:` prompt is refused when `SERVERFS_AGENT_FAKE_EXEC` is off.
const EXEC_OFF: &str = "the fake runtime's exec: prompt runs a shell command without asking anyone; it is off \
     (SERVERFS_AGENT_FAKE_EXEC=true turns it on, for tests)";

impl FakeRuntime {
    /// A fake runtime whose child is `program fake-agent`, keeping sessions under `home`;
    /// `exec` lets its `exec:` prompt run (`SERVERFS_AGENT_FAKE_EXEC`).
    pub fn new(
        program: PathBuf,
        home: PathBuf,
        base_env: BaseEnv,
        containment: Containment,
        exec: bool,
    ) -> FakeRuntime {
        FakeRuntime { program, home, base_env, containment, exec }
    }

    /// Refuses a prompt this runtime will not run: `exec:` while it is off.
    pub fn check_prompt(&self, prompt: &str) -> Result<(), String> {
        let command = prompt.split_once(':').map_or(prompt, |(c, _)| c);
        if command == "exec" && !self.exec { Err(EXEC_OFF.to_owned()) } else { Ok(()) }
    }

    /// Always available when enabled.
    pub fn info(&self) -> RuntimeInfo {
        RuntimeInfo {
            name: RuntimeName::Fake,
            available: true,
            version: Some(format!("fake/{}", env!("CARGO_PKG_VERSION"))),
            detail: None,
            reason: None,
            live_steer: true,
            model_override: false,
            model_discovery: "runtime_catalog",
        }
    }

    /// Spawns the child and starts the turn.
    pub async fn start(&self, spec: StartSpec) -> Result<Session, StartError> {
        let fail = |message: String| StartError { code: code::AGENT_PROVIDER_ERROR, message };
        self.check_prompt(&spec.prompt).map_err(|message| StartError { code: code::AGENT_DISABLED, message })?;
        let mut env = self.base_env.for_child(&[]);
        env.push((OsString::from(HOME_VAR), self.home.clone().into_os_string()));
        // The session store must exist before the sandbox binds it back in.
        let home = self.home.join("sessions");
        #[expect(clippy::disallowed_methods, reason = "inside spawn_blocking")]
        let _ = tokio::task::spawn_blocking(move || std::fs::create_dir_all(home)).await;
        let spawned = spawn(SpawnSpec {
            program: self.program.clone(),
            args: vec![OsString::from("fake-agent")],
            cwd: spec.cwd.clone(),
            env,
            task_id: spec.task_id.clone(),
            sandbox: Some(self.containment.clone()),
            // The session store lives in the state directory, which the sandbox hides.
            workdir: spec.workdir_view(),
            git: spec.git.clone(),
            read: Vec::new(),
            write: vec![self.home.clone()],
            // No endpoint of its own: only what the operator allows (the tests' hostile agent).
            egress: Some(Vec::new()),
            kind: SpawnKind::Agent,
            hold: spec.hold.clone(),
            beside: false,
        })
        .await
        .map_err(|e| fail(format!("cannot start the fake runtime: {e}")))?;
        let mut stdin = spawned.stdin;
        let start = ToChild::Start {
            prompt: spec.prompt,
            resume: spec.resume_session,
            profile: spec.profile.as_str().to_owned(),
        };
        let mut line = serde_json::to_vec(&start).map_err(|e| fail(e.to_string()))?;
        line.push(b'\n');
        stdin.write_all(&line).await.map_err(|e| fail(format!("cannot talk to the fake runtime: {e}")))?;

        let (event_tx, events) = mpsc::channel(64);
        let (commands, mut command_rx) = mpsc::channel::<ProviderCommand>(16);
        let stderr_tail = Arc::new(Mutex::new(String::new()));

        let reader = super::io::spawn(read_child(BufReader::new(spawned.stdout), event_tx));
        let writer = super::io::spawn(async move {
            while let Some(command) = command_rx.recv().await {
                let msg = match command {
                    ProviderCommand::Approval { native_id, decision, .. } => {
                        ToChild::Decision { id: native_id, decision }
                    }
                    ProviderCommand::Answers { native_id, answers } => ToChild::Answers { id: native_id, answers },
                    ProviderCommand::Steer(text) => ToChild::Steer { text },
                    ProviderCommand::Interrupt => ToChild::Interrupt,
                };
                let Ok(mut line) = serde_json::to_vec(&msg) else { continue };
                line.push(b'\n');
                if stdin.write_all(&line).await.is_err() {
                    break;
                }
            }
            // Dropping stdin closes the child's input: the fake exits at EOF.
        });
        // The fake's stderr is drained into the same bounded tail as a real CLI's.
        let (drain, _stderr_done) = super::io::spawn_stderr(spawned.stderr, Arc::clone(&stderr_tail));
        Ok(Session { events, commands, process: spawned.process, io_tasks: vec![reader, writer, drain], stderr_tail })
    }
}

async fn read_child<R: tokio::io::AsyncBufRead + Unpin>(mut reader: R, events: mpsc::Sender<ProviderEvent>) {
    let mut buf = Vec::new();
    loop {
        let line = match read_line(&mut reader, &mut buf, MAX_CHILD_LINE).await {
            Ok(Line::Complete) => &buf,
            Ok(Line::TooLong) => {
                let _ = events
                    .send(ProviderEvent::Finished(TurnOutcome::Failed {
                        code: code::AGENT_PROVIDER_ERROR,
                        message: "the provider wrote a line longer than the bridge accepts".into(),
                    }))
                    .await;
                return;
            }
            Ok(Line::Eof | Line::Truncated) | Err(_) => return,
        };
        let event = match serde_json::from_slice::<FromChild>(line) {
            Ok(FromChild::Session { id }) => ProviderEvent::Session(id),
            Ok(FromChild::Event { event_type, payload }) => ProviderEvent::Event { event_type, payload },
            Ok(FromChild::Approval { id, payload }) => ProviderEvent::Approval { native_id: id, payload },
            Ok(FromChild::Question { id, payload }) => ProviderEvent::Question { native_id: id, payload },
            Ok(FromChild::Withdrawn { id }) => ProviderEvent::Withdrawn { native_id: id },
            Ok(FromChild::Usage { input_tokens, output_tokens, cost_usd }) => ProviderEvent::Usage(super::Usage {
                input_tokens,
                output_tokens,
                cost_usd,
                model: Some("fake-scripted".to_owned()),
                ..Default::default()
            }),
            Ok(FromChild::Result { text }) => ProviderEvent::Finished(TurnOutcome::Completed(text)),
            Ok(FromChild::Failed { message }) => {
                ProviderEvent::Finished(TurnOutcome::Failed { code: code::AGENT_PROVIDER_ERROR, message })
            }
            Ok(FromChild::Interrupted) => ProviderEvent::Finished(TurnOutcome::Interrupted),
            Err(e) => ProviderEvent::Event {
                event_type: "provider.warning".into(),
                payload: json!({ "message": format!("unreadable line from the provider: {e}") }),
            },
        };
        if events.send(event).await.is_err() {
            return;
        }
    }
}
