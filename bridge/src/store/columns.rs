//! How the domain's closed vocabularies are stored: each enum is a `TEXT` column holding its
//! wire name (the same strings as before the enums existed, so no migration), written with
//! `ToSql` and read with `FromSql`. A value this build does not know is a conversion error
//! naming the vocabulary and the value (rusqlite adds the column index), never a panic.

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};

use super::facts::FactKind;
use super::outbox::{DeliveryState, MessageKind};
use crate::config::Role;
use crate::model::{
    AuditOutcome, InteractionKind, InteractionStatus, PlanStatus, ResultStorage, StepStatus, TaskStatus, WorktreeState,
};

/// Implements `ToSql`/`FromSql` for a type with `as_str` and a `parse` returning `Option`.
macro_rules! text_column {
    ($($ty:ty => $what:expr),+ $(,)?) => {$(
        impl ToSql for $ty {
            fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
                Ok(ToSqlOutput::from(self.as_str()))
            }
        }

        impl FromSql for $ty {
            fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
                let text = value.as_str()?;
                <$ty>::parse(text).ok_or_else(|| unknown($what, text))
            }
        }
    )+};
}

text_column! {
    TaskStatus => TaskStatus::WHAT,
    PlanStatus => PlanStatus::WHAT,
    StepStatus => StepStatus::WHAT,
    InteractionKind => InteractionKind::WHAT,
    InteractionStatus => InteractionStatus::WHAT,
    ResultStorage => ResultStorage::WHAT,
    AuditOutcome => AuditOutcome::WHAT,
    WorktreeState => WorktreeState::WHAT,
    DeliveryState => DeliveryState::WHAT,
    MessageKind => MessageKind::WHAT,
    FactKind => FactKind::WHAT,
    Role => "role",
}

fn unknown(what: &str, text: &str) -> FromSqlError {
    FromSqlError::Other(format!("unknown {what} {text:?} in the database").into())
}

#[cfg(test)]
#[path = "columns_tests.rs"]
mod tests;
