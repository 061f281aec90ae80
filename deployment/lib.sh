# Shared by install.sh, rollback.sh, uninstall.sh and verify.sh (sourced, not run).
#
# Where a user-scoped install lives (all under $HOME; no root, no sudo, nothing under /etc):
#   ~/.local/share/agent-bridge/releases/<name>/bin/   one folder per installed release
#   ~/.local/share/agent-bridge/current, previous      links to two of them
#   ~/.config/agent-bridge/config.json                 the rendered config (0600), and
#   ~/.config/agent-bridge/config.previous.json        the one `previous` ran with
#   ~/.config/systemd/user/agent-bridge.service        the unit
# The socket, lock and state directories are the config's own (by default under
# ~/.local/share/agent-bridge/runtime and ~/.local/state/agent-bridge).

# shellcheck shell=bash
# shellcheck disable=SC2034 # the paths are used by the scripts that source this file

DATA_DIR=$HOME/.local/share/agent-bridge
RELEASES=$DATA_DIR/releases
CONFIG_DIR=$HOME/.config/agent-bridge
CONFIG=$CONFIG_DIR/config.json
PREVIOUS_CONFIG=$CONFIG_DIR/config.previous.json
UNIT_NAME=agent-bridge.service
UNIT_DIR=$HOME/.config/systemd/user
UNIT_FILE=$UNIT_DIR/$UNIT_NAME
HEALTH_TIMEOUT=${AGENT_BRIDGE_HEALTH_TIMEOUT:-30}

say() { printf '%s\n' "$*"; }
warn() { printf '%s: %s\n' "$SCRIPT" "$*" >&2; }
die() {
    warn "$*"
    exit 1
}

# Prints the calling script's header comment (its usage) and exits 0.
usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
}

# Refuses root unless the script was given --allow-root (throwaway containers and CI).
refuse_root() {
    local allowed=$1
    if [ "$(id -u)" = 0 ] && [ "$allowed" != true ]; then
        die "refusing to run as root: agent-bridge is installed for your own user (no sudo). In a throwaway container, pass --allow-root (and set SERVERFS_AGENT_ALLOW_ROOT=true in .env)."
    fi
}

# The release a link points at (its folder name), or nothing.
link_target() {
    local link=$1
    [ -L "$link" ] || return 0
    basename "$(readlink "$link")"
}

# Points `link` at `releases/<name>` atomically (a new link renamed over the old one).
set_link() {
    local link=$1 name=$2
    ln -sfn "releases/$name" "$link.new"
    mv -T "$link.new" "$link"
}

# Whether a systemd user manager answers (and the caller did not opt out with --no-systemd).
have_user_systemd() {
    [ "${NO_SYSTEMD:-false}" != true ] && command -v systemctl >/dev/null 2>&1 &&
        systemctl --user show-environment >/dev/null 2>&1
}

# The value of a top-level string field of the rendered JSON config (pretty-printed by the
# bridge, one field per line), e.g. `config_field state_dir`.
config_field() {
    local field=$1 file=${2:-$CONFIG}
    sed -n "s/^  \"$field\": \"\\(.*\\)\",\$/\\1/p" "$file"
}

# The installed CLI.
bridge() {
    "$DATA_DIR/current/bin/agent-bridge" "$@"
}

# Waits until the installed bridge answers `health`, at most HEALTH_TIMEOUT seconds.
wait_healthy() {
    local deadline=$((SECONDS + HEALTH_TIMEOUT))
    until bridge health --config "$CONFIG" >/dev/null 2>&1; do
        [ $SECONDS -lt "$deadline" ] || return 1
        sleep 0.2
    done
}

# Restarts the unit and checks that the bridge answers from the `current` release: its main
# process runs the current release's binary. Returns non-zero (with a message) otherwise.
restart_and_check() {
    local want pid exe
    # 9>&-: the scripts' lock (descriptor 9) is never handed to anything they start.
    systemctl --user daemon-reload 9>&-
    systemctl --user enable --quiet "$UNIT_NAME" 9>&-
    systemctl --user restart "$UNIT_NAME" 9>&- || {
        warn "systemctl --user restart $UNIT_NAME failed"
        return 1
    }
    if ! wait_healthy; then
        warn "the bridge did not answer within ${HEALTH_TIMEOUT} s (journalctl --user -u $UNIT_NAME)"
        return 1
    fi
    want=$(readlink -f "$DATA_DIR/current/bin/agent-bridge")
    pid=$(systemctl --user show -p MainPID --value "$UNIT_NAME")
    exe=$(readlink -f "/proc/$pid/exe" 2>/dev/null || true)
    if [ "$exe" != "$want" ]; then
        warn "the running bridge (pid $pid) runs ${exe:-nothing}, not $want"
        return 1
    fi
}

# The command to run the installed bridge in the foreground.
foreground_command() {
    printf '%s serve --config %s' "$DATA_DIR/current/bin/agent-bridge" "$CONFIG"
}

# Runs `agent-bridge doctor` on the installed config; its exit status is the verdict.
verify() {
    say "Verifying (agent-bridge doctor):"
    bridge doctor --config "$CONFIG"
}
