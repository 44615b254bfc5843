#!/usr/bin/env bash
# Stops the run started by launch/pod_run.sh on every worker (SIGTERM to its process group,
# SIGKILL after STOP_TIMEOUT seconds). The TPU VM keeps running: see launch/pod_delete.sh.
#
# Usage:
#   TPU_NAME=jaxblend-v5e ZONE=us-west4-a launch/pod_stop.sh
#
# Environment (shared settings: launch/pod_env.sh):
#   TPU_NAME, ZONE    required
#   PROJECT, REMOTE_DIR, LOG_DIR, RUN_NAME  optional, as given to pod_run.sh
#   STOP_TIMEOUT      seconds to wait after SIGTERM (default 30)

set -euo pipefail
# shellcheck source=pod_env.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/pod_env.sh"

STOP_TIMEOUT=${STOP_TIMEOUT:-30}
[[ $STOP_TIMEOUT =~ ^[0-9]+$ ]] || die "STOP_TIMEOUT='$STOP_TIMEOUT' must be a whole number of seconds"
WORKER_ENV=("STOP_TIMEOUT=$STOP_TIMEOUT")
tpu_vm ssh "$TPU_NAME" --worker=all "--command=$(worker_command stop)"
