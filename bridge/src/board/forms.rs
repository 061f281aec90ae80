//! Posted forms: the session and its CSRF token are checked before any field is used.

use axum::http::{HeaderMap, StatusCode};

use super::{Authed, Board};
use crate::registry::sessions::csrf_matches;

/// The fields of an urlencoded form, in order (a field may repeat: checkboxes).
pub type Fields = Vec<(String, String)>;

/// The first value of a field.
pub fn field<'a>(fields: &'a Fields, name: &str) -> Option<&'a str> {
    fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Every value of a field.
pub fn all<'a>(fields: &'a Fields, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    fields.iter().filter(move |(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// Why a POST is refused (an answer of its own).
pub type Refusal = (StatusCode, &'static str);

/// A logged-in POST with the session's CSRF token, or the answer that refuses it.
pub fn check(board: &Board, headers: &HeaderMap, fields: &Fields) -> Result<Authed, Refusal> {
    let Some(authed) = board.session(headers) else {
        return Err((StatusCode::FORBIDDEN, "refused: log in to the board first"));
    };
    match field(fields, "csrf") {
        Some(token) if csrf_matches(&authed.session, token) => Ok(authed),
        _ => Err((StatusCode::FORBIDDEN, "refused: the form's CSRF token is missing or wrong; reload the page")),
    }
}
