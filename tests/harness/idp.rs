//! A stand-in identity provider for tests and benchmarks that need only its metadata and keys:
//! a few lines of HTTP/1.1 on 127.0.0.1 answering fixed JSON per path and counting requests.
//! (The real authorization server of the OAuth end-to-end tests is `tests/oauth/idp.mjs`.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the stand-in answers, and what it was asked.
#[derive(Default)]
pub struct StandinIdp {
    routes: Mutex<HashMap<String, (u16, String)>>,
    hits: Mutex<Vec<String>>,
}

impl StandinIdp {
    /// Serves `path` with `status` and `body` from now on.
    pub fn set(&self, path: &str, status: u16, body: &Value) {
        self.routes.lock().expect("routes").insert(path.to_owned(), (status, body.to_string()));
    }

    /// Serves RFC 8414 metadata naming `issuer` (this stand-in's own origin, from
    /// [`StandinIdp::serve`]) and a JWKS of `keys` at `/jwks`.
    pub fn publish(&self, issuer: &str, keys: &[Value]) {
        let metadata = serde_json::json!({ "issuer": issuer, "jwks_uri": format!("{issuer}/jwks") });
        self.set("/.well-known/oauth-authorization-server", 200, &metadata);
        self.set("/jwks", 200, &serde_json::json!({ "keys": keys }));
    }

    /// How many requests asked for `path`.
    pub fn hits(&self, path: &str) -> usize {
        self.hits.lock().expect("hits").iter().filter(|p| *p == path).count()
    }

    /// Serves on a loopback port the kernel picks until the returned task is aborted; returns
    /// `http://127.0.0.1:PORT`. Every answer closes its connection; an unknown path is a 404.
    pub async fn serve(self: &Arc<Self>) -> (String, tokio::task::JoinHandle<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the stand-in IdP");
        let origin = format!("http://{}", listener.local_addr().expect("its address"));
        let idp = Arc::clone(self);
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let idp = Arc::clone(&idp);
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                        match stream.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let text = String::from_utf8_lossy(&head);
                    let path = text.split(' ').nth(1).unwrap_or("").to_owned();
                    idp.hits.lock().expect("hits").push(path.clone());
                    let (status, body) = idp
                        .routes
                        .lock()
                        .expect("routes")
                        .get(&path)
                        .cloned()
                        .unwrap_or((404, "{\"error\":\"not found\"}".into()));
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                         connection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = stream.write_all(reply.as_bytes()).await;
                });
            }
        });
        (origin, task)
    }
}
