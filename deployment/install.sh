#!/usr/bin/env bash
# Installs agent-bridge for the current user, from binaries already built:
#   cargo build --release -p agent-bridge -p mcp-front     (or pass --build)
#   deployment/install.sh [--env-file .env]
#
# 1. checks the .env with the new binary (`agent-bridge config check`): a refused .env changes
#    nothing; warns when Debian's bubblewrap (`bwrap`, the task sandbox) is missing or cannot
#    start a sandbox for this user (this install cannot apt-get it: sudo apt-get install
#    bubblewrap);
# 2. copies the binaries into ~/.local/share/agent-bridge/releases/<name>/bin (the name is the
#    version and the binary's hash, or --release-name);
# 3. renders the config, 0600 and atomically (`agent-bridge config render`), creates the
#    socket, lock and state directories (0700) when missing, installs the systemd --user unit
#    (the config is rendered before step 2, so a refused render leaves no new folder);
# 4. switches `current` to the new release (the old one becomes `previous`, with its config);
# 5. with a systemd user manager: restarts the unit and checks that the new release answers;
#    if it does not, switches back, restarts the previous release and exits 1. Without one it
#    says so and prints the command that runs the bridge in the foreground;
# 6. verifies with `agent-bridge doctor`.
# Re-running it with the same build re-renders the config and restarts; `previous` is kept.
#
# Options:
#   --env-file FILE      the operator's .env [default: .env at the repository root]
#   --bin-dir DIR        where the built binaries are [default: $CARGO_TARGET_DIR/release or target/release]
#   --build              run `cargo build --release` for both binaries first
#   --release-name NAME  the release folder's name [default: <version>-<12 hex of the binary's SHA-256>]
#   --no-start           install and switch, but do not (re)start the service
#   --no-systemd         act as if there were no systemd user manager
#   --allow-root         allow uid 0: for throwaway containers and CI only (the .env must also
#                        set SERVERFS_AGENT_ALLOW_ROOT=true)
# Environment: AGENT_BRIDGE_HEALTH_TIMEOUT (seconds to wait for the new release, default 30).
set -euo pipefail
SCRIPT=install.sh
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=deployment/lib.sh
source "$repo/deployment/lib.sh"

env_file=$repo/.env
bin_dir=${CARGO_TARGET_DIR:-$repo/target}/release
build=false release_name='' start=true allow_root=false NO_SYSTEMD=false
while [ $# -gt 0 ]; do
    case $1 in
    --env-file) env_file=${2:?--env-file needs a file}; shift 2 ;;
    --bin-dir) bin_dir=${2:?--bin-dir needs a directory}; shift 2 ;;
    --build) build=true; shift ;;
    --release-name) release_name=${2:?--release-name needs a name}; shift 2 ;;
    --no-start) start=false; shift ;;
    --no-systemd) NO_SYSTEMD=true; shift ;;
    --allow-root) allow_root=true; shift ;;
    -h | --help) usage ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
refuse_root "$allow_root"
[ -f "$env_file" ] || die "no .env at $env_file: copy .env.example to .env and edit it, or pass --env-file"
env_file=$(cd "$(dirname "$env_file")" && pwd)/$(basename "$env_file")

if [ "$build" = true ]; then
    say "Building agent-bridge and mcp-front (release)…"
    cargo build --release --locked --manifest-path "$repo/Cargo.toml" -p agent-bridge -p mcp-front
fi
new_bridge=$bin_dir/agent-bridge
new_front=$bin_dir/mcp-front
[ -x "$new_bridge" ] || die "no agent-bridge in $bin_dir: build it (cargo build --release -p agent-bridge -p mcp-front) or pass --build or --bin-dir"
version=$("$new_bridge" --version) || die "$new_bridge does not run"

# 1. The .env, checked by the binary that will run it. Nothing has changed yet.
say "Checking $env_file with $version…"
checked=$("$new_bridge" config check --json --env-file "$env_file") || die "the .env is refused (above); nothing was changed"
if [ "$(id -u)" = 0 ] && ! grep -q '"allow_root": true' <<<"$checked"; then
    die "running as root, the .env must set SERVERFS_AGENT_ALLOW_ROOT=true too (the bridge refuses root otherwise)"
fi
field() { sed -n "s/^    \"$1\": \"\\(.*\\)\",\$/\\1/p" <<<"$checked"; }
socket_path=$(field socket_path) state_dir=$(field state_dir) lock_dir=$(field lock_dir)
if [ -z "$socket_path" ] || [ -z "$state_dir" ] || [ -z "$lock_dir" ]; then
    die "cannot read the paths of the checked config"
fi

# The task sandbox needs Debian's bubblewrap, which this install (no root) cannot install. The
# bridge decides at startup; without bwrap, auto runs tasks uncontained and required refuses them.
sandbox_mode=$(sed -n '/^    "sandbox": {/,/^    }/s/^      "mode": "\([a-z]*\)",\{0,1\}$/\1/p' <<<"$checked")
sandbox_mode=${sandbox_mode:-auto}
if [ "$sandbox_mode" != off ]; then
    if [ "$sandbox_mode" = required ]; then
        consequence="with SERVERFS_AGENT_SANDBOX=required the bridge refuses every task (AGENT_SANDBOX_UNAVAILABLE)"
    else
        consequence="with SERVERFS_AGENT_SANDBOX=$sandbox_mode tasks run uncontained (no task sandbox)"
    fi
    if ! command -v bwrap >/dev/null; then
        warn "WARNING: bwrap (Debian's bubblewrap) is not installed: $consequence. Fix: sudo apt-get install bubblewrap, then run install.sh again (or restart the bridge)."
    elif ! bwrap --unshare-user --unshare-pid --dev-bind / / --proc /proc -- true >/dev/null 2>&1; then
        warn "WARNING: $(command -v bwrap) cannot start a sandbox as $(id -un 2>/dev/null || id -u) (unprivileged user namespaces refused here): $consequence. Fix: allow them (agent-bridge doctor says how), then restart the bridge."
    fi
fi

if [ -z "$release_name" ]; then
    release_name=${version#agent-bridge }-$(sha256sum "$new_bridge" | cut -c1-12)
fi
case $release_name in
'' | . | .. | */* | .*) die "--release-name $release_name: a plain folder name is needed" ;;
esac

mkdir -p "$RELEASES" "$CONFIG_DIR" "$UNIT_DIR"
chmod 700 "$CONFIG_DIR"
exec 9>"$DATA_DIR/.install.lock"
flock -n 9 || die "another install, rollback or uninstall is running"

# The config, rendered (0600, atomic) beside the live one; swapped in at the switch.
"$new_bridge" config render --env-file "$env_file" --output "$CONFIG.new" >/dev/null ||
    die "cannot render the config (above); nothing was changed"
trap 'rm -f "$CONFIG.new"' EXIT

# 2. The release folder: written beside its final name, then renamed into place.
release=$RELEASES/$release_name
if [ -d "$release" ]; then
    if ! cmp -s "$new_bridge" "$release/bin/agent-bridge"; then
        rm -f "$CONFIG.new"
        die "$release already holds a different agent-bridge: choose another --release-name"
    fi
    say "Release $release_name is already installed."
else
    staging=$RELEASES/.$release_name.staging.$$
    rm -rf "$staging"
    mkdir -p "$staging/bin"
    cp "$new_bridge" "$staging/bin/agent-bridge"
    if [ -x "$new_front" ]; then cp "$new_front" "$staging/bin/mcp-front"; fi
    {
        printf '%s\n' "$version"
        git -C "$repo" rev-parse HEAD 2>/dev/null || true
    } >"$staging/VERSION"
    mv -T "$staging" "$release"
    say "Installed release $release_name in $release."
fi

# 3. The directories the bridge and compose's bind mount need, and the unit.
for dir in "$state_dir" "$lock_dir" "$(dirname "$socket_path")"; do
    if [ ! -e "$dir" ]; then
        mkdir -p "$(dirname "$dir")"
        mkdir -m 0700 "$dir"
    fi
done
[ -f "$UNIT_FILE" ] && cp -p "$UNIT_FILE" "$UNIT_FILE.rollback"
cp "$repo/deployment/$UNIT_NAME" "$UNIT_FILE.new"
mv -f "$UNIT_FILE.new" "$UNIT_FILE"

# 4. The switch. What it replaces is kept until the new release is known to run.
old_current=$(link_target "$DATA_DIR/current")
old_previous=$(link_target "$DATA_DIR/previous")
[ -f "$CONFIG" ] && cp -p "$CONFIG" "$CONFIG.rollback"
[ -f "$PREVIOUS_CONFIG" ] && cp -p "$PREVIOUS_CONFIG" "$PREVIOUS_CONFIG.rollback"
if [ -n "$old_current" ] && [ "$old_current" != "$release_name" ]; then
    set_link "$DATA_DIR/previous" "$old_current"
    [ -f "$CONFIG" ] && cp -p "$CONFIG" "$PREVIOUS_CONFIG"
fi
mv -f "$CONFIG.new" "$CONFIG"
set_link "$DATA_DIR/current" "$release_name"

restore() {
    warn "keeping the previous state: current -> ${old_current:-nothing}"
    if [ -n "$old_current" ]; then set_link "$DATA_DIR/current" "$old_current"; else rm -f "$DATA_DIR/current"; fi
    if [ -n "$old_previous" ]; then set_link "$DATA_DIR/previous" "$old_previous"; else rm -f "$DATA_DIR/previous"; fi
    if [ -f "$CONFIG.rollback" ]; then mv -f "$CONFIG.rollback" "$CONFIG"; else rm -f "$CONFIG"; fi
    if [ -f "$PREVIOUS_CONFIG.rollback" ]; then mv -f "$PREVIOUS_CONFIG.rollback" "$PREVIOUS_CONFIG"; else rm -f "$PREVIOUS_CONFIG"; fi
    if [ -f "$UNIT_FILE.rollback" ]; then mv -f "$UNIT_FILE.rollback" "$UNIT_FILE"; else rm -f "$UNIT_FILE"; fi
}

# 5. Start (or restart) and check.
if [ "$start" = true ] && have_user_systemd; then
    say "Restarting $UNIT_NAME (systemd --user)…"
    if ! restart_and_check; then
        restore
        if [ -n "$old_current" ]; then
            if restart_and_check; then
                warn "release $old_current runs again"
            else
                warn "release $old_current did not come back either: see journalctl --user -u $UNIT_NAME"
            fi
        else
            systemctl --user disable --now --quiet "$UNIT_NAME" 9>&- || true
        fi
        die "release $release_name did not start (its files stay in $release for inspection; uninstall.sh removes them)"
    fi
    say "agent-bridge $release_name runs as $UNIT_NAME."
elif [ "$start" = true ]; then
    say "No systemd user manager here (systemctl --user does not answer): nothing was started."
    if bridge health --config "$CONFIG" >/dev/null 2>&1; then
        say "A bridge already answers on $socket_path: stop it and start the new release with:"
    else
        say "Run the bridge in the foreground with:"
    fi
    say "  $(foreground_command)"
else
    say "Not started (--no-start). Start it with: systemctl --user restart $UNIT_NAME"
fi
rm -f "$CONFIG.rollback" "$PREVIOUS_CONFIG.rollback" "$UNIT_FILE.rollback"
previous=$(link_target "$DATA_DIR/previous")
say "current -> $release_name${previous:+, previous -> $previous}"

# 6. Verify.
verify || {
    warn "installed, but agent-bridge doctor reports problems (above)"
    exit 1
}
