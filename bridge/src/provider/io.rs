//! Child I/O plumbing shared by the JSON-lines drivers (`codex`, `claude`): a reader task that
//! turns stdout into parsed JSON lines, a writer task that owns stdin, and a bounded stderr
//! tail.
//!
//! The writer owns the child's stdin alone: whoever wants to write sends a line through its
//! outbox. When every outbox sender is dropped, the writer closes stdin, which is how a driver
//! tells an idle CLI to exit.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use bridge_proto::framing::{Line, read_line};

/// The longest stdout line a real CLI may write (a large tool output or file diff).
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// How much of the child's stderr is kept.
pub const STDERR_TAIL: usize = 8192;

/// What the reader saw on stdout.
#[derive(Debug)]
pub enum Read {
    /// A line that parsed as a JSON object.
    Json(Value),
    /// A line that is not a JSON object (kept for a warning; bounded).
    Garbage(String),
    /// A line over [`MAX_LINE`]; the reader stops after it.
    TooLong,
}

/// Spawns one of a provider's I/O tasks in the current span (the task's), so what it logs
/// carries the task without repeating its id.
pub fn spawn<F>(future: F) -> JoinHandle<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    tokio::spawn(tracing::Instrument::in_current_span(future))
}

/// Reads stdout line by line and sends each line, parsed, to `out`; ends at EOF (the channel
/// closing is how the driver learns the child's output ended).
pub fn spawn_reader<R: AsyncBufRead + Unpin + Send + 'static>(
    mut reader: R,
    out: mpsc::Sender<Read>,
) -> JoinHandle<()> {
    spawn(async move {
        let mut buf = Vec::new();
        loop {
            let read = match read_line(&mut reader, &mut buf, MAX_LINE).await {
                Ok(Line::Complete) => parse_line(&buf),
                Ok(Line::TooLong) => Read::TooLong,
                Ok(Line::Eof | Line::Truncated) | Err(_) => return,
            };
            let stop = matches!(read, Read::TooLong);
            if out.send(read).await.is_err() || stop {
                return;
            }
        }
    })
}

/// Parses one stdout line; never panics.
pub fn parse_line(line: &[u8]) -> Read {
    match serde_json::from_slice::<Value>(line) {
        Ok(v @ Value::Object(_)) => Read::Json(v),
        _ => {
            let text = String::from_utf8_lossy(line);
            Read::Garbage(text.chars().take(200).collect())
        }
    }
}

/// Writes every line from `outbox` to the child's stdin (a newline is added); closes stdin
/// once every sender is gone or a write fails.
pub fn spawn_writer<W: AsyncWrite + Unpin + Send + 'static>(
    mut stdin: W,
    mut outbox: mpsc::UnboundedReceiver<Value>,
) -> JoinHandle<()> {
    spawn(async move {
        while let Some(msg) = outbox.recv().await {
            let Ok(mut line) = serde_json::to_vec(&msg) else { continue };
            line.push(b'\n');
            if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                break;
            }
        }
        let _ = stdin.shutdown().await;
    })
}

/// Keeps the last [`STDERR_TAIL`] bytes of the child's stderr in `tail` (so the pipe never
/// fills and a failure can quote the CLI's last words). The token is cancelled once stderr has
/// ended: a driver that sees stdout end waits for it (briefly), so the tail is complete when
/// the runner quotes it.
pub fn spawn_stderr<R: AsyncRead + Unpin + Send + 'static>(
    mut stderr: R,
    tail: Arc<Mutex<String>>,
) -> (JoinHandle<()>, CancellationToken) {
    let done = CancellationToken::new();
    let finished = done.clone();
    let task = spawn(async move {
        let _finished = finished.drop_guard();
        let mut buf = vec![0u8; 4096];
        while let Ok(n) = stderr.read(&mut buf).await {
            if n == 0 {
                break;
            }
            if let Ok(mut t) = tail.lock() {
                t.push_str(&String::from_utf8_lossy(&buf[..n]));
                let excess = t.len().saturating_sub(STDERR_TAIL);
                if excess > 0 {
                    let cut = (excess..t.len()).find(|i| t.is_char_boundary(*i)).unwrap_or(t.len());
                    t.drain(..cut);
                }
            }
        }
    });
    (task, done)
}

/// Waits, at most half a second, until stderr has ended (see [`spawn_stderr`]).
pub async fn stderr_settled(done: &CancellationToken) {
    let _ = tokio::time::timeout(std::time::Duration::from_millis(500), done.cancelled()).await;
}

/// The first `max` bytes of `s`, cut on a character boundary, with `…` when cut.
pub fn clip(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// The last `max` bytes of `s`, cut on a character boundary, with `…` when cut.
pub fn clip_tail(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    format!("…{}", &s[start..])
}

/// `text` with every absolute path's directories replaced by `<host-path>` (its file name
/// stays: `/opt/x/bin/codex: not found` → `<host-path>/codex: not found`), for the details a
/// probe gives callers, who must never learn host paths. A path starts with `/` at the start
/// of the text or after a space, a quote, a bracket, `=` or `,`; a URL's `//` is left alone.
pub fn without_host_paths(text: &str) -> String {
    let is_path_char = |c: char| c.is_alphanumeric() || matches!(c, '/' | '_' | '-' | '.' | '+' | '@' | '~');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut previous: Option<char> = None;
    while let Some(c) = rest.chars().next() {
        let starts_path = c == '/'
            && previous.is_none_or(|p| p.is_whitespace() || matches!(p, '"' | '\'' | '`' | '(' | '[' | '=' | ','));
        if starts_path {
            let end = rest.find(|ch: char| !is_path_char(ch)).unwrap_or(rest.len());
            let path = &rest[..end];
            let name = path.rsplit('/').next().unwrap_or("");
            if path.len() > 1 {
                out.push_str("<host-path>/");
                out.push_str(name);
            } else {
                out.push_str(path);
            }
            previous = path.chars().next_back();
            rest = &rest[end..];
        } else {
            out.push(c);
            previous = Some(c);
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn host_paths_leave_only_their_file_name() {
        use super::without_host_paths as w;
        assert_eq!(w("/opt/tools/bin/codex: No such file"), "<host-path>/codex: No such file");
        assert_eq!(w("`/home/u/.local/bin/claude --version` failed: x"), "`<host-path>/claude --version` failed: x");
        assert_eq!(
            w("cannot run /usr/bin/codex (PATH=/usr/bin,/bin)"),
            "cannot run <host-path>/codex (PATH=<host-path>/bin,<host-path>/bin)"
        );
        assert_eq!(w("see https://example.com/a/b and a/b"), "see https://example.com/a/b and a/b");
        assert_eq!(w("ratio 1/2, root /"), "ratio 1/2, root /");
        assert_eq!(w("é /ü/ß"), "é <host-path>/ß");
        assert_eq!(w(""), "");
    }

    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lines_parse_or_become_bounded_garbage() {
        assert!(matches!(parse_line(br#"{"a":1}"#), Read::Json(_)));
        assert!(matches!(parse_line(b"[1,2]"), Read::Garbage(_)));
        let Read::Garbage(g) = parse_line(&[b'x'; 1000]) else { panic!() };
        assert_eq!(g.len(), 200);
    }

    proptest! {
        #[test]
        fn clipping_never_panics_and_stays_bounded(s in "\\PC{0,64}", max in 0usize..40) {
            let head = clip(&s, max);
            let tail = clip_tail(&s, max);
            prop_assert!(head.len() <= max + '…'.len_utf8());
            prop_assert!(tail.len() <= max + '…'.len_utf8());
        }

        #[test]
        fn any_bytes_parse_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_line(&bytes);
        }
    }
}
