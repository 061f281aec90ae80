//! The catalog of every `.env` key the project reads, and of the ServerFS keys it tolerates.
//!
//! [`KEYS`] is the single source for key names, defaults and meanings: the validator in
//! [`super::env`] looks keys up here, and `.env.example` and `docs/configuration.md` are
//! rendered from this table (and checked against it).
//! Per-slot keys are written with the placeholder `NN` (`WORKDIR_NN_ALIAS`,
//! `SERVERFS_NOTIFY_NN_URL`) and exist for the slots `01` to their family's count.

/// How many `WORKDIR_NN_*` slots there are.
pub const SLOT_COUNT: u8 = 16;

/// The prefix every per-slot key starts with, before its two-digit slot number.
pub const SLOT_PREFIX: &str = "WORKDIR_";

/// How many `SERVERFS_NOTIFY_NN_*` notification targets there are.
pub const NOTIFY_COUNT: u8 = 8;

/// A family of numbered keys: workdirs, notification targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotFamily {
    /// What the key's name starts with, `NN` included (`WORKDIR_NN_`).
    pub placeholder: &'static str,
    /// What goes before the two digits (`WORKDIR_`).
    pub prefix: &'static str,
    /// Slots `01` to this.
    pub count: u8,
    /// What a slot is, for messages ("workdir slots").
    pub what: &'static str,
}

/// The families, workdirs first.
pub const FAMILIES: [SlotFamily; 2] = [
    SlotFamily { placeholder: "WORKDIR_NN_", prefix: SLOT_PREFIX, count: SLOT_COUNT, what: "workdir slots" },
    SlotFamily {
        placeholder: "SERVERFS_NOTIFY_NN_",
        prefix: "SERVERFS_NOTIFY_",
        count: NOTIFY_COUNT,
        what: "notification targets",
    },
];

/// The part of the project a key belongs to; `.env.example` is laid out by group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// Where the bridge keeps its socket, locks and state.
    Paths,
    /// Who may connect to the bridge, and whether it may run as root.
    Identity,
    /// Task lifecycle limits and result sizes.
    Lifecycle,
    /// The global agent policy that workdirs inherit.
    Policy,
    /// How `mcp-front` listens and reaches the bridge.
    Front,
    /// How `mcp-front` callers are authenticated.
    Auth,
    /// How `/mcp-oauth` callers are authenticated: the identity provider and the role mapping.
    OAuth,
    /// How compose runs the front's container (`compose.yml` and its overlays).
    Compose,
    /// The local web board.
    Board,
    /// Outbound notifications (`SERVERFS_NOTIFY_NN_*`).
    Notify,
    /// Where the agent CLIs live.
    Runtimes,
    /// Logging.
    Logging,
    /// One configured work directory (`WORKDIR_NN_*`).
    Workdir,
    /// ServerFS settings that agent-bridge accepts and ignores.
    ServerFs,
}

/// Whether agent-bridge uses a key or only tolerates it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Owner {
    /// Read by the bridge, `mcp-front` or the board.
    Ours,
    /// A ServerFS key: accepted so a ServerFS `.env` carries over, and reported as ignored.
    ServerFsIgnored,
}

/// One key of the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeySpec {
    /// The key's name; per-slot keys carry `NN` where the slot number goes.
    pub name: &'static str,
    /// The value used when the key is absent or empty, as written in `.env.example`.
    pub default: Option<&'static str>,
    /// The part of the project the key belongs to.
    pub group: Group,
    /// One line saying what the key does.
    pub meaning: &'static str,
    /// Whether the project uses the key or only tolerates it.
    pub owner: Owner,
}

impl KeySpec {
    /// The family of numbered keys this key belongs to, if any.
    pub fn family(&self) -> Option<&'static SlotFamily> {
        FAMILIES.iter().find(|f| self.name.starts_with(f.placeholder))
    }

    /// Whether this key exists once per slot (a workdir, a notification target).
    pub fn is_per_slot(&self) -> bool {
        self.family().is_some()
    }

    /// The key's name for one slot (`WORKDIR_03_ALIAS`); global keys return their name.
    pub fn name_for_slot(&self, slot: u8) -> String {
        match self.family() {
            Some(f) => format!("{}{slot:02}_{}", f.prefix, &self.name[f.placeholder.len()..]),
            None => self.name.to_owned(),
        }
    }
}

/// The name of a notification target's key: `notify_key(2, "URL")` is `SERVERFS_NOTIFY_02_URL`.
pub fn notify_key(slot: u8, suffix: &str) -> String {
    format!("{}{slot:02}_{suffix}", FAMILIES[1].prefix)
}

/// The name of a per-slot key: `slot_key(3, "ALIAS")` is `WORKDIR_03_ALIAS`.
pub fn slot_key(slot: u8, suffix: &str) -> String {
    format!("{SLOT_PREFIX}{slot:02}_{suffix}")
}

const fn ours(name: &'static str, default: Option<&'static str>, group: Group, meaning: &'static str) -> KeySpec {
    KeySpec { name, default, group, meaning, owner: Owner::Ours }
}

const fn serverfs(name: &'static str, meaning: &'static str) -> KeySpec {
    KeySpec { name, default: None, group: Group::ServerFs, meaning, owner: Owner::ServerFsIgnored }
}

/// Every key the project knows, ours first, in `.env.example` order.
pub static KEYS: &[KeySpec] = &[
    ours(
        "SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR",
        Some("~/.local/share/agent-bridge/runtime/socket"),
        Group::Paths,
        "Directory of the bridge's socket (bridge.sock); absolute or ~/.",
    ),
    ours(
        "SERVERFS_AGENT_LOCK_HOST_DIR",
        Some("~/.local/share/agent-bridge/runtime/locks"),
        Group::Paths,
        "Directory of the writer-lease lock files, one per workdir; absolute or ~/.",
    ),
    ours(
        "SERVERFS_AGENT_BRIDGE_STATE_DIR",
        Some("~/.local/state/agent-bridge"),
        Group::Paths,
        "Directory of the task store, result spool and instance lock; absolute or ~/.",
    ),
    ours(
        "SERVERFS_AGENT_PEER_UID",
        None,
        Group::Identity,
        "The uid allowed to connect to the bridge socket; empty means the bridge's own uid.",
    ),
    ours(
        "SERVERFS_AGENT_PEER_GID",
        None,
        Group::Identity,
        "The gid allowed to connect to the bridge socket; empty means the bridge's own gid.",
    ),
    ours("SERVERFS_AGENT_ALLOW_ROOT", Some("false"), Group::Identity, "Let the bridge run as root; leave false."),
    ours(
        "SERVERFS_AGENT_TASK_TIMEOUT_SECONDS",
        Some("7200"),
        Group::Lifecycle,
        "Task timeout: the longest a task may live, in seconds.",
    ),
    ours(
        "SERVERFS_AGENT_INTERACTION_TIMEOUT_SECONDS",
        Some("1800"),
        Group::Lifecycle,
        "Interaction timeout: how long one approval or question may wait, in seconds.",
    ),
    ours(
        "SERVERFS_AGENT_MAX_ACTIVE_TASKS",
        Some("4"),
        Group::Lifecycle,
        "The most tasks that may be unfinished at once, all callers together.",
    ),
    ours(
        "SERVERFS_AGENT_MAX_EVENTS_PER_TASK",
        Some("10000"),
        Group::Lifecycle,
        "Provider events kept per task; more are dropped and counted (at most 10000000).",
    ),
    ours(
        "SERVERFS_AGENT_TASK_RETENTION_HOURS",
        Some("168"),
        Group::Lifecycle,
        "Terminal retention: how long a finished task is kept, in hours.",
    ),
    ours(
        "SERVERFS_AGENT_AUDIT_RETENTION_DAYS",
        Some("90"),
        Group::Lifecycle,
        "Audit retention: how long an audit row is kept, in days.",
    ),
    ours(
        "SERVERFS_AGENT_RESULT_SPOOL_THRESHOLD_BYTES",
        Some("262144"),
        Group::Lifecycle,
        "Results larger than this many bytes are spooled to a file (at most 8388608).",
    ),
    ours(
        "SERVERFS_AGENT_EVENT_IDLE_TIMEOUT_SECONDS",
        None,
        Group::Lifecycle,
        "Event-idle timeout: longest provider silence, human waits aside, in seconds; empty = off.",
    ),
    ours(
        "SERVERFS_AGENT_PROVIDER_RETRY_TIMEOUT_SECONDS",
        Some("120"),
        Group::Lifecycle,
        "How long a provider may keep retrying an unreachable model service before its task fails.",
    ),
    ours(
        "SERVERFS_AGENT_MODE",
        Some("disabled"),
        Group::Policy,
        "Agent mode of workdirs that set none: disabled, review or workspace-write.",
    ),
    ours(
        "SERVERFS_AGENT_RUNTIMES",
        None,
        Group::Policy,
        "Runtimes of workdirs that list none, comma-separated: codex, claude, fake.",
    ),
    ours(
        "SERVERFS_AGENT_ENABLE_FAKE_RUNTIME",
        Some("false"),
        Group::Policy,
        "Offer the scripted fake runtime, for tests only.",
    ),
    ours(
        "SERVERFS_AGENT_FAKE_EXEC",
        Some("false"),
        Group::Policy,
        "Let the fake runtime's exec: prompt run a shell command in the task, unasked: for tests only.",
    ),
    ours(
        "SERVERFS_AGENT_SANDBOX",
        Some("auto"),
        Group::Policy,
        "Task sandbox (bubblewrap namespaces): auto (where the machine allows it), required or off.",
    ),
    ours(
        "SERVERFS_AGENT_SANDBOX_HIDE",
        None,
        Group::Policy,
        "More paths the task sandbox replaces by empty directories, comma-separated, absolute or ~/.",
    ),
    ours(
        "SERVERFS_AGENT_SANDBOX_READ",
        None,
        Group::Policy,
        "Paths every task may read (its view holds only the system, its workdir and its runtime's home): comma-separated, absolute or ~/, e.g. ~/.cargo/bin,~/.rustup,~/.nvm.",
    ),
    ours(
        "SERVERFS_AGENT_SANDBOX_WRITE",
        None,
        Group::Policy,
        "Paths every task may read and write, e.g. a build cache: comma-separated, absolute or ~/.",
    ),
    ours(
        "SERVERFS_AGENT_EGRESS",
        Some("proxy"),
        Group::Policy,
        "A sandboxed task's network: proxy (its own namespace; out only through the bridge's proxy to allowed hosts), host (the host's network, shared: not recommended) or none.",
    ),
    ours(
        "SERVERFS_AGENT_EGRESS_ALLOW",
        None,
        Group::Policy,
        "Hosts every task may reach beyond its runtime's own endpoints: comma-separated host, host:port or *.domain, e.g. registry.npmjs.org,*.pypi.org.",
    ),
    ours(
        "SERVERFS_AGENT_BRANCH_PREFIX",
        Some("agent/"),
        Group::Policy,
        "What a worktree task's branch is named with, before its short id (agent/ gives agent/3f2a9c1b0d4e).",
    ),
    ours(
        "SERVERFS_AGENT_BRIDGE_SOCKET",
        None,
        Group::Front,
        "The bridge socket's path for an mcp-front on the host; empty = the socket directory's bridge.sock.",
    ),
    ours(
        "SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS",
        Some("30"),
        Group::Front,
        "Front-to-bridge RPC timeout: one call from mcp-front to the bridge, in seconds.",
    ),
    ours("SERVERFS_MCP_LISTEN", Some("127.0.0.1:8765"), Group::Front, "The address mcp-front listens on (IP:port)."),
    ours(
        "SERVERFS_MCP_MAX_CONNECTIONS",
        Some("4096"),
        Group::Front,
        "Connections mcp-front keeps open at once (fewer if descriptors are short); more get 503.",
    ),
    ours(
        "SERVERFS_MCP_MAX_INFLIGHT_REQUESTS",
        Some("512"),
        Group::Front,
        "Requests mcp-front serves at once, long polls included; more get 503 with Retry-After.",
    ),
    ours(
        "SERVERFS_MCP_ALLOWED_HOSTS",
        None,
        Group::Front,
        "Host header values mcp-front accepts besides its listen address, comma-separated.",
    ),
    ours(
        "SERVERFS_MCP_ALLOWED_ORIGINS",
        None,
        Group::Front,
        "Origin header values mcp-front accepts, comma-separated.",
    ),
    ours(
        "SERVERFS_MCP_AUTH",
        Some("bearer"),
        Group::Auth,
        "How MCP callers are identified: bearer (API keys) or none (tunnel mode).",
    ),
    ours(
        "SERVERFS_MCP_TUNNEL_PRINCIPAL",
        Some("tunnel"),
        Group::Auth,
        "In tunnel mode, the principal every caller becomes.",
    ),
    ours(
        "SERVERFS_MCP_TUNNEL_ROLE",
        Some("operator"),
        Group::Auth,
        "In tunnel mode, that principal's role: viewer or operator (never admin).",
    ),
    ours(
        "SERVERFS_MCP_TUNNEL_ALLOW_LOCAL",
        Some("false"),
        Group::Auth,
        "Allow tunnel mode while the front listens on (or is published to) a loopback address.",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_ISSUER",
        None,
        Group::OAuth,
        "The identity provider's issuer URL; set with the resource to serve /mcp-oauth (empty: off).",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_RESOURCE",
        None,
        Group::OAuth,
        "The public URL of /mcp-oauth (https://host/mcp-oauth): the access tokens' audience.",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_JWKS_URL",
        None,
        Group::OAuth,
        "Where the IdP's signing keys are, when not at discovery's jwks_uri on the issuer's origin.",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_SCOPES",
        Some("agent-bridge:operator"),
        Group::OAuth,
        "The scopes a client is told to ask for (the 401's scope and the metadata's scopes_supported).",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_ROLE_PREFIX",
        Some("agent-bridge:"),
        Group::OAuth,
        "A token scope or role-claim value <prefix>viewer, <prefix>operator or <prefix>admin grants that role.",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_ROLE_CLAIM",
        None,
        Group::OAuth,
        "A claim whose values grant roles too, e.g. roles, groups or realm_access.roles (empty: scopes only).",
    ),
    ours("SERVERFS_MCP_OAUTH_ADMINS", None, Group::OAuth, "Token subjects (sub) that are admins, comma-separated."),
    ours(
        "SERVERFS_MCP_OAUTH_OPERATORS",
        None,
        Group::OAuth,
        "Token subjects (sub) that are operators, comma-separated.",
    ),
    ours("SERVERFS_MCP_OAUTH_VIEWERS", None, Group::OAuth, "Token subjects (sub) that are viewers, comma-separated."),
    ours(
        "SERVERFS_MCP_OAUTH_WORKDIRS",
        None,
        Group::OAuth,
        "The workdir aliases OAuth callers may use, comma-separated (empty or *: all).",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_LEEWAY_SECONDS",
        Some("30"),
        Group::OAuth,
        "Clock skew allowed on a token's exp and nbf, in seconds (at most 300).",
    ),
    ours(
        "SERVERFS_MCP_OAUTH_INTROSPECTION_URL",
        None,
        Group::OAuth,
        "RFC 7662 introspection endpoint for opaque (non-JWT) tokens (empty: JWTs only).",
    ),
    ours("SERVERFS_MCP_OAUTH_CLIENT_ID", None, Group::OAuth, "The client id the bridge introspects with."),
    ours("SERVERFS_MCP_OAUTH_CLIENT_SECRET", None, Group::OAuth, "That client's secret."),
    ours(
        "SERVERFS_UID",
        None,
        Group::Compose,
        "The front container's uid: the bridge user's (id -u); empty = 10001, for compose.yml alone.",
    ),
    ours(
        "SERVERFS_GID",
        None,
        Group::Compose,
        "The front container's gid: the bridge user's (id -g); empty = 10001, for compose.yml alone.",
    ),
    ours(
        "SERVERFS_PUBLIC_DOMAIN",
        None,
        Group::Compose,
        "compose.tls.yml: the public DNS name Caddy gets a certificate for (and the front accepts as Host).",
    ),
    ours(
        "SERVERFS_ACME_EMAIL",
        None,
        Group::Compose,
        "compose.tls.yml: the contact address of the certificate's ACME account.",
    ),
    ours(
        "SERVERFS_MCP_FRONT_IMAGE",
        Some("agent-bridge/mcp-front:local"),
        Group::Compose,
        "The image compose runs the front from, and the tag it gives a build of mcp-front/Dockerfile.",
    ),
    ours(
        "SERVERFS_MCP_PUBLISH",
        None,
        Group::Compose,
        "Where compose.publish.yml publishes the front on the host (IP:port); empty = not published.",
    ),
    ours(
        "SERVERFS_BOARD_ADDR",
        Some("127.0.0.1:7878"),
        Group::Board,
        "The address the local web board listens on (IP:port, loopback only; port 0 picks a free one).",
    ),
    ours(
        "SERVERFS_BOARD_SOCKET",
        None,
        Group::Board,
        "Serve the board on this Unix socket (0600) instead of TCP, for ssh -L; absolute or ~/.",
    ),
    ours(
        "SERVERFS_BOARD_PUBLIC_URL",
        None,
        Group::Board,
        "The board as you reach it from a phone (tunnel, tailnet, proxy), for notification links; https://.",
    ),
    ours(
        "SERVERFS_NOTIFY_RETRY_BASE_MS",
        Some("5000"),
        Group::Notify,
        "The first retry delay of a failed delivery, in ms; it doubles up to 1 h, for 24 h.",
    ),
    ours(
        "SERVERFS_NOTIFY_NN_URL",
        None,
        Group::Notify,
        "Where target NN is sent: a webhook, an ntfy topic or a Slack incoming-webhook URL; https://.",
    ),
    ours("SERVERFS_NOTIFY_NN_KIND", None, Group::Notify, "The target's format: webhook, ntfy or slack."),
    ours(
        "SERVERFS_NOTIFY_NN_EVENTS",
        None,
        Group::Notify,
        "Comma-separated events to send (empty: all six, listed above).",
    ),
    ours(
        "SERVERFS_NOTIFY_NN_SECRET",
        None,
        Group::Notify,
        "webhook: the signing secret, whsec_<base64> (24-64 bytes); ntfy: an access token (optional).",
    ),
    ours(
        "SERVERFS_NOTIFY_NN_DETAILS",
        Some("summary"),
        Group::Notify,
        "summary: titles and kinds only; full: also the approval's command or the question's text.",
    ),
    ours(
        "SERVERFS_CODEX_BIN",
        None,
        Group::Runtimes,
        "Absolute path of the codex executable; empty means found on PATH.",
    ),
    ours(
        "SERVERFS_CODEX_HOME",
        Some("~/.codex"),
        Group::Runtimes,
        "Codex's home, where its sessions are kept; absolute or ~/.",
    ),
    ours(
        "SERVERFS_CLAUDE_BIN",
        None,
        Group::Runtimes,
        "Absolute path of the claude executable; empty means found on PATH.",
    ),
    ours(
        "SERVERFS_CLAUDE_CONFIG_DIR",
        None,
        Group::Runtimes,
        "Claude Code's configuration directory; empty means its own default.",
    ),
    ours(
        "SERVERFS_LOG_LEVEL",
        Some("INFO"),
        Group::Logging,
        "Log level of the bridge and of mcp-front: TRACE, DEBUG, INFO, WARNING or ERROR.",
    ),
    ours(
        "WORKDIR_NN_ALIAS",
        None,
        Group::Workdir,
        "The name callers use for this workdir; letter first, then letters, digits, _ or -.",
    ),
    ours("WORKDIR_NN_PATH", None, Group::Workdir, "The workdir's existing host directory; absolute or ~/."),
    ours("WORKDIR_NN_DESCRIPTION", None, Group::Workdir, "One line shown to callers."),
    ours(
        "WORKDIR_NN_READ_ONLY",
        Some("true"),
        Group::Workdir,
        "Whether the workdir is read-only; workspace-write needs false.",
    ),
    ours(
        "WORKDIR_NN_AGENT_MODE",
        None,
        Group::Workdir,
        "This workdir's agent mode; empty inherits SERVERFS_AGENT_MODE.",
    ),
    ours(
        "WORKDIR_NN_AGENT_RUNTIMES",
        None,
        Group::Workdir,
        "This workdir's runtimes; empty inherits SERVERFS_AGENT_RUNTIMES.",
    ),
    ours(
        "WORKDIR_NN_SANDBOX_READ",
        None,
        Group::Workdir,
        "Paths this workdir's tasks may read beyond SERVERFS_AGENT_SANDBOX_READ; comma-separated, absolute or ~/.",
    ),
    ours(
        "WORKDIR_NN_SANDBOX_WRITE",
        None,
        Group::Workdir,
        "Paths this workdir's tasks may read and write beyond SERVERFS_AGENT_SANDBOX_WRITE.",
    ),
    ours(
        "WORKDIR_NN_EGRESS_ALLOW",
        None,
        Group::Workdir,
        "Hosts this workdir's tasks may reach beyond SERVERFS_AGENT_EGRESS_ALLOW.",
    ),
    ours(
        "WORKDIR_NN_AGENT_ISOLATION",
        Some("in_place"),
        Group::Workdir,
        "Where this workdir's writer tasks work unless a task says: in_place (the checkout itself, one writer at a time) or worktree (a git worktree of their own, on their own branch).",
    ),
    serverfs("SERVERFS_IMAGE", "The ServerFS container image."),
    serverfs("SERVERFS_AGENT_BRIDGE_ENABLED", "ServerFS's master switch for its own bridge."),
    serverfs("SERVERFS_AGENT_USE_PROXY", "ServerFS agent egress through its shared proxy."),
    serverfs("SERVERFS_CODEX_AUTOSTART", "ServerFS starting the Codex app-server daemon on demand."),
    serverfs("SERVERFS_CODEX_REQUEST_TIMEOUT_SECONDS", "ServerFS's per-request Codex timeout."),
    serverfs("SERVERFS_CLAUDE_PROBE_TIMEOUT_SECONDS", "ServerFS's Claude version probe timeout."),
    serverfs("SERVERFS_QODER_BIN", "The Qoder executable; Qoder is not supported."),
    serverfs("SERVERFS_QODER_PROBE_TIMEOUT_SECONDS", "ServerFS's Qoder version probe timeout."),
    serverfs("SERVERFS_JEV_API_KEY", "ServerFS's Jev advisor key."),
    serverfs("SERVERFS_JEV_USE_PROXY", "ServerFS's Jev egress through its shared proxy."),
    serverfs("SERVERFS_MAX_READ_BYTES", "ServerFS file tool limit."),
    serverfs("SERVERFS_MAX_READ_LINES", "ServerFS file tool limit."),
    serverfs("SERVERFS_DEFAULT_LIST_LIMIT", "ServerFS file tool limit."),
    serverfs("SERVERFS_MAX_LIST_ENTRIES", "ServerFS file tool limit."),
    serverfs("SERVERFS_DEFAULT_SEARCH_RESULTS", "ServerFS file tool limit."),
    serverfs("SERVERFS_MAX_SEARCH_RESULTS", "ServerFS file tool limit."),
    serverfs("SERVERFS_MAX_WALK_ENTRIES", "ServerFS file tool limit."),
    serverfs("SERVERFS_SEARCH_TIMEOUT_SECONDS", "ServerFS file tool limit."),
    serverfs("SERVERFS_SEARCH_MAX_FILE_BYTES", "ServerFS file tool limit."),
    serverfs("SERVERFS_ALLOW_HIDDEN", "ServerFS file tool policy."),
    serverfs("SERVERFS_EXTRA_DENY_GLOBS", "ServerFS file tool policy."),
    serverfs("SERVERFS_DISABLE_DEFAULT_DENY", "ServerFS file tool policy."),
    serverfs("SERVERFS_MAX_WRITE_BYTES", "ServerFS file tool limit."),
    serverfs("SERVERFS_MAX_EDITS_PER_CALL", "ServerFS file tool limit."),
    serverfs("SERVERFS_BINARY_TRANSFER_ENABLED", "ServerFS file tool policy."),
    serverfs("SERVERFS_MAX_BINARY_TRANSFER_BYTES", "ServerFS file tool limit."),
    serverfs("SERVERFS_FILE_INGRESS_ENABLED", "ServerFS file ingress sidecar."),
    serverfs("SERVERFS_FILE_INGRESS_TIMEOUT_SECONDS", "ServerFS file ingress sidecar."),
    serverfs("SERVERFS_FILE_INGRESS_ALLOWED_HOSTS", "ServerFS file ingress sidecar."),
    serverfs("SERVERFS_FILE_INGRESS_ALLOW_OPENAI_BLOB_HOSTS", "ServerFS file ingress sidecar."),
    serverfs("SERVERFS_FILE_INGRESS_FETCH_TIMEOUT_SECONDS", "ServerFS file ingress sidecar."),
    serverfs("SERVERFS_FILE_INGRESS_MAX_REDIRECTS", "ServerFS file ingress sidecar."),
    serverfs("SERVERFS_OPENAI_TUNNEL_USE_PROXY", "ServerFS's tunnel egress through its shared proxy."),
    serverfs("SERVERFS_PROXY_HOST", "ServerFS's shared proxy."),
    serverfs("SERVERFS_PROXY_PORT", "ServerFS's shared proxy."),
    serverfs("SERVERFS_PROXY_USERNAME", "ServerFS's shared proxy."),
    serverfs("SERVERFS_PROXY_PASSWORD", "ServerFS's shared proxy."),
    serverfs("WORKDIR_NN_ALLOW_HIDDEN", "ServerFS per-workdir file tool policy."),
    serverfs("WORKDIR_NN_DISABLE_DEFAULT_DENY", "ServerFS per-workdir file tool policy."),
    serverfs("WORKDIR_NN_EXTRA_DENY_GLOBS", "ServerFS per-workdir file tool policy."),
    serverfs("WORKDIR_NN_MAX_READ_BYTES", "ServerFS per-workdir file tool limit."),
    serverfs("WORKDIR_NN_MAX_READ_LINES", "ServerFS per-workdir file tool limit."),
    serverfs("WORKDIR_NN_MAX_WRITE_BYTES", "ServerFS per-workdir file tool limit."),
    serverfs("WORKDIR_NN_BINARY_TRANSFER_ENABLED", "ServerFS per-workdir file tool policy."),
    serverfs("WORKDIR_NN_MAX_BINARY_TRANSFER_BYTES", "ServerFS per-workdir file tool limit."),
];

/// A key found in the catalog.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KnownKey {
    /// The catalog entry.
    pub spec: &'static KeySpec,
    /// The slot number for a per-slot key.
    pub slot: Option<u8>,
}

/// Looks a key up in the catalog, per-slot keys included (exact, case-sensitive).
pub fn lookup(key: &str) -> Option<KnownKey> {
    if let Some((family, slot, suffix)) = split_slot_key(key) {
        if !(1..=family.count).contains(&slot) {
            return None;
        }
        return KEYS
            .iter()
            .find(|spec| spec.name.strip_prefix(family.placeholder) == Some(suffix))
            .map(|spec| KnownKey { spec, slot: Some(slot) });
    }
    KEYS.iter().find(|spec| !spec.is_per_slot() && spec.name == key).map(|spec| KnownKey { spec, slot: None })
}

/// Splits `WORKDIR_07_ALIAS` into `(workdirs, 7, "ALIAS")`; anything else is `None`.
fn split_slot_key(key: &str) -> Option<(&'static SlotFamily, u8, &str)> {
    FAMILIES.iter().find_map(|family| {
        let rest = key.strip_prefix(family.prefix)?;
        let (digits, suffix) = rest.split_at_checked(2)?;
        let suffix = suffix.strip_prefix('_')?;
        if !digits.bytes().all(|b| b.is_ascii_digit()) || suffix.is_empty() {
            return None;
        }
        digits.parse().ok().map(|slot| (family, slot, suffix))
    })
}

/// Whether a key lies in the project's namespace (`SERVERFS_*` or `WORKDIR_*`, any case), so
/// that an unknown one is a typo rather than another program's setting.
pub fn in_our_namespace(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    upper.starts_with("SERVERFS_") || upper.starts_with(SLOT_PREFIX)
}

/// Whether a key's value must never be shown: its name mentions a key, secret, token or password.
pub fn is_secret(key: &str) -> bool {
    let upper = key.to_ascii_uppercase();
    ["KEY", "SECRET", "TOKEN", "PASSWORD", "PASSWD"].iter().any(|word| upper.contains(word))
}

/// Explains why an unknown key of our namespace is refused, with the closest known key when
/// one is within two edits.
pub fn unknown_key_message(key: &str) -> String {
    if let Some((family, slot, suffix)) = split_slot_key(key) {
        let known_suffix = KEYS.iter().any(|spec| spec.name.strip_prefix(family.placeholder) == Some(suffix));
        if known_suffix && !(1..=family.count).contains(&slot) {
            return format!("unknown key: {} are numbered 01 to {:02}", family.what, family.count);
        }
    }
    match suggest(key) {
        Some(best) => format!("unknown key (did you mean {best}?)"),
        None => "unknown key (not a setting of agent-bridge or ServerFS)".to_owned(),
    }
}

/// The known key closest to `key` (case-insensitively), if it is at most two edits away.
pub fn suggest(key: &str) -> Option<String> {
    let wanted = key.to_ascii_uppercase();
    let mut best: Option<(usize, String)> = None;
    for spec in KEYS {
        let names: Vec<String> = if let Some(family) = spec.family() {
            (1..=family.count).map(|slot| spec.name_for_slot(slot)).collect()
        } else {
            vec![spec.name.to_owned()]
        };
        for name in names {
            let distance = levenshtein(wanted.as_bytes(), name.as_bytes());
            if distance <= 2 && best.as_ref().is_none_or(|(d, _)| distance < *d) {
                best = Some((distance, name));
            }
        }
    }
    best.map(|(_, name)| name)
}

/// The edit distance between two byte strings (insertions, deletions, substitutions).
fn levenshtein(a: &[u8], b: &[u8]) -> usize {
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, &ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = std::collections::HashSet::new();
        for spec in KEYS {
            assert!(seen.insert(spec.name), "{} appears twice", spec.name);
            assert!(in_our_namespace(spec.name), "{} is outside our namespace", spec.name);
            assert!(spec.meaning.ends_with('.'), "{}'s meaning is not a sentence", spec.name);
            assert!(
                spec.name.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_'),
                "{} is not UPPER_SNAKE",
                spec.name
            );
        }
    }

    #[test]
    fn lookup_finds_global_and_slot_keys() {
        let key = lookup("SERVERFS_AGENT_MODE").expect("global key");
        assert_eq!(key.slot, None);
        assert_eq!(key.spec.default, Some("disabled"));
        let key = lookup("WORKDIR_16_AGENT_RUNTIMES").expect("slot key");
        assert_eq!(key.slot, Some(16));
        assert_eq!(key.spec.owner, Owner::Ours);
        let key = lookup("WORKDIR_01_MAX_READ_BYTES").expect("ignored slot key");
        assert_eq!(key.spec.owner, Owner::ServerFsIgnored);
        assert!(lookup("WORKDIR_17_ALIAS").is_none());
        assert!(lookup("WORKDIR_00_ALIAS").is_none());
        assert!(lookup("WORKDIR_NN_ALIAS").is_none());
        assert!(lookup("WORKDIR_1_ALIAS").is_none());
        assert!(lookup("serverfs_agent_mode").is_none());
    }

    #[test]
    fn suggestions_stay_within_two_edits() {
        assert_eq!(suggest("SERVERFS_AGENT_MODES").as_deref(), Some("SERVERFS_AGENT_MODE"));
        assert_eq!(suggest("WORKDIR_01_ALIAZ").as_deref(), Some("WORKDIR_01_ALIAS"));
        assert_eq!(suggest("serverfs_log_level").as_deref(), Some("SERVERFS_LOG_LEVEL"));
        assert_eq!(suggest("SERVERFS_SOMETHING_ELSE"), None);
        assert!(unknown_key_message("WORKDIR_17_ALIAS").contains("01 to 16"));
    }

    #[test]
    fn levenshtein_counts_edits() {
        assert_eq!(levenshtein(b"", b""), 0);
        assert_eq!(levenshtein(b"abc", b""), 3);
        assert_eq!(levenshtein(b"kitten", b"sitting"), 3);
        assert_eq!(levenshtein(b"MODE", b"MDOE"), 2);
    }

    #[test]
    fn secret_looking_names_are_recognized() {
        for name in ["SERVERFS_JEV_API_KEY", "SERVERFS_PROXY_PASSWORD", "GITHUB_TOKEN", "MY_SECRET"] {
            assert!(is_secret(name), "{name}");
        }
        assert!(!is_secret("SERVERFS_AGENT_MODE"));
    }
}
