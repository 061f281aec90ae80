//! Bounded newline framing: read one line without ever buffering more than the limit, and
//! (for a server) without letting a started line or an idle wait last beyond a bound.

use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    /// A complete line is in the buffer (newline removed).
    Complete,
    /// The peer closed the stream before sending any byte of a new line.
    Eof,
    /// The line exceeded the limit; the stream is left mid-line and should be closed.
    TooLong,
    /// The peer closed the stream in the middle of a line (the partial line is in the buffer).
    Truncated,
}

/// Reads one `\n`-terminated line into `buf` (cleared first), refusing lines longer than
/// `max` bytes without reading further than `max + 1` bytes into memory.
pub async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return Ok(if buf.is_empty() { Line::Eof } else { Line::Truncated });
        }
        match available.iter().position(|&b| b == b'\n') {
            Some(i) => {
                if buf.len() + i > max {
                    return Ok(Line::TooLong);
                }
                buf.extend_from_slice(&available[..i]);
                reader.consume(i + 1);
                if buf.last() == Some(&b'\r') {
                    buf.pop();
                }
                return Ok(Line::Complete);
            }
            None => {
                let n = available.len();
                if buf.len() + n > max {
                    return Ok(Line::TooLong);
                }
                buf.extend_from_slice(available);
                reader.consume(n);
            }
        }
    }
}

/// How long [`read_line_timed`] waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineBounds {
    /// The longest wait for the first byte of the next line (an idle connection).
    pub idle: Duration,
    /// The longest a line may take to arrive whole once its first byte has arrived.
    pub line: Duration,
}

/// What [`read_line_timed`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Timed {
    /// What [`read_line`] found, within the bounds.
    Line(Line),
    /// No byte of a new line arrived within [`LineBounds::idle`].
    Idle,
    /// The line started but did not end within [`LineBounds::line`] (the partial line is in
    /// the buffer); the stream is left mid-line and should be closed.
    Slow,
}

/// [`read_line`] within `bounds`: waits at most `bounds.idle` for the line's first byte, calls
/// `on_first_byte` when it is there, then gives the rest of the line at most `bounds.line`.
pub async fn read_line_timed<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max: usize,
    bounds: LineBounds,
    on_first_byte: impl FnOnce(),
) -> std::io::Result<Timed> {
    buf.clear();
    // `fill_buf` consumes nothing, so giving up on it loses no byte.
    match tokio::time::timeout(bounds.idle, reader.fill_buf()).await {
        Err(_) => return Ok(Timed::Idle),
        Ok(available) => {
            if available?.is_empty() {
                return Ok(Timed::Line(Line::Eof));
            }
        }
    }
    on_first_byte();
    match tokio::time::timeout(bounds.line, read_line(reader, buf, max)).await {
        Err(_) => Ok(Timed::Slow),
        Ok(line) => Ok(Timed::Line(line?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::BufReader;

    async fn lines(input: &[u8], max: usize) -> Vec<(Line, Vec<u8>)> {
        let mut reader = BufReader::with_capacity(7, input);
        let mut out = Vec::new();
        let mut buf = Vec::new();
        loop {
            let line = read_line(&mut reader, &mut buf, max).await.unwrap();
            let stop = !matches!(line, Line::Complete);
            out.push((line, buf.clone()));
            if stop {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn splits_lines_across_small_buffers() {
        let out = lines(b"hello world\nsecond\r\n", 64).await;
        assert_eq!(out[0], (Line::Complete, b"hello world".to_vec()));
        assert_eq!(out[1], (Line::Complete, b"second".to_vec()));
        assert_eq!(out[2].0, Line::Eof);
    }

    #[tokio::test]
    async fn refuses_long_lines_and_reports_truncation() {
        assert_eq!(lines(b"0123456789\n", 10).await[0].0, Line::Complete);
        assert_eq!(lines(b"0123456789a\n", 10).await[0].0, Line::TooLong);
        assert_eq!(lines(b"0123456789abcdef", 10).await[0].0, Line::TooLong);
        assert_eq!(lines(b"abc", 10).await[0], (Line::Truncated, b"abc".to_vec()));
    }
}
