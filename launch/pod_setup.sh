#!/usr/bin/env bash
# Copies this jaxblend tree to every worker of TPU_NAME and installs it there (step 2 of 4).
#
# Usage:
#   TPU_NAME=jaxblend-v5e ZONE=us-west4-a launch/pod_setup.sh
#
# Packs SOURCE_DIR into a tarball (in a git checkout: the tracked and untracked-but-not-ignored
# files as they are in the working tree, so uncommitted edits are shipped too; with GIT_REF set:
# `git archive GIT_REF`), copies it to every worker with `tpu-vm scp --worker=all`, unpacks it
# into REMOTE_DIR (over an existing copy, keeping its .venv and logs) and runs
# `launch/worker.sh setup` there: python3 -m venv .venv, pip install -e '.[JAXBLEND_EXTRAS]' JAX_SPEC.
# Run it again after changing the code.
#
# Environment (shared settings: launch/pod_env.sh):
#   TPU_NAME, ZONE    required
#   PROJECT, REMOTE_DIR (default jaxblend)  optional
#   SOURCE_DIR        tree to copy (default: the repository holding this script)
#   GIT_REF           ship this commit/branch/tag of SOURCE_DIR instead of its working tree
#   JAXBLEND_EXTRAS   extras to install (default tokenizers,train)
#   JAX_SPEC          pip requirement for JAX on TPU (default jax[tpu])
#   WORKER_PYTHON     interpreters the workers try for the venv (see launch/worker.sh)

set -euo pipefail
# shellcheck source=pod_env.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/pod_env.sh"

SOURCE_DIR=${SOURCE_DIR:-$REPO_ROOT}
GIT_REF=${GIT_REF:-}
JAXBLEND_EXTRAS=${JAXBLEND_EXTRAS:-tokenizers,train}
JAX_SPEC=${JAX_SPEC:-jax[tpu]}
REMOTE_TARBALL=jaxblend-src.tar.gz

if [[ ! -f $SOURCE_DIR/pyproject.toml || ! -f $SOURCE_DIR/launch/worker.sh ]]; then
  die "SOURCE_DIR='$SOURCE_DIR' is not a jaxblend tree (needs pyproject.toml and launch/worker.sh)"
fi

# Writes the tarball of SOURCE_DIR to $1.
make_tarball() {
  local out=$1
  if git -C "$SOURCE_DIR" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    if [[ -n $GIT_REF ]]; then
      git -C "$SOURCE_DIR" archive --format=tar.gz -o "$out" "$GIT_REF"
      return
    fi
    (
      cd "$SOURCE_DIR"
      git ls-files -z --cached --others --exclude-standard |
        while IFS= read -r -d '' path; do
          # Skip files deleted in the working tree but still in the index.
          if [[ -e $path || -L $path ]]; then
            printf '%s\0' "$path"
          fi
        done |
        tar --null -T - -czf "$out"
    )
  else
    [[ -z $GIT_REF ]] || die "GIT_REF='$GIT_REF' is set but SOURCE_DIR='$SOURCE_DIR' is not a git checkout"
    tar -C "$SOURCE_DIR" --exclude=./.venv --exclude=./.git --exclude=__pycache__ \
      --exclude=./runs --exclude=./logs -czf "$out" .
  fi
}

workdir=$(mktemp -d)
trap 'rm -rf "$workdir"' EXIT
tarball="$workdir/$REMOTE_TARBALL"
make_tarball "$tarball"
echo "packed $SOURCE_DIR${GIT_REF:+ at $GIT_REF}: $(du -h "$tarball" | cut -f1)" >&2

tpu_vm scp "$tarball" "$TPU_NAME:$REMOTE_TARBALL" --worker=all

WORKER_ENV=("JAXBLEND_EXTRAS=$JAXBLEND_EXTRAS" "JAX_SPEC=$JAX_SPEC")
if [[ -n ${WORKER_PYTHON:-} ]]; then
  WORKER_ENV+=("WORKER_PYTHON=$WORKER_PYTHON")
fi
unpack="mkdir -p $(shq "$REMOTE_DIR") && tar -xzf $REMOTE_TARBALL -C $(shq "$REMOTE_DIR") && rm -f $REMOTE_TARBALL"
tpu_vm ssh "$TPU_NAME" --worker=all "--command=$unpack && $(worker_command setup)"
