#!/usr/bin/env bash
# Starts the training job on every worker of TPU_NAME at once (step 3 of 4).
#
# Usage:
#   TPU_NAME=jaxblend-v5e ZONE=us-west4-a launch/pod_run.sh [TRAIN_FLAG...]
#   e.g. BUCKET=gs://my-bucket/run1 launch/pod_run.sh --train_iters=2000
#
# Each worker runs `.venv/bin/python -m jaxblend.train --flagfile=FLAGFILE TRAIN_FLAG...` in
# REMOTE_DIR, in the background (nohup, own process group), appending to its own log
# LOG_DIR/RUN_NAME-<hostname>.log; this script returns once all have started. JAX finds the
# other workers of the slice itself, so no --coordinator_address/--num_processes/--process_id.
# Follow with launch/pod_logs.sh, stop with launch/pod_stop.sh.
#
# Environment (shared settings: launch/pod_env.sh):
#   TPU_NAME, ZONE    required
#   PROJECT, REMOTE_DIR, LOG_DIR, RUN_NAME  optional
#   FLAGFILE          flagfile, relative to REMOTE_DIR (default configs/pod.flags)
#   MODULE            Python module to run (default jaxblend.train)
#   BUCKET            gs:// (or s3://) directory the hosts share: adds
#                     --data_cache_path=BUCKET/index_cache --checkpoint_dir=BUCKET/checkpoints
#                     (flags given to this script still override them). Rerunning the same
#                     command resumes from the newest checkpoint there, on any slice size.

set -euo pipefail
# shellcheck source=pod_env.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/pod_env.sh"

FLAGFILE=${FLAGFILE:-configs/pod.flags}
MODULE=${MODULE:-jaxblend.train}

BUCKET=${BUCKET:-}
bucket_flags=()
if [[ -n $BUCKET ]]; then
  if [[ ! $BUCKET =~ ^(gs|s3)://[^/]+ ]]; then
    die "BUCKET='$BUCKET' must be a gs:// or s3:// URL, e.g. gs://my-bucket/run1"
  fi
  BUCKET=${BUCKET%/}
  bucket_flags=("--data_cache_path=$BUCKET/index_cache" "--checkpoint_dir=$BUCKET/checkpoints")
fi

job=(.venv/bin/python -m "$MODULE" "--flagfile=$FLAGFILE" "${bucket_flags[@]}" "$@")
tpu_vm ssh "$TPU_NAME" --worker=all "--command=$(worker_command start "${job[@]}")"
