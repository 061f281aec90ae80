//! The shared engine of the fuzz targets: seed corpora from `fuzz/corpus/<target>/`, and
//! proptest strategies that mutate them (byte flips, truncations, splices, deep nesting, huge
//! numbers, invalid UTF-8, JSON tree edits) or produce fully random inputs.
//!
//! Each crate includes this file once with `#[path]` (the crates share no test-only
//! crate). `FUZZ_CASES` sets the number of cases (default [`DEFAULT_CASES`]); `bench/fuzz`
//! runs every target with a million. A failure is saved to `fuzz/regressions/<target>.txt`
//! inside the clone and replayed first on the next run.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "the fuzz engine (test-only) reads its corpus and writes its regressions"
)]
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestRunner};
use serde_json::{Map, Value};

/// Cases per target when `FUZZ_CASES` is unset: enough to catch the easy bugs, quick enough
/// for every `cargo test`.
pub const DEFAULT_CASES: u32 = 2_000;

/// The number of cases to run: `FUZZ_CASES`, else [`DEFAULT_CASES`].
pub fn cases() -> u32 {
    match std::env::var("FUZZ_CASES") {
        Ok(text) => text.trim().parse().unwrap_or_else(|_| panic!("FUZZ_CASES={text:?} is not a number of cases")),
        Err(_) => DEFAULT_CASES,
    }
}

/// The `fuzz/` directory of the clone (every crate is one level below the root).
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz")
}

/// A runner for `target`: [`cases`] cases, failures persisted under `fuzz/regressions/`.
pub fn runner(target: &str) -> TestRunner {
    let path = fuzz_dir().join("regressions").join(format!("{target}.txt"));
    // `Direct` wants a 'static path; one small leak per target and test run.
    let path: &'static str = Box::leak(path.to_string_lossy().into_owned().into_boxed_str());
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(path))),
        // A million cases must not stop on a few rejected ones; no strategy here rejects.
        max_global_rejects: u32::MAX,
        ..Config::default()
    })
}

/// Runs `test` on `strategy` with [`runner`]; panics with the minimal failing input.
pub fn run<S: Strategy>(target: &str, strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>)
where
    S::Value: std::fmt::Debug,
{
    let mut runner = runner(target);
    if let Err(failure) = runner.run(&strategy, test) {
        panic!("fuzz target {target} failed: {failure}");
    }
}

/// The seeds of one target, with the tokens and JSON values mutations draw from.
#[derive(Debug)]
pub struct Corpus {
    /// Every seed, as bytes (a `.jsonl` file gives one seed per line).
    pub seeds: Vec<Vec<u8>>,
    /// The seeds that parse as JSON.
    pub values: Vec<Value>,
    /// Tokens spliced into inputs: the built-in dictionary, the caller's, and every object
    /// key and short string of the JSON seeds.
    pub tokens: Vec<Vec<u8>>,
    /// Strings seen in the JSON seeds (keys and values), for renames and replacements.
    pub words: Vec<String>,
}

/// Structural tokens and hostile fragments every target gets.
const DICTIONARY: &[&[u8]] = &[
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"\\",
    b"\n",
    b"\r\n",
    b"\r",
    b"\t",
    b" ",
    b"=",
    b"#",
    b"'",
    b"null",
    b"true",
    b"false",
    b"0",
    b"-1",
    b"1.5e3",
    b"{}",
    b"[]",
    b"\"\"",
    b"1e99999",
    b"-1e99999",
    b"18446744073709551616",
    b"-9223372036854775809",
    b"99999999999999999999999999999",
    b"0.000000000000000000000000000000000000000000001",
    b"-0",
    b"NaN",
    b"Infinity",
    b"\xff",
    b"\xfe\xff",
    b"\xc3",
    b"\xe2\x82",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xef\xbb\xbf",
    b"\\u0000",
    b"\\ud800",
    b"\\udc00\\ud800",
    b"\\u00e9",
    b"\\\"",
    b"\\n",
    b"\x00",
    b"\x1b[2J",
    b"\xc2\x9b",
    b"export ",
    b"KEY=",
    b"~/",
    b"$HOME",
    b"${X}",
    b"/bin/bash -lc '",
    b"'\\''",
    b"\"jsonrpc\":\"2.0\"",
    b"\"id\":",
    b"\"method\":",
    b"\"params\":",
    b"\"type\":",
    b"\"protocol_version\":1",
    b"\"request_id\":",
    b"\"ok\":true",
    b"\"ok\":false",
];

/// Values that break careless code: boundaries, huge, empty, multi-byte text at clip edges.
fn evil_leaf(choice: u64, corpus: &Corpus) -> Value {
    match choice % 24 {
        0 => Value::Null,
        1 => Value::Bool(choice & 32 != 0),
        2 => Value::from(u64::MAX),
        3 => Value::from(i64::MIN),
        4 => Value::from(-1),
        5 => Value::from(0),
        6 => serde_json::Number::from_f64(1e308).map_or(Value::Null, Value::Number),
        7 => serde_json::Number::from_f64(-0.5).map_or(Value::Null, Value::Number),
        8 => Value::String(String::new()),
        9 => Value::String("é".repeat(1000 + (choice >> 8) as usize % 1200)),
        10 => Value::String("😀".repeat(500 + (choice >> 8) as usize % 700)),
        11 => Value::String("x".repeat(1990 + (choice >> 8) as usize % 20) + "€€€€"),
        12 => Value::String("a".repeat(100_000)),
        13 => Value::String("\u{0}\u{1b}[2J\u{9b}\r\n\t".into()),
        14 => Value::String("/bin/bash -lc 'echo '\\''hi'\\'''".into()),
        15 => Value::String("'".into()),
        16 => Value::Array(Vec::new()),
        17 => Value::Object(Map::new()),
        18 => Value::Array(vec![Value::String("é".repeat(3)); 300]),
        19 => Value::String(format!("q{}", choice >> 8)),
        20 => Value::String(format!("opt_{}", (choice >> 8) % 40)),
        21 => Value::String("18446744073709551616".into()),
        _ => match pick(&corpus.words, choice >> 5) {
            Some(word) => Value::String(word.clone()),
            None => Value::Null,
        },
    }
}

fn pick<T>(list: &[T], n: u64) -> Option<&T> {
    if list.is_empty() { None } else { list.get((n % list.len() as u64) as usize) }
}

fn collect_words(value: &Value, words: &mut Vec<String>) {
    match value {
        Value::String(s) if s.len() <= 64 => words.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|v| collect_words(v, words)),
        Value::Object(map) => {
            for (key, v) in map {
                words.push(key.clone());
                collect_words(v, words);
            }
        }
        _ => {}
    }
}

impl Corpus {
    /// Loads `fuzz/corpus/<target>/`; `tokens` adds target-specific dictionary entries.
    pub fn load(target: &str, tokens: &[&str]) -> Arc<Corpus> {
        let dir = fuzz_dir().join("corpus").join(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("the seed corpus {} cannot be read: {e}", dir.display()))
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|path| path.is_file())
            .collect();
        files.sort();
        let mut seeds = Vec::new();
        for path in files {
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            if path.extension().is_some_and(|ext| ext == "jsonl") {
                seeds.extend(bytes.split(|&b| b == b'\n').filter(|line| !line.is_empty()).map(<[u8]>::to_vec));
            } else {
                seeds.push(bytes);
            }
        }
        assert!(!seeds.is_empty(), "the seed corpus {} is empty", dir.display());
        Corpus::new(seeds, tokens)
    }

    /// A corpus from seeds already in memory.
    pub fn new(seeds: Vec<Vec<u8>>, tokens: &[&str]) -> Arc<Corpus> {
        let values: Vec<Value> = seeds.iter().filter_map(|s| serde_json::from_slice(s).ok()).collect();
        let mut words = Vec::new();
        values.iter().for_each(|v| collect_words(v, &mut words));
        words.extend(tokens.iter().map(|t| (*t).to_owned()));
        words.sort();
        words.dedup();
        let mut all: Vec<Vec<u8>> = DICTIONARY.iter().map(|t| t.to_vec()).collect();
        all.extend(words.iter().map(|w| w.clone().into_bytes()));
        Arc::new(Corpus { seeds, values, tokens: all, words })
    }
}

/// An input as bytes, shown as an escaped byte string when a case fails.
#[derive(Clone, PartialEq, Eq)]
pub struct Bytes(pub Vec<u8>);

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "b\"{}\"", self.0.escape_ascii())
    }
}

impl std::ops::Deref for Bytes {
    type Target = Vec<u8>;
    fn deref(&self) -> &Vec<u8> {
        &self.0
    }
}

/// One mutation: what to do and two numbers that say where and with what.
pub type Op = (u8, u64, u64);

fn ops(max: usize) -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 1..max)
}

/// Applies one byte-level mutation to `input`.
pub fn mutate_bytes(input: &mut Vec<u8>, (kind, a, b): Op, corpus: &Corpus) {
    let len = input.len() as u64;
    let at = if len == 0 { 0 } else { (a % (len + 1)) as usize };
    match kind % 12 {
        0 if len > 0 => {
            let i = (a % len) as usize;
            input[i] ^= 1 << (b % 8);
        }
        1 if len > 0 => {
            const BYTES: &[u8] = b"\x00\xff\x7f\x80\"\\\n{}[],:=#' \r\t0-.eE";
            let i = (a % len) as usize;
            input[i] = BYTES[(b % BYTES.len() as u64) as usize];
        }
        2 => {
            let end = (at + 1 + (b % 32) as usize).min(input.len());
            input.drain(at.min(end)..end);
        }
        3 => {
            let extra: Vec<u8> = b.to_le_bytes()[..(1 + (a >> 60) as usize % 8)].to_vec();
            input.splice(at..at, extra);
        }
        4 => input.truncate(at),
        5 => {
            let end = (at + 1 + (b % 64) as usize).min(input.len());
            let chunk = input[at.min(end)..end].to_vec();
            input.splice(at..at, chunk);
        }
        6 => {
            // Splice: a piece of another seed.
            if let Some(other) = pick(&corpus.seeds, b) {
                let start = ((b >> 20) % (other.len() as u64 + 1)) as usize;
                let end = (start + (b >> 40) as usize % 256).min(other.len());
                input.splice(at..at, other[start..end].iter().copied());
            }
        }
        7 | 8 => {
            if let Some(token) = pick(&corpus.tokens, b) {
                input.splice(at..at, token.iter().copied());
            }
        }
        9 => {
            // Deep nesting, past any recursion limit.
            let depth = 1 + (b % 3000) as usize;
            let open: &[u8] = match b >> 62 {
                0 => b"[",
                1 => b"{\"a\":",
                _ => b"[{\"item\":",
            };
            let nest: Vec<u8> = open.iter().copied().cycle().take(open.len() * depth).collect();
            input.splice(at..at, nest);
        }
        10 => {
            // A number in the input grows huge.
            if let Some(i) = input.iter().skip(at).position(u8::is_ascii_digit).map(|i| i + at) {
                let digits: Vec<u8> = std::iter::repeat_n(b'9', 20 + (b % 400) as usize).collect();
                input.splice(i..i + 1, digits);
            }
        }
        _ => {
            // Invalid UTF-8 at a random place.
            const BAD: &[&[u8]] = &[b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x28\xa1"];
            let bad = BAD[(b % BAD.len() as u64) as usize];
            input.splice(at..at, bad.iter().copied());
        }
    }
}

fn count_nodes(value: &Value) -> u64 {
    1 + match value {
        Value::Array(items) => items.iter().map(count_nodes).sum(),
        Value::Object(map) => map.values().map(count_nodes).sum(),
        _ => 0,
    }
}

fn node_mut(value: &mut Value, mut n: u64) -> Option<&mut Value> {
    fn walk<'a>(value: &'a mut Value, n: &mut u64) -> Option<&'a mut Value> {
        if *n == 0 {
            return Some(value);
        }
        *n -= 1;
        match value {
            Value::Array(items) => items.iter_mut().find_map(|v| walk(v, n)),
            Value::Object(map) => map.values_mut().find_map(|v| walk(v, n)),
            _ => None,
        }
    }
    walk(value, &mut n)
}

fn node(value: &Value, n: u64) -> Value {
    let mut copy = value.clone();
    let count = count_nodes(&copy);
    node_mut(&mut copy, n % count).map(|v| v.take()).unwrap_or(Value::Null)
}

/// Applies one JSON tree mutation to `value`.
pub fn mutate_value(value: &mut Value, (kind, a, b): Op, corpus: &Corpus) {
    let count = count_nodes(value);
    let Some(target) = node_mut(value, a % count) else { return };
    match kind % 9 {
        0 | 1 => *target = evil_leaf(b, corpus),
        2 => {
            if let Some(other) = pick(&corpus.values, b) {
                *target = node(other, b >> 16);
            }
        }
        3 => match target {
            Value::Object(map) if !map.is_empty() => {
                let key = map.keys().nth((b % map.len() as u64) as usize).cloned().unwrap_or_default();
                map.remove(&key);
            }
            Value::Array(items) if !items.is_empty() => {
                items.remove((b % items.len() as u64) as usize);
            }
            _ => *target = Value::Null,
        },
        4 => match target {
            Value::Object(map) => {
                let key = pick(&corpus.words, b).cloned().unwrap_or_default();
                map.insert(key, evil_leaf(b >> 8, corpus));
            }
            Value::Array(items) => items.push(evil_leaf(b, corpus)),
            other => *other = Value::Array(vec![other.take()]),
        },
        5 => {
            // Nesting: deep, but under serde_json's parse limit often enough to reach mappers.
            let depth = 1 + (b % 140) as usize;
            let mut inner = target.take();
            for level in 0..depth {
                inner = if (b >> 8) & 1 == 0 || level % 2 == 0 {
                    Value::Array(vec![inner])
                } else {
                    let key = pick(&corpus.words, b >> 16).cloned().unwrap_or_default();
                    Value::Object(Map::from_iter([(key, inner)]))
                };
            }
            *target = inner;
        }
        6 => {
            *target = match target.take() {
                Value::String(s) => {
                    s.parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
                }
                Value::Number(n) => Value::String(n.to_string()),
                Value::Array(items) => {
                    Value::Object(items.into_iter().enumerate().map(|(i, v)| (i.to_string(), v)).collect())
                }
                Value::Object(map) => Value::Array(map.into_iter().map(|(_, v)| v).collect()),
                Value::Bool(flag) => Value::String(flag.to_string()),
                Value::Null => Value::String("null".into()),
            }
        }
        7 => {
            // Many copies: lists past their caps (10 questions, 100 changes).
            if let Value::Array(items) = target
                && let Some(first) = items.first().cloned()
            {
                let n = 1 + (b % 300) as usize;
                items.extend(std::iter::repeat_n(first, n));
            }
        }
        _ => {
            if let Value::Object(map) = target
                && !map.is_empty()
            {
                let old = map.keys().nth((b % map.len() as u64) as usize).cloned().unwrap_or_default();
                let new = pick(&corpus.words, b >> 8).cloned().unwrap_or_default();
                if let Some(v) = map.remove(&old) {
                    map.insert(new, v);
                }
            }
        }
    }
}

/// Inputs as bytes: a seed as is, a seed with byte mutations, or random bytes.
pub fn bytes(corpus: &Arc<Corpus>) -> impl Strategy<Value = Bytes> + use<> {
    let seeds = corpus.seeds.len();
    let (c1, c2) = (Arc::clone(corpus), Arc::clone(corpus));
    prop_oneof![
        1 => proptest::collection::vec(any::<u8>(), 0..512).prop_map(Bytes),
        1 => (0..seeds).prop_map(move |i| Bytes(c1.seeds[i].clone())),
        8 => (0..seeds, prop_oneof![3 => ops(4), 1 => ops(16)]).prop_map(move |(i, ops)| {
            let mut input = c2.seeds[i].clone();
            ops.into_iter().for_each(|op| mutate_bytes(&mut input, op, &c2));
            Bytes(input)
        }),
    ]
}

/// Inputs as JSON lines: a JSON seed with tree mutations, serialized, sometimes with byte
/// mutations after (so most inputs stay JSON and reach the code behind the parser).
pub fn json_lines(corpus: &Arc<Corpus>) -> impl Strategy<Value = Bytes> + use<> {
    assert!(!corpus.values.is_empty(), "a JSON target needs JSON seeds");
    let values = corpus.values.len();
    let c = Arc::clone(corpus);
    prop_oneof![
        1 => bytes(corpus),
        4 => (0..values, prop_oneof![3 => ops(4), 1 => ops(12)], proptest::collection::vec((any::<u8>(), any::<u64>(), any::<u64>()), 0..2))
            .prop_map(move |(i, tree_ops, byte_ops)| {
                let mut value = c.values[i].clone();
                tree_ops.into_iter().for_each(|op| mutate_value(&mut value, op, &c));
                let mut line = serde_json::to_vec(&value).unwrap_or_default();
                byte_ops.into_iter().for_each(|op| mutate_bytes(&mut line, op, &c));
                Bytes(line)
            }),
    ]
}

/// Whether two JSON values are equal, floats up to the last bits (serde_json reads floats
/// fast rather than exactly: `1e206` reads back as `9.999999999999999e205`).
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => match (x.as_f64(), y.as_f64()) {
            (Some(x), Some(y)) => x == y || ((x - y) / x.abs().max(y.abs())).abs() < 1e-14,
            _ => false,
        },
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(x, y)| json_eq(x, y)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Asserts that `value` is JSON that serializes and reads back unchanged.
pub fn round_trips(value: &Value) -> Result<(), TestCaseError> {
    let text = serde_json::to_string(value).map_err(|e| TestCaseError::fail(format!("does not serialize: {e}")))?;
    let back: Value = serde_json::from_str(&text).map_err(|e| TestCaseError::fail(format!("not JSON: {e}")))?;
    prop_assert!(json_eq(&back, value), "{value} reads back as {back}");
    Ok(())
}
