#!/usr/bin/env bash
# lab/h200/python.sh: the Python binding on one H200, by stage:
#   pytest  python/tests with CECOLL_BACKEND=nvidia (ranks in spawned processes on GPU 0, CUDA
#           tensors)
#   smoke   lab/h200/cuda_smoke.py: AllGather, AlltoAll, Scatter and Gather of 7 and 1M floats
#           and an in-place AlltoAll on a registered window, 2 and 4 processes, CUDA tensors
#   readme  the README's torch example as written: its train.py block and its command block
#           (torchrun a process per GPU, cecoll preloaded, CECOLL_DEBUG=INFO into a file per
#           process), then the route and summary lines it asks the user to look for
# python/tests/harness.py pins CECOLL_BACKEND=host and CPU tensors for its own ranks unless the
# caller sets the backend; python -m cecoll.bench has no CUDA mode. build/libcecoll.so comes
# carried:
#
#   run(command="bash lab/h200/python.sh pytest smoke readme", carry=["build"])
#
# Knobs: PYTHON (python3), BUDGET (seconds, 560). Results in $OUT/python.tar.gz, the log in
# $OUT/python.log.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin python
PY=${PYTHON:-python3}
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' || exit 1
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  pytest)
    PYTHONPATH=python CECOLL_LIBRARY=$PWD/build/libcecoll.so timeout 240 "$PY" -m pytest python/tests -x -q -p no:cacheprovider > "$R/pytest.txt" 2>&1
    echo "pytest: rc=$? $(grep -hE '[0-9]+ (passed|failed)' "$R/pytest.txt" | tail -1)"
    grep -hE '^(FAILED|ERROR) ' "$R/pytest.txt" | head -5
    ;;
  smoke)
    PYTHONPATH=python CECOLL_LIBRARY=$PWD/build/libcecoll.so CECOLL_TIMEOUT=30 CECOLL_BOOTSTRAP_TIMEOUT=30 \
      timeout 90 "$PY" lab/h200/cuda_smoke.py > "$R/smoke.txt" 2>&1
    echo "smoke: rc=$?"; grep -hE 'CUDA_SMOKE|Error|error' "$R/smoke.txt" | head -12
    ;;
  readme)
    # The README's ```python gpu train.py block, and its ```sh gpu block run as typed.
    mkdir -p "$R/readme" && rm -f "$R"/readme/cecoll.*.log
    awk '/^```python gpu train.py$/{on=1; next} on && /^```$/{exit} on' README.md > "$R/readme/train.py"
    awk '/^```sh gpu$/{on=1; next} on && /^```$/{exit} on' README.md | sed "s|\$PWD/build|$PWD/build|" > "$R/readme/cmd.sh"
    (cd "$R/readme" && PATH=$(dirname "$(command -v "$PY")"):$PATH timeout 240 bash -e cmd.sh) > "$R/readme.txt" 2>&1
    echo "readme: rc=$? $(grep -c 'right data' "$R/readme.txt") rank(s) with right data"
    grep -hE 'summary|route: ncclAllReduce|route: AllGather|Error|error' "$R/readme.txt" | cut -c1-400 | head -12
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish python
