//! What every client command shares: one capability call on surface `cli` as the local
//! operator, the [`Failure`] it may end in, and how its answer is shown (JSON or text).

use serde_json::Value;

use super::output;
use bridge_proto::client::{CallError, Client};
use bridge_proto::methods::{self, CallParams, Surface};

pub(super) use super::output::{cell as s, listing};

/// Why a client command failed; `client::run` maps it to the exit code.
pub(super) enum Failure {
    /// Bad usage.
    Usage(String),
    /// A refused or failed call.
    Call(CallError),
    /// The command said what failed already.
    Quiet,
}

impl From<CallError> for Failure {
    fn from(e: CallError) -> Failure {
        Failure::Call(e)
    }
}

/// Calls the capability `name` with `arguments` (an object) as the local operator.
pub(super) async fn call(client: &Client, name: &str, arguments: Value) -> Result<Value, Failure> {
    let Value::Object(arguments) = arguments else { return Err(Failure::Usage("arguments must be an object".into())) };
    let params = CallParams {
        credential: None,
        surface: Surface::Cli,
        path: Default::default(),
        client: None,
        name: name.to_owned(),
        arguments,
    };
    let Value::Object(params) = serde_json::to_value(params).unwrap_or_default() else {
        return Err(Failure::Usage("bad params".into()));
    };
    Ok(client.call(methods::CAPABILITIES_CALL, params).await?)
}

/// Prints `value` as JSON in `--json` mode, else the text `text` makes of it.
pub(super) fn show(json_mode: bool, value: &Value, text: impl FnOnce(&Value) -> String) {
    if json_mode {
        output::json(value);
    } else {
        output::line(&text(value));
    }
}
