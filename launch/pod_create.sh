#!/usr/bin/env bash
# Creates the TPU VM slice TPU_NAME (step 1 of 4: create, setup, run, delete).
#
# Usage:
#   TPU_NAME=jaxblend-v5e ZONE=us-west4-a [PROJECT=my-project] launch/pod_create.sh [GCLOUD_FLAG...]
#
# Environment (all settings: launch/pod_env.sh):
#   TPU_NAME, ZONE    required
#   PROJECT           optional Google Cloud project
#   ACCELERATOR_TYPE  slice type (default v5litepod-16: 16 v5e chips on 4 workers)
#   RUNTIME_VERSION   TPU software version (default v2-alpha-tpuv5-lite, the v5e runtime)
#   CAPACITY          on-demand (default), spot or preemptible
# Extra arguments go to `gcloud compute tpus tpu-vm create` as they are (e.g. --labels=team=x).

set -euo pipefail
# shellcheck source=pod_env.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/pod_env.sh"

create_args=("$TPU_NAME" "--accelerator-type=$ACCELERATOR_TYPE" "--version=$RUNTIME_VERSION")
case $CAPACITY in
  on-demand) ;;
  spot) create_args+=(--spot) ;;
  preemptible) create_args+=(--preemptible) ;;
  *) die "CAPACITY='$CAPACITY' must be on-demand, spot or preemptible" ;;
esac

tpu_vm create "${create_args[@]}" "$@"
