//! Fuzz targets of the socket protocol (`fuzz/corpus/envelope/`): request and response lines
//! and the bounded line framing, fed mutated seeds and random bytes.
//!
//! Properties: nothing panics; a request either parses into a valid request that encodes back
//! to itself, or is refused with a stable code whose answer is a well-formed response line; a
//! response parses back to what it encodes; the framing splits a stream exactly like
//! `split(b'\n')` does, refusing precisely the lines over the limit.

#[path = "../../fuzz/mutate.rs"]
mod mutate;

use proptest::prelude::*;
use serde_json::Value;
use tokio::io::BufReader;

use crate::envelope::{IncomingRequest, MAX_REQUEST_ID_BYTES, Request, Response};
use crate::framing::{Line, read_line};
use crate::{PROTOCOL_VERSION, codes};
use mutate::Corpus;

fn check_request(line: &[u8]) -> Result<(), TestCaseError> {
    // The one-pass reading accepts exactly what the thorough reading accepts, with the same
    // id and parameters.
    match (IncomingRequest::parse(line), Request::check(line)) {
        (Ok(incoming), Ok(id)) => {
            prop_assert_eq!(&incoming.request_id, &id);
            let thorough: Value = serde_json::from_slice(line).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let params: Value =
                serde_json::from_str(incoming.params.get()).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(mutate::json_eq(&params, &thorough["params"]), "{params} vs {}", thorough["params"]);
            prop_assert_eq!(incoming.method.as_str(), thorough["method"].as_str().unwrap_or(""));
        }
        (Err(fast), Err(slow)) => prop_assert_eq!(fast, slow),
        // JSON text whose values the JSON parser refuses (a number beyond a float, a lone
        // surrogate escape) is kept as text by the one-pass reading: the method that parses
        // the parameters refuses it there. Nesting past the parser's depth limit over the
        // whole line may fit within it for the parameters alone.
        (Ok(incoming), Err(slow)) => prop_assert!(
            serde_json::from_str::<Value>(incoming.params.get()).is_err()
                || slow.error.message.contains("recursion limit exceeded"),
            "accepted in one pass, refused by the thorough reading: {slow:?}"
        ),
        (fast, slow) => prop_assert!(false, "the readings disagree: {fast:?} / {slow:?}"),
    }
    match Request::parse(line) {
        Ok(request) => {
            prop_assert!(!request.method.is_empty());
            prop_assert!((1..=MAX_REQUEST_ID_BYTES).contains(&request.request_id.len()));
            prop_assert!(!request.request_id.chars().any(char::is_control));
            let encoded = request.to_line();
            prop_assert_eq!(encoded.last(), Some(&b'\n'));
            let back =
                Request::parse(&encoded[..encoded.len() - 1]).map_err(|e| TestCaseError::fail(e.error.message))?;
            prop_assert!(
                back.request_id == request.request_id
                    && back.method == request.method
                    && mutate::json_eq(&Value::Object(back.params.clone()), &Value::Object(request.params.clone())),
                "an accepted request re-encodes to itself: {request:?} became {back:?}"
            );
        }
        Err(rejected) => {
            let code = rejected.error.code.as_str();
            prop_assert!(
                code == codes::INVALID_REQUEST || code == codes::PROTOCOL_VERSION_UNSUPPORTED,
                "unstable refusal code {code}"
            );
            prop_assert!(!rejected.error.message.is_empty());
            if let Some(id) = &rejected.request_id {
                prop_assert!((1..=MAX_REQUEST_ID_BYTES).contains(&id.len()), "echoed id of {} bytes", id.len());
            }
            // The answer the bridge sends for it is itself a valid response line.
            let answer = Response::Err { request_id: rejected.request_id.clone(), error: rejected.error.clone() };
            let encoded = answer.to_line();
            prop_assert!(encoded.len() <= crate::MAX_LINE_BYTES + 1);
            let back = Response::parse(&encoded[..encoded.len() - 1]);
            prop_assert_eq!(back.as_ref(), Ok(&answer), "a refusal's answer parses back");
        }
    }
    Ok(())
}

fn check_response(line: &[u8]) -> Result<(), TestCaseError> {
    match Response::parse(line) {
        Ok(response) => {
            let encoded = response.to_line();
            let back = Response::parse(&encoded[..encoded.len() - 1]).map_err(TestCaseError::fail)?;
            let same = match (&back, &response) {
                (Response::Ok { request_id: a, result: x }, Response::Ok { request_id: b, result: y }) => {
                    a == b && mutate::json_eq(x, y)
                }
                // A success too large for one line is answered with RESPONSE_TOO_LARGE instead.
                (Response::Err { error, .. }, Response::Ok { result, .. })
                    if error.code == codes::RESPONSE_TOO_LARGE =>
                {
                    serde_json::to_vec(result).map_or(0, |v| v.len()) > crate::MAX_LINE_BYTES - 64
                }
                (back, response) => back == response,
            };
            prop_assert!(same, "{response:?} reads back as {back:?}");
        }
        Err(message) => prop_assert!(!message.is_empty()),
    }
    Ok(())
}

/// Reads `input` with [`read_line`] through a `capacity`-byte buffer and compares each line
/// with the oracle: the input split on `\n`, a trailing `\r` removed.
async fn check_framing(input: &[u8], capacity: usize, max: usize) -> Result<(), TestCaseError> {
    let mut reader = BufReader::with_capacity(capacity, input);
    let mut buf = Vec::new();
    let mut parts = input.split(|&b| b == b'\n').peekable();
    loop {
        let line = read_line(&mut reader, &mut buf, max).await.map_err(|e| TestCaseError::fail(e.to_string()))?;
        let part = parts.next().unwrap_or_default();
        let last = parts.peek().is_none();
        match line {
            Line::Complete => {
                prop_assert!(!last, "a complete line without a newline");
                prop_assert!(part.len() <= max);
                prop_assert_eq!(buf.as_slice(), part.strip_suffix(b"\r").unwrap_or(part));
            }
            Line::TooLong => {
                prop_assert!(part.len() > max, "refused a line of {} bytes, limit {max}", part.len());
                return Ok(());
            }
            Line::Eof => {
                prop_assert!(last && part.is_empty());
                return Ok(());
            }
            Line::Truncated => {
                prop_assert!(last && !part.is_empty() && part.len() <= max);
                prop_assert_eq!(buf.as_slice(), part);
                return Ok(());
            }
        }
    }
}

#[test]
fn fuzz_envelope_request() {
    let corpus = Corpus::load("envelope", &["bridge.health", "capabilities.list", "capabilities.call"]);
    let strategy = prop_oneof![mutate::bytes(&corpus), mutate::json_lines(&corpus)];
    mutate::run("envelope_request", strategy, |line| {
        check_request(&line)?;
        check_response(&line)
    });
    assert_eq!(PROTOCOL_VERSION, 1, "the seeds speak version 1");
}

#[test]
fn fuzz_envelope_framing() {
    let corpus = Corpus::load("envelope", &[]);
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
    let stream = proptest::collection::vec(mutate::bytes(&corpus), 1..6).prop_map(|lines| {
        let lines: Vec<Vec<u8>> = lines.into_iter().map(|l| l.0).collect();
        mutate::Bytes(lines.join(&b'\n'))
    });
    mutate::run("envelope_framing", (stream, 1usize..80, 0usize..300), |(input, capacity, max)| {
        runtime.block_on(check_framing(&input, capacity, max))
    });
}
