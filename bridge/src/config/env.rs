//! `.env` → [`BridgeConfig`] validation (stub, replaced by the config work).

use super::BridgeConfig;

/// Every refusal found in a configuration.
#[derive(Debug, Default)]
pub struct Refusals(pub Vec<String>);

impl std::fmt::Display for Refusals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0.join("; "))
    }
}

/// Re-checks the rules a loaded JSON config must satisfy.
pub fn check_rules(_config: &BridgeConfig) -> Result<(), Refusals> {
    Ok(())
}
