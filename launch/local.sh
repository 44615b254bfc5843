#!/usr/bin/env bash
# Runs the training job (or another jaxblend command) as NUM_PROCESSES JAX processes on this
# machine, joined with jax.distributed on localhost: the multi-host code paths without a pod.
#
# Usage:
#   launch/local.sh [TRAIN_FLAG...]
#       runs PYTHON -m jaxblend.train --flagfile=FLAGFILE TRAIN_FLAG...
#   launch/local.sh -- MODULE [FLAG...]     (or: -- python -m MODULE [FLAG...])
#       runs PYTHON -m MODULE FLAG... instead, e.g.
#       launch/local.sh -- jaxblend.tools.dump_batches --mock_data --seq_length=16 --out=/tmp/b
#
# Each process gets its own CPU device count and `--coordinator_address=localhost:PORT
# --num_processes=N --process_id=i` appended (jaxblend.tools.launch_local); output lines are
# prefixed with [i]; if one process fails the others are stopped and its exit code is returned.
# Commands run from the repository root, so relative paths in flags are relative to it.
#
# Environment:
#   NUM_PROCESSES        JAX processes to start (default 2)
#   DEVICES_PER_PROCESS  CPU devices per process (default 4)
#   FLAGFILE             training flagfile, relative to the repository root
#                        (default configs/demo.flags; not used with `-- MODULE`)
#   PYTHON               interpreter with jaxblend installed (default .venv/bin/python, made by
#                        `python3 dev.py demo` or `python3 dev.py test`)
#   LAUNCH_TIMEOUT       seconds before all processes are killed (default 3600)

set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

NUM_PROCESSES=${NUM_PROCESSES:-2}
DEVICES_PER_PROCESS=${DEVICES_PER_PROCESS:-4}
FLAGFILE=${FLAGFILE:-configs/demo.flags}
PYTHON=${PYTHON:-.venv/bin/python}
LAUNCH_TIMEOUT=${LAUNCH_TIMEOUT:-3600}

die() {
  echo "launch/local.sh: $*" >&2
  exit 1
}

[[ $NUM_PROCESSES =~ ^[1-9][0-9]*$ ]] || die "NUM_PROCESSES='$NUM_PROCESSES' must be a positive integer"
[[ $DEVICES_PER_PROCESS =~ ^[1-9][0-9]*$ ]] ||
  die "DEVICES_PER_PROCESS='$DEVICES_PER_PROCESS' must be a positive integer"
[[ $LAUNCH_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "LAUNCH_TIMEOUT='$LAUNCH_TIMEOUT' must be a positive integer"
command -v "$PYTHON" >/dev/null 2>&1 ||
  die "PYTHON='$PYTHON' not found: run 'python3 dev.py test' (creates .venv) or set PYTHON"

if (($# > 0)) && [[ $1 == -- ]]; then
  shift
  # `-- python -m MODULE ...` is accepted too; PYTHON runs it either way.
  if (($# >= 2)) && [[ $1 =~ ^python[0-9.]*$ && $2 == -m ]]; then
    shift 2
  fi
  (($# > 0)) || die "give a module after --, e.g. -- jaxblend.tools.dump_batches --mock_data ..."
  [[ $1 =~ ^[A-Za-z_][A-Za-z0-9_.]*$ ]] ||
    die "'$1' is not a Python module name: after -- give MODULE [FLAG...] (it runs as PYTHON -m MODULE)"
  job=("$PYTHON" -m "$@")
else
  [[ -f $FLAGFILE ]] || die "FLAGFILE='$FLAGFILE' not found (relative to $PWD)"
  job=("$PYTHON" -m jaxblend.train "--flagfile=$FLAGFILE" "$@")
fi

exec "$PYTHON" -m jaxblend.tools.launch_local \
  "--num_processes=$NUM_PROCESSES" \
  "--devices_per_process=$DEVICES_PER_PROCESS" \
  "--timeout=$LAUNCH_TIMEOUT" \
  -- "${job[@]}"
