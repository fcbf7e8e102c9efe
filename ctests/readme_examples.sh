#!/usr/bin/env bash
# readme_examples.sh: the READMEs' examples are tests, so none can rot.
#
#   bash ctests/readme_examples.sh [README.md python/README.md ...]
#
# README.md brings along every docs/*.md page that holds a marked block.
#
# In a README, a fenced block whose info string reads
#   ```c runnable allgather.c        is a file of the example, and
#   ```sh runnable                   is a command line that builds or runs it.
# (Markdown renders them by the first word; the rest is for this script.)
# Per README, the files are written to a scratch folder that stands for the
# repository root (build/ and python/ are links to the real ones), then the
# command blocks run there with bash -e, in order, twice (an example must
# work again: no stale id file, nothing left behind). `python3` in them is
# $TEST_PYTHON (Debian's /usr/bin/python3: torch comes from Debian); without
# torch for it, a block that runs python3 is skipped, loudly.
#   ```python gpu train.py          is an example that needs a GPU and a real
#   ```sh gpu                        NCCL (torch under cecoll): CI has neither, so
# these are written and syntax-checked (python3 -m py_compile, bash -n) but
# never run, and the summary says so loudly (NOT RUN).
# A c, cpp or python block that is not marked fails the check: every example
# must be a complete, runnable program. Command lines that are not the
# example's own (make test, install lines) stay unmarked sh blocks.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
TEST_PYTHON=${TEST_PYTHON:-/usr/bin/python3}
TIMEOUT=${CECOLL_TEST_TIMEOUT:-120}
[ $# -gt 0 ] || set -- README.md python/README.md ctests/README.md
# README.md stands for the docs/ pages too: each page holding a marked
# example (the C example lives in docs/c-api.md) joins the list after it.
files=()
for f in "$@"; do
  case " ${files[*]-} " in *" $f "*) ;; *) files+=("$f") ;; esac
  if [ "$f" = README.md ]; then
    for page in $(cd "$root" && grep -lE '^```[a-z]+ (runnable|gpu)( |$)' docs/*.md 2>/dev/null); do
      case " ${files[*]} $* " in *" $page "*) ;; *) files+=("$page") ;; esac
    done
  fi
done
set -- "${files[@]}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
ln -s "$TEST_PYTHON" "$tmp/bin/python3"
have_torch=0
"$TEST_PYTHON" -c 'import torch' >/dev/null 2>&1 && have_torch=1
passed=0 failed=0 skipped=0 gpuonly=0

for readme in "$@"; do
  src=$root/$readme
  work=$tmp/$(echo "$readme" | tr / _)
  mkdir -p "$work"
  ln -s "$root/build" "$work/build"
  ln -s "$root/python" "$work/python"
  # Writes each marked block to its file in $work, lists the command
  # blocks in $work/.commands; fails on an unmarked example.
  if ! awk -v dir="$work" -v readme="$readme" '
    /^```/ && !inblk {
      n = split(substr($0, 4), w, " ")
      lang = w[1]; mark = (n >= 2 && w[2] == "runnable"); name = (n >= 3 ? w[3] : "")
      gpu = (n >= 2 && w[2] == "gpu")
      inblk = 1; out = ""
      if (gpu && name != "") {
        out = dir "/" name; print out "\t" readme ":" NR >> (dir "/.gpu")
      } else if (gpu && lang == "sh") {
        out = sprintf("%s/.gpu-%03d.sh", dir, NR); print out "\t" readme ":" NR >> (dir "/.gpu")
      } else if (gpu) {
        printf "%s:%d: a gpu %s block needs a file name (```%s gpu NAME)\n", readme, NR, lang, lang; bad = 1
      } else if (mark && name != "") {
        out = dir "/" name
      } else if (mark && lang == "sh") {
        out = sprintf("%s/.cmd-%03d.sh", dir, NR); print out "\t" readme ":" NR >> (dir "/.commands")
      } else if (mark) {
        printf "%s:%d: a runnable %s block needs a file name (```%s runnable NAME)\n", readme, NR, lang, lang; bad = 1
      } else if (lang == "c" || lang == "cpp" || lang == "python" || lang == "py") {
        printf "%s:%d: a %s example not marked runnable (```%s runnable NAME, or ```%s gpu NAME)\n", readme, NR, lang, lang, lang; bad = 1
      }
      if (out != "") printf "" > out
      next
    }
    /^```/ && inblk { inblk = 0; if (out != "") close(out); next }
    inblk && out != "" { print > out }
    END { exit bad }
  ' "$src"; then
    echo "FAIL  $readme: see above"
    failed=$((failed + 1))
    continue
  fi
  # GPU-only examples: written, syntax-checked, never run here.
  if [ -f "$work/.gpu" ]; then
    while IFS=$'\t' read -r file where; do
      case $file in
        *.py) check=("$TEST_PYTHON" -m py_compile "$file") ;;
        *.sh) check=(bash -n "$file") ;;
        *) check=(true) ;;
      esac
      if out=$(cd "$work" && "${check[@]}" 2>&1); then
        gpuonly=$((gpuonly + 1))
        echo "NOT RUN  $where (needs a GPU and a real NCCL; syntax checked)"
      else
        failed=$((failed + 1))
        echo "FAIL  $where: the GPU-only example does not parse"
        echo "$out" | sed 's/^/    /'
      fi
    done <"$work/.gpu"
  fi
  [ -f "$work/.commands" ] || continue
  for round in 1 2; do
    while IFS=$'\t' read -r cmd where; do
      if grep -qw python3 "$cmd" && [ "$have_torch" -eq 0 ]; then
        [ "$round" -eq 1 ] && skipped=$((skipped + 1)) && echo "SKIP  $where (python3: no torch for $TEST_PYTHON)"
        continue
      fi
      log=$work/.log
      if (cd "$work" && PATH="$tmp/bin:$PATH" timeout -k 5 "$TIMEOUT" bash -e "$cmd") </dev/null >"$log" 2>&1; then
        passed=$((passed + 1))
        echo "PASS  $where (run $round)"
      else
        failed=$((failed + 1))
        echo "FAIL  $where (run $round): the block"
        sed 's/^/    /' "$cmd"
        echo "  printed:"
        tail -30 "$log" | sed 's/^/    /'
      fi
    done <"$work/.commands"
  done
done

if [ "$skipped" -gt 0 ]; then
  echo "################################################################"
  echo "## SKIPPED: $skipped README example(s) run with python3: torch is not installed for $TEST_PYTHON"
  echo "## install it: apt-get install python3-torch python3-numpy"
  echo "################################################################"
fi
if [ "$gpuonly" -gt 0 ]; then
  echo "################################################################"
  echo "## NOT RUN: $gpuonly GPU-only README example(s) (\`\`\`python gpu / \`\`\`sh gpu):"
  echo "## they need a GPU and a real NCCL: run them by hand on a GPU machine; here only their syntax was checked"
  echo "################################################################"
fi
echo "readme_examples.sh: $passed passed, $failed failed, $skipped skipped, $gpuonly GPU-only not run"
[ "$failed" -eq 0 ] && [ $((passed + skipped + gpuonly)) -gt 0 ]
