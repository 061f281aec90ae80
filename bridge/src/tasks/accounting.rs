//! What a task cost and how long it took: its title, the usage its runtime reported (stored
//! as the latest cumulative figure, with a `usage.updated` event), its timing, and the JSON
//! shapes of usage and totals every view shares.

use std::sync::Arc;

use serde_json::{Value, json};

use super::Inner;
use crate::model::Usage;
use crate::store::accounting::UsageTotals;
use crate::store::events::NewEvent;
use crate::store::tasks::TaskRow;

/// The longest title, in characters.
pub const TITLE_CHARS: usize = 80;

/// A task's title: the first non-blank line of its prompt, trimmed, at most [`TITLE_CHARS`]
/// characters (an ellipsis marks a cut), control characters removed, and every absolute path
/// in it shown as `<path>` (a title is shown in lists and on the board, where no host path
/// belongs, even one the caller wrote).
pub fn title_of(prompt: &str) -> Option<String> {
    let line = prompt.lines().map(str::trim).find(|l| !l.is_empty())?;
    let clean: String = line.chars().filter(|c| !c.is_control()).collect();
    let clean = clean
        .split(' ')
        .map(|w| {
            let bare = w.trim_start_matches(['(', '"', '\'', '`', '[']);
            if bare.starts_with('/') && bare.len() > 1 || bare.starts_with("~/") { "<path>" } else { w }
        })
        .collect::<Vec<_>>()
        .join(" ");
    if clean.chars().count() <= TITLE_CHARS {
        return Some(clean);
    }
    let mut cut: String = clean.chars().take(TITLE_CHARS - 1).collect();
    cut.push('…');
    Some(cut)
}

/// The public shape of a usage report.
pub fn usage_json(u: &Usage) -> Value {
    serde_json::to_value(super::task_view::UsageView::of(u)).unwrap_or(Value::Null)
}

/// The public shape of summed usage.
pub fn totals_json(t: &UsageTotals) -> Value {
    json!({
        "tasks": t.tasks,
        "tasks_with_usage": t.reported,
        "input_tokens": t.input_tokens,
        "cached_input_tokens": t.cached_input_tokens,
        "cache_write_input_tokens": t.cache_write_input_tokens,
        "output_tokens": t.output_tokens,
        "reasoning_tokens": t.reasoning_tokens,
        "total_tokens": t.input_tokens.saturating_add(t.output_tokens),
        "cost_usd": t.cost_usd.map(round_cost),
        "wall_ms": t.wall_ms,
        "human_wait_ms": t.human_wait_ms,
    })
}

/// Sums of many small floats: rounded to a nanodollar so `0.1 + 0.2` reads as `0.3`.
fn round_cost(c: f64) -> f64 {
    (c * 1e9).round() / 1e9
}

/// A task's timing: wall time from its start to its end (or to `now` while it runs) and the
/// time it waited for a human (the pending request counted up to `now`).
pub fn timing_json(t: &TaskRow, pending_since: Option<i64>, now: i64) -> Value {
    serde_json::to_value(super::task_view::timing(t, pending_since, now)).unwrap_or(Value::Null)
}

/// Stores a runtime's usage report and records it as an event (under the per-task cap).
pub(super) async fn record_usage(inner: &Arc<Inner>, task_id: &str, usage: Usage) {
    let event = NewEvent::new("usage.updated", usage_json(&usage));
    let (tid, now, cap) = (task_id.to_owned(), inner.clock.now_ms(), inner.config.limits.max_events_per_task);
    let stored = inner
        .store
        .call(move |s| {
            s.set_usage(&tid, &usage, now)?;
            s.append_event(&tid, &event, Some(cap), now)
        })
        .await;
    if let Err(e) = stored {
        tracing::warn!(cause = %e, "cannot record the usage a runtime reported");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_title_is_the_first_line_shortened() {
        assert_eq!(title_of("\n  Fix the build  \nthen more"), Some("Fix the build".into()));
        assert_eq!(title_of("   \n\t\n"), None);
        let long = "é".repeat(200);
        let t = title_of(&long).unwrap();
        assert_eq!(t.chars().count(), TITLE_CHARS);
        assert!(t.ends_with('…'));
        assert_eq!(title_of("a\u{7}b\u{1b}[31m"), Some("ab[31m".into()));
        assert_eq!(
            title_of("APPLY_PATCH: /root/outside/x.txt then (\"/etc/passwd\") ~/.ssh/id and a/b / c"),
            Some("APPLY_PATCH: <path> then <path> <path> and a/b / c".into())
        );
    }

    #[test]
    fn summed_costs_are_rounded_and_missing_ones_stay_null() {
        let t = UsageTotals { cost_usd: Some(0.1 + 0.2), ..Default::default() };
        assert_eq!(totals_json(&t)["cost_usd"], json!(0.3));
        assert_eq!(totals_json(&UsageTotals::default())["cost_usd"], Value::Null);
    }
}
