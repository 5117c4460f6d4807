#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: run the GPU tests (read-only: nothing changes MIG mode, clocks,
# persistence or any setting) and keep what they read in tests/fixtures/gpu-captures/<gpu>/, with
# SOURCE.txt noting the machine, driver, date and the tests' outcome. GPU UUIDs, serial numbers and
# the host name are masked in the saved files. <gpu> is the catalogue id (else the GPU's name).
#   tests/gpu/capture.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-.venv/bin/python}

if ! command -v nvidia-smi >/dev/null; then
  echo "capture.sh: no nvidia-smi on PATH: run this on a machine with an NVIDIA GPU" >&2
  exit 4
fi
gpu=$("$PY" - <<'PY'
import sys
sys.path.insert(0, "tests/gpu")
from livegpu import probe, slug
from provision.matrix.loader import load_matrix

live, reason = probe(load_matrix("compat"))
if live is None:
    sys.exit(f"capture.sh: {reason}")
first = live.gpus[0]
print(slug(first.catalogue_id or first.name))
PY
)
dir="tests/fixtures/gpu-captures/$gpu"
mkdir -p "$dir"

set +e
PROVISION_GPU_CAPTURES="$PWD/$dir" "$PY" -m pytest -m gpu -rs -v -p no:cacheprovider tests/gpu "$@" \
  | tee "$dir/pytest.txt"
rc=${PIPESTATUS[0]}
set -e

host=$(hostname)
find "$dir" -type f -exec sed -E -i \
  -e 's/GPU-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}/GPU-00000000-0000-0000-0000-000000000000/g' \
  -e 's/MIG-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}/MIG-00000000-0000-0000-0000-000000000000/g' \
  -e 's#<serial>[^<]*</serial>#<serial>0000000000000</serial>#g' \
  -e "s/\\b${host//./\\.}\\b/redacted-host/g" {} +

driver=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u | paste -sd, -)
os_name=$(. /etc/os-release 2>/dev/null && echo "${PRETTY_NAME:-unknown}")
{
  echo "Captured by tests/gpu/capture.sh (provision's GPU tests, read-only) on a real machine."
  echo "date:    $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "machine: $(uname -srm), $(nproc) cores, ${os_name}"
  echo "driver:  ${driver}"
  echo "gpus:"
  timeout 30 nvidia-smi -L | sed -E 's/\(UUID: [^)]*\)/(UUID masked)/; s/^/  /'
  echo "commit:  $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "pytest exit code: ${rc} (summary in pytest.txt)"
  echo "Identifiers masked: GPU/MIG UUIDs, serial numbers, the host name."
} >"$dir/SOURCE.txt"
echo "capture.sh: captures in $dir (pytest exit $rc)"
exit "$rc"
