//! Socket round-trip benchmark: `get_agent_task` and idempotent re-submission through the real
//! `agent-bridge` binary, with 1 and 16 concurrent clients, each on its own connection.
//!
//! Run with `cargo bench -p agent-bridge --bench socket`. Figures depend on the machine; compare
//! ratios measured in one run, never absolute numbers across machines.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark: it sets up files and processes outside the daemon"
)]

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use bridge_proto::client::Connection;
use bridge_proto::methods::{self, CallParams, Surface};
use e2e::{Options, TestBridge};

fn call_params(name: &str, arguments: Value) -> Map<String, Value> {
    let Value::Object(arguments) = arguments else { unreachable!() };
    let params = CallParams {
        credential: None,
        surface: Surface::Cli,
        path: Default::default(),
        client: None,
        name: name.into(),
        arguments,
    };
    match serde_json::to_value(params) {
        Ok(Value::Object(m)) => m,
        _ => unreachable!(),
    }
}

struct Run {
    latencies: Vec<Duration>,
    wall: Duration,
}

async fn run(bridge: &TestBridge, clients: usize, calls_per_client: usize, name: &'static str, args: Value) -> Run {
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..clients {
        let socket = bridge.socket.clone();
        let args = args.clone();
        handles.push(tokio::spawn(async move {
            let mut conn = Connection::connect(&socket).await.expect("connect");
            let mut lat = Vec::with_capacity(calls_per_client);
            for _ in 0..calls_per_client {
                let t = Instant::now();
                conn.call(methods::CAPABILITIES_CALL, call_params(name, args.clone())).await.expect("call");
                lat.push(t.elapsed());
            }
            lat
        }));
    }
    let mut latencies = Vec::new();
    for h in handles {
        latencies.extend(h.await.expect("client"));
    }
    Run { latencies, wall: started.elapsed() }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn report(label: &str, clients: usize, mut r: Run) {
    r.latencies.sort();
    let calls = r.latencies.len();
    let rate = calls as f64 / r.wall.as_secs_f64();
    let p50 = percentile(&r.latencies, 0.50);
    let p99 = percentile(&r.latencies, 0.99);
    let line = format!(
        "{label:<28} clients {clients:>2}  calls {calls:>6}  p50 {:>8.1} µs  p99 {:>8.1} µs  {rate:>9.0} calls/s",
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6
    );
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{line}");
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let options = Options { bin: Some(env!("CARGO_BIN_EXE_agent-bridge").into()), ..Options::default() };
        let bridge = TestBridge::start_with(options).await;
        let submit_args = json!({
            "runtime": "fake", "workdir": "repo", "prompt": "complete:bench", "idempotency_key": "bench-key",
        });
        let first = bridge.call("submit_agent_task", submit_args.clone()).await.expect("submit");
        let task_id = first["task_id"].as_str().expect("task id").to_owned();
        bridge.wait_terminal(&task_id).await;
        let get_args = json!({ "task_id": task_id });
        // Warm up connections, caches and the audit writer.
        let _ = run(&bridge, 4, 200, "get_agent_task", get_args.clone()).await;
        for clients in [1usize, 16] {
            let per_client = if clients == 1 { 4000 } else { 500 };
            report(
                "get_agent_task",
                clients,
                run(&bridge, clients, per_client, "get_agent_task", get_args.clone()).await,
            );
            report(
                "submit (idempotent replay)",
                clients,
                run(&bridge, clients, per_client, "submit_agent_task", submit_args.clone()).await,
            );
        }
        let turns = bridge.fake_turns();
        assert_eq!(turns, 1, "every re-submission returned the original task: one provider turn in all");
    });
}
