#!/usr/bin/env bash
# Switches agent-bridge back to the previous release: `current` and `previous` swap, and so do
# the configs each ran with (config.json and config.previous.json). With a systemd user
# manager it restarts the unit and checks that the previous release answers; if it does not,
# it switches forward again and exits 1. Then it verifies with `agent-bridge doctor`.
# Running it twice goes forward again.
#
# A release that predates a store migration cannot open the migrated store (the bridge
# refuses a schema newer than it knows): such a rollback fails its check and is undone.
#
# Options: --no-start (switch only), --no-systemd, --allow-root (throwaway containers, CI).
set -euo pipefail
SCRIPT=rollback.sh
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=deployment/lib.sh
source "$repo/deployment/lib.sh"

start=true allow_root=false NO_SYSTEMD=false
while [ $# -gt 0 ]; do
    case $1 in
    --no-start) start=false; shift ;;
    --no-systemd) NO_SYSTEMD=true; shift ;;
    --allow-root) allow_root=true; shift ;;
    -h | --help) usage ;;
    *) die "unknown option $1 (see --help)" ;;
    esac
done
refuse_root "$allow_root"
[ -d "$DATA_DIR" ] || die "agent-bridge is not installed for this user ($DATA_DIR is missing)"
exec 9>"$DATA_DIR/.install.lock"
flock -n 9 || die "another install, rollback or uninstall is running"

current=$(link_target "$DATA_DIR/current")
previous=$(link_target "$DATA_DIR/previous")
[ -n "$current" ] || die "no current release"
[ -n "$previous" ] || die "no previous release to go back to"
[ -x "$RELEASES/$previous/bin/agent-bridge" ] || die "the previous release $previous is missing from $RELEASES"

swap() { # swap FROM TO: makes FROM current and TO previous, with their configs
    set_link "$DATA_DIR/current" "$1"
    set_link "$DATA_DIR/previous" "$2"
    if [ -f "$PREVIOUS_CONFIG" ]; then
        mv -f "$CONFIG" "$CONFIG.swap"
        mv -f "$PREVIOUS_CONFIG" "$CONFIG"
        mv -f "$CONFIG.swap" "$PREVIOUS_CONFIG"
    fi
}

say "Rolling back: $current -> $previous"
swap "$previous" "$current"
if [ "$start" = true ] && have_user_systemd; then
    if ! restart_and_check; then
        swap "$current" "$previous"
        if restart_and_check; then
            warn "release $current runs again"
        else
            warn "release $current did not come back either: see journalctl --user -u $UNIT_NAME"
        fi
        die "release $previous did not start; the rollback was undone"
    fi
    say "agent-bridge $previous runs as $UNIT_NAME."
elif [ "$start" = true ]; then
    say "No systemd user manager here: restart your bridge to run $previous:"
    say "  $(foreground_command)"
fi
say "current -> $previous, previous -> $current"
verify || {
    warn "rolled back, but agent-bridge doctor reports problems (above)"
    exit 1
}
