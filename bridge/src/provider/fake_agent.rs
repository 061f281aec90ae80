//! The `fake` runtime's child program (`agent-bridge fake-agent`): a scripted agent that speaks
//! the fake line protocol on stdio, for tests and demos.
//!
//! Its prompt is a script, one command:
//! `complete:TEXT`, `approval:TEXT`, `question:TEXT`, `wait:SECONDS`, `fail:TEXT`, `crash`,
//! `ignore-interrupt:SECONDS`, `orphan:SECONDS`, `events:N` (as fast as it can), `events:N@RATE`
//! (`RATE` a second), `big:BYTES`, `cwd`,
//! `usage:IN/OUT/COST` (reports that token usage and cost, then completes),
//! `answered-elsewhere:SECONDS` (asks for approval, then resolves it itself), `exec:COMMAND`
//! (runs `sh -c COMMAND` inside the task, as an agent's tool would, and answers with its exit
//! status and output: the tests' way to act as a hostile agent); anything else
//! is echoed back as the result. Steering text is echoed as an `agent.message` event while the
//! script waits. Sessions persist under `$AGENT_BRIDGE_FAKE_HOME/sessions`, so a continuation
//! resumes the same session and says how many turns it had.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::fake::{FromChild, HOME_VAR, ToChild};

/// Runs the fake agent on the process's stdin/stdout; returns the exit code.
pub fn run() -> i32 {
    let (tx, inbox) = channel::<Option<ToChild>>();
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            // An unreadable command line is ignored, like a CLI ignoring junk on its input.
            if let Ok(msg) = serde_json::from_str::<ToChild>(&line)
                && tx.send(Some(msg)).is_err()
            {
                return;
            }
        }
        let _ = tx.send(None);
    });
    let Ok(Some(ToChild::Start { prompt, resume, .. })) = inbox.recv() else {
        return 2;
    };
    let mut agent = Agent { inbox, next_id: 1 };
    match agent.session(resume) {
        Ok(()) => {}
        Err(message) => {
            emit(&FromChild::Failed { message });
            return 0;
        }
    }
    agent.script(&prompt)
}

struct Agent {
    inbox: Receiver<Option<ToChild>>,
    next_id: u32,
}

enum Waited {
    Elapsed,
    Interrupted,
    Closed,
}

fn emit(msg: &FromChild) {
    let Ok(mut line) = serde_json::to_vec(msg) else { return };
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(&line);
    let _ = out.flush();
}

fn event(event_type: &str, payload: Value) {
    emit(&FromChild::Event { event_type: event_type.into(), payload });
}

fn finish(text: String) -> i32 {
    emit(&FromChild::Result { text });
    0
}

impl Agent {
    #[expect(
        clippy::disallowed_methods,
        reason = "the fake agent is the tests' child program, not the daemon: it runs commands and keeps its session file"
    )]
    fn session(&mut self, resume: Option<String>) -> Result<(), String> {
        let home = std::env::var_os(HOME_VAR).map(PathBuf::from);
        let id =
            resume.clone().unwrap_or_else(|| format!("fake-{}", crate::ids::hex(&crate::ids::random_bytes::<8>())));
        let Some(home) = home else {
            emit(&FromChild::Session { id });
            return Ok(());
        };
        let dir = home.join("sessions");
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create the session store: {e}"))?;
        let file = dir.join(&id);
        let earlier = match (&resume, std::fs::read_to_string(&file)) {
            (Some(_), Ok(text)) => text.lines().count(),
            (Some(_), Err(_)) => return Err(format!("no fake session {id} to resume")),
            (None, _) => 0,
        };
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&file)
            .map_err(|e| format!("cannot write the session store: {e}"))?;
        let _ = writeln!(f, "turn");
        emit(&FromChild::Session { id });
        if resume.is_some() {
            event("agent.message", json!({ "text": format!("resumed session: {earlier} earlier turn(s)") }));
        }
        Ok(())
    }

    /// Waits up to `d`, echoing steering; stops early on interrupt unless `ignore_interrupts`.
    fn wait(&mut self, d: Duration, ignore_interrupts: bool) -> Waited {
        let end = Instant::now() + d;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Waited::Elapsed;
            }
            match self.inbox.recv_timeout(left) {
                Ok(Some(ToChild::Steer { text })) => {
                    event("agent.message", json!({ "text": format!("steered: {text}") }))
                }
                Ok(Some(ToChild::Interrupt)) if !ignore_interrupts => return Waited::Interrupted,
                Ok(Some(_)) => {}
                Ok(None) | Err(RecvTimeoutError::Disconnected) => return Waited::Closed,
                Err(RecvTimeoutError::Timeout) => return Waited::Elapsed,
            }
        }
    }

    /// Waits for the answer to request `id`.
    fn await_answer(&mut self, id: &str) -> Result<ToChild, Waited> {
        loop {
            match self.inbox.recv() {
                Ok(Some(ToChild::Steer { text })) => {
                    event("agent.message", json!({ "text": format!("steered: {text}") }))
                }
                Ok(Some(ToChild::Interrupt)) => return Err(Waited::Interrupted),
                Ok(Some(msg @ (ToChild::Decision { .. } | ToChild::Answers { .. }))) => {
                    let matches = match &msg {
                        ToChild::Decision { id: got, .. } | ToChild::Answers { id: got, .. } => got == id,
                        _ => false,
                    };
                    if matches {
                        return Ok(msg);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Err(Waited::Closed),
            }
        }
    }

    fn new_id(&mut self) -> String {
        let id = format!("fake-req-{}", self.next_id);
        self.next_id += 1;
        id
    }

    fn script(&mut self, prompt: &str) -> i32 {
        let (command, arg) = prompt.split_once(':').unwrap_or((prompt, ""));
        let seconds = || arg.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0);
        match command {
            "complete" => {
                event("agent.message", json!({ "text": arg }));
                finish(arg.to_owned())
            }
            "approval" => self.approval(arg),
            "answered-elsewhere" => match seconds() {
                Some(s) => self.answered_elsewhere(Duration::from_secs_f64(s)),
                None => failed(format!("answered-elsewhere needs seconds, got {arg:?}")),
            },
            "question" => self.question(arg),
            "wait" => match seconds() {
                Some(s) => match self.wait(Duration::from_secs_f64(s), false) {
                    Waited::Elapsed => finish(format!("waited {arg} s")),
                    Waited::Interrupted => interrupted(),
                    Waited::Closed => 0,
                },
                None => failed(format!("wait needs a number of seconds, got {arg:?}")),
            },
            "fail" => failed(arg.to_owned()),
            "usage" => {
                // `usage:IN/OUT/COST`: reports that usage, then completes.
                let parts: Vec<&str> = arg.trim().split('/').collect();
                match parts.as_slice() {
                    [i, o, c] => match (i.parse(), o.parse(), c.parse::<f64>()) {
                        (Ok(input_tokens), Ok(output_tokens), Ok(cost)) => {
                            emit(&FromChild::Usage { input_tokens, output_tokens, cost_usd: Some(cost) });
                            finish(format!("used {arg}"))
                        }
                        _ => failed(format!("usage needs IN/OUT/COST numbers, got {arg:?}")),
                    },
                    _ => failed(format!("usage needs IN/OUT/COST, got {arg:?}")),
                }
            }
            "exec" => exec(arg),
            "crash" => {
                event("agent.message", json!({ "text": "about to crash" }));
                std::process::exit(3);
            }
            "ignore-interrupt" => match seconds() {
                Some(s) => match self.wait(Duration::from_secs_f64(s), true) {
                    Waited::Closed => 0,
                    _ => finish(format!("ignored interrupts for {arg} s")),
                },
                None => failed(format!("ignore-interrupt needs seconds, got {arg:?}")),
            },
            "orphan" => match seconds() {
                Some(s) => self.orphan(s),
                None => failed(format!("orphan needs seconds, got {arg:?}")),
            },
            "events" => match parse_events(arg) {
                Ok((n, rate)) => {
                    let started = Instant::now();
                    for i in 1..=n {
                        if let Some(rate) = rate {
                            // Event `i` is due `(i - 1) / rate` s after the first: sleep until
                            // then, in steps of at least a millisecond (a burst per step).
                            let due = started + Duration::from_secs_f64((i - 1) as f64 / rate);
                            let now = Instant::now();
                            if due > now {
                                std::thread::sleep((due - now).max(Duration::from_millis(1)));
                            }
                        }
                        event("agent.message", json!({ "text": format!("event {i} of {n}") }));
                    }
                    finish(format!("emitted {n} events"))
                }
                Err(why) => failed(why),
            },
            "big" => match arg.trim().parse::<usize>() {
                Ok(n) => finish(big_text(n)),
                Err(_) => failed(format!("big needs a byte count, got {arg:?}")),
            },
            "cwd" => finish(std::env::current_dir().map(|p| p.display().to_string()).unwrap_or_default()),
            _ => finish(prompt.to_owned()),
        }
    }

    fn approval(&mut self, what: &str) -> i32 {
        let id = self.new_id();
        // Shown like a real CLI's request: the title and the display clipped, the whole
        // command kept for the approver when they are.
        let mut payload = json!({
            "category": "command",
            "title": format!("Run `{}`", super::io::clip(what, 200)),
            "command_display": super::io::clip(what, 4000),
            "reason": "the fake runtime asks before every command",
            "relative_cwd": ".",
            "available_decisions": ["approve_once", "approve_session", "deny", "cancel_task"],
        });
        if what.len() > 4000
            && let Some(map) = payload.as_object_mut()
        {
            super::events::keep_full_text(map, what);
        }
        emit(&FromChild::Approval { id: id.clone(), payload });
        match self.await_answer(&id) {
            Ok(ToChild::Decision { decision, .. }) => match decision.as_str() {
                "approve_once" | "approve_session" => {
                    event("command.started", json!({ "command": what }));
                    event("command.finished", json!({ "command": what, "exit_code": 0 }));
                    finish(format!("approval={decision}"))
                }
                "cancel_task" => interrupted(),
                _ => finish(format!("approval={decision}")),
            },
            Ok(_) => failed("expected a decision".into()),
            Err(Waited::Interrupted) => {
                emit(&FromChild::Withdrawn { id });
                interrupted()
            }
            Err(_) => 0,
        }
    }

    /// Asks for approval, then — as Codex does when its Remote Control answered the request
    /// first — resolves it itself after `after` and goes on: the bridge's request goes stale.
    fn answered_elsewhere(&mut self, after: Duration) -> i32 {
        let id = self.new_id();
        let payload = json!({
            "category": "command",
            "title": "Run `make deploy`",
            "command_display": "make deploy",
            "relative_cwd": ".",
            "available_decisions": ["approve_once", "deny", "cancel_task"],
        });
        emit(&FromChild::Approval { id: id.clone(), payload });
        match self.wait(after, false) {
            Waited::Elapsed => {
                emit(&FromChild::Withdrawn { id });
                event("agent.message", json!({ "text": "approved in another client" }));
                finish("approved elsewhere".into())
            }
            Waited::Interrupted => interrupted(),
            Waited::Closed => 0,
        }
    }

    fn question(&mut self, prompt: &str) -> i32 {
        let id = self.new_id();
        emit(&FromChild::Question {
            id: id.clone(),
            payload: json!({
                "questions": [{
                    "question_id": "q1",
                    "prompt": prompt,
                    "options": [
                        {"option_id": "yes", "label": "Yes"},
                        {"option_id": "no", "label": "No"},
                    ],
                    "multi_select": false,
                    "allow_free_text": true,
                }],
            }),
        });
        match self.await_answer(&id) {
            Ok(ToChild::Answers { answers, .. }) => finish(answers.to_string()),
            Ok(_) => failed("expected answers".into()),
            Err(Waited::Interrupted) => {
                emit(&FromChild::Withdrawn { id });
                interrupted()
            }
            Err(_) => 0,
        }
    }

    #[expect(
        clippy::disallowed_types,
        reason = "the fake agent is the tests' child program, not the daemon: it runs commands and keeps its session file"
    )]
    fn orphan(&mut self, seconds: f64) -> i32 {
        let spawned = std::process::Command::new("setsid")
            .arg("sleep")
            .arg(format!("{seconds}"))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn();
        match spawned {
            Ok(child) => {
                event("agent.message", json!({ "text": format!("left a background process for {seconds} s") }));
                // Not waited for on purpose: it outlives this process, like an agent's stray
                // background command.
                drop(child);
                finish(format!("orphan left for {seconds} s"))
            }
            Err(e) => failed(format!("cannot start the background process: {e}")),
        }
    }
}

/// Runs `sh -c command` and finishes with `exit=N` and its output (at most 64 KiB). The output
/// goes to a file, not a pipe, so a command that leaves a background process returns at once.
#[expect(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the fake agent is the tests' child program, not the daemon: it runs commands and keeps its session file"
)]
fn exec(command: &str) -> i32 {
    event("command.started", json!({ "command": command }));
    let out = std::env::temp_dir().join(format!("fake-agent-exec-{}", std::process::id()));
    let file = match std::fs::File::create(&out) {
        Ok(f) => f,
        Err(e) => return failed(format!("cannot create the output file: {e}")),
    };
    let status = file.try_clone().and_then(|err| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(std::process::Stdio::null())
            .stdout(file)
            .stderr(err)
            .status()
    });
    let mut text = std::fs::read(&out).unwrap_or_default();
    let _ = std::fs::remove_file(&out);
    text.truncate(64 * 1024);
    let text = String::from_utf8_lossy(&text);
    match status {
        Ok(status) => finish(format!("exit={}\n{}", status.code().unwrap_or(-1), text.trim_end())),
        Err(e) => failed(format!("cannot run sh: {e}")),
    }
}

/// `events:N` (as fast as it can) or `events:N@RATE` (`RATE` events a second, a positive
/// number): the count and the rate.
fn parse_events(arg: &str) -> Result<(u64, Option<f64>), String> {
    let (count, rate) = match arg.split_once('@') {
        Some((count, rate)) => (count, Some(rate)),
        None => (arg, None),
    };
    let n = count
        .trim()
        .parse::<u64>()
        .map_err(|_| format!("events needs a count (events:N or events:N@RATE), got {arg:?}"))?;
    let rate = match rate {
        None => None,
        Some(rate) => match rate.trim().parse::<f64>() {
            Ok(r) if r.is_finite() && r > 0.0 => Some(r),
            _ => return Err(format!("events:N@RATE needs a positive number of events a second, got {rate:?}")),
        },
    };
    Ok((n, rate))
}

fn failed(message: String) -> i32 {
    emit(&FromChild::Failed { message });
    0
}

fn interrupted() -> i32 {
    emit(&FromChild::Interrupted);
    0
}

/// Exactly `n` bytes of UTF-8 mixing 1-, 2-, 3- and 4-byte characters, so chunked reads must
/// respect character boundaries.
pub fn big_text(n: usize) -> String {
    const PATTERN: &str = "agent-bridge é€𝄞 ";
    let mut out = String::with_capacity(n);
    'fill: loop {
        for c in PATTERN.chars() {
            if out.len() + c.len_utf8() > n {
                break 'fill;
            }
            out.push(c);
        }
    }
    while out.len() < n {
        out.push('.');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn events_takes_a_count_and_an_optional_rate() {
        assert_eq!(super::parse_events("5"), Ok((5, None)));
        assert_eq!(super::parse_events(" 100000@10000 "), Ok((100_000, Some(10_000.0))));
        assert_eq!(super::parse_events("3@0.5"), Ok((3, Some(0.5))));
        for bad in ["", "x", "-1", "5@", "5@0", "5@-3", "5@inf", "5@NaN", "5@1@2", "@10", "1.5@10"] {
            let why = super::parse_events(bad).expect_err(bad);
            assert!(why.starts_with("events"), "{bad}: {why}");
        }
    }

    #[test]
    fn big_text_has_the_exact_size() {
        for n in [0, 1, 2, 3, 17, 18, 19, 20, 1000, 262_145] {
            assert_eq!(super::big_text(n).len(), n);
        }
        assert!(super::big_text(100).contains('𝄞'));
    }
}
