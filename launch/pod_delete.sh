#!/usr/bin/env bash
# Deletes the TPU VM slice TPU_NAME and its workers' disks (step 4 of 4). Copy logs and
# checkpoints you need off the workers first (launch/pod_logs.sh, or write them to gs://).
#
# Usage:
#   TPU_NAME=jaxblend-v5e ZONE=us-west4-a launch/pod_delete.sh [GCLOUD_FLAG...]
#
# Environment (shared settings: launch/pod_env.sh):
#   TPU_NAME, ZONE    required
#   PROJECT           optional
# Extra arguments go to `gcloud compute tpus tpu-vm delete` (e.g. --async).

set -euo pipefail
# shellcheck source=pod_env.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/pod_env.sh"

tpu_vm delete "$TPU_NAME" --quiet "$@"
