//! The strict `.env` syntax both binaries read: the one parser of the operator's file.
//!
//! The file comes from outside, so the parser never panics and every error names its line.
//! Accepted: `KEY=VALUE` lines, blank lines and `#` comment lines. Keys match
//! `[A-Za-z_][A-Za-z0-9_]*`; spaces and tabs before the key and around `=` are tolerated, as
//! ServerFS's own renderer tolerates them. A value is unquoted (an inline `#` comment starts
//! only after whitespace; surrounding whitespace is trimmed), single-quoted (literal) or
//! double-quoted (with the escapes `\"`, `\\` and `\n`); after a closing quote only
//! whitespace and a comment may follow. Refused: an `export ` prefix, a duplicate key,
//! invalid UTF-8.
//! Nothing is expanded: `$X` stays `$X`. CRLF line ends and a leading UTF-8 BOM are tolerated.
//!
//! What the keys mean is the reader's business: the bridge validates the whole file against its
//! key catalog, the front takes the few keys it needs. An error carries a [`Problem`], which
//! never holds a value, because a value may be a secret; its `Display` is the bridge's wording,
//! and the front words the same problems its own way.

use std::collections::HashMap;
use std::fmt;

/// One `KEY=VALUE` assignment, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The value, unquoted and unescaped.
    pub value: String,
    /// The 1-based line it was found on.
    pub line: usize,
}

/// What is wrong with a line. No variant holds any part of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The line is not UTF-8; `byte` is the 1-based position of the first bad byte.
    InvalidUtf8 {
        /// The 1-based byte of the line where the bad sequence starts.
        byte: usize,
    },
    /// The line starts with `export` and whitespace.
    Export,
    /// The line is neither blank, a comment nor an assignment.
    NotAnAssignment,
    /// Nothing (but whitespace) before `=`.
    MissingKey,
    /// The text before `=`, which is not a valid key.
    InvalidKey(String),
    /// A single quote that is never closed.
    UnterminatedSingleQuote,
    /// A double quote that is never closed.
    UnterminatedDoubleQuote,
    /// A double-quoted value whose line ends in a lone backslash (so never closed either).
    TrailingBackslash,
    /// A backslash followed by something other than `"`, `\` or `n` in a double-quoted value.
    UnsupportedEscape,
    /// Text other than whitespace and a comment after a closing quote.
    TextAfterQuote,
    /// The key was already set; `first` is the line that set it.
    Duplicate {
        /// The 1-based line of the first assignment.
        first: usize,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidUtf8 { byte } => write!(f, "invalid UTF-8 at byte {byte} of the line"),
            Self::Export => f.write_str("the `export` prefix is not supported: write KEY=VALUE without it"),
            Self::NotAnAssignment => f.write_str("expected KEY=VALUE"),
            Self::MissingKey => f.write_str("missing key before `=`"),
            Self::InvalidKey(key) => write!(
                f,
                "invalid key {key:?}: a key is letters, digits and underscores, and does not start with a digit"
            ),
            Self::UnterminatedSingleQuote => f.write_str("unterminated single-quoted value"),
            Self::UnterminatedDoubleQuote | Self::TrailingBackslash => f.write_str("unterminated double-quoted value"),
            Self::UnsupportedEscape => {
                f.write_str("unsupported escape in a double-quoted value (only \\\", \\\\ and \\n are allowed)")
            }
            Self::TextAfterQuote => {
                f.write_str("unexpected text after the closing quote (only a comment after whitespace may follow)")
            }
            Self::Duplicate { first } => write!(f, "duplicate key (first set on line {first})"),
        }
    }
}

/// A syntax error on one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    /// The 1-based line.
    pub line: usize,
    /// The key assigned on that line, when the line got far enough to name one.
    pub key: Option<String>,
    /// What is wrong, without the value.
    pub problem: Problem,
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.problem)
    }
}

impl std::error::Error for SyntaxError {}

/// Parses a whole `.env` file: every assignment, or every syntax error (at most one a line,
/// in line order, never none).
pub fn parse(input: &[u8]) -> Result<Vec<Entry>, Vec<SyntaxError>> {
    let input = input.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(input);
    let mut entries = Vec::new();
    let mut errors = Vec::new();
    let mut first_line_of: HashMap<String, usize> = HashMap::new();

    for (index, raw) in input.split(|&b| b == b'\n').enumerate() {
        let line = index + 1;
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        let text = match std::str::from_utf8(raw) {
            Ok(text) => text,
            Err(e) => {
                let problem = Problem::InvalidUtf8 { byte: e.valid_up_to() + 1 };
                errors.push(SyntaxError { line, key: None, problem });
                continue;
            }
        };
        match parse_line(text) {
            Ok(None) => {}
            Ok(Some((key, value))) => {
                if let Some(&first) = first_line_of.get(key) {
                    errors.push(SyntaxError { line, key: Some(key.to_owned()), problem: Problem::Duplicate { first } });
                } else {
                    first_line_of.insert(key.to_owned(), line);
                    entries.push(Entry { key: key.to_owned(), value, line });
                }
            }
            Err((key, problem)) => {
                errors.push(SyntaxError { line, key: key.map(str::to_owned), problem });
            }
        }
    }
    if errors.is_empty() { Ok(entries) } else { Err(errors) }
}

/// What a line failed with: the key when known, and the problem.
type LineError<'a> = (Option<&'a str>, Problem);

/// Parses one line (without its line end): `None` for blank and comment lines.
fn parse_line(text: &str) -> Result<Option<(&str, String)>, LineError<'_>> {
    let trimmed = text.trim_start_matches([' ', '\t']);
    if trimmed.trim_end_matches([' ', '\t']).is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    if let Some(rest) = trimmed.strip_prefix("export")
        && rest.starts_with([' ', '\t'])
    {
        let key = rest.split_once('=').map(|(key, _)| key.trim_matches([' ', '\t'])).filter(|key| is_valid_key(key));
        return Err((key, Problem::Export));
    }
    let Some((key_part, value_part)) = trimmed.split_once('=') else {
        return Err((None, Problem::NotAnAssignment));
    };
    let key = key_part.trim_end_matches([' ', '\t']);
    if !is_valid_key(key) {
        let problem = if key.is_empty() { Problem::MissingKey } else { Problem::InvalidKey(key.to_owned()) };
        return Err((None, problem));
    }
    parse_value(value_part).map(|value| Some((key, value))).map_err(|problem| (Some(key), problem))
}

/// Whether `key` matches `[A-Za-z_][A-Za-z0-9_]*`.
fn is_valid_key(key: &str) -> bool {
    let mut bytes = key.bytes();
    matches!(bytes.next(), Some(b) if b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Parses the text after `=`.
fn parse_value(raw: &str) -> Result<String, Problem> {
    let start = raw.trim_start_matches([' ', '\t']);
    // A `#` right after whitespace begins a comment, even when it is the first thing after `=`.
    if start.len() < raw.len() && start.starts_with('#') {
        return Ok(String::new());
    }
    if let Some(body) = start.strip_prefix('\'') {
        let Some((value, rest)) = body.split_once('\'') else {
            return Err(Problem::UnterminatedSingleQuote);
        };
        check_after_quote(rest)?;
        Ok(value.to_owned())
    } else if let Some(body) = start.strip_prefix('"') {
        parse_double_quoted(body)
    } else {
        Ok(unquoted(start))
    }
}

/// An unquoted value: everything up to a `#` that follows whitespace, trailing whitespace trimmed.
fn unquoted(text: &str) -> String {
    let mut end = text.len();
    let mut previous_is_space = false;
    for (index, c) in text.char_indices() {
        if c == '#' && previous_is_space {
            end = index;
            break;
        }
        previous_is_space = c == ' ' || c == '\t';
    }
    text[..end].trim_end_matches([' ', '\t']).to_owned()
}

/// The body of a double-quoted value, from just after the opening quote.
fn parse_double_quoted(body: &str) -> Result<String, Problem> {
    let mut value = String::new();
    let mut chars = body.char_indices();
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => {
                check_after_quote(&body[index + 1..])?;
                return Ok(value);
            }
            '\\' => match chars.next() {
                Some((_, '"')) => value.push('"'),
                Some((_, '\\')) => value.push('\\'),
                Some((_, 'n')) => value.push('\n'),
                Some(_) => return Err(Problem::UnsupportedEscape),
                None => return Err(Problem::TrailingBackslash),
            },
            _ => value.push(c),
        }
    }
    Err(Problem::UnterminatedDoubleQuote)
}

/// What may follow a closing quote: nothing, whitespace, or whitespace and a comment.
fn check_after_quote(rest: &str) -> Result<(), Problem> {
    let trimmed = rest.trim_start_matches([' ', '\t']);
    if trimmed.is_empty() || (trimmed.len() < rest.len() && trimmed.starts_with('#')) {
        Ok(())
    } else {
        Err(Problem::TextAfterQuote)
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod syntax_fuzz;

// The shared fuzz engine (`fuzz/`), compiled once for this crate's fuzz target.
#[cfg(test)]
#[path = "../../fuzz/mutate.rs"]
mod mutate;
