//! Accept-and-refuse: a connection past the cap gets a short `503` with `Retry-After` and
//! `Connection: close`, then the server stops writing and reads what the client still sends
//! (so closing does not reset the connection before the client has read the answer).

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::REFUSAL_TIME;

/// The most a refused client's request is read (and discarded) before closing.
const DRAIN_BYTES: usize = 64 * 1024;

/// Writes the busy answer on `io` and closes it; bounded by [`REFUSAL_TIME`].
pub(crate) async fn busy<T>(mut io: T, content_type: &str, body: String, retry_after: u32)
where
    T: AsyncRead + AsyncWrite + Unpin,
{
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: {retry_after}\r\nConnection: close\r\n\
         Cache-Control: no-store\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let work = async {
        io.write_all(answer.as_bytes()).await?;
        io.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut read = 0;
        while read < DRAIN_BYTES {
            match io.read(&mut sink).await? {
                0 => break,
                n => read += n,
            }
        }
        Ok::<(), std::io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIME, work).await;
}
