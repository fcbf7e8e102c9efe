#!/usr/bin/env bash
# run.sh: build and run cecoll's C tests.
#
#   bash ctests/run.sh                 everything (needs build/libcecoll.so: make)
#   bash ctests/run.sh --compile-only  only check that every test compiles
#   bash ctests/run.sh --fast          the default environment only
#   CECOLL_LIB=/path/libcecoll.so bash ctests/run.sh   another build of the library
#
# Steps: the header check (test_header.sh); every test built with
# gcc -Wall -Werror -Iinclude against build/libcecoll.so; then each test run
# under a matrix of environments, each run under `timeout 120` so a hang
# fails:
#   default                  the caller's environment (a GPU where present), full options
#   caps=<switch>            CECOLL_HOST_CAPS=nobatchcopy|noattrs|nopeerwrite|nomulticast|hipbatches
#   chaos=<seed>             CECOLL_HOST_CHAOS=1,2,3: a fixed list; a failure
#                            under any seed is a bug, not a flake
#   sync=star,chaos=2        CECOLL_SYNC=star with copy-written flags, chaos 2
#   sync=allpairs,nomulticast,chaos=3   all pairs over unicast, chaos 3
#   lsan                     a reduced set built with -fsanitize=leak
# (caps and chaos rows run on the host device: CECOLL_BACKEND=host.)
# test_multiproc (several processes through the TCP bootstrap; built with
# mp_common.c) runs in the default row, caps=nopeerwrite and chaos=1 only,
# the last two with a reduced set. test_fork (a child forked after the
# library loaded is refused) runs in the default row only.
# The correctness matrix (matrix.c, built with common.c and mp_common.c):
# every cell with every rank on device 0 (dev0) on the host device, plain
# and with a 4 KiB staging window (the plain row only with --fast), under
# CECOLL_HOST_CHAOS=1,2,3 every such cell of the four collectives and the
# pairwise subset of sendrecv and broadcast (all of them: make
# test-matrix), 16 cells per process; the pairwise subset of the cells
# with a device per rank (dev, rank r on the host's device r) plain (also
# with --fast), with a 4 KiB staging window and under each chaos seed,
# and every dev cell of 3 ranks plain (every dev cell: make
# test-matrix); and the pairwise subset of both
# with a process per cell. The collectives that came later (alltoallv,
# sendrecv-mismatch under CECOLL_CHECK=1) in rows of their own: their
# pairwise subset plain and under each chaos seed with a 4 KiB staging
# window (all of them: make test-matrix). A 10 s watchdog per cell, 4 processes at
# a time (a hung cell sleeps, so more run than there are cores;
# docs/performance.md, "The matrix's running time"). Then the runner's
# own check: a cell that hangs mid-batch (MATRIX_SELFTEST_HANG).
# Forward mode (test_forward.c): the fake "real NCCL" of ctests/fake-nccl
# is built as build/ctests/fake-nccl/libnccl.so.2, and the test runs on
# the host device the three ways in: linked to cecoll with CECOLL_NCCL_LIB
# naming the fake (row forward=lib), linked to the fake with cecoll
# preloaded (forward=preload), and linked to the fake with a copy of
# cecoll as libnccl.so.2 first on LD_LIBRARY_PATH (forward=dropin); then
# forward=lib under chaos seeds 1-3 (the default environment only with
# --fast: the three ways). test_dropin_link.sh: a library using NCCL's
# device API links against build/dropin/libnccl.so.2 and loads (torch).
# test_mpi.c: an MPI program built with mpicc, linked with -lnccl against
# build/dropin, under mpirun with 2 and 4 ranks, plain and chaos=1 (plain
# only with --fast; SKIPPED loudly without mpicc and mpirun).
# test_ncclenv (NCCL's environment: NCCL_DEBUG*, NCCL_COMM_ID, ...; its
# children started with posix_spawn, built with mp_common.c) and test_fork
# run in the default row only, test_ncclenv with FAKE_NCCL naming the fake
# for its forward case.
# Then the exported-symbol check (test_symbols.sh), the install layout
# and pkg-config check (install_check.sh, its pkg-config part skipped
# loudly without pkg-config) and the CMake package check (cmake_check.sh,
# skipped loudly without cmake). Prints a summary and
# exits non-zero on any failure. Sized to take a few minutes on 2 cores.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
lib=${CECOLL_LIB:-$root/build/libcecoll.so} # CECOLL_LIB: test another build
libdir=$(cd "$(dirname "$lib")" 2>/dev/null && pwd)
out="$root/build/ctests"
CC=${CC:-gcc}
TIMEOUT=${CECOLL_TEST_TIMEOUT:-120}
tests="api errors env allgather alltoall scatter gather"
mptests="multiproc" # own rows; also linked with mp_common.c
envtests="ncclenv"  # the default row only; also linked with mp_common.c
onetests="fork"     # the default row only: the environment matrix does not touch what they check
mode=all
case "${1:-}" in
  --compile-only) mode=compile ;;
  --fast) mode=fast ;;
  "") ;;
  *) echo "usage: $0 [--compile-only|--fast]" >&2; exit 2 ;;
esac

results=()
failed=0
record() { # $1 name, $2 status (PASS/FAIL/SKIP), $3 detail
  results+=("$(printf '%-4s  %-40s %s' "$2" "$1" "$3")")
  [ "$2" = FAIL ] && failed=$((failed + 1))
  return 0
}

summary() {
  echo
  echo "==== C test summary ===="
  printf '%s\n' "${results[@]}"
  local npass nfail nskip
  npass=$(printf '%s\n' "${results[@]}" | grep -c '^PASS')
  nfail=$(printf '%s\n' "${results[@]}" | grep -c '^FAIL')
  nskip=$(printf '%s\n' "${results[@]}" | grep -c '^SKIP')
  echo "run.sh: $npass passed, $nfail failed, $nskip skipped"
}

mkdir -p "$out"

# ---- Headers -----------------------------------------------------------------
if bash "$here/test_header.sh" >"$out/test_header.log" 2>&1; then
  record test_header.sh PASS "$(tail -1 "$out/test_header.log")"
else
  record test_header.sh FAIL "see $out/test_header.log"
  cat "$out/test_header.log"
fi

cflags=(-std=gnu17 -O1 -g -Wall -Werror -I"$root/include")
if [ "$mode" = compile ]; then
  $CC "${cflags[@]}" -fsyntax-only "$here/mp_common.c" || record "compile mp_common.c" FAIL ""
  if $CC "${cflags[@]}" -fsyntax-only "$here/matrix.c"; then
    record "compile matrix" PASS "syntax only"
  else
    record "compile matrix" FAIL ""
  fi
  if $CC "${cflags[@]}" -fsyntax-only "$here/test_forward.c" && $CC "${cflags[@]}" -fsyntax-only "$here/fake-nccl/fakenccl.c"; then
    record "compile test_forward" PASS "syntax only, with the fake NCCL"
  else
    record "compile test_forward" FAIL ""
  fi
  if command -v mpicc >/dev/null; then
    if mpicc "${cflags[@]}" -fsyntax-only "$here/test_mpi.c"; then
      record "compile test_mpi" PASS "syntax only, mpicc"
    else
      record "compile test_mpi" FAIL ""
    fi
  else
    echo "!!!! mpicc not found (Debian: openmpi-bin libopenmpi-dev): test_mpi is not compiled !!!!" >&2
    record "compile test_mpi" SKIP "mpicc not found: install openmpi-bin libopenmpi-dev"
  fi
  for t in $tests $mptests $envtests $onetests; do
    if $CC "${cflags[@]}" -fsyntax-only "$here/test_$t.c" && $CC "${cflags[@]}" -fsyntax-only "$here/common.c"; then
      record "compile test_$t" PASS "syntax only"
    else
      record "compile test_$t" FAIL ""
    fi
  done
  summary
  [ "$failed" -eq 0 ]
  exit
fi

if [ ! -f "$lib" ]; then
  record libcecoll.so FAIL "$lib missing: run make first"
  summary
  exit 1
fi

# ---- Build -------------------------------------------------------------------
link=(-L"$libdir" -lcecoll -Wl,-rpath,"$libdir" -lpthread)
build() { # $1 test, $2 output dir, rest: extra flags
  local t=$1 dir=$2 extra=()
  shift 2
  mkdir -p "$dir"
  case " $mptests $envtests " in *" $t "*) extra=("$here/mp_common.c") ;; esac
  $CC "${cflags[@]}" "$@" -o "$dir/test_$t" "$here/test_$t.c" "$here/common.c" "${extra[@]}" "${link[@]}" 2>"$dir/test_$t.build.log"
}
for t in $tests $mptests $envtests $onetests; do
  if build "$t" "$out"; then
    record "build test_$t" PASS ""
  else
    record "build test_$t" FAIL "see $out/test_$t.build.log"
    cat "$out/test_$t.build.log"
  fi
done

# Forward mode: the fake NCCL, the test linked to cecoll ($out) and to the
# fake ($out/fl), and cecoll in place of libnccl.so.2 ($out/dropin).
fake="$out/fake-nccl"
mkdir -p "$fake" "$out/fl" "$out/dropin"
if $CC "${cflags[@]}" -fPIC -shared -Wl,-soname,libnccl.so.2 -o "$fake/libnccl.so.2" "$here/fake-nccl/fakenccl.c" \
  -lpthread -lrt -ldl 2>"$fake/build.log" &&
  $CC "${cflags[@]}" -o "$out/test_forward" "$here/test_forward.c" "${link[@]}" -ldl 2>>"$fake/build.log" &&
  $CC "${cflags[@]}" -o "$out/fl/test_forward" "$here/test_forward.c" -L"$fake" -l:libnccl.so.2 -Wl,-rpath,"$fake" \
    -lpthread -ldl 2>>"$fake/build.log" &&
  if [ -z "${CECOLL_LIB:-}" ] && [ -f "$root/build/dropin/libnccl.so.2" ] && ! [ "$root/build/dropin/libnccl.so.2" -ot "$lib" ]; then
    cp "$root/build/dropin/libnccl.so.2" "$out/dropin/libnccl.so.2" # make dropin: SONAME libnccl.so.2
  else
    cp "$lib" "$out/dropin/libnccl.so.2"
  fi; then
  record "build test_forward" PASS "with the fake NCCL (3 ways in)"
else
  record "build test_forward" FAIL "see $fake/build.log"
  cat "$fake/build.log"
fi

# The matrix finds libcecoll.so beside it too ($ORIGIN/..), as in build/.
if $CC "${cflags[@]}" -o "$out/matrix" "$here/matrix.c" "$here/common.c" "$here/mp_common.c" "${link[@]}" \
  -Wl,-rpath,'$ORIGIN/..' 2>"$out/matrix.build.log"; then
  record "build matrix" PASS ""
else
  record "build matrix" FAIL "see $out/matrix.build.log"
  cat "$out/matrix.build.log"
fi

lsan=0
if [ "$mode" = all ]; then
  if echo 'int main(void){return 0;}' | $CC -fsanitize=leak -x c - -o "$out/lsan_probe" 2>/dev/null &&
    "$out/lsan_probe"; then
    lsan=1
    # A canary: a deliberate leak in a program linked to cecoll must be
    # reported, or a clean lsan row would prove nothing.
    printf '%s\n' '#include <stdlib.h>' '#include "nccl.h"' 'void* volatile keep;' \
      'int main(void) { int v; ncclGetVersion(&v); keep = malloc(77); keep = 0; return v == 0; }' >"$out/lsan_canary.c"
    if $CC -fsanitize=leak -I"$root/include" -o "$out/lsan_canary" "$out/lsan_canary.c" "${link[@]}" 2>/dev/null; then
      LSAN_OPTIONS=exitcode=23 "$out/lsan_canary" >/dev/null 2>&1
      if [ $? -eq 23 ]; then
        record "lsan canary" PASS "a deliberate leak is reported"
      else
        record "lsan canary" FAIL "LeakSanitizer missed a deliberate leak: the lsan rows prove nothing"
      fi
    else
      record "lsan canary" FAIL "could not build the canary"
    fi
    for t in $tests; do
      build "$t" "$out/lsan" -fsanitize=leak -fno-omit-frame-pointer || {
        record "build lsan test_$t" FAIL "see $out/lsan/test_$t.build.log"
        cat "$out/lsan/test_$t.build.log"
      }
    done
  else
    echo "!!!! LeakSanitizer is not available with $CC: the lsan rows are SKIPPED !!!!" >&2
    record "lsan" SKIP "LeakSanitizer not available with $CC"
  fi
fi

# ---- Run -----------------------------------------------------------------------
# run_one ROW TEST BINARY_DIR ENV... -- ARGS...
run_one() {
  local row=$1 t=$2 dir=$3
  shift 3
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  local bin="$dir/test_$t"
  local log="$out/logs/$row.test_$t.log"
  mkdir -p "$out/logs"
  if [ ! -x "$bin" ]; then
    record "$row test_$t" FAIL "not built"
    return
  fi
  local start end rc
  start=$(date +%s)
  # The tests' own watchdog fires first and names the case that hung.
  # test_api runs each check group in a child with a shorter watchdog of
  # its own, so one hang costs little and the other groups still report.
  env CECOLL_TEST_WATCHDOG=$((TIMEOUT - 5)) CECOLL_TEST_CHILD_WATCHDOG=${CECOLL_TEST_CHILD_WATCHDOG:-20} "${envs[@]}" timeout -k 10 "$TIMEOUT" "$bin" "$@" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  local last
  last=$(grep -E '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    record "$row test_$t" PASS "$((end - start))s  $last"
  else
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && last="TIMED OUT after ${TIMEOUT}s; $last"
    record "$row test_$t" FAIL "rc=$rc $((end - start))s  $last  (log: $log)"
    echo "---- $row test_$t failed (rc=$rc); last lines of $log:"
    tail -25 "$log"
  fi
}

# Options per row: the default row covers every dimension; the others a
# reduced set (still 9 ranks: device sharing and sub-batches).
full_args=()
reduced_args=(-r 1,2,3,4,9 -c 0,1,7,1001 -l 0 -g 2)
lsan_args=(-r 2,3,9 -c 0,7 -l 0 -g 2 -q)
# test_multiproc has its own options (ctests/README.md): the reduced rows
# keep every data path and the kills, and leave the bootstrap refusals
# (which neither caps nor chaos touch) to the default row.
mp_reduced_args=(-c 0,7,1M -q -X data_n2,data_n3,data_n4,data_n8,data_2x2,control_1x3,kill_rank2,kill_parked,abort_parked,kill_sendrecv,sendrecv_timeout)

for t in $tests; do
  run_one default "$t" "$out" CECOLL_TEST_ROW=default -- "${full_args[@]}"
done
for t in $mptests; do
  run_one default "$t" "$out" CECOLL_TEST_ROW=default -- "${full_args[@]}"
done
for t in $envtests; do
  run_one default "$t" "$out" CECOLL_TEST_ROW=default "FAKE_NCCL=$fake/libnccl.so.2" --
done
for t in $onetests; do
  run_one default "$t" "$out" CECOLL_TEST_ROW=default --
done
# Forward mode, the three ways in (see the top).
fwd_env=(CECOLL_BACKEND=host CECOLL_ROUTE_BYTES=4K)
run_one forward=lib forward "$out" "${fwd_env[@]}" "CECOLL_NCCL_LIB=$fake/libnccl.so.2" "FAKE_NCCL_LOG=$out/logs/fake.lib.log" --
run_one forward=preload forward "$out/fl" "${fwd_env[@]}" "LD_PRELOAD=$lib" "FAKE_NCCL_LOG=$out/logs/fake.preload.log" --
run_one forward=dropin forward "$out/fl" "${fwd_env[@]}" "LD_LIBRARY_PATH=$out/dropin:$fake" \
  "FAKE_NCCL_LOG=$out/logs/fake.dropin.log" --
# The drop-in links and loads as torch's libtorch_cuda.so needs it (NCCL's
# device API: test_dropin_link.sh); only make dropin's own build has the
# SONAME libnccl.so.2.
if [ -z "${CECOLL_LIB:-}" ] && [ -f "$root/build/dropin/libnccl.so.2" ] && ! [ "$root/build/dropin/libnccl.so.2" -ot "$lib" ]; then
  if bash "$here/test_dropin_link.sh" "$root/build/dropin/libnccl.so.2" "$fake" >"$out/test_dropin_link.log" 2>&1; then
    record test_dropin_link.sh PASS "$(tail -1 "$out/test_dropin_link.log")"
  else
    record test_dropin_link.sh FAIL "see $out/test_dropin_link.log"
    cat "$out/test_dropin_link.log"
  fi
else
  record test_dropin_link.sh SKIP "no current build/dropin/libnccl.so.2 (make dropin), or CECOLL_LIB set"
fi
# MPI (test_mpi.c): an MPI+NCCL application's way in. Built with mpicc and
# linked with -lnccl against make dropin's build/dropin/libnccl.so.2 (through
# a libnccl.so link in $out/mpi, as an NCCL development package has it), run
# under mpirun with build/dropin first on LD_LIBRARY_PATH, one rank per
# process on device rank % count of the host device, CECOLL_ROUTE=ce:
# 2 and 4 ranks, plain and (not with --fast) under CECOLL_HOST_CHAOS=1,
# about 15 s in all on 2 cores. Without mpicc and mpirun (Debian:
# openmpi-bin libopenmpi-dev, which .ci/run installs) the rows are SKIPPED
# loudly; without a current drop-in (make dropin), or with CECOLL_LIB, too.
run_mpi() { # ROW NP ENV...
  local row=$1 np=$2 log="$out/logs/$1.test_mpi.log" start end rc last ompi=() envs=()
  shift 2
  mkdir -p "$out/logs"
  envs=(CECOLL_BACKEND=host CECOLL_ROUTE=ce "LD_LIBRARY_PATH=$root/build/dropin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@")
  # Open MPI: root needs --allow-run-as-root, fewer cores than ranks
  # --oversubscribe, and -x passes each variable on (other MPIs inherit them).
  if mpirun --version 2>&1 | grep -q "Open MPI"; then
    ompi=(--allow-run-as-root --oversubscribe)
    for e in "${envs[@]}"; do ompi+=(-x "${e%%=*}"); done
  fi
  start=$(date +%s)
  env "${envs[@]}" timeout -k 10 "$TIMEOUT" mpirun "${ompi[@]}" -np "$np" "$out/mpi/test_mpi" -w $((TIMEOUT - 5)) >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  last=$(grep -E '^test_mpi: [0-9]+ ranks, [0-9]+ lines' "$log" | tail -1)
  if [ "$rc" -eq 0 ] && [ -n "$last" ]; then
    record "$row test_mpi" PASS "$((end - start))s  ${last#test_mpi: }"
  else
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && last="TIMED OUT after ${TIMEOUT}s; $last"
    record "$row test_mpi" FAIL "rc=$rc $((end - start))s  ${last#test_mpi: }  (log: $log)"
    echo "---- $row test_mpi failed (rc=$rc); its FAIL lines and the last lines of $log:"
    grep -E '^FAIL' "$log" | head -20 | cut -c1-240
    tail -15 "$log"
  fi
}
dropin_so="$root/build/dropin/libnccl.so.2"
if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "!!!! mpicc or mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev): the MPI rows are SKIPPED !!!!" >&2
  record "mpi test_mpi" SKIP "mpicc or mpirun not found: install openmpi-bin libopenmpi-dev"
elif [ -n "${CECOLL_LIB:-}" ] || [ ! -f "$dropin_so" ] || [ "$dropin_so" -ot "$lib" ]; then
  echo "!!!! no current build/dropin/libnccl.so.2 (make dropin), or CECOLL_LIB set: the MPI rows are SKIPPED !!!!" >&2
  record "mpi test_mpi" SKIP "no current build/dropin/libnccl.so.2 (make dropin), or CECOLL_LIB set"
else
  mkdir -p "$out/mpi"
  ln -sfn "$dropin_so" "$out/mpi/libnccl.so"
  if mpicc "${cflags[@]}" -o "$out/mpi/test_mpi" "$here/test_mpi.c" "$here/common.c" -L"$out/mpi" -lnccl -lpthread \
    2>"$out/mpi/build.log"; then
    if command -v readelf >/dev/null && ! readelf -d "$out/mpi/test_mpi" | grep -q 'NEEDED.*\[libnccl\.so\.2\]'; then
      record "build test_mpi" FAIL "$out/mpi/test_mpi does not need libnccl.so.2: $(readelf -d "$out/mpi/test_mpi" | grep NEEDED | tr -s ' ' | tr '\n' ' ')"
    else
      record "build test_mpi" PASS "mpicc, -lnccl against build/dropin (NEEDED libnccl.so.2)"
    fi
    for np in 2 4; do
      run_mpi "mpi,n$np" "$np"
      [ "$mode" = all ] && run_mpi "mpi,n$np,chaos=1" "$np" CECOLL_HOST_CHAOS=1
    done
  else
    record "build test_mpi" FAIL "see $out/mpi/build.log"
    cat "$out/mpi/build.log"
  fi
fi
if [ "$mode" = all ]; then
  for seed in 1 2 3; do
    run_one "forward=lib,chaos=$seed" forward "$out" "${fwd_env[@]}" CECOLL_HOST_CHAOS=$seed \
      "CECOLL_NCCL_LIB=$fake/libnccl.so.2" "FAKE_NCCL_LOG=$out/logs/fake.chaos$seed.log" --
  done
fi
if [ "$mode" = all ]; then
  for cap in nobatchcopy noattrs nopeerwrite nomulticast hipbatches; do
    for t in $tests; do
      run_one "caps=$cap" "$t" "$out" CECOLL_BACKEND=host CECOLL_HOST_CAPS=$cap -- "${reduced_args[@]}"
    done
    if [ "$cap" = nopeerwrite ]; then
      for t in $mptests; do
        run_one "caps=$cap" "$t" "$out" CECOLL_BACKEND=host CECOLL_HOST_CAPS=$cap -- "${mp_reduced_args[@]}"
      done
    fi
  done
  for seed in 1 2 3; do
    for t in $tests; do
      run_one "chaos=$seed" "$t" "$out" CECOLL_BACKEND=host CECOLL_HOST_CHAOS=$seed -- "${reduced_args[@]}"
    done
    if [ "$seed" = 1 ]; then
      for t in $mptests; do
        run_one "chaos=$seed" "$t" "$out" CECOLL_BACKEND=host CECOLL_HOST_CHAOS=$seed -- "${mp_reduced_args[@]}"
      done
    fi
  done
  # Each sync algorithm on adversarial streams (the chaos rows above run the
  # host default, all-pairs multicast): star with copy-written flags, and
  # all pairs over unicast.
  for t in $tests; do
    run_one "sync=star,chaos=2" "$t" "$out" CECOLL_BACKEND=host CECOLL_HOST_CHAOS=2 \
      CECOLL_SYNC=star CECOLL_FLAG_WRITE=copy -- "${reduced_args[@]}"
    run_one "sync=allpairs,nomulticast,chaos=3" "$t" "$out" CECOLL_BACKEND=host CECOLL_HOST_CHAOS=3 \
      CECOLL_HOST_CAPS=nomulticast CECOLL_SYNC=allpairs -- "${reduced_args[@]}"
  done
  if [ "$lsan" -eq 1 ]; then
    for t in $tests; do
      run_one lsan "$t" "$out/lsan" CECOLL_BACKEND=host \
        "LSAN_OPTIONS=suppressions=$here/lsan.supp:print_suppressions=0:exitcode=23" -- "${lsan_args[@]}"
    done
  fi
fi

# ---- The correctness matrix -------------------------------------------------------
# run_matrix ROW SELECTION BATCH ENV... [-- MATRIX-ARGS...]: the cells (all,
# or the pairwise subset; SELECTION@OPS: of the collectives OPS only), BATCH
# per process; one line per cell in the row's log, the cells' own logs
# (unexpected outcomes only) beside it. MATRIX-ARGS: e.g. --devices dev0.
run_matrix() {
  local row=$1 sel=${2%@*} batch=$3 args=() envs=()
  [ "$2" != "$sel" ] && args=(--ops "${2#*@}")
  shift 3
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  args+=("$@")
  local log="$out/logs/matrix.$row.log" start end rc last
  mkdir -p "$out/logs"
  if [ ! -x "$out/matrix" ]; then
    record "$row matrix" FAIL "not built"
    return
  fi
  rm -rf "$out/logs/matrix-$row"
  start=$(date +%s)
  env CECOLL_BACKEND=host "${envs[@]}" timeout -k 10 "$TIMEOUT" "$out/matrix" --run "$sel" "${args[@]}" -j 4 -b "$batch" -t 10 \
    -o "$out/logs/matrix-$row" >"$log" 2>&1
  rc=$?
  end=$(date +%s)
  last=$(grep '^matrix summary' "$log" | tail -1)
  if [ "$rc" -eq 0 ]; then
    record "$row matrix" PASS "$((end - start))s  ${last#matrix summary: }"
  else
    [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] && last="TIMED OUT after ${TIMEOUT}s; $last"
    record "$row matrix" FAIL "rc=$rc $((end - start))s  ${last#matrix summary: }  (log: $log)"
    echo "---- $row matrix failed (rc=$rc); unexpected cells (the first 20):"
    grep -E '^(FAIL|HANG) ' "$log" | head -20 | cut -c1-240
  fi
}
# The whole matrix with every rank on device 0 (dev0), 16 cells per process
# (communicator after communicator, as a long-running program makes them),
# plain and with a 4 KiB staging window; under each chaos seed the whole of
# the four collectives and the pairwise subset of sendrecv and broadcast
# (their whole under chaos: make test-matrix). The cells with a device per
# rank (dev: copies into a peer device's memory, flags written into it, no
# one-device pairs): their pairwise subset plain, with a 4 KiB staging
# window and under each chaos seed, and every dev cell of 3 ranks (a third
# of them, about 12 s on 2 cores; every dev cell: make test-matrix).
# The pairwise subset of both with a process per cell. These rows name
# their collectives: the later ones (alltoallv, sendrecv-mismatch) have
# rows of their own below, and the ids and pairwise subsets of the rest
# are what they were before them.
ops=allgather,alltoall,scatter,gather,sendrecv,broadcast
run_matrix default all@$ops 16 -- --devices dev0
run_matrix "devices=each" pairwise@$ops 16 -- --devices dev
# Broadcast of 1 MiB per rank with a device per rank, 3 and 4 ranks: the
# chain (each rank forwards the pieces to the next), under chaos.
run_matrix "devices=each,broadcast-chain" pairwise@broadcast 16 CECOLL_HOST_CHAOS=2 -- --devices dev -r 3,4 -c 262144
if [ "$mode" = all ]; then
  run_matrix "pairwise,isolated" pairwise@$ops 1
  run_matrix "devices=each,n3" all@$ops 16 -- --devices dev -r 3
  # A 4 KiB staging window: every staged call takes many rounds, so a rank
  # on the staged path plans other steps than one on a window's.
  run_matrix "staging=4K" all@$ops 16 CECOLL_STAGING_BYTES=4096 -- --devices dev0
  run_matrix "devices=each,staging=4K" pairwise@$ops 16 CECOLL_STAGING_BYTES=4096 -- --devices dev
  for seed in 1 2 3; do
    run_matrix "chaos=$seed" all@allgather,alltoall,scatter,gather 16 CECOLL_HOST_CHAOS=$seed -- --devices dev0
    run_matrix "chaos=$seed,pairwise" pairwise@sendrecv,broadcast 16 CECOLL_HOST_CHAOS=$seed CECOLL_STAGING_BYTES=4096 \
      -- --devices dev0
    run_matrix "devices=each,chaos=$seed" pairwise@$ops 16 CECOLL_HOST_CHAOS=$seed -- --devices dev
  done
fi
# alltoallv (uneven, with zero pairs) and sendrecv-mismatch (a receive
# whose count differs from its send's, under CECOLL_CHECK=1): their
# pairwise subset, device 0 and a device per rank, plain and under each
# chaos seed with a 4 KiB staging window (about 1 s a row on 2 cores;
# every cell: make test-matrix). In one thread's group (ncclCommInitAll's
# communicators, which have no CECOLL_CHECK board) ncclGroupEnd itself
# compares the sizes of every pair whose both sides it holds.
later=alltoallv,sendrecv-mismatch
run_matrix "later,pairwise" "pairwise@$later" 16
if [ "$mode" = all ]; then
  for seed in 1 2 3; do
    run_matrix "later,chaos=$seed" "pairwise@$later" 16 CECOLL_HOST_CHAOS=$seed CECOLL_STAGING_BYTES=4096
  done
fi

# The runner itself: a cell that hangs in the middle of a batch gets HANG
# from the watchdog, and the batch's later cell still runs (in a new
# process), in-process and process layouts alike.
if [ -x "$out/matrix" ]; then
  for l in group proc; do
    cells="allgather.oop.unreg.$l.eager.own.n2,allgather.oop.unreg.$l.eager.two.n2,allgather.oop.unreg.$l.eager.null.n2"
    got=$(MATRIX_SELFTEST_HANG=allgather.oop.unreg.$l.eager.two.n2 CECOLL_BACKEND=host timeout 60 "$out/matrix" \
      --run "$cells" -j 1 -b 8 -t 2 -o "$out/logs/matrix-selftest-$l" 2>&1 | awk '/^(PASS|FAIL|HANG|EXPECTED)/ {printf "%s ", $1}')
    if [ "$got" = "PASS HANG PASS " ]; then
      record "matrix runner ($l)" PASS "a hang mid-batch: PASS HANG PASS"
    else
      record "matrix runner ($l)" FAIL "a hang mid-batch gave: $got (want PASS HANG PASS)"
    fi
  done
fi

# ---- Symbols and packaging ---------------------------------------------------------
if bash "$here/test_symbols.sh" "$lib" >"$out/test_symbols.log" 2>&1; then
  record test_symbols.sh PASS "$(tail -1 "$out/test_symbols.log")"
else
  record test_symbols.sh FAIL "see $out/test_symbols.log"
  cat "$out/test_symbols.log"
fi
if [ "$mode" = all ]; then
  bash "$here/install_check.sh" >"$out/install_check.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    record install_check.sh PASS "$(tail -1 "$out/install_check.log")"
  elif [ "$rc" -eq 77 ]; then
    echo "!!!! pkg-config not found: the pkg-config check is SKIPPED (the install layout passed) !!!!" >&2
    record install_check.sh SKIP "pkg-config not found; $(tail -1 "$out/install_check.log")"
  else
    record install_check.sh FAIL "see $out/install_check.log"
    tail -30 "$out/install_check.log"
  fi
  CECOLL_LIB="$lib" bash "$here/cmake_check.sh" >"$out/cmake_check.log" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ]; then
    record cmake_check.sh PASS "$(tail -1 "$out/cmake_check.log")"
  elif [ "$rc" -eq 77 ]; then
    echo "!!!! cmake not found: the CMake package check is SKIPPED !!!!" >&2
    record cmake_check.sh SKIP "cmake not found"
  else
    record cmake_check.sh FAIL "see $out/cmake_check.log"
    tail -30 "$out/cmake_check.log"
  fi
fi

summary
[ "$failed" -eq 0 ]
