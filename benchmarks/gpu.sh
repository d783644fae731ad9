#!/usr/bin/env bash
# benchmarks/gpu.sh: issue 34's GPU measurements on a device machine (benchmarks/gpu.py, its steps in
# gpu_steps.py; gpu.py's docstring says what each step measures). Figures: $OUT/gpu.json and
# $OUT/gpu.log; the table on stdout. About 9.5 minutes at most (the limit below): give the device's
# run a timeout_s of 600.
#
# The device reaches no package registry: wheels for what its image lacks (nltk for nb generate's
# word counts) travel in .whl/ (git-ignored; carry it), fetched here beforehand with
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl nltk
# and are installed below before gpu.py looks for anything missing. nb's CLI wants typer 0.29 (pyproject);
# should the image's typer be another, `nb probe-bias` may refuse to start: gpu.py then times the same
# report through nbcli.probe and says so (probe_bias_api in gpu.json).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/out/gpu}
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
PYTHONUNBUFFERED=1 timeout 570 python3 benchmarks/gpu.py --out "$OUT" "$@"
