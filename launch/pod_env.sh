# shellcheck shell=bash
# Settings and helpers shared by the TPU VM pod scripts (launch/pod_*.sh). Sourced, not run.
#
# Required:
#   TPU_NAME          name of the TPU VM slice, e.g. jaxblend-v5e-16
#   ZONE              its zone, e.g. us-west4-a (v5e) or us-central2-b (v4)
# Optional:
#   PROJECT           Google Cloud project (default: the one `gcloud config` has)
#   ACCELERATOR_TYPE  slice type for pod_create.sh (default v5litepod-16)
#   RUNTIME_VERSION   TPU software version for pod_create.sh (default v2-alpha-tpuv5-lite)
#   CAPACITY          on-demand (default), spot or preemptible (pod_create.sh)
#   REMOTE_DIR        jaxblend's directory on every worker, relative to the remote home or
#                     absolute (default jaxblend)
#   LOG_DIR           log directory on every worker, relative to REMOTE_DIR (default logs)
#   RUN_NAME          names the run's log and pid files: LOG_DIR/RUN_NAME-<hostname>.log
#                     (default train)
#   DRY_RUN           1: print the gcloud commands without running them (default 0)
#
# Every gcloud command is echoed to stderr with a leading "+ " before it runs.

set -euo pipefail

: "${TPU_NAME:?set TPU_NAME to the TPU VM name (see launch/pod_env.sh)}"
: "${ZONE:?set ZONE to the TPU VM zone, e.g. us-west4-a (see launch/pod_env.sh)}"
PROJECT=${PROJECT:-}
ACCELERATOR_TYPE=${ACCELERATOR_TYPE:-v5litepod-16}
RUNTIME_VERSION=${RUNTIME_VERSION:-v2-alpha-tpuv5-lite}
CAPACITY=${CAPACITY:-on-demand}
REMOTE_DIR=${REMOTE_DIR:-jaxblend}
LOG_DIR=${LOG_DIR:-logs}
RUN_NAME=${RUN_NAME:-train}
DRY_RUN=${DRY_RUN:-0}

LAUNCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(dirname "$LAUNCH_DIR")
export LAUNCH_DIR REPO_ROOT

# Prints "<script>: MESSAGE" to stderr and exits 1.
die() {
  echo "$(basename "$0"): $*" >&2
  exit 1
}

if [[ ! $TPU_NAME =~ ^[a-z]([-a-z0-9]*[a-z0-9])?$ ]]; then
  die "TPU_NAME='$TPU_NAME' is not a valid TPU name (lowercase letters, digits and '-', starting with a letter)"
fi
if [[ ! $RUN_NAME =~ ^[A-Za-z0-9_.-]+$ ]]; then
  die "RUN_NAME='$RUN_NAME' may only contain letters, digits, '_', '.' and '-'"
fi
if [[ $DRY_RUN != 0 && $DRY_RUN != 1 ]]; then
  die "DRY_RUN='$DRY_RUN' must be 0 or 1"
fi
if [[ $DRY_RUN == 0 ]] && ! command -v gcloud >/dev/null 2>&1; then
  die "gcloud not found on PATH: install the Google Cloud SDK (or set DRY_RUN=1)"
fi

# Quotes one word for a POSIX shell; words made only of safe characters stay as they are.
shq() {
  local safe='^[A-Za-z0-9_./=:,+@%-]+$'
  if [[ $1 =~ $safe ]]; then
    printf '%s' "$1"
  else
    printf "'%s'" "${1//\'/\'\\\'\'}"
  fi
}

# Joins words into one shell command line, quoting each as needed.
shell_join() {
  local quoted=() word
  for word in "$@"; do
    quoted+=("$(shq "$word")")
  done
  printf '%s' "${quoted[*]}"
}

# Runs `gcloud compute tpus tpu-vm SUBCOMMAND ARGS... --zone=ZONE [--project=PROJECT]`.
tpu_vm() {
  local cmd=(gcloud compute tpus tpu-vm "$@" "--zone=$ZONE")
  if [[ -n $PROJECT ]]; then
    cmd+=("--project=$PROJECT")
  fi
  echo "+ $(shell_join "${cmd[@]}")" >&2
  if [[ $DRY_RUN == 1 ]]; then
    return 0
  fi
  "${cmd[@]}"
}

# Prints the remote command that runs `launch/worker.sh ARGS...` inside REMOTE_DIR on a worker,
# with LOG_DIR, RUN_NAME and the NAME=VALUE words of the WORKER_ENV array in its environment.
worker_command() {
  local env_words=("LOG_DIR=$LOG_DIR" "RUN_NAME=$RUN_NAME" "${WORKER_ENV[@]}")
  printf 'cd %s && env %s bash launch/worker.sh %s' \
    "$(shq "$REMOTE_DIR")" "$(shell_join "${env_words[@]}")" "$(shell_join "$@")"
}

WORKER_ENV=()
