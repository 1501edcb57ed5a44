#!/usr/bin/env bash
# Builds `pipeline` with the libtorch backend (cargo feature `tch`: CPU and CUDA) offline,
# against the exact PyTorch that will run it (libtorch has no stable ABI; see
# ../shared/docs/GPU.md). Installs torch==2.11.0 into .venv-torch first if needed.
#
#   scripts/build-tch.sh                 # release binary in target/tch/release/pipeline
#   scripts/build-tch.sh test -p pipeline-albert   # any cargo subcommand and args instead
#
# Run the binary with torch's libraries on the library path:
#   LD_LIBRARY_PATH=$(scripts/build-tch.sh --print-libdir) target/tch/release/pipeline ...
set -euo pipefail
cd "$(dirname "$0")/.."

VENV="${PIPELINE_TORCH_VENV:-.venv-torch}"
TORCH_VERSION="${PIPELINE_TORCH_VERSION:-2.11.0}"

if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" 2>/dev/null; then
  echo "installing torch==$TORCH_VERSION into $VENV (about 4.7 GB with its CUDA libraries)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet "torch==$TORCH_VERSION"
fi
VENV="$(cd "$VENV" && pwd)" # absolute: PATH below must not depend on the current directory
LIBDIR="$("$VENV/bin/python" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
if [[ "${1:-}" == "--print-libdir" ]]; then
  echo "$LIBDIR"
  exit 0
fi

# torch-sys finds libtorch through the venv's python; the version check would refuse 2.11
# (tch 0.22 was written for 2.9), and the C++ shim compiles against 2.11 headers fine.
export PATH="$VENV/bin:$PATH"
export LIBTORCH_USE_PYTORCH=1
export LIBTORCH_BYPASS_VERSION_CHECK=1
export LD_LIBRARY_PATH="$LIBDIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# A separate target directory keeps the flex build's artifacts (features unify per build).
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/tch}"

if [[ $# -eq 0 ]]; then
  exec cargo build --release --features tch --bin pipeline
fi
cmd="$1"; shift
exec cargo "$cmd" --features tch "$@"
