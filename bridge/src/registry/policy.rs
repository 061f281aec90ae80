//! Access policy, as pure functions: which role and surface see which capability.
//!
//! A capability outside the caller's role or surface is hidden from the list and answers
//! exactly like a tool that does not exist, so names cannot be probed.

use serde_json::{Value, json};

use crate::config::Role;
use bridge_proto::methods::Surface;

/// Whether a capability reads or changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Reads only.
    Read,
    /// Changes state.
    Write,
}

impl Scope {
    /// Wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Write => "write",
        }
    }
}

/// MCP tool annotations (hints for the calling model and client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Annotations {
    /// Does not change anything.
    pub read_only: bool,
    /// May destroy or overwrite work.
    pub destructive: bool,
    /// Repeating the call has no further effect.
    pub idempotent: bool,
    /// Reaches beyond the bridge (an agent acting on a workdir).
    pub open_world: bool,
}

impl Annotations {
    /// A read-only, idempotent, closed-world capability.
    pub const READ: Annotations =
        Annotations { read_only: true, destructive: false, idempotent: true, open_world: false };

    /// The MCP `annotations` object.
    pub fn to_json(self) -> Value {
        json!({
            "readOnlyHint": self.read_only,
            "destructiveHint": self.destructive,
            "idempotentHint": self.idempotent,
            "openWorldHint": self.open_world,
        })
    }
}

/// Whether a caller with `role` on `surface` sees a capability that needs `min_role` and
/// exists on `surfaces`. Roles are ordered `viewer < operator < admin`.
pub fn can_see(role: Role, min_role: Role, surface: Surface, surfaces: &[Surface]) -> bool {
    role >= min_role && surfaces.contains(&surface)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_ordered_and_surfaces_gate() {
        let all = [Surface::Mcp, Surface::Cli, Surface::Board];
        assert!(can_see(Role::Viewer, Role::Viewer, Surface::Mcp, &all));
        assert!(!can_see(Role::Viewer, Role::Operator, Surface::Mcp, &all));
        assert!(can_see(Role::Admin, Role::Operator, Surface::Mcp, &all));
        assert!(!can_see(Role::Operator, Role::Admin, Surface::Cli, &all));
        assert!(!can_see(Role::Admin, Role::Admin, Surface::Mcp, &[Surface::Cli, Surface::Board]));
        assert_eq!(Role::parse("ADMIN"), Some(Role::Admin));
        assert_eq!(Role::parse("Operator"), Some(Role::Operator));
        assert_eq!(Role::parse("root"), None);
    }
}
