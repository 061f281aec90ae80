//! A page of `read_agent_task_events`, written straight from its rows to JSON text on the
//! store's thread: a flooding agent's pagers read 500-event pages, and building each as a JSON
//! tree on the async threads (a map per event, its stored payload parsed and written again)
//! was most of the bridge's work during a flood, and made other callers' small reads wait.
//! The keys are in sorted order, as the JSON trees of the other views write theirs.

use serde::Serialize;
use serde_json::value::RawValue;

use super::task_view::stored_json;
use crate::clock::rfc3339;
use crate::store::events::EventRow;

/// The page of `events` for `task_id`, read after the cursor `after`.
pub fn render(
    task_id: &str,
    correlation_id: Option<&str>,
    status: &str,
    after: i64,
    events: &[EventRow],
) -> Box<RawValue> {
    let page = Page {
        correlation_id,
        events: events
            .iter()
            .map(|e| Event {
                correlation_id,
                created_at: rfc3339(e.created_at),
                event_id: e.event_id,
                event_type: &e.event_type,
                payload: stored_json(&e.payload_json),
                schema_version: 1,
                task_id: &e.task_id,
            })
            .collect(),
        next_after_event_id: events.last().map_or(after, |e| e.event_id),
        status,
        task_id,
    };
    // Writing borrowed strings, numbers and checked JSON text cannot fail.
    serde_json::value::to_raw_value(&page).unwrap_or_else(|e| {
        tracing::error!(cause = %e, "cannot write an event page");
        RawValue::NULL.to_owned()
    })
}

#[derive(Serialize)]
struct Page<'a> {
    correlation_id: Option<&'a str>,
    events: Vec<Event<'a>>,
    next_after_event_id: i64,
    status: &'a str,
    task_id: &'a str,
}

/// The public view of an event (the schema-versioned envelope).
#[derive(Serialize)]
struct Event<'a> {
    correlation_id: Option<&'a str>,
    created_at: String,
    event_id: i64,
    event_type: &'a str,
    payload: super::task_view::Json<'a>,
    schema_version: u32,
    task_id: &'a str,
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn row(event_id: i64, payload_json: &str) -> EventRow {
        EventRow {
            event_id,
            task_id: "agt_1".into(),
            event_type: "provider.message".into(),
            payload_json: payload_json.into(),
            created_at: 1_767_225_600_000,
        }
    }

    #[test]
    fn a_page_is_the_envelope_of_each_event_in_sorted_keys() {
        // A payload goes in as the bridge stored it (written from a JSON tree: keys sorted).
        let rows = [row(7, r#"{"n":[1,2],"text":"hi \"there\""}"#), row(9, "not json")];
        let text = render("agt_1", Some("corr-1"), "running", 3, &rows);
        let page: Value = serde_json::from_str(text.get()).expect("a page is JSON");
        let when = rfc3339(1_767_225_600_000);
        let event = |id: i64, payload: Value| {
            json!({
                "correlation_id": "corr-1", "created_at": when, "event_id": id,
                "event_type": "provider.message", "payload": payload, "schema_version": 1,
                "task_id": "agt_1",
            })
        };
        assert_eq!(
            page,
            json!({
                "correlation_id": "corr-1",
                // A payload that is not JSON (never stored by this bridge) reads as null.
                "events": [event(7, json!({"text": "hi \"there\"", "n": [1, 2]})), event(9, Value::Null)],
                "next_after_event_id": 9,
                "status": "running",
                "task_id": "agt_1",
            })
        );
        // The same text a JSON tree would give: the keys in sorted order, nothing else added.
        assert_eq!(text.get(), serde_json::to_string(&page).expect("write"));
    }

    #[test]
    fn an_empty_page_keeps_the_cursor() {
        let text = render("agt_1", None, "succeeded", 42, &[]);
        let page: Value = serde_json::from_str(text.get()).expect("a page is JSON");
        assert_eq!(
            page,
            json!({ "correlation_id": null, "events": [], "next_after_event_id": 42,
                    "status": "succeeded", "task_id": "agt_1" })
        );
    }
}
