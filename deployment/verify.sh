#!/usr/bin/env bash
# Verifies an installed agent-bridge: `agent-bridge doctor` with the installed config (files and
# permissions, whether the bridge answers, each workdir's lease and recovery guard). Exit 0
# healthy, 1 problems, 2 no usable config. Extra arguments go to doctor (e.g. --json).
set -euo pipefail
SCRIPT=verify.sh
repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=deployment/lib.sh
source "$repo/deployment/lib.sh"

[ -x "$DATA_DIR/current/bin/agent-bridge" ] || die "agent-bridge is not installed for this user (no $DATA_DIR/current)"
exec "$DATA_DIR/current/bin/agent-bridge" doctor --config "$CONFIG" "$@"
