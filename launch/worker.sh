#!/usr/bin/env bash
# Runs ON each TPU VM worker, inside its copy of jaxblend; the pod scripts start it over ssh
# (`gcloud compute tpus tpu-vm ssh --worker=all`). You do not normally call it yourself.
#
# Usage:
#   bash launch/worker.sh setup               # .venv + pip install (launch/pod_setup.sh)
#   bash launch/worker.sh start CMD [ARG...]  # CMD in the background with nohup (launch/pod_run.sh)
#   bash launch/worker.sh stop                # stops the started run (launch/pod_stop.sh)
#
# Environment:
#   WORKER_PYTHON    interpreters to try for the venv, first one that is Python >= 3.11 wins
#                    (default "python3 python3.13 python3.12 python3.11"); when none is found,
#                    python3.11 is installed with apt
#   JAXBLEND_EXTRAS  jaxblend extras to install (default tokenizers,train)
#   JAX_SPEC         pip requirement for JAX on TPU (default jax[tpu])
#   LOG_DIR          log directory, relative to the jaxblend directory (default logs)
#   RUN_NAME         log file LOG_DIR/RUN_NAME-<hostname>.log, pid file ...pid (default train)
#   STOP_TIMEOUT     seconds `stop` waits after SIGTERM before SIGKILL (default 30)

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

LOG_DIR=${LOG_DIR:-logs}
RUN_NAME=${RUN_NAME:-train}
HOST=$(hostname)
LOG_FILE="$LOG_DIR/$RUN_NAME-$HOST.log"
PID_FILE="$LOG_DIR/$RUN_NAME-$HOST.pid"

die() {
  echo "worker.sh on $HOST: $*" >&2
  exit 1
}

usage() {
  die "usage: bash launch/worker.sh setup | start CMD [ARG...] | stop"
}

# True while process PID exists and is not a zombie.
alive() {
  kill -0 "$1" 2>/dev/null || return 1
  if command -v ps >/dev/null 2>&1; then
    [[ $(ps -o stat= -p "$1" 2>/dev/null) != Z* ]]
  fi
}

is_new_python() {
  "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1
}

# Prints the first interpreter of WORKER_PYTHON that exists and is Python >= 3.11.
find_python() {
  local candidates candidate
  read -ra candidates <<<"${WORKER_PYTHON:-python3 python3.13 python3.12 python3.11}"
  for candidate in "${candidates[@]}"; do
    if command -v "$candidate" >/dev/null 2>&1 && is_new_python "$candidate"; then
      echo "$candidate"
      return 0
    fi
  done
  return 1
}

apt_install() {
  echo "$HOST: apt-get install $*"
  sudo apt-get update -qq
  sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

do_setup() {
  local python extras=${JAXBLEND_EXTRAS:-tokenizers,train} jax_spec=${JAX_SPEC:-jax[tpu]}
  if ! python=$(find_python); then
    # TPU VM images based on Ubuntu 22.04 ship Python 3.10; jaxblend needs >= 3.11.
    apt_install python3.11 python3.11-venv
    python=$(find_python) || die "no Python >= 3.11 after installing python3.11 (WORKER_PYTHON=${WORKER_PYTHON:-})"
  fi
  if [[ -x .venv/bin/python ]] && ! is_new_python .venv/bin/python; then
    echo "$HOST: replacing .venv (its Python is older than 3.11)"
    rm -rf .venv
  fi
  if [[ ! -x .venv/bin/python ]]; then
    if ! "$python" -m venv .venv; then
      # Debian and Ubuntu package venv/ensurepip separately.
      rm -rf .venv
      apt_install "$(basename "$python")-venv"
      "$python" -m venv .venv
    fi
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[$extras]" "$jax_spec"
  echo "$HOST: installed jaxblend[$extras] and $jax_spec into $PWD/.venv"
}

do_start() {
  if (($# == 0)); then
    usage
  fi
  mkdir -p "$LOG_DIR"
  if [[ -f $PID_FILE ]] && alive "$(cat "$PID_FILE")"; then
    die "run '$RUN_NAME' is already running (pid $(cat "$PID_FILE")); stop it with launch/pod_stop.sh or pick another RUN_NAME"
  fi
  echo "=== $(date -u +%Y-%m-%dT%H:%M:%SZ) $HOST: $*" >>"$LOG_FILE"
  # setsid: the run leads its own process group, so `stop` also reaches its children.
  PYTHONUNBUFFERED=1 setsid nohup "$@" >>"$LOG_FILE" 2>&1 </dev/null &
  echo "$!" >"$PID_FILE"
  echo "$HOST: started '$RUN_NAME' (pid $!), log $PWD/$LOG_FILE"
}

do_stop() {
  local pid waited=0 timeout=${STOP_TIMEOUT:-30}
  if [[ ! -f $PID_FILE ]]; then
    echo "$HOST: no $PID_FILE, nothing to stop"
    return 0
  fi
  pid=$(cat "$PID_FILE")
  if alive "$pid"; then
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
    while alive "$pid" && ((waited < timeout)); do
      sleep 1
      waited=$((waited + 1))
    done
    if alive "$pid"; then
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid"
    fi
    echo "$HOST: stopped '$RUN_NAME' (pid $pid)"
  else
    echo "$HOST: '$RUN_NAME' (pid $pid) was not running"
  fi
  rm -f "$PID_FILE"
}

if (($# == 0)); then
  usage
fi
command=$1
shift
case $command in
  setup) do_setup "$@" ;;
  start) do_start "$@" ;;
  stop) do_stop "$@" ;;
  *) usage ;;
esac
