#!/usr/bin/env bash
# Shows the training log of one worker, or of all of them (after launch/pod_run.sh).
#
# Usage:
#   TPU_NAME=jaxblend-v5e ZONE=us-west4-a launch/pod_logs.sh [WORKER]
#   WORKER: a worker index (default 0) or "all" (lines of all workers interleave)
#
# Environment (shared settings: launch/pod_env.sh):
#   TPU_NAME, ZONE    required
#   PROJECT, REMOTE_DIR, LOG_DIR, RUN_NAME  optional, as given to pod_run.sh
#   LOG_LINES         lines to show first (default 100)
#   FOLLOW            1: keep following the log, Ctrl-C to stop (default); 0: print and exit

set -euo pipefail
# shellcheck source=pod_env.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/pod_env.sh"

if (($# > 1)); then
  die "usage: launch/pod_logs.sh [WORKER|all]"
fi
WORKER=${1:-0}
LOG_LINES=${LOG_LINES:-100}
FOLLOW=${FOLLOW:-1}
[[ $WORKER == all || $WORKER =~ ^[0-9]+$ ]] || die "WORKER='$WORKER' must be a worker index or 'all'"
[[ $LOG_LINES =~ ^[0-9]+$ ]] || die "LOG_LINES='$LOG_LINES' must be a non-negative integer"
[[ $FOLLOW == 0 || $FOLLOW == 1 ]] || die "FOLLOW='$FOLLOW' must be 0 or 1"

tail_cmd="tail -n $LOG_LINES"
if [[ $FOLLOW == 1 ]]; then
  tail_cmd+=" -F"
fi
remote="cd $(shq "$REMOTE_DIR") && $tail_cmd $(shq "$LOG_DIR")/$RUN_NAME-*.log"
tpu_vm ssh "$TPU_NAME" "--worker=$WORKER" "--command=$remote"
