#!/usr/bin/env bash
# Removes what install.sh put in place: stops and disables the systemd --user unit and removes
# it, the releases and their links, the rendered configs, the socket and lock directories (once
# the bridge is stopped they hold only its lock files), and the folders left empty.
#
# It keeps, and says so:
#   - the state directory: the task store, spooled results, API keys and the audit log
#     (a later install finds them again); --purge removes it too;
#   - ~/.config/agent-bridge/provider.env, if you wrote one.
# It refuses while a bridge still answers on the socket and it cannot stop it (no systemd).
#
# Options: --purge, --no-systemd, --allow-root (throwaway containers, CI).
set -euo pipefail
SCRIPT=uninstall.sh
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=deployment/lib.sh
source "$repo/deployment/lib.sh"

purge=false allow_root=false NO_SYSTEMD=false
while [ $# -gt 0 ]; do
    case $1 in
    --purge) purge=true; shift ;;
    --no-systemd) NO_SYSTEMD=true; shift ;;
    --allow-root) allow_root=true; shift ;;
    -h | --help) usage ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
refuse_root "$allow_root"
[ -d "$DATA_DIR" ] || [ -f "$CONFIG" ] || [ -f "$UNIT_FILE" ] || die "agent-bridge is not installed for this user"
mkdir -p "$DATA_DIR"
exec 9>"$DATA_DIR/.install.lock"
flock -n 9 || die "another install, rollback or uninstall is running"

state_dir='' socket_path='' lock_dir=''
if [ -f "$CONFIG" ]; then
    state_dir=$(config_field state_dir) socket_path=$(config_field socket_path) lock_dir=$(config_field lock_dir)
fi

# Stop the bridge.
if have_user_systemd; then
    systemctl --user disable --now --quiet "$UNIT_NAME" 9>&- 2>/dev/null || true
fi
if [ -x "$DATA_DIR/current/bin/agent-bridge" ] && [ -f "$CONFIG" ] && bridge health --config "$CONFIG" >/dev/null 2>&1; then
    die "a bridge still answers on $socket_path: stop it first (Ctrl-C or SIGTERM for a foreground bridge); nothing was removed"
fi

# The unit.
rm -f "$UNIT_FILE"
if have_user_systemd; then
    systemctl --user daemon-reload 9>&- || true
fi
rmdir "$UNIT_DIR" 2>/dev/null || true

# Releases, links, configs.
rm -rf "$RELEASES"
rm -f "$DATA_DIR/current" "$DATA_DIR/previous" "$CONFIG" "$PREVIOUS_CONFIG"

# The socket directory (a stale socket of a stopped bridge) and the lock directory (its lease
# files), then whatever folders that leaves empty.
if [ -n "$socket_path" ]; then
    [ -S "$socket_path" ] && rm -f "$socket_path"
    rmdir "$(dirname "$socket_path")" 2>/dev/null || true
fi
if [ -n "$lock_dir" ] && [ -d "$lock_dir" ]; then
    find "$lock_dir" -maxdepth 1 -type f -name '[0-9][0-9].lock' -delete
    rmdir "$lock_dir" 2>/dev/null || true
fi

kept=()
if [ -n "$state_dir" ] && [ -d "$state_dir" ]; then
    if [ "$purge" = true ]; then
        case $state_dir in
        / | "$HOME" | "$HOME/" | "$HOME/.local" | "$HOME/.local/state" | "$HOME/.config")
            warn "not purging $state_dir: it is not agent-bridge's own directory"
            kept+=("$state_dir (the state directory)")
            ;;
        *) rm -rf "$state_dir" && say "Purged the state directory $state_dir." ;;
        esac
    else
        kept+=("$state_dir (the state directory: tasks, results, API keys, audit log; --purge removes it)")
    fi
fi
[ -f "$CONFIG_DIR/provider.env" ] && kept+=("$CONFIG_DIR/provider.env (yours)")

rm -f "$DATA_DIR/.install.lock"
exec 9>&-
for dir in "$DATA_DIR/runtime" "$DATA_DIR" "$CONFIG_DIR"; do
    rmdir "$dir" 2>/dev/null || true
done
for dir in "$DATA_DIR" "$CONFIG_DIR"; do
    [ -e "$dir" ] && kept+=("$dir (not empty: files not installed by install.sh)")
done

say "agent-bridge is uninstalled."
if [ ${#kept[@]} -eq 0 ]; then
    say "Nothing was kept."
else
    say "Kept:"
    printf '  %s\n' "${kept[@]}"
fi
