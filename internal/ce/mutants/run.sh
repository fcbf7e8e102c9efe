#!/usr/bin/env bash
# make test-mutants: every B test (internal/ce/b_test.go) must fail when the
# fix it pins is undone. Each BNN.patch here undoes one fix (ENN.patch: an
# engine decision outside the seed's defects, pinned by its test); this applies
# each in a scratch copy of the module and runs its test, which must fail
# (a hang counts as a failure: -timeout). Prints one line per mutant and
# exits non-zero when one survives or does not apply. MUTANTS="B08 B17"
# runs only those. The patches of internal/comm/mutants do the same for
# the communicators' decisions, run in ./internal/comm/: FNN forward
# mode's (routing agreement, real-first teardown, the window rule), CNN
# the rest (a refusal fails every rank, CECOLL_CHECK's rooted offsets,
# the engine settings agreed at init, graph replays under
# the timeout, forward-only on too few queues, the queues a rank holds
# and the streams a group may use),
# PNN point-to-point's (matching order, credits before reuse, signal
# after data, the staged halves, the streams of a thread's group; in
# internal/ce: captured pairs, the receives' stream, a staging slot per
# sender).
set -u
root=$(cd "$(dirname "$0")/../../.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
survived=0 total=0
for p in "$root"/internal/ce/mutants/[BEP]*.patch "$root"/internal/comm/mutants/[CFP]*.patch; do
  pkg=./internal/$(basename "$(dirname "$(dirname "$p")")")/
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
  (cd "$scratch/m" && timeout 300 go test -count=1 -timeout 90s -run "$test" "$pkg" >"$scratch/test.log" 2>&1)
  rc=$?
  secs=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    echo "SURVIVED $name ($test passed with the fix undone: $(sed -n 1p "$p"))"
    survived=$((survived + 1))
  else
    echo "killed   $name by $test in ${secs}s ($(sed -n 1p "$p" | sed 's/^mutant [A-Z0-9]*: //'))"
  fi
done
# export/mutants/XNN.patch undo a decision of the C layer: each is applied
# to a scratch copy of the tree, whose library is built and run under
# test_forward cecoll preloaded in front of the fake NCCL (ctests), which
# must fail.
for p in "$root"/export/mutants/X*.patch; do
  name=$(basename "$p" .patch)
  case " ${MUTANTS:-$name} " in *" $name "*) ;; *) continue ;; esac
  total=$((total + 1))
  rm -rf "$scratch/m"
  mkdir -p "$scratch/m"
  (cd "$root" && git ls-files -z | xargs -0 cp --parents -t "$scratch/m")
  if ! git -C "$scratch/m" apply "$p" 2>"$scratch/apply.log"; then
    echo "BROKEN   $name: the patch does not apply: $(head -1 "$scratch/apply.log")"
    survived=$((survived + 1))
    continue
  fi
  start=$(date +%s)
  (
    cd "$scratch/m" && mkdir -p build/fake &&
      go build -buildmode=c-shared -o build/libcecoll.so ./export &&
      gcc -shared -fPIC -Iinclude -Wl,-soname,libnccl.so.2 -o build/fake/libnccl.so.2 ctests/fake-nccl/fakenccl.c -lpthread -lrt -ldl &&
      gcc -Iinclude -o build/test_forward ctests/test_forward.c -Lbuild/fake -l:libnccl.so.2 -Wl,-rpath,"$PWD/build/fake" -lpthread -ldl &&
      CECOLL_BACKEND=host CECOLL_ROUTE_BYTES=4K LD_PRELOAD="$PWD/build/libcecoll.so" timeout 120 build/test_forward
  ) >"$scratch/test.log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  if [ "$rc" -eq 0 ]; then
    echo "SURVIVED $name (test_forward, cecoll preloaded, passed with it: $(sed -n 1p "$p"))"
    survived=$((survived + 1))
  elif ! grep -q "test_forward:" "$scratch/test.log"; then
    echo "BROKEN   $name: the scratch build or test did not run: $(tail -1 "$scratch/test.log")"
    survived=$((survived + 1))
  else
    echo "killed   $name by test_forward (cecoll preloaded) in ${secs}s ($(sed -n 1p "$p" | sed 's/^mutant [A-Z0-9]*: //'))"
  fi
done
echo "mutants: $((total - survived)) of $total killed"
[ "$survived" -eq 0 ]
