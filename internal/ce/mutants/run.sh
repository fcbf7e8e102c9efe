#!/usr/bin/env bash
# make test-mutants: every B test (internal/ce/b_test.go) must fail when the
# fix it pins is undone. Each BNN.patch here undoes one fix; this applies
# each in a scratch copy of the module and runs its test, which must fail
# (a hang counts as a failure: -timeout). Prints one line per mutant and
# exits non-zero when one survives or does not apply. MUTANTS="B08 B17"
# runs only those.
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
survived=0 total=0
for p in "$root"/internal/ce/mutants/B*.patch; do
  name=$(basename "$p" .patch)
  case " ${MUTANTS:-$name} " in *" $name "*) ;; *) continue ;; esac
  total=$((total + 1))
  rm -rf "$scratch/m"
  mkdir -p "$scratch/m"
  cp -r "$root/go.mod" "$root/go.sum" "$root/internal" "$scratch/m/"
  if ! git -C "$scratch/m" apply "$p" 2>"$scratch/apply.log"; then
    echo "BROKEN   $name: the patch does not apply: $(head -1 "$scratch/apply.log")"
    survived=$((survived + 1))
    continue
  fi
  test=$(sed -n 's/^test: //p' "$p")
  start=$(date +%s)
  (cd "$scratch/m" && timeout 300 go test -count=1 -timeout 90s -run "$test" ./internal/ce/ >"$scratch/test.log" 2>&1)
  rc=$?
  secs=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    echo "SURVIVED $name ($test passed with the fix undone: $(sed -n 1p "$p"))"
    survived=$((survived + 1))
  else
    echo "killed   $name by $test in ${secs}s ($(sed -n 1p "$p" | sed 's/^mutant [A-Z0-9]*: //'))"
  fi
done
echo "mutants: $((total - survived)) of $total killed"
[ "$survived" -eq 0 ]
