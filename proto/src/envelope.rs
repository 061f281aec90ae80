//! The request and response envelopes, with exact key sets in both directions.
//!
//! Request: exactly `{protocol_version, request_id, method, params}`.
//! Response: exactly `{request_id, ok: true, result}` or `{request_id, ok: false, error}`.
//! Parsing is strict on purpose: a key too many, a key missing, a duplicated key, a boolean
//! where an integer belongs — each is refused with a message naming the problem, and the
//! request id is echoed whenever it can be read.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::{PROTOCOL_VERSION, codes};

/// Longest accepted `request_id`, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;

/// A parsed request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// The caller's id for this request, echoed in the response.
    pub request_id: String,
    /// The method name.
    pub method: String,
    /// The method's parameters (an object).
    pub params: Map<String, Value>,
}

/// The `error` member of a failed response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorBody {
    /// A stable `UPPER_SNAKE` code from [`crate::codes`] or a tool's own code.
    pub code: String,
    /// A human-readable explanation; never contains host paths or secrets.
    pub message: String,
}

impl ErrorBody {
    /// Builds an error body.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ErrorBody { code: code.into(), message: message.into() }
    }
}

/// A response: success or failure, for the request with `request_id` (`None` when the request
/// was unreadable).
#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    /// `{request_id, ok: true, result}`.
    Ok {
        /// The echoed request id.
        request_id: String,
        /// The method's result.
        result: Value,
    },
    /// `{request_id, ok: false, error}`.
    Err {
        /// The echoed request id, or `None` when the request could not be read.
        request_id: Option<String>,
        /// What went wrong.
        error: ErrorBody,
    },
}

/// A request as the bridge reads it: its parameters kept as their JSON text (an object), to
/// be parsed once, by the method that takes them, into the type it takes.
#[derive(Debug)]
pub struct IncomingRequest {
    /// The caller's id for this request, echoed in the response.
    pub request_id: String,
    /// The method name.
    pub method: String,
    /// The method's parameters: the text of a JSON object.
    pub params: Box<RawValue>,
}

/// A parsed response whose result is still JSON text (the front passes it on unparsed).
#[derive(Debug)]
pub enum RawResponse {
    /// `{request_id, ok: true, result}`.
    Ok {
        /// The echoed request id.
        request_id: String,
        /// The method's result, as JSON text.
        result: Box<RawValue>,
    },
    /// `{request_id, ok: false, error}`.
    Err {
        /// The echoed request id, or `None` when the request could not be read.
        request_id: Option<String>,
        /// What went wrong.
        error: ErrorBody,
    },
}

/// A request that could not be accepted: the error to answer with, and the id to echo.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    /// The request id, when it could be read from the line.
    pub request_id: Option<String>,
    /// The error to send back.
    pub error: ErrorBody,
}

#[derive(Serialize)]
struct RequestWire<'a, P> {
    protocol_version: u64,
    request_id: &'a str,
    method: &'a str,
    params: &'a P,
}

/// The well-formed request, typed: what every accepted line is. Only a line that does not
/// read as this goes through [`Request::refusal`], which says what is wrong with it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TypedRequest<'a> {
    protocol_version: u64,
    #[serde(borrow)]
    request_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    method: std::borrow::Cow<'a, str>,
    params: Box<RawValue>,
}

impl IncomingRequest {
    /// Parses one request line (without its newline) in one pass; a line that is not a valid
    /// request is refused exactly as [`Request::parse`] refuses it.
    pub fn parse(line: &[u8]) -> Result<IncomingRequest, Rejected> {
        if let Ok(typed) = serde_json::from_slice::<TypedRequest<'_>>(line) {
            let id_ok = !typed.request_id.is_empty()
                && typed.request_id.len() <= MAX_REQUEST_ID_BYTES
                && !typed.request_id.chars().any(char::is_control);
            let object = typed.params.get().starts_with('{');
            if typed.protocol_version == PROTOCOL_VERSION && id_ok && !typed.method.is_empty() && object {
                return Ok(IncomingRequest {
                    request_id: typed.request_id.into_owned(),
                    method: typed.method.into_owned(),
                    params: typed.params,
                });
            }
        }
        Err(Request::refusal(line))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictRequest {
    protocol_version: Value,
    request_id: Value,
    method: Value,
    params: Value,
}

impl Request {
    /// Parses one request line (without its newline).
    pub fn parse(line: &[u8]) -> Result<Request, Rejected> {
        let incoming = IncomingRequest::parse(line)?;
        let params = serde_json::from_str(incoming.params.get()).map_err(|e| Rejected {
            request_id: Some(incoming.request_id.clone()),
            error: ErrorBody::new(codes::INVALID_REQUEST, format!("params must be an object: {e}")),
        })?;
        Ok(Request { request_id: incoming.request_id, method: incoming.method, params })
    }

    /// Why `line` is not a valid request: the error to answer with, and the id to echo when
    /// it can be read (the slow, thorough reading, for refusals only).
    fn refusal(line: &[u8]) -> Rejected {
        match Request::check(line) {
            Err(rejected) => rejected,
            // Valid by the thorough reading but not by the typed one: cannot happen (the
            // fuzz target checks that the two agree); refused all the same.
            Ok(request_id) => Rejected {
                request_id: Some(request_id),
                error: ErrorBody::new(codes::INVALID_REQUEST, "the request could not be read"),
            },
        }
    }

    /// The thorough reading of a request line: the id of a valid one, or why it is refused.
    pub(crate) fn check(line: &[u8]) -> Result<String, Rejected> {
        let invalid = |request_id: Option<String>, message: String| Rejected {
            request_id,
            error: ErrorBody::new(codes::INVALID_REQUEST, message),
        };
        let text = std::str::from_utf8(line).map_err(|_| invalid(None, "request line is not valid UTF-8".into()))?;
        // A lenient first look, only to echo the request id in every later error.
        let loose: Value =
            serde_json::from_str(text).map_err(|e| invalid(None, format!("request line is not valid JSON: {e}")))?;
        let Value::Object(loose) = loose else {
            return Err(invalid(None, "request must be a JSON object".into()));
        };
        let echo_id = match loose.get("request_id") {
            Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_REQUEST_ID_BYTES => Some(s.clone()),
            _ => None,
        };
        let strict: StrictRequest = serde_json::from_str(text).map_err(|e| {
            invalid(
                echo_id.clone(),
                format!("request must have exactly the keys protocol_version, request_id, method, params: {e}"),
            )
        })?;
        let request_id = match strict.request_id {
            Value::String(s) if s.is_empty() => {
                return Err(invalid(None, "request_id must not be empty".into()));
            }
            Value::String(s) if s.len() > MAX_REQUEST_ID_BYTES => {
                return Err(invalid(None, format!("request_id is longer than {MAX_REQUEST_ID_BYTES} bytes")));
            }
            Value::String(s) if s.chars().any(char::is_control) => {
                return Err(invalid(None, "request_id contains a control character".into()));
            }
            Value::String(s) => s,
            _ => return Err(invalid(None, "request_id must be a string".into())),
        };
        match &strict.protocol_version {
            Value::Number(n) if n.as_u64() == Some(PROTOCOL_VERSION) => {}
            Value::Number(n) if n.is_u64() || n.is_i64() => {
                return Err(Rejected {
                    request_id: Some(request_id),
                    error: ErrorBody::new(
                        codes::PROTOCOL_VERSION_UNSUPPORTED,
                        format!("protocol_version {n} is not supported; this bridge speaks {PROTOCOL_VERSION}"),
                    ),
                });
            }
            _ => {
                return Err(invalid(Some(request_id), "protocol_version must be an integer".into()));
            }
        }
        if !matches!(&strict.method, Value::String(s) if !s.is_empty()) {
            return Err(invalid(Some(request_id), "method must be a non-empty string".into()));
        }
        if !strict.params.is_object() {
            return Err(invalid(Some(request_id), "params must be an object".into()));
        }
        Ok(request_id)
    }

    /// Encodes the request as one line, newline included.
    pub fn to_line(&self) -> Vec<u8> {
        Request::line(&self.request_id, &self.method, &self.params)
    }

    /// Encodes a request of `method` with `params` (which must serialize as an object) as one
    /// line, newline included, without building it first.
    pub fn line(request_id: &str, method: &str, params: &impl Serialize) -> Vec<u8> {
        let mut line =
            serde_json::to_vec(&RequestWire { protocol_version: PROTOCOL_VERSION, request_id, method, params })
                .expect("request parameters always serialize");
        line.push(b'\n');
        line
    }
}

#[derive(Serialize)]
struct OkWire<'a, R: ?Sized> {
    request_id: &'a str,
    ok: bool,
    result: &'a R,
}

#[derive(Serialize)]
struct ErrWire<'a> {
    request_id: Option<&'a str>,
    ok: bool,
    error: &'a ErrorBody,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StrictResponse {
    request_id: Option<String>,
    ok: bool,
    #[serde(default)]
    result: Option<Box<RawValue>>,
    #[serde(default)]
    error: Option<ErrorBody>,
}

impl Response {
    /// Encodes the response as one line, newline included. A success larger than
    /// [`crate::MAX_LINE_BYTES`] is replaced by a [`codes::RESPONSE_TOO_LARGE`] error.
    pub fn to_line(&self) -> Vec<u8> {
        match self {
            Response::Ok { request_id, result } => Response::ok_line(request_id, result),
            Response::Err { request_id, error } => {
                let mut line = serde_json::to_vec(&ErrWire { request_id: request_id.as_deref(), ok: false, error })
                    .expect("an error body always serializes");
                line.push(b'\n');
                line
            }
        }
    }

    /// Encodes a success with `result` (a `Value`, or JSON text as a `RawValue`) as one line,
    /// newline included, without building a [`Response`]. A line larger than
    /// [`crate::MAX_LINE_BYTES`] is replaced by a [`codes::RESPONSE_TOO_LARGE`] error.
    pub fn ok_line<R: Serialize + ?Sized>(request_id: &str, result: &R) -> Vec<u8> {
        // Most answers fit: written without regrowing the buffer.
        let mut line = Vec::with_capacity(4096);
        if let Err(e) = serde_json::to_writer(&mut line, &OkWire { request_id, ok: true, result }) {
            let error = ErrorBody::new(codes::BRIDGE_PROTOCOL_ERROR, format!("cannot encode the result: {e}"));
            return Response::Err { request_id: Some(request_id.to_owned()), error }.to_line();
        }
        if line.len() > crate::MAX_LINE_BYTES {
            let error = ErrorBody::new(
                codes::RESPONSE_TOO_LARGE,
                format!("the response is larger than {} bytes", crate::MAX_LINE_BYTES),
            );
            return Response::Err { request_id: Some(request_id.to_owned()), error }.to_line();
        }
        line.push(b'\n');
        line
    }

    /// Parses a response line, checking the exact key set of each variant.
    pub fn parse(line: &[u8]) -> Result<Response, String> {
        match Response::parse_raw(line)? {
            RawResponse::Ok { request_id, result } => {
                let result =
                    serde_json::from_str(result.get()).map_err(|e| format!("response is not a valid envelope: {e}"))?;
                Ok(Response::Ok { request_id, result })
            }
            RawResponse::Err { request_id, error } => Ok(Response::Err { request_id, error }),
        }
    }

    /// [`Response::parse`], the result left as JSON text.
    pub fn parse_raw(line: &[u8]) -> Result<RawResponse, String> {
        let strict: StrictResponse =
            serde_json::from_slice(line).map_err(|e| format!("response is not a valid envelope: {e}"))?;
        match (strict.ok, strict.result, strict.error, strict.request_id) {
            (true, Some(result), None, Some(request_id)) => Ok(RawResponse::Ok { request_id, result }),
            (false, None, Some(error), request_id) => Ok(RawResponse::Err { request_id, error }),
            _ => {
                Err("response must be exactly {request_id, ok: true, result} or {request_id, ok: false, error}".into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reject(line: &str) -> Rejected {
        Request::parse(line.as_bytes()).unwrap_err()
    }

    #[test]
    fn accepts_exact_envelope() {
        let r = Request::parse(br#"{"protocol_version":1,"request_id":"a","method":"m","params":{"x":1}}"#).unwrap();
        assert_eq!(r.request_id, "a");
        assert_eq!(r.method, "m");
        assert_eq!(r.params["x"], 1);
    }

    #[test]
    fn refuses_extra_missing_and_duplicate_keys_with_echo() {
        let e = reject(r#"{"protocol_version":1,"request_id":"a","method":"m","params":{},"x":1}"#);
        assert_eq!(e.error.code, codes::INVALID_REQUEST);
        assert_eq!(e.request_id.as_deref(), Some("a"));
        let e = reject(r#"{"protocol_version":1,"request_id":"b","method":"m"}"#);
        assert_eq!(e.error.code, codes::INVALID_REQUEST);
        assert_eq!(e.request_id.as_deref(), Some("b"));
        let e = reject(r#"{"protocol_version":1,"request_id":"c","method":"m","method":"n","params":{}}"#);
        assert_eq!(e.error.code, codes::INVALID_REQUEST);
    }

    #[test]
    fn refuses_wrong_types_and_versions() {
        let e = reject(r#"{"protocol_version":true,"request_id":"a","method":"m","params":{}}"#);
        assert_eq!(e.error.code, codes::INVALID_REQUEST);
        let e = reject(r#"{"protocol_version":2,"request_id":"a","method":"m","params":{}}"#);
        assert_eq!(e.error.code, codes::PROTOCOL_VERSION_UNSUPPORTED);
        assert_eq!(e.request_id.as_deref(), Some("a"));
        let e = reject(r#"{"protocol_version":1.0,"request_id":"a","method":"m","params":{}}"#);
        assert_eq!(e.error.code, codes::INVALID_REQUEST);
        let e = reject(r#"{"protocol_version":1,"request_id":"","method":"m","params":{}}"#);
        assert_eq!(e.request_id, None);
        let e = reject(r#"{"protocol_version":1,"request_id":"a","method":"m","params":[]}"#);
        assert!(e.error.message.contains("params"));
        assert_eq!(reject("[1]").error.code, codes::INVALID_REQUEST);
        assert_eq!(reject("nope").error.code, codes::INVALID_REQUEST);
        let e = Request::parse(b"{\"protocol_version\":1,\xff}").unwrap_err();
        assert!(e.error.message.contains("UTF-8"));
    }

    #[test]
    fn response_round_trips_and_is_strict() {
        let ok = Response::Ok { request_id: "r".into(), result: serde_json::json!({"a": 1}) };
        let line = ok.to_line();
        assert_eq!(Response::parse(&line[..line.len() - 1]).unwrap(), ok);
        let err = Response::Err { request_id: None, error: ErrorBody::new("X", "y") };
        let line = err.to_line();
        assert_eq!(Response::parse(&line[..line.len() - 1]).unwrap(), err);
        assert!(
            Response::parse(br#"{"request_id":"r","ok":true,"result":1,"error":{"code":"A","message":"b"}}"#).is_err()
        );
        assert!(Response::parse(br#"{"request_id":"r","ok":true}"#).is_err());
        assert!(Response::parse(br#"{"request_id":"r","ok":true,"result":1,"extra":0}"#).is_err());
    }

    #[test]
    fn oversized_response_becomes_an_error() {
        let big = "x".repeat(crate::MAX_LINE_BYTES);
        let line = Response::Ok { request_id: "r".into(), result: Value::String(big) }.to_line();
        let parsed = Response::parse(&line[..line.len() - 1]).unwrap();
        match parsed {
            Response::Err { request_id, error } => {
                assert_eq!(request_id.as_deref(), Some("r"));
                assert_eq!(error.code, codes::RESPONSE_TOO_LARGE);
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = Request::parse(&bytes);
            let _ = Response::parse(&bytes);
        }

        #[test]
        fn encoded_requests_parse_back(id in "[a-zA-Z0-9_-]{1,64}", method in "[a-z.]{1,20}", n in proptest::num::i64::ANY) {
            let mut params = Map::new();
            params.insert("n".into(), Value::from(n));
            let req = Request { request_id: id, method, params };
            let line = req.to_line();
            proptest::prop_assert_eq!(Request::parse(&line[..line.len() - 1]).unwrap(), req);
        }
    }
}
