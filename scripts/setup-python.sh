#!/usr/bin/env bash
# Creates (or completes) the Python environment used by the reference fixtures
# (tests/fixtures/*.py), the Hugging Face baseline benchmarks (benches/hf_baseline.py)
# and the `tch` build (LIBTORCH_USE_PYTORCH=1, see ../shared/docs/GPU.md).
#
#   scripts/setup-python.sh            # creates .venv-torch at the repo root
#   VENV=/some/where scripts/setup-python.sh
#
# Idempotent: a package already installed at the wanted version is not reinstalled,
# and when everything is present the script only checks and prints the versions.
# torch==2.11.0 from PyPI brings the CUDA 13 libraries (~4.7 GB): that is expected,
# it is the exact libtorch the GPU machine runs.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv-torch}"
PYTHON="${PYTHON:-python3}"

TORCH_VERSION="2.11.0"
# transformers 5.x (the published baseline figures were measured with 5.23)
TRANSFORMERS_SPEC="transformers>=5.0,<6"
OTHERS=(safetensors numpy pyarrow tokenizers)

if [ ! -x "$VENV/bin/python" ]; then
    echo "setup-python: creating $VENV" >&2
    "$PYTHON" -m venv "$VENV"
fi
PY="$VENV/bin/python"

# Returns 0 when the distribution is installed (and, if given, at the exact version).
have() {
    "$PY" - "$1" "${2:-}" <<'PYEOF'
import sys
from importlib import metadata
name, want = sys.argv[1], sys.argv[2]
try:
    v = metadata.version(name)
except metadata.PackageNotFoundError:
    sys.exit(1)
if want and v.split("+")[0] != want:
    sys.exit(1)
if name == "transformers" and not v.startswith("5."):
    sys.exit(1)
PYEOF
}

missing=()
have torch "$TORCH_VERSION" || missing+=("torch==$TORCH_VERSION")
have transformers || missing+=("$TRANSFORMERS_SPEC")
for p in "${OTHERS[@]}"; do
    have "$p" || missing+=("$p")
done

if [ "${#missing[@]}" -gt 0 ]; then
    echo "setup-python: installing ${missing[*]}" >&2
    "$PY" -m pip install --disable-pip-version-check --quiet "${missing[@]}"
else
    echo "setup-python: everything already installed in $VENV" >&2
fi

"$PY" - <<'PYEOF'
import torch, transformers, safetensors, numpy, pyarrow, tokenizers, os
print(f"python {'.'.join(map(str, __import__('sys').version_info[:3]))}")
for m in (torch, transformers, safetensors, numpy, pyarrow, tokenizers):
    print(f"{m.__name__} {m.__version__}")
print(f"torch lib dir: {os.path.join(os.path.dirname(torch.__file__), 'lib')}")
PYEOF
