//! Tool arguments: the JSON Schema announced for a tool is generated from the Rust type that
//! parses it, and this module enforces exactly that schema before the type is built.
//!
//! Arguments come from a language model: plausible, not reliable. So, strictly: unknown
//! parameters are refused by name; types, enums, bounds and lengths are checked with a message
//! naming the parameter and the rule. Two leniencies: a numeric string becomes a
//! number where a number is expected (`"4.5"` → 4.5), and `null` or `""` on an optional
//! parameter means the parameter is absent.

use schemars::JsonSchema;
use serde_json::{Map, Number, Value};

use crate::error::ToolError;

/// The input schema of `T`: JSON Schema 2020-12 with every sub-schema inlined.
pub fn schema_for<T: JsonSchema>() -> Value {
    let generator =
        schemars::generate::SchemaSettings::draft2020_12().with(|s| s.inline_subschemas = true).into_generator();
    let mut schema = generator.into_root_schema_for::<T>().to_value();
    if let Some(map) = schema.as_object_mut() {
        map.remove("$schema");
        map.remove("title");
    }
    schema
}

/// Validates and normalizes `args` against an object `schema`; returns the normalized object.
pub fn validate(schema: &Value, args: Map<String, Value>) -> Result<Value, ToolError> {
    let mut value = Value::Object(args);
    check(schema, &mut value, "")?;
    Ok(value)
}

fn name(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

fn types_of(schema: &Value) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn check(schema: &Value, value: &mut Value, path: &str) -> Result<(), ToolError> {
    let param = if path.is_empty() { "arguments" } else { path };
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = schema.get(key).and_then(Value::as_array) {
            let mut first_err = None;
            for alt in alts {
                let mut candidate = value.clone();
                match check(alt, &mut candidate, path) {
                    Ok(()) => {
                        *value = candidate;
                        return Ok(());
                    }
                    Err(e) if first_err.is_none() && !(alt.get("type") == Some(&Value::from("null"))) => {
                        first_err = Some(e)
                    }
                    Err(_) => {}
                }
            }
            return Err(first_err.unwrap_or_else(|| ToolError::invalid(param, "does not match any allowed form")));
        }
    }
    let types = types_of(schema);
    coerce_numeric_string(&types, value);
    if !types.is_empty() && !types.iter().any(|t| matches_type(t, value)) {
        let expected = types.iter().filter(|t| **t != "null").copied().collect::<Vec<_>>().join(" or ");
        return Err(ToolError::invalid(param, format!("must be {}", with_article(&expected))));
    }
    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list =
            allowed.iter().map(|v| v.as_str().map(str::to_owned).unwrap_or_else(|| v.to_string())).collect::<Vec<_>>();
        return Err(ToolError::invalid(param, format!("must be one of: {}", list.join(", "))));
    }
    if let Some(c) = schema.get("const")
        && c != value
    {
        return Err(ToolError::invalid(param, format!("must be {c}")));
    }
    match value {
        Value::Number(n) => check_number(schema, n, param),
        Value::String(s) => {
            let chars = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && chars < min
            {
                return Err(ToolError::invalid(param, format!("must be at least {min} characters long")));
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars > max
            {
                return Err(ToolError::invalid(param, format!("must be at most {max} characters long")));
            }
            Ok(())
        }
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                return Err(ToolError::invalid(param, format!("must hold at least {min} item(s)")));
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && items.len() as u64 > max
            {
                return Err(ToolError::invalid(param, format!("must hold at most {max} items")));
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter_mut().enumerate() {
                    check(item_schema, item, &format!("{param}[{i}]"))?;
                }
            }
            Ok(())
        }
        Value::Object(map) => check_object(schema, map, path),
        _ => Ok(()),
    }
}

fn with_article(t: &str) -> String {
    match t {
        "integer" | "array" | "object" => format!("an {t}"),
        "" => "of another type".into(),
        other => format!("a {other}"),
    }
}

fn matches_type(t: &str, v: &Value) -> bool {
    match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "string" => v.is_string(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "number" => v.is_number(),
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f.fract() == 0.0 && f.abs() < 9e15)
        }
        _ => false,
    }
}

/// `"42"` → 42 where an integer is expected; `"4.5"` → 4.5 where a number is expected.
fn coerce_numeric_string(types: &[&str], value: &mut Value) {
    let Value::String(s) = value else { return };
    let t = s.trim();
    if t.is_empty() || types.contains(&"string") {
        return;
    }
    if types.contains(&"integer") {
        if let Ok(i) = t.parse::<i64>() {
            *value = Value::from(i);
        } else if let Ok(u) = t.parse::<u64>() {
            *value = Value::from(u);
        } else if let Some(n) = t.parse::<f64>().ok().filter(|f| f.is_finite() && f.fract() == 0.0 && f.abs() < 9e15) {
            *value = Value::from(n as i64);
        }
    } else if types.contains(&"number")
        && let Some(n) = t.parse::<f64>().ok().filter(|f| f.is_finite()).and_then(Number::from_f64)
    {
        *value = Value::Number(n);
    }
}

fn check_number(schema: &Value, n: &mut Number, param: &str) -> Result<(), ToolError> {
    let Some(f) = n.as_f64() else { return Ok(()) };
    // An integral float where an integer is expected (`5.0`) is stored as an integer.
    if types_of(schema).contains(&"integer") && !n.is_i64() && !n.is_u64() {
        *n = Number::from(f as i64);
    }
    let (mut min, mut max) = match schema.get("format").and_then(Value::as_str) {
        Some("uint8") => (Some(0.0), Some(u8::MAX as f64)),
        Some("uint16") => (Some(0.0), Some(u16::MAX as f64)),
        Some("uint32") => (Some(0.0), Some(u32::MAX as f64)),
        Some("uint64" | "uint") => (Some(0.0), None),
        _ => (None, None),
    };
    if let Some(m) = schema.get("minimum").and_then(Value::as_f64) {
        min = Some(min.map_or(m, |x: f64| x.max(m)));
    }
    if let Some(m) = schema.get("maximum").and_then(Value::as_f64) {
        max = Some(max.map_or(m, |x: f64| x.min(m)));
    }
    if let Some(min) = min.filter(|m| f < *m) {
        return Err(ToolError::invalid(param, format!("must be at least {min}")));
    }
    if let Some(max) = max.filter(|m| f > *m) {
        return Err(ToolError::invalid(param, format!("must be at most {max}")));
    }
    Ok(())
}

fn check_object(schema: &Value, map: &mut Map<String, Value>, path: &str) -> Result<(), ToolError> {
    let empty = Map::new();
    let props = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if schema.get("additionalProperties") == Some(&Value::Bool(false)) {
        let mut unknown: Vec<&String> = map.keys().filter(|k| !props.contains_key(*k)).collect();
        unknown.sort();
        if let Some(first) = unknown.first() {
            let known = props.keys().map(String::as_str).collect::<Vec<_>>().join(", ");
            return Err(ToolError::invalid(&name(path, first), format!("is unknown; the parameters are: {known}")));
        }
    }
    // `null` and "" on an optional parameter mean "absent".
    map.retain(|k, v| required.contains(&k.as_str()) || !(v.is_null() || v.as_str() == Some("")));
    for key in &required {
        match map.get(*key) {
            None => return Err(ToolError::invalid(&name(path, key), "is required")),
            Some(Value::Null) => return Err(ToolError::invalid(&name(path, key), "is required and must not be null")),
            _ => {}
        }
    }
    for (key, v) in map.iter_mut() {
        if let Some(p) = props.get(key) {
            check(p, v, &name(path, key))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Item {
        id: String,
        #[serde(default)]
        picks: Vec<String>,
        text: Option<String>,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(rename_all = "snake_case")]
    #[allow(dead_code)]
    enum Mode {
        Fast,
        Slow,
    }

    #[derive(Debug, Deserialize, JsonSchema)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Args {
        name: String,
        #[serde(default)]
        #[schemars(range(min = 1, max = 500))]
        limit: Option<u32>,
        ratio: Option<f64>,
        mode: Option<Mode>,
        #[schemars(length(max = 5))]
        short: Option<String>,
        #[schemars(length(min = 1))]
        items: Option<Vec<Item>>,
    }

    fn run(v: Value) -> Result<Value, ToolError> {
        let Value::Object(map) = v else { panic!() };
        validate(&schema_for::<Args>(), map)
    }

    fn err(v: Value) -> String {
        let e = run(v).unwrap_err();
        assert_eq!(e.code, "INVALID_ARGUMENT");
        e.message
    }

    #[test]
    fn accepts_and_normalizes() {
        let out = run(json!({"name": "a", "limit": "42", "ratio": "4.5", "mode": "fast", "short": "", "items": null}))
            .unwrap();
        assert_eq!(out, json!({"name": "a", "limit": 42, "ratio": 4.5, "mode": "fast"}));
        let parsed: Args = serde_json::from_value(out).unwrap();
        assert_eq!(parsed.limit, Some(42));
        let out = run(json!({"name": "a", "limit": 7.0})).unwrap();
        assert_eq!(out["limit"], json!(7));
    }

    #[test]
    fn refuses_with_the_parameter_and_the_rule() {
        assert!(err(json!({"name": "a", "bogus": 1})).contains("'bogus' is unknown"));
        assert!(err(json!({})).contains("'name' is required"));
        assert!(err(json!({"name": null})).contains("'name' is required"));
        assert!(err(json!({"name": 5})).contains("'name' must be a string"));
        assert!(err(json!({"name": "a", "limit": 0})).contains("'limit' must be at least 1"));
        assert!(err(json!({"name": "a", "limit": 501})).contains("'limit' must be at most 500"));
        assert!(err(json!({"name": "a", "limit": "x"})).contains("'limit' must be an integer"));
        assert!(err(json!({"name": "a", "limit": 1.5})).contains("'limit' must be an integer"));
        assert!(err(json!({"name": "a", "mode": "medium"})).contains("must be one of: fast, slow"));
        assert!(err(json!({"name": "a", "short": "toolong"})).contains("'short' must be at most 5 characters"));
        assert!(err(json!({"name": "a", "items": []})).contains("'items' must hold at least 1"));
        assert!(err(json!({"name": "a", "items": [{"id": "x", "nope": 1}]})).contains("'items[0].nope' is unknown"));
        assert!(err(json!({"name": "a", "items": [{"picks": []}]})).contains("'items[0].id' is required"));
        assert!(
            err(json!({"name": "a", "items": [{"id": "x", "picks": [3]}]}))
                .contains("'items[0].picks[0]' must be a string")
        );
    }

    proptest::proptest! {
        #[test]
        fn never_panics(keys in proptest::collection::vec("[a-z]{1,6}", 0..5), n in proptest::num::f64::ANY, s in ".{0,12}") {
            let mut map = Map::new();
            for (i, k) in keys.iter().enumerate() {
                let v = match i % 4 { 0 => json!(s), 1 => json!(n), 2 => json!([s, n]), _ => json!({"id": s}) };
                map.insert(k.clone(), v);
            }
            map.insert("name".into(), json!(s));
            map.insert("limit".into(), json!(s));
            let _ = validate(&schema_for::<Args>(), map);
        }
    }
}
