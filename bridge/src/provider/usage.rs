//! Token usage as the runtimes report it on their wire, turned into one task's [`Usage`]:
//! Codex's `thread/tokenUsage/updated` (a thread's running total: a task counts from where its
//! turn began) and Claude Code's `result` (`usage`, `total_cost_usd`, `modelUsage`).
//!
//! `input_tokens` is every prompt token, cached ones included, for both runtimes (Claude
//! reports the cache reads and writes apart; they are added in).

use serde_json::Value;

use super::Usage;

/// The longest model name kept.
const MODEL_CHARS: usize = 200;

fn clip_model(name: &str) -> String {
    name.chars().filter(|c| !c.is_control()).take(MODEL_CHARS).collect()
}

/// A Codex token breakdown: input, cached input, cache-write input, output, reasoning.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Breakdown([u64; 5]);

impl Breakdown {
    fn parse(v: &Value) -> Option<Breakdown> {
        let n = |k: &str| v.get(k).and_then(Value::as_u64);
        Some(Breakdown([
            n("inputTokens")?,
            n("cachedInputTokens").unwrap_or(0),
            n("cacheWriteInputTokens").unwrap_or(0),
            n("outputTokens")?,
            n("reasoningOutputTokens").unwrap_or(0),
        ]))
    }

    fn minus(self, other: Breakdown) -> Breakdown {
        let mut out = [0; 5];
        for (i, o) in out.iter_mut().enumerate() {
            *o = self.0[i].saturating_sub(other.0[i]);
        }
        Breakdown(out)
    }
}

/// One Codex task's usage, from its thread's running totals.
#[derive(Debug, Clone, Default)]
pub struct CodexTally {
    /// The thread's total before this task's first request (a continuation's earlier turns).
    base: Option<Breakdown>,
    model: Option<String>,
}

impl CodexTally {
    /// A tally for a turn of `model` (as `thread/start` or `thread/resume` answered).
    pub fn new(model: Option<&str>) -> CodexTally {
        CodexTally { base: None, model: model.filter(|m| !m.is_empty()).map(clip_model) }
    }

    /// The task's usage after a `thread/tokenUsage/updated` notification; `None` when its
    /// params are not a usage report.
    pub fn update(&mut self, params: &Value) -> Option<Usage> {
        let usage = params.get("tokenUsage")?;
        let total = Breakdown::parse(usage.get("total")?)?;
        // The first report of the task: what came before it is the total less its last request.
        let base = *self.base.get_or_insert_with(|| {
            let last = usage.get("last").and_then(Breakdown::parse).unwrap_or(total);
            total.minus(last)
        });
        let [input, cached, cache_write, output, reasoning] = total.minus(base).0;
        Some(Usage {
            input_tokens: input,
            cached_input_tokens: cached,
            cache_write_input_tokens: cache_write,
            output_tokens: output,
            reasoning_tokens: Some(reasoning),
            cost_usd: None,
            model: self.model.clone(),
        })
    }
}

/// A Claude Code task's usage from its `result` message (each task is one CLI process, whose
/// result counts that process's requests); `init_model` is what `system/init` named.
pub fn claude_result(result: &Value, init_model: Option<&str>) -> Option<Usage> {
    let usage = result.get("usage").filter(|u| u.is_object());
    let cost = result.get("total_cost_usd").and_then(Value::as_f64).filter(|c| c.is_finite() && *c >= 0.0);
    if usage.is_none() && cost.is_none() {
        return None;
    }
    let n = |k: &str| usage.and_then(|u| u.get(k)).and_then(Value::as_u64).unwrap_or(0);
    let (read, write) = (n("cache_read_input_tokens"), n("cache_creation_input_tokens"));
    let mut models: Vec<&str> = result
        .get("modelUsage")
        .and_then(Value::as_object)
        .map(|m| m.keys().map(String::as_str).collect())
        .unwrap_or_default();
    models.sort_unstable();
    let model = match models.as_slice() {
        [] => init_model.filter(|m| !m.is_empty()).map(clip_model),
        many => Some(clip_model(&many.join(", "))),
    };
    Some(Usage {
        input_tokens: n("input_tokens").saturating_add(read).saturating_add(write),
        cached_input_tokens: read,
        cache_write_input_tokens: write,
        output_tokens: n("output_tokens"),
        reasoning_tokens: None,
        cost_usd: cost,
        model,
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn report(total: [u64; 5], last: [u64; 5]) -> Value {
        let b = |v: [u64; 5]| {
            json!({ "totalTokens": v[0] + v[3], "inputTokens": v[0], "cachedInputTokens": v[1],
                    "cacheWriteInputTokens": v[2], "outputTokens": v[3], "reasoningOutputTokens": v[4] })
        };
        json!({ "threadId": "t", "turnId": "u", "tokenUsage": { "total": b(total), "last": b(last), "modelContextWindow": null } })
    }

    #[test]
    fn a_codex_task_counts_from_where_its_turn_began() {
        // A continuation: the thread already used 100/40 before this task.
        let mut tally = CodexTally::new(Some("gpt-5.9-codex"));
        let first = tally.update(&report([130, 50, 0, 47, 3], [30, 10, 0, 7, 3])).unwrap();
        assert_eq!((first.input_tokens, first.cached_input_tokens, first.output_tokens), (30, 10, 7));
        assert_eq!(first.reasoning_tokens, Some(3));
        assert_eq!(first.model.as_deref(), Some("gpt-5.9-codex"));
        let second = tally.update(&report([180, 90, 0, 60, 5], [50, 40, 0, 13, 2])).unwrap();
        assert_eq!((second.input_tokens, second.cached_input_tokens, second.output_tokens), (80, 50, 20));
        assert_eq!(second.reasoning_tokens, Some(5));
        assert!(tally.update(&json!({ "tokenUsage": { "total": { "inputTokens": "many" } } })).is_none());
        assert!(tally.update(&json!({})).is_none());
    }

    #[test]
    fn a_claude_result_adds_the_cache_into_the_input_and_keeps_the_cost() {
        let result = json!({
            "type": "result", "subtype": "success", "total_cost_usd": 0.0123,
            "usage": { "input_tokens": 12, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200, "output_tokens": 34 },
            "modelUsage": { "claude-sonnet-9": { "inputTokens": 12 } },
        });
        let u = claude_result(&result, Some("init-model")).unwrap();
        assert_eq!(
            (u.input_tokens, u.cached_input_tokens, u.cache_write_input_tokens, u.output_tokens),
            (1212, 1000, 200, 34)
        );
        assert_eq!(u.cost_usd, Some(0.0123));
        assert_eq!(u.model.as_deref(), Some("claude-sonnet-9"));
        let bare = claude_result(&json!({ "usage": { "output_tokens": 1 } }), Some("init-model")).unwrap();
        assert_eq!(bare.model.as_deref(), Some("init-model"));
        assert_eq!(bare.cost_usd, None);
        assert!(claude_result(&json!({ "result": "x" }), None).is_none());
        let negative = claude_result(&json!({ "total_cost_usd": -1.0, "usage": {} }), None).unwrap();
        assert_eq!(negative.cost_usd, None, "a negative cost is not a cost");
    }

    proptest! {
        #[test]
        fn arbitrary_reports_never_panic(v in any::<Option<u64>>(), s in ".{0,300}", f in any::<f64>()) {
            let mut tally = CodexTally::new(Some(&s));
            let _ = tally.update(&json!({ "tokenUsage": { "total": { "inputTokens": v, "outputTokens": v }, "last": s } }));
            let u = claude_result(&json!({ "usage": { "input_tokens": v, "cache_read_input_tokens": u64::MAX },
                                            "total_cost_usd": f, "modelUsage": { s.clone(): {} } }), None);
            let u = u.unwrap();
            prop_assert!(u.cost_usd.is_none_or(|c| c.is_finite() && c >= 0.0));
            prop_assert!(u.model.is_none_or(|m| m.chars().count() <= MODEL_CHARS));
        }
    }
}
