#!/usr/bin/env sh
# nb set-up: install the pinned CPU PyTorch where no torch is present, install nb with its test
# extras, then run the main job on a small bundled default (`nb quickstart`).
set -eu
PY="${PYTHON:-python3}"
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==2.13.0"
fi
"$PY" -m pip install -q -e ".[test]"
nb quickstart
