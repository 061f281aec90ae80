//! The front's settings: command-line flags, then the process environment, then an optional
//! `.env`, then the defaults. This is the only module that reads environment variables.
//!
//! The keys are the bridge's (`SERVERFS_MCP_LISTEN`, `SERVERFS_AGENT_BRIDGE_SOCKET`,
//! `SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS`, `SERVERFS_MCP_ALLOWED_HOSTS`,
//! `SERVERFS_MCP_ALLOWED_ORIGINS`, `SERVERFS_MCP_MAX_CONNECTIONS`, `SERVERFS_MCP_MAX_INFLIGHT_REQUESTS`,
//! `SERVERFS_LOG_LEVEL`), so one `.env` drives both processes; the bridge's
//! `config check` validates the whole file, the front reads only these.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The HTTP server's bounds (connections, requests in flight, timeouts).
pub use bridge_httpd::Limits as HttpLimits;

/// The default listen address (loopback).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8765";
/// The default front-to-bridge timeout for one call, in seconds.
pub const DEFAULT_BRIDGE_TIMEOUT_SECONDS: u64 = 30;
/// The largest request body accepted (the bridge's line limit: a larger call could not be
/// forwarded anyway).
pub const MAX_BODY_BYTES: usize = bridge_proto::MAX_LINE_BYTES;
/// The most connections or requests in flight a setting may name.
pub const MAX_HTTP_CAP: u64 = 1_000_000;

/// mcp-front: the stateless MCP server in front of agent-bridge.
#[derive(Debug, Clone, Default, Parser)]
#[command(name = "mcp-front", version, about)]
pub struct Args {
    /// Without a command, serve.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// The address to listen on, IP:port [env: SERVERFS_MCP_LISTEN; default 127.0.0.1:8765].
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// The bridge socket [env: SERVERFS_AGENT_BRIDGE_SOCKET; default: the bridge's default
    /// socket under SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR or ~/.local/share/agent-bridge].
    #[arg(long)]
    pub bridge_socket: Option<PathBuf>,
    /// Seconds one call to the bridge may take [env: SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS; 30].
    #[arg(long)]
    pub bridge_timeout_seconds: Option<u64>,
    /// Extra accepted Host values, comma-separated [env: SERVERFS_MCP_ALLOWED_HOSTS].
    #[arg(long)]
    pub allowed_hosts: Option<String>,
    /// Accepted Origin values, comma-separated [env: SERVERFS_MCP_ALLOWED_ORIGINS].
    #[arg(long)]
    pub allowed_origins: Option<String>,
    /// Connections open at once; the next is answered 503 [env: SERVERFS_MCP_MAX_CONNECTIONS;
    /// 4096, lowered to fit the descriptor limit].
    #[arg(long)]
    pub max_connections: Option<u64>,
    /// Requests in flight at once (long polls included); the next is answered 503
    /// [env: SERVERFS_MCP_MAX_INFLIGHT_REQUESTS; 512].
    #[arg(long)]
    pub max_inflight_requests: Option<u64>,
    /// For tests only: the header, body and idle timeouts in milliseconds, `H,B,I`
    /// [default 10000,30000,60000].
    #[arg(long, hide = true)]
    pub test_http_timeouts_ms: Option<String>,
    /// Read the settings from this `.env` (the environment and the flags win over it).
    #[arg(long, global = true)]
    pub env_file: Option<PathBuf>,
    /// Refuse to start when the bridge socket's directory does not exist: in a container it
    /// must be a mount of the bridge's socket directory, and without it every call would fail
    /// (the image's default command sets this).
    #[arg(long)]
    pub require_bridge_dir: bool,
}

/// What to do instead of serving.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Ask a running front's `/healthz` (the address it listens on, or `--addr`); exit 0 when
    /// it answers 200 (the bridge answers), 1 otherwise. For container health checks, which
    /// have no shell or HTTP client to call.
    Healthcheck {
        /// The front to ask, IP:port [default: the listen address; an unspecified IP such as
        /// 0.0.0.0 is asked on loopback].
        #[arg(long)]
        addr: Option<SocketAddr>,
    },
}

/// The validated settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The bridge socket.
    pub bridge_socket: PathBuf,
    /// The bound of one front-to-bridge call.
    pub bridge_timeout: Duration,
    /// Host values accepted besides the loopback names and the listen address.
    pub allowed_hosts: Vec<String>,
    /// Origin values accepted (a request without Origin is always accepted).
    pub allowed_origins: Vec<String>,
    /// Whether the `.env` or the environment says the bridge runs in tunnel mode
    /// (`SERVERFS_MCP_AUTH=none`); only used to warn, the bridge decides.
    pub tunnel_mode: bool,
    /// Refuse to start when the socket's directory is missing (`--require-bridge-dir`).
    pub require_bridge_dir: bool,
    /// The `tracing` level from `SERVERFS_LOG_LEVEL` (`info`); `MCP_FRONT_LOG` overrides it.
    pub log_level: &'static str,
    /// The HTTP server's bounds: the caps from `SERVERFS_MCP_MAX_CONNECTIONS` and
    /// `SERVERFS_MCP_MAX_INFLIGHT_REQUESTS`, the rest [`HttpLimits::FRONT`].
    pub http: HttpLimits,
}

/// A setting that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The `.env` could not be read.
    #[error("cannot read {path}: {message}")]
    EnvFile {
        /// The file.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// A value is invalid.
    #[error("{key}: {message}")]
    Invalid {
        /// The key or flag.
        key: &'static str,
        /// Why (never the value of a secret; none of these keys is one).
        message: String,
    },
}

impl Config {
    /// Builds the configuration from flags, the process environment and the `.env`.
    pub fn load(args: Args) -> Result<Config, ConfigError> {
        let (environment, file) = sources(&args)?;
        let config = Config::resolve(args, &environment, &file)?;
        if config.require_bridge_dir {
            config.check_bridge_dir()?;
        }
        Ok(config)
    }

    /// With `--require-bridge-dir`: the socket's directory must exist. In a container that
    /// directory is the bind mount of the bridge's socket directory (`compose.agent.yml`);
    /// when it is missing the front was started without it, the documented compose trap.
    pub fn check_bridge_dir(&self) -> Result<(), ConfigError> {
        let dir = self.bridge_socket.parent().unwrap_or(std::path::Path::new("/"));
        if dir.is_dir() {
            return Ok(());
        }
        Err(ConfigError::Invalid {
            key: "--require-bridge-dir",
            message: format!(
                "the bridge socket's directory {} does not exist, so no call could reach the bridge: mount the \
                 bridge's socket directory there (with compose: add the agent overlay, \
                 `-f compose.yml -f compose.agent.yml`, or keep COMPOSE_FILE=compose.yml:compose.agent.yml in .env)",
                dir.display()
            ),
        })
    }

    /// The listen address alone, from the same sources as [`Config::load`] (for `healthcheck`,
    /// which needs nothing else).
    pub fn load_listen(args: &Args) -> Result<SocketAddr, ConfigError> {
        let (environment, file) = sources(args)?;
        Config::resolve_listen(args, &environment, &file)
    }

    /// The address to listen on: `--listen`, else `SERVERFS_MCP_LISTEN` from `environment`
    /// or `file`, else the default.
    pub fn resolve_listen(
        args: &Args,
        environment: &HashMap<String, String>,
        file: &HashMap<String, String>,
    ) -> Result<SocketAddr, ConfigError> {
        if let Some(addr) = args.listen {
            return Ok(addr);
        }
        let text = environment
            .get("SERVERFS_MCP_LISTEN")
            .or_else(|| file.get("SERVERFS_MCP_LISTEN"))
            .map(String::as_str)
            .filter(|v| !v.is_empty())
            .unwrap_or(DEFAULT_LISTEN);
        text.parse().map_err(|_| ConfigError::Invalid {
            key: "SERVERFS_MCP_LISTEN",
            message: format!("{text:?} is not an IP:port address"),
        })
    }

    /// The pure part of [`Config::load`]: flags over `environment` over `file`.
    pub fn resolve(
        args: Args,
        environment: &HashMap<String, String>,
        file: &HashMap<String, String>,
    ) -> Result<Config, ConfigError> {
        let get =
            |key: &str| environment.get(key).or_else(|| file.get(key)).map(String::as_str).filter(|v| !v.is_empty());
        let listen = Config::resolve_listen(&args, environment, file)?;
        let http = resolve_http(&args, &get)?;
        let home = environment.get("HOME").map(PathBuf::from);
        let bridge_socket = match args.bridge_socket {
            Some(path) => path,
            None => match get("SERVERFS_AGENT_BRIDGE_SOCKET") {
                Some(path) => expand_home(path, home.as_ref()),
                None => match get("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR") {
                    Some(dir) => expand_home(dir, home.as_ref()).join("bridge.sock"),
                    None => match home {
                        Some(home) => home.join(".local/share/agent-bridge/runtime/socket/bridge.sock"),
                        None => {
                            return Err(ConfigError::Invalid {
                                key: "SERVERFS_AGENT_BRIDGE_SOCKET",
                                message: "not set, and HOME is unset so the default cannot be found".into(),
                            });
                        }
                    },
                },
            },
        };
        let seconds = match args.bridge_timeout_seconds {
            Some(s) => s,
            None => match get("SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS") {
                Some(text) => text.parse().map_err(|_| ConfigError::Invalid {
                    key: "SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS",
                    message: format!("{text:?} is not a positive whole number of seconds"),
                })?,
                None => DEFAULT_BRIDGE_TIMEOUT_SECONDS,
            },
        };
        if seconds == 0 || seconds > 3600 {
            return Err(ConfigError::Invalid {
                key: "SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS",
                message: format!("{seconds} is outside 1..=3600"),
            });
        }
        let allowed_hosts = split(args.allowed_hosts.as_deref().or(get("SERVERFS_MCP_ALLOWED_HOSTS")));
        if let Some(bad) = allowed_hosts.iter().find(|h| h.contains('/') || h.contains(char::is_whitespace)) {
            return Err(ConfigError::Invalid {
                key: "SERVERFS_MCP_ALLOWED_HOSTS",
                message: format!("{bad:?} is not a host name (no spaces, no scheme, no path)"),
            });
        }
        let allowed_origins = split(args.allowed_origins.as_deref().or(get("SERVERFS_MCP_ALLOWED_ORIGINS")));
        if let Some(bad) = allowed_origins.iter().find(|o| crate::origin::normalize_origin(o).is_none()) {
            return Err(ConfigError::Invalid {
                key: "SERVERFS_MCP_ALLOWED_ORIGINS",
                message: format!("{bad:?} is not an origin such as https://chatgpt.com"),
            });
        }
        let tunnel_mode = get("SERVERFS_MCP_AUTH").is_some_and(|v| v.eq_ignore_ascii_case("none"));
        let allow_local = match get("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL").map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0" | "no" | "off") => false,
            Some("true" | "1" | "yes" | "on") => true,
            Some(other) => {
                return Err(ConfigError::Invalid {
                    key: "SERVERFS_MCP_TUNNEL_ALLOW_LOCAL",
                    message: format!("{other:?} is not a boolean (use true or false)"),
                });
            }
        };
        if tunnel_mode && listen.ip().is_loopback() && !allow_local {
            return Err(ConfigError::Invalid {
                key: "SERVERFS_MCP_AUTH",
                message: format!(
                    "tunnel mode (no credential) on the loopback address {listen} lets every local user act as the \
                     tunnel principal; set SERVERFS_MCP_TUNNEL_ALLOW_LOCAL=true if that is meant (a tunnel daemon \
                     on this host), or use API keys"
                ),
            });
        }
        let log_level = match get("SERVERFS_LOG_LEVEL").map(str::to_ascii_uppercase).as_deref() {
            None | Some("INFO") => "info",
            Some("TRACE") => "trace",
            Some("DEBUG") => "debug",
            Some("WARN" | "WARNING") => "warn",
            Some("ERROR") => "error",
            Some(other) => {
                return Err(ConfigError::Invalid {
                    key: "SERVERFS_LOG_LEVEL",
                    message: format!("{other:?} is not a log level (use TRACE, DEBUG, INFO, WARNING or ERROR)"),
                });
            }
        };
        Ok(Config {
            listen,
            bridge_socket,
            bridge_timeout: Duration::from_secs(seconds),
            allowed_hosts,
            allowed_origins,
            tunnel_mode,
            require_bridge_dir: args.require_bridge_dir,
            log_level,
            http,
        })
    }

    /// Whether the front listens on a loopback address only.
    pub fn is_loopback(&self) -> bool {
        self.listen.ip().is_loopback()
    }
}

/// The HTTP bounds: the caps from the flags or the keys, the timeouts the defaults (or the
/// test-only flag).
fn resolve_http<'a>(args: &Args, get: &impl Fn(&str) -> Option<&'a str>) -> Result<HttpLimits, ConfigError> {
    let mut http = HttpLimits::FRONT;
    for (key, flag, target) in [
        ("SERVERFS_MCP_MAX_CONNECTIONS", args.max_connections, &mut http.max_connections),
        ("SERVERFS_MCP_MAX_INFLIGHT_REQUESTS", args.max_inflight_requests, &mut http.max_inflight),
    ] {
        let value = match (flag, get(key)) {
            (Some(n), _) => n,
            (None, Some(text)) => text.parse().map_err(|_| ConfigError::Invalid {
                key,
                message: format!("{text:?} is not a positive whole number"),
            })?,
            (None, None) => continue,
        };
        if value == 0 || value > MAX_HTTP_CAP {
            return Err(ConfigError::Invalid { key, message: format!("{value} is outside 1..={MAX_HTTP_CAP}") });
        }
        *target = usize::try_from(value).unwrap_or(usize::MAX);
    }
    if let Some(text) = &args.test_http_timeouts_ms {
        let ms: Vec<u64> = text.split(',').filter_map(|t| t.trim().parse().ok()).filter(|&n| n > 0).collect();
        let [header, body, idle] = ms[..] else {
            return Err(ConfigError::Invalid {
                key: "--test-http-timeouts-ms",
                message: format!("{text:?} is not three positive millisecond counts H,B,I"),
            });
        };
        http.header_timeout = Duration::from_millis(header);
        http.body_timeout = Duration::from_millis(body);
        http.idle_timeout = Duration::from_millis(idle);
    }
    Ok(http)
}

/// The process environment (the keys the front reads) and the `.env` named by `--env-file`.
type Sources = (HashMap<String, String>, HashMap<String, String>);

#[expect(
    clippy::disallowed_methods,
    reason = "the front reads its environment and .env file once, at start, before it serves"
)]
fn sources(args: &Args) -> Result<Sources, ConfigError> {
    let file = match &args.env_file {
        Some(path) => {
            let bytes =
                std::fs::read(path).map_err(|e| ConfigError::EnvFile { path: path.clone(), message: e.to_string() })?;
            crate::dotenv::parse(&bytes)
                .map_err(|e| ConfigError::EnvFile { path: path.clone(), message: e.to_string() })?
        }
        None => HashMap::new(),
    };
    let environment = std::env::vars().filter(|(k, _)| k.starts_with("SERVERFS_") || k == "HOME").collect();
    Ok((environment, file))
}

fn split(list: Option<&str>) -> Vec<String> {
    list.unwrap_or("").split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
}

fn expand_home(path: &str, home: Option<&PathBuf>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => home.join(rest),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    #[test]
    fn flags_win_over_the_environment_which_wins_over_the_file() {
        let file = map(&[("SERVERFS_MCP_LISTEN", "127.0.0.1:1"), ("SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS", "7")]);
        let env = map(&[("SERVERFS_MCP_LISTEN", "127.0.0.1:2"), ("HOME", "/home/op")]);
        let c = Config::resolve(Args::default(), &env, &file).unwrap();
        assert_eq!(c.listen.port(), 2);
        assert_eq!(c.bridge_timeout, Duration::from_secs(7));
        assert_eq!(c.bridge_socket, PathBuf::from("/home/op/.local/share/agent-bridge/runtime/socket/bridge.sock"));
        let args = Args { listen: Some("127.0.0.1:3".parse().unwrap()), ..Args::default() };
        assert_eq!(Config::resolve(args, &env, &file).unwrap().listen.port(), 3);
    }

    #[test]
    fn the_socket_follows_the_bridge_socket_dir_and_expands_home() {
        let env = map(&[("HOME", "/h"), ("SERVERFS_AGENT_BRIDGE_HOST_SOCKET_DIR", "~/run")]);
        let c = Config::resolve(Args::default(), &env, &HashMap::new()).unwrap();
        assert_eq!(c.bridge_socket, PathBuf::from("/h/run/bridge.sock"));
        let env = map(&[("HOME", "/h"), ("SERVERFS_AGENT_BRIDGE_SOCKET", "/s/b.sock")]);
        assert_eq!(
            Config::resolve(Args::default(), &env, &HashMap::new()).unwrap().bridge_socket,
            PathBuf::from("/s/b.sock")
        );
    }

    #[test]
    fn refuses_bad_values_naming_the_key() {
        for (key, value) in [
            ("SERVERFS_MCP_LISTEN", "localhost"),
            ("SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS", "0"),
            ("SERVERFS_AGENT_BRIDGE_TIMEOUT_SECONDS", "x"),
            ("SERVERFS_MCP_ALLOWED_HOSTS", "https://a.example"),
            ("SERVERFS_MCP_ALLOWED_ORIGINS", "a.example"),
            ("SERVERFS_MCP_MAX_CONNECTIONS", "0"),
            ("SERVERFS_MCP_MAX_INFLIGHT_REQUESTS", "many"),
        ] {
            let env = map(&[("HOME", "/h"), (key, value)]);
            let e = Config::resolve(Args::default(), &env, &HashMap::new()).unwrap_err();
            assert!(e.to_string().starts_with(key), "{e}");
        }
    }

    #[test]
    #[expect(clippy::disallowed_methods, reason = "a test sets up its files directly")]
    fn a_required_bridge_dir_must_exist() {
        let dir = std::env::temp_dir().join(format!("mcp-front-config-{}", std::process::id()));
        let socket = dir.join("bridge.sock");
        let args = Args { bridge_socket: Some(socket.clone()), require_bridge_dir: true, ..Args::default() };
        let c = Config::resolve(args, &map(&[("HOME", "/h")]), &HashMap::new()).unwrap();
        assert!(c.require_bridge_dir);
        let e = c.check_bridge_dir().unwrap_err().to_string();
        assert!(e.starts_with("--require-bridge-dir: the bridge socket's directory"), "{e}");
        assert!(e.contains("compose.agent.yml"), "{e}");
        std::fs::create_dir_all(&dir).unwrap();
        let checked = c.check_bridge_dir();
        std::fs::remove_dir(&dir).unwrap();
        assert!(checked.is_ok(), "{checked:?}");
    }

    #[test]
    fn the_http_caps_come_from_the_keys_and_the_flags() {
        let env = map(&[("HOME", "/h"), ("SERVERFS_MCP_MAX_CONNECTIONS", "100")]);
        let file = map(&[("SERVERFS_MCP_MAX_INFLIGHT_REQUESTS", "7")]);
        let c = Config::resolve(Args::default(), &env, &file).unwrap();
        assert_eq!((c.http.max_connections, c.http.max_inflight), (100, 7));
        assert_eq!(c.http.header_timeout, HttpLimits::FRONT.header_timeout);
        let args =
            Args { max_connections: Some(3), test_http_timeouts_ms: Some("100,200,300".into()), ..Args::default() };
        let c = Config::resolve(args, &env, &file).unwrap();
        assert_eq!(c.http.max_connections, 3);
        assert_eq!(c.http.idle_timeout, Duration::from_millis(300));
        let args = Args { test_http_timeouts_ms: Some("100,0,300".into()), ..Args::default() };
        assert!(Config::resolve(args, &env, &file).is_err());
    }

    #[test]
    fn the_command_line_takes_a_healthcheck_and_the_flags() {
        let args = Args::try_parse_from(["mcp-front", "healthcheck", "--addr", "127.0.0.1:9"]).unwrap();
        assert!(matches!(args.command, Some(Command::Healthcheck { addr: Some(a) }) if a.port() == 9));
        let args = Args::try_parse_from(["mcp-front", "--require-bridge-dir", "--listen", "0.0.0.0:8765"]).unwrap();
        assert!(args.command.is_none() && args.require_bridge_dir);
        let env = map(&[("SERVERFS_MCP_LISTEN", "0.0.0.0:8765")]);
        assert_eq!(Config::resolve_listen(&Args::default(), &env, &HashMap::new()).unwrap().port(), 8765);
    }

    #[test]
    fn lists_are_split_and_tunnel_mode_is_noticed() {
        let env = map(&[
            ("HOME", "/h"),
            ("SERVERFS_MCP_ALLOWED_HOSTS", " mcp.example.com, ,front:8765"),
            ("SERVERFS_MCP_ALLOWED_ORIGINS", "https://chatgpt.com"),
            ("SERVERFS_MCP_AUTH", "none"),
            ("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL", "true"),
        ]);
        let c = Config::resolve(Args::default(), &env, &HashMap::new()).unwrap();
        assert_eq!(c.allowed_hosts, ["mcp.example.com", "front:8765"]);
        assert_eq!(c.allowed_origins, ["https://chatgpt.com"]);
        assert!(c.tunnel_mode && c.is_loopback());
    }

    #[test]
    fn tunnel_mode_on_loopback_is_refused_unless_the_operator_means_it() {
        let env = map(&[("HOME", "/h"), ("SERVERFS_MCP_AUTH", "none")]);
        let refused = Config::resolve(Args::default(), &env, &HashMap::new()).unwrap_err().to_string();
        assert!(
            refused.starts_with("SERVERFS_MCP_AUTH:") && refused.contains("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL"),
            "{refused}"
        );
        let public = map(&[("HOME", "/h"), ("SERVERFS_MCP_AUTH", "none"), ("SERVERFS_MCP_LISTEN", "0.0.0.0:8765")]);
        assert!(Config::resolve(Args::default(), &public, &HashMap::new()).unwrap().tunnel_mode);
        let bad = map(&[("HOME", "/h"), ("SERVERFS_MCP_AUTH", "none"), ("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL", "maybe")]);
        let refused = Config::resolve(Args::default(), &bad, &HashMap::new()).unwrap_err().to_string();
        assert!(refused.starts_with("SERVERFS_MCP_TUNNEL_ALLOW_LOCAL:"), "{refused}");
    }

    #[test]
    fn the_log_level_is_read_in_any_case_and_a_bad_one_is_refused() {
        let env = map(&[("HOME", "/h")]);
        assert_eq!(Config::resolve(Args::default(), &env, &HashMap::new()).unwrap().log_level, "info");
        let file = map(&[("SERVERFS_LOG_LEVEL", "Warning")]);
        assert_eq!(Config::resolve(Args::default(), &env, &file).unwrap().log_level, "warn");
        let env = map(&[("HOME", "/h"), ("SERVERFS_LOG_LEVEL", "debug")]);
        assert_eq!(Config::resolve(Args::default(), &env, &file).unwrap().log_level, "debug");
        let env = map(&[("HOME", "/h"), ("SERVERFS_LOG_LEVEL", "loud")]);
        let refused = Config::resolve(Args::default(), &env, &HashMap::new()).unwrap_err().to_string();
        assert!(refused.starts_with("SERVERFS_LOG_LEVEL:") && refused.contains("LOUD"), "{refused}");
    }
}
