//! A configuration's refusals: every problem found, each naming the key or field at fault.
//!
//! Validation never stops at the first problem; it collects [`Refusal`]s and returns them all,
//! so `agent-bridge config check` can explain everything in one run.

use std::fmt;

/// One problem found in a configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The key (or JSON field) at fault, when one is.
    pub key: Option<String>,
    /// What is wrong, and how to fix it when that is not obvious.
    pub message: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{key}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Every refusal found in a configuration, in the order found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Refusals(pub Vec<Refusal>);

impl Refusals {
    /// Refusals holding one refusal.
    pub fn single(key: Option<&str>, message: impl Into<String>) -> Refusals {
        let mut refusals = Refusals::default();
        refusals.push(key, message);
        refusals
    }

    /// Records one refusal.
    pub fn push(&mut self, key: Option<&str>, message: impl Into<String>) {
        self.0.push(Refusal { key: key.map(str::to_owned), message: message.into() });
    }

    /// Whether nothing was refused.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The refusals, in the order found.
    pub fn iter(&self) -> std::slice::Iter<'_, Refusal> {
        self.0.iter()
    }

    /// `Ok(value)` when nothing was refused, else the refusals.
    pub fn into_result<T>(self, value: T) -> Result<T, Refusals> {
        if self.is_empty() { Ok(value) } else { Err(self) }
    }
}

impl fmt::Display for Refusals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (index, refusal) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{refusal}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusals {}

impl<'a> IntoIterator for &'a Refusals {
    type Item = &'a Refusal;
    type IntoIter = std::slice::Iter<'a, Refusal>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}
