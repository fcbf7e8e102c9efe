#!/bin/bash
# session.sh: every single-GPU measurement the open issues need, in one run on
# the H200 device machine (lab/h200/README.md), from the repository root,
# with build/ carried (libcecoll.so, cecoll-perf, ctests/test_*; that machine
# has no Go). Logs go under $OUT; a SUMMARY block comes last (also
# $OUT/SUMMARY.txt).
#
# Steps, in run order (SESSION_STEPS picks some, e.g. "D3 D2"):
#   D3  issue 6: host cost of one 4-rank AllGather, cecoll vs the same driver
#       calls from C (lab/h200/hostcost.c), 8 B and 64 KiB
#   D5  issue 6: where D3's extra host time goes: hostcost at 8 B under
#       lab/h200/cushim.c (a counting libcuda.so.1), defaults and
#       allpairs/value: driver calls, time inside the driver and outside it
#       per collective, per side, and per symbol
#   D2  issue 6: 8 B per rank, graph replay, N=2,4,8, for CECOLL_SYNC x
#       CECOLL_FLAG_WRITE (and the defaults, also eager)
#   D1  issue 6: 64 and 256 MiB per rank, N=2,4,8, symmetric windows (-R 2)
#       eager/graph (20 iterations: with 5 the first eager iteration's
#       start-up weighed a fifth), and unregistered (-R 0) at 64 MiB
#       eager/graph: %ceil
#   A   issue 3: the C tests in thread-per-rank mode (-m threads) at 2, 4, 8
#       ranks with CUDA_DEVICE_MAX_CONNECTIONS unset and =32 (=8 too on the
#       rows that hung before), group mode as the control, the queue probe,
#       and the library's CECOLL_DEBUG=INFO lines of one short run
#   B   issue 4: several processes on one GPU: test_multiproc (data, and
#       kills), cecoll-perf -P 2/4 at 8 B and 64 MiB per rank, -R 2/0, and /dev/shm +
#       abstract sockets before and after
#   C   issue 5: the Python tests (pytest), and a CUDA-tensor smoke test of
#       the binding (2 and 4 processes, all four collectives, a window)
#   D4  issue 6: overlap (lab/gpu/ncclcmp.c overlap), where that file exists
#
# Knobs (environment):
#   OUT              log folder (default /tmp/cecoll_session)
#   SESSION_BUDGET   seconds the whole run may take (default 540); a step
#                    gets at most what is left, and is skipped when < 8 s
#   SESSION_STEPS    steps to run (default "D3 D5 D2 D1 A B C D4"; they always run in that order)
#   SESSION_BACKEND  nvidia (default) or host: the plumbing check on a
#                    machine without a GPU (nvidia-only steps are skipped,
#                    sizes shrink)
#   A_TO             timeout per C-test run (default 40; watchdog 5 s less)
#   A_BUDGET         seconds step A may take in all (default 170)
#   A_RANKS          rank counts of the thread rows (default "2 4 8")
#   A_CONNS          CUDA_DEVICE_MAX_CONNECTIONS variants (default "unset 32")
#   D1_NS, D2_NS     rank counts (default "2 4 8")
#   D1_SIZES         "64M 256M" (host: "1M 4M")
#   D2_ITERS         graph replays per 8 B row (default 50; eager rows: calls)
#   D2_K             collectives captured per graph (cecoll-perf -n with -G, default 20)
#   D2_COMBOS        [old:]sync/flag pairs (default "default/default allpairs/value
#                    allpairs/copy star/value star/copy"); old: runs against OLD_LIB
#   OLD_LIB          another build's libcecoll.so, in its own folder (for old: combos)
#   HC_ROUNDS        hostcost bursts (default 30)
#   HC_EXTRA         more sync/flag pairs for hostcost (default "allpairs/value star/copy";
#                    "" for none); the C reference follows the same pair
#   PYTHON           python for step C (default python3)
set -u
T0=$(date +%s.%N)
cd "$(dirname "$0")/../.." || exit 2 # the repository root
OUT=${OUT:-/tmp/cecoll_session}
mkdir -p "$OUT"
exec > >(tee "$OUT/session.log") 2>&1
TEE_PID=$!

BUDGET=${SESSION_BUDGET:-540}
STEPS=${SESSION_STEPS:-"D3 D5 D2 D1 A B C D4"}
BACKEND=${SESSION_BACKEND:-nvidia}
PY=${PYTHON:-python3}
CUDA=${CUDA_HOME:-/usr/local/cuda}
ROOT=$(pwd)
LIB=$ROOT/build/libcecoll.so
PERF=$ROOT/build/cecoll-perf
CT=$ROOT/build/ctests
BIN=$(mktemp -d "${TMPDIR:-/tmp}/cecoll_session_bin.XXXXXX")
trap 'rm -rf "$BIN"' EXIT
mkdir -p "$OUT"/{a,b,c,d1,d2,d3,d4,d5}

export NCCL_NVLS_ENABLE=0 CECOLL_BACKEND=$BACKEND
export LD_LIBRARY_PATH=$ROOT/build:/usr/local/nvidia/lib64:${LD_LIBRARY_PATH:-}
# The variants of step A set it themselves; the rest see the library's own choice.
ORIG_CONN=${CUDA_DEVICE_MAX_CONNECTIONS-unset}
unset CUDA_DEVICE_MAX_CONNECTIONS
# Forced by SESSION_STEPS etc., never inherited: the steps set them per run.
unset CECOLL_SYNC CECOLL_FLAG_WRITE CECOLL_DEBUG

NVIDIA=0
[ "$BACKEND" = nvidia ] && NVIDIA=1
if [ "$NVIDIA" = 1 ]; then
  D1_SIZES=${D1_SIZES:-"64M 256M"}
else
  D1_SIZES=${D1_SIZES:-"1M 4M"}
fi
D1_NS=${D1_NS:-"2 4 8"}
D2_NS=${D2_NS:-"2 4 8"}
D2_ITERS=${D2_ITERS:-50}
D2_K=${D2_K:-20}
HC_ROUNDS=${HC_ROUNDS:-30}
HC_EXTRA=${HC_EXTRA-"allpairs/value star/copy"}
A_TO=${A_TO:-40}
A_BUDGET=${A_BUDGET:-170}
A_RANKS=${A_RANKS:-"2 4 8"}
A_CONNS=${A_CONNS:-"unset 32"}

# ---- Helpers -------------------------------------------------------------------
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v a="$T0" -v b="$(now)" -v B="$BUDGET" 'BEGIN { printf "%d", B - (b - a) }'; }
want() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
: >"$OUT/results.tsv"
record() { # id name status rc secs note
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$OUT/results.tsv"
}

# run_step ID NAME TIMEOUT LOG CMD...: runs CMD under timeout (capped by the
# session budget), logs to LOG, records PASS / FAIL / HANG / SKIP and the
# elapsed seconds. STATUS holds the result afterwards.
STATUS=
run_step() {
  local id=$1 name=$2 to=$3 log=$4
  shift 4
  local l t rc secs note=
  l=$(left)
  mkdir -p "$(dirname "$log")"
  if [ "$l" -lt 8 ]; then
    STATUS=SKIP
    echo "SKIPPED: session budget spent" >"$log"
    record "$id" "$name" SKIP - 0 "budget spent"
    printf '[%6ss] %-3s %-58s SKIP (session budget spent)\n' "$(since "$T0")" "$id" "$name"
    return 0
  fi
  [ "$to" -gt $((l - 3)) ] && to=$((l - 3)) && note="timeout cut to ${to}s by the budget"
  t=$(now)
  { echo "# $name"; echo "# cmd: $*"; echo "# timeout ${to}s"; } >"$log"
  timeout -k 3 "$to" "$@" >>"$log" 2>&1
  rc=$?
  secs=$(since "$t")
  echo "EXIT $rc after ${secs}s" >>"$log"
  if [ "$rc" -eq 0 ]; then
    STATUS=PASS
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    STATUS=HANG
    note="killed by timeout ${to}s${note:+; $note}"
  elif tail -n +4 "$log" | grep -qE 'FATAL watchdog|HOSTCOST watchdog|^WATCHDOG'; then
    STATUS=HANG
    note="$(tail -n +4 "$log" | grep -E -m1 'FATAL watchdog|HOSTCOST watchdog|^WATCHDOG' | cut -c1-120)"
  else
    STATUS=FAIL
    note="$(tail -n +4 "$log" | grep -E -m1 'FAIL|FATAL|rror' | cut -c1-120)"
    [ -n "$note" ] || note="$(tail -n +4 "$log" | grep -v '^EXIT ' | tail -1 | cut -c1-120)"
  fi
  record "$id" "$name" "$STATUS" "$rc" "$secs" "$note"
  printf '[%6ss] %-3s %-58s %-4s rc=%-3s %6ss %s\n' "$(since "$T0")" "$id" "$name" "$STATUS" "$rc" "$secs" "$note"
  return 0
}

skip_step() { # id name reason
  record "$1" "$2" SKIP - 0 "$3"
  printf '[%6ss] %-3s %-58s SKIP (%s)\n' "$(since "$T0")" "$1" "$2" "$3"
}

# perf_rows FILE: "coll size oop_us oop_busbw oop_ceil ip_us ip_busbw ip_ceil" per row of a cecoll-perf
# table (nccl-tests' columns, then %ceil out of place and in place).
perf_rows() {
  awk '/^# Collective test starting:/ { c = $NF; sub(/_perf$/, "", c); sub(/_/, "", c); next }
       c != "" && /^ *[0-9]/ && NF >= 15 { print c, $1, $6, $8, $14, $10, $12, $15 }' "$1" 2>/dev/null
}
# mul_size SIZE N: SIZE (bytes, or with a K/M/G suffix) times N, for cecoll-perf's total sizes.
mul_size() { case $1 in *[KMG]) echo "$((${1%?} * $2))${1: -1}" ;; *) echo "$(($1 * $2))" ;; esac; }
# perf_us FILE COLL: the out-of-place time of the first row of COLL.
perf_us() { perf_rows "$1" | awk -v c="$2" '$1 == c { print $3; exit }'; }

# ---- Setup -----------------------------------------------------------------------
echo "== cecoll session: backend $BACKEND, budget ${BUDGET}s, steps: $STEPS"
echo "== $(date -u '+%F %T UTC'), host ${HOSTNAME:-?}, $(nproc) cores; CUDA_DEVICE_MAX_CONNECTIONS was $ORIG_CONN"
if [ "$NVIDIA" = 1 ]; then
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L 2>&1 | head -4
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader 2>&1 | head -2
  fi
  if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1' && ! ls /usr/local/nvidia/lib64/libcuda.so.1 >/dev/null 2>&1; then
    echo "!! no NVIDIA driver (libcuda.so.1) here: every nvidia step will fail."
    echo "!! For a plumbing check without a GPU: SESSION_BACKEND=host bash lab/h200/session.sh"
  fi
fi
missing=
for f in "$LIB" "$PERF" "$CT/test_allgather" "$CT/test_alltoall" "$CT/test_scatter" "$CT/test_gather" \
  "$CT/test_errors" "$CT/test_multiproc"; do
  [ -e "$f" ] || missing="$missing ${f#"$ROOT"/}"
done
if [ -n "$missing" ]; then
  echo "!! missing:$missing (run make and ctests/run.sh where Go is, and carry build/)"
fi
git log --oneline -1 2>/dev/null | sed 's/^/== commit /'
stat -c '== libcecoll.so %s bytes, modified %y' "$LIB" 2>/dev/null
md5sum "$LIB" 2>/dev/null | awk '{ print "== libcecoll.so md5", $1 }'

HOSTCOST=
CBENCH=
NCCLCMP=
if [ "$NVIDIA" = 1 ]; then
  if gcc -O2 -Wall -o "$BIN/hostcost" lab/h200/hostcost.c -ldl -lpthread >"$OUT/build_hostcost.log" 2>&1; then
    HOSTCOST=$BIN/hostcost
  else
    echo "!! hostcost did not build (see $OUT/build_hostcost.log)"
  fi
  if gcc -O2 -Wall -I"$CUDA/include" lab/h200/cecoll_cbench.c -o "$BIN/cecoll_cbench" -L"$CUDA/lib64/stubs" -lcuda \
    >"$OUT/build_cbench.log" 2>&1 ||
    gcc -O2 -Wall -I"$CUDA/include" lab/h200/cecoll_cbench.c -o "$BIN/cecoll_cbench" -L/usr/local/nvidia/lib64 \
      -l:libcuda.so.1 >>"$OUT/build_cbench.log" 2>&1; then
    CBENCH=$BIN/cecoll_cbench
  else
    echo "!! cecoll_cbench did not build (see $OUT/build_cbench.log)"
  fi
  if [ -f lab/gpu/ncclcmp.c ]; then
    if gcc -O2 -I include -o "$BIN/ncclcmp" lab/gpu/ncclcmp.c -ldl -lpthread >"$OUT/build_ncclcmp.log" 2>&1; then
      NCCLCMP=$BIN/ncclcmp
    else
      echo "!! lab/gpu/ncclcmp.c did not build (see $OUT/build_ncclcmp.log)"
    fi
  fi
fi
echo "== setup done in $(since "$T0")s"

# ---- D3: host cost -----------------------------------------------------------------
if want D3; then
  echo; echo "== D3 (issue 6): host cost per collective, cecoll vs the same driver calls from C"
  if [ -z "$HOSTCOST" ]; then
    skip_step D3 "hostcost" "needs the nvidia backend and a built hostcost"
  else
    # cecoll's defaults; the C reference makes the same choices (hostcost.c).
    run_step D3 "hostcost N=4 defaults" 90 "$OUT/d3/hostcost.txt" \
      "$HOSTCOST" -l "$LIB" -n 4 -s 8,65536 -r "$HC_ROUNDS" -k 64 -t 80
    grep -E '^(INFO|VERIFY|HOSTCOST)' "$OUT/d3/hostcost.txt"
    if [ "$STATUS" != PASS ]; then
      # At least the C reference's figure, without the library.
      run_step D3 "hostcost -x (C reference alone)" 60 "$OUT/d3/hostcost_refonly.txt" \
        "$HOSTCOST" -x -n 4 -s 8,65536 -r "$HC_ROUNDS" -k 64 -t 50
      grep -E '^(VERIFY|HOSTCOST)' "$OUT/d3/hostcost_refonly.txt"
    fi
    for combo in $HC_EXTRA; do
      run_step D3 "hostcost N=4 ${combo}" 60 "$OUT/d3/hostcost_${combo//\//_}.txt" \
        env CECOLL_SYNC="${combo%/*}" CECOLL_FLAG_WRITE="${combo#*/}" "$HOSTCOST" -l "$LIB" -n 4 -s 8,65536 \
        -r "$HC_ROUNDS" -k 64 -t 50
      grep -E '^HOSTCOST' "$OUT/d3/hostcost_${combo//\//_}.txt"
    done
  fi
fi

# ---- D5: host cost split by a counting libcuda.so.1 ------------------------------------
# cushim.c is built as $BIN/cushim/libcuda.so.1 and put first on
# LD_LIBRARY_PATH, so hostcost and cecoll both load it; it forwards to the
# real driver (the next libcuda.so.1 on LD_LIBRARY_PATH, else the system
# one) and counts. hostcost prints HOSTSPLIT per side and the shim a CUSHIM
# block per side (stderr, same log).
if want D5; then
  echo; echo "== D5 (issue 6): hostcost at 8 B under cushim (driver calls counted and timed)"
  if [ -z "$HOSTCOST" ]; then
    skip_step D5 "hostcost under cushim" "needs the nvidia backend and a built hostcost"
  elif ! { mkdir -p "$BIN/cushim" &&
    gcc -O2 -Wall -Wextra -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$BIN/cushim/libcuda.so.1" lab/h200/cushim.c \
      -ldl -lpthread && gcc -O2 -Wall -Wextra -DCUSHIM_BENCH -o "$BIN/cushim_bench" lab/h200/cushim.c -ldl; } \
    >"$OUT/d5/build_cushim.log" 2>&1; then
    skip_step D5 "hostcost under cushim" "cushim.c did not build (d5/build_cushim.log)"
    cat "$OUT/d5/build_cushim.log"
  else
    # Every name the backend resolves must be a shim export, or it would
    # miss the driver (required: Open fails; optional: silently absent).
    miss=$(grep -oE 'name: +"cu[A-Za-z0-9_]+"' internal/hip/nvidia/symbols.go | cut -d'"' -f2 | sort -u |
      comm -23 - <(nm -D --defined-only "$BIN/cushim/libcuda.so.1" | awk '{ print $3 }' | sort -u))
    if [ -n "$miss" ]; then
      echo "CUSHIM check: symbols.go names the shim lacks: $(tr '\n' ' ' <<<"$miss")"
    else
      echo "CUSHIM check: every symbols.go name is a shim export"
    fi
    SHIMLP="$BIN/cushim:$LD_LIBRARY_PATH"
    run_step D5 "cushim overhead (cuDriverGetVersion)" 10 "$OUT/d5/overhead.txt" \
      env LD_LIBRARY_PATH="$SHIMLP" "$BIN/cushim_bench" 200000
    grep -E '^CUSHIM' "$OUT/d5/overhead.txt"
    for combo in default/default allpairs/value; do
      envs=()
      [ "$combo" != default/default ] && envs=(CECOLL_SYNC="${combo%/*}" CECOLL_FLAG_WRITE="${combo#*/}")
      fl="$OUT/d5/hostsplit_${combo//\//_}.txt"
      run_step D5 "hostcost 8 B under cushim ${combo}" 25 "$fl" \
        env LD_LIBRARY_PATH="$SHIMLP" "${envs[@]}" "$HOSTCOST" -l "$LIB" -n 4 -s 8 -r "$HC_ROUNDS" -k 64 -t 20
      grep -E '^(HOSTCOST|HOSTSPLIT|CUSHIM)|watchdog' "$fl"
    done
  fi
fi

# ---- D2: 8 B, graph replay, per sync algorithm and flag method ---------------------------
# A combo is [old:]sync/flag; "old:" runs it against $OLD_LIB (another build
# of the library, e.g. the previous commit's, in a folder of its own): a
# baseline from the same call.
D2_COMBOS=${D2_COMBOS:-"default/default allpairs/value allpairs/copy star/value star/copy"}
combo_key() { echo "${1//[:\/]/_}"; }
if want D2; then
  echo; echo "== D2 (issue 6): 8 B per rank, -G graph replay, CECOLL_SYNC x CECOLL_FLAG_WRITE"
  for combo in $D2_COMBOS; do
    lp=$LD_LIBRARY_PATH sf=$combo
    if [ "${combo#old:}" != "$combo" ]; then
      sf=${combo#old:}
      if [ ! -f "${OLD_LIB:-}" ]; then
        skip_step D2 "8B graph $combo" "OLD_LIB is not a file"
        continue
      fi
      lp="$(dirname "$OLD_LIB"):$LD_LIBRARY_PATH"
    fi
    s=${sf%/*} f=${sf#*/}
    envs=("LD_LIBRARY_PATH=$lp")
    [ "$s" != default ] && envs+=("CECOLL_SYNC=$s")
    [ "$f" != default ] && envs+=("CECOLL_FLAG_WRITE=$f")
    k=$(combo_key "$combo")
    for n in $D2_NS; do
      run_step D2 "8B graph N=$n $combo" 45 "$OUT/d2/graph_N${n}_${k}.txt" \
        env "${envs[@]}" "$PERF" -g "$n" -b $((8 * n)) -e $((8 * n)) -d uint8 -R 2 -n "$D2_K" -G "$D2_ITERS" -w 5 -c 1 \
        --json "$OUT/d2/graph_N${n}_${k}.json"
    done
  done
  for n in $D2_NS; do
    run_step D2 "8B eager N=$n sync=default flag=default" 45 "$OUT/d2/eager_N${n}_default_default.txt" \
      "$PERF" -g "$n" -b $((8 * n)) -e $((8 * n)) -d uint8 -R 2 -n 500 -w 20 -c 1 --json "$OUT/d2/eager_N${n}_default_default.json"
  done
fi

# ---- D1: large messages, %ceil ---------------------------------------------------------
if want D1; then
  echo; echo "== D1 (issue 6): large messages ($D1_SIZES per rank), %ceil"
  read -r small big _ <<<"$D1_SIZES"
  big=${big:-$small}
  for n in $D1_NS; do
    # No data checks: reading GiBs back through the host costs seconds per
    # row (docs/measurements.md); the C tests check the data.
    chk=0
    for mode in eager graph; do
      # ITERS calls, or one call captured and replayed ITERS times.
      it() { if [ "$mode" = graph ]; then echo "-n 1 -G $1"; else echo "-n $1"; fi; }
      # R=1: symmetric windows (-R 2), R=0: unregistered (-R 0); sizes per rank times n.
      # shellcheck disable=SC2046 # it() gives options
      run_step D1 "N=$n R=1 $mode $small..$big" 90 "$OUT/d1/N${n}_R1_${mode}.txt" \
        "$PERF" -g "$n" -b "$(mul_size "$small" "$n")" -e "$(mul_size "$big" "$n")" -f 4 -d uint8 -w 3 -c "$chk" -R 2 \
        $(it 20) --json "$OUT/d1/N${n}_R1_${mode}.json"
      # shellcheck disable=SC2046
      run_step D1 "N=$n R=0 $mode $small" 60 "$OUT/d1/N${n}_R0_${mode}.txt" \
        "$PERF" -g "$n" -b "$(mul_size "$small" "$n")" -e "$(mul_size "$small" "$n")" -d uint8 -w 2 -c "$chk" -R 0 \
        $(it 5) --json "$OUT/d1/N${n}_R0_${mode}.json"
    done
  done
fi

# ---- A: thread-per-rank hang ---------------------------------------------------------
declare -A ARES=()
A_ARGS=(-c "0,1,7,1001" -l 64 -g 2)
a_run() { # test mode ranks conn
  local t=$1 mode=$2 r=$3 conn=$4 key="$1 $2 $3 $4" envs=()
  [ -n "${ARES[$key]:-}" ] && return 0
  if [ "$(awk -v a="$A_T0" -v b="$(now)" 'BEGIN { printf "%d", b - a }')" -ge "$A_BUDGET" ]; then
    ARES[$key]=SKIP
    record A "$key" SKIP - 0 "A_BUDGET spent"
    return 0
  fi
  if [ "$conn" = unset ]; then envs=(-u CUDA_DEVICE_MAX_CONNECTIONS); else envs=("CUDA_DEVICE_MAX_CONNECTIONS=$conn"); fi
  run_step A "test_$t -m $mode -r $r conn=$conn" "$A_TO" "$OUT/a/${t}_${mode}_r${r//,/-}_conn${conn}.log" \
    env "${envs[@]}" CECOLL_TEST_WATCHDOG=$((A_TO - 5)) "$CT/test_$t" -r "$r" -m "$mode" "${A_ARGS[@]}"
  ARES[$key]=$STATUS
}
if want A; then
  echo; echo "== A (issue 3): thread-per-rank C tests, CUDA_DEVICE_MAX_CONNECTIONS variants (budget ${A_BUDGET}s)"
  if [ -n "$CBENCH" ]; then
    run_step A "queue probe, connections unset" 30 "$OUT/a/probe.txt" env -u CUDA_DEVICE_MAX_CONNECTIONS "$CBENCH" probe
    run_step A "queue probe, connections 32" 30 "$OUT/a/probe32.txt" env CUDA_DEVICE_MAX_CONNECTIONS=32 "$CBENCH" probe
    grep -h '^PROBE' "$OUT/a/probe.txt" "$OUT/a/probe32.txt"
  else
    skip_step A "queue probe" "cecoll_cbench needs CUDA headers and the driver"
  fi
  run_step A "CECOLL_DEBUG=INFO test_allgather -r 2 -m threads" 30 "$OUT/a/debug_info.log" \
    env CECOLL_DEBUG=INFO CECOLL_TEST_WATCHDOG=25 "$CT/test_allgather" -r 2 -m threads -c 7 -l 0 -g 1
  A_T0=$(now)
  # The rows that hung before first, each with every variant (and =8, the
  # driver's default, which the library's setenv would otherwise replace).
  for conn in $A_CONNS 8; do a_run allgather threads 4 "$conn"; done
  for conn in $A_CONNS 8; do a_run alltoall threads 8 "$conn"; done
  for t in allgather alltoall scatter gather errors; do
    for r in $A_RANKS; do
      for conn in $A_CONNS; do a_run "$t" threads "$r" "$conn"; done
    done
  done
  for t in allgather alltoall scatter gather errors; do
    for conn in $A_CONNS; do a_run "$t" group "${A_RANKS// /,}" "$conn"; done
  done
fi

# ---- B: several processes on one GPU ---------------------------------------------------
leftovers() { # label: /dev/shm entries and cecoll's abstract sockets (@cecoll-PID-...)
  ls -A /dev/shm >"$OUT/b/shm_$1.txt" 2>&1
  grep -o '@cecoll[^ ]*' /proc/net/unix >"$OUT/b/sock_$1.txt" 2>/dev/null
}
if want B; then
  echo; echo "== B (issue 4): several processes on one GPU"
  leftovers before
  run_step B "test_multiproc data n=2,4 (+2x2)" 120 "$OUT/b/multiproc_data.log" \
    env CECOLL_TEST_WATCHDOG=115 "$CT/test_multiproc" -n 2,4 -c 0,7,1M -X data_n2,data_n4,data_2x2 -t 60
  run_step B "test_multiproc kill -9 / abort mid-run" 100 "$OUT/b/multiproc_kill.log" \
    env CECOLL_TEST_WATCHDOG=95 "$CT/test_multiproc" -n 2,4 -X kill_rank2,kill_parked,abort_parked -t 40
  grep -hE '^== .*: (PASS|FAIL)' "$OUT/b/multiproc_data.log" "$OUT/b/multiproc_kill.log"
  for p in 2 4; do
    for r in 1 0; do
      run_step B "cecoll-perf -P $p -R $r 8B+64M" 60 "$OUT/b/perf_P${p}_R${r}.txt" \
        "$PERF" -P "$p" -b $((8 * p)) -e $((64 * p))M -f 8388608 -d uint8 -n 10 -w 2 -c 0 -R $((2 * r)) \
        --json "$OUT/b/perf_P${p}_R${r}.json"
    done
  done
  sleep 1
  leftovers after
fi

# ---- C: Python on CUDA -------------------------------------------------------------------
if want C; then
  echo; echo "== C (issue 5): Python binding"
  mkdir -p "$OUT/c"
  if ! "$PY" -c 'import torch' >"$OUT/c/torch.txt" 2>&1; then
    skip_step C "pytest python/tests" "$PY has no torch"
    skip_step C "CUDA smoke" "$PY has no torch"
  else
    "$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' \
      >>"$OUT/c/torch.txt" 2>&1
    cat "$OUT/c/torch.txt"
    # python/tests takes the caller's CECOLL_BACKEND: with nvidia its ranks
    # run on GPU 0 with CUDA tensors.
    run_step C "pytest python/tests (CECOLL_BACKEND=$BACKEND)" "${C_PYTEST_TO:-240}" "$OUT/c/pytest.log" \
      env PYTHONPATH=python CECOLL_LIBRARY="$LIB" CECOLL_BACKEND="$BACKEND" \
      "$PY" -m pytest python/tests -x -q -p no:cacheprovider
    cat >"$OUT/c/cuda_smoke.py" <<'PYEOF'
"""Smoke test of python/cecoll on the backend's tensors (CUDA on a GPU
backend, CPU on the host device): every rank a spawned process (on GPU 0);
AllGather, AlltoAll, Scatter, Gather (7 and 1M floats), and an in-place
AlltoAll on a registered window."""
import os
import sys
import tempfile

import torch
import torch.multiprocessing as mp

import cecoll


def val(rank, n):
    return torch.arange(n, dtype=torch.float32) + rank * 100000


def worker(rank, ws, idpath):
    if os.environ.get("CECOLL_BACKEND", "") != "host":
        torch.cuda.set_device(0)
    pg = cecoll.ProcessGroup(rank, ws, cecoll.share_id_via_file(idpath, rank))
    dev = pg.device

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    bad = []
    for n in (7, 1 << 20):
        out = torch.empty(ws * n, device=dev)
        pg.all_gather_into_tensor(out, val(rank, n).to(dev))
        sync()
        if not torch.equal(out.cpu(), torch.cat([val(r, n) for r in range(ws)])):
            bad.append("all_gather/%d" % n)
        a2a = torch.cat([val(r, ws * n)[rank * n:(rank + 1) * n] for r in range(ws)])
        out = torch.empty(ws * n, device=dev)
        pg.all_to_all_single(out, val(rank, ws * n).to(dev))
        sync()
        if not torch.equal(out.cpu(), a2a):
            bad.append("all_to_all/%d" % n)
        full = torch.cat([val(r, n) for r in range(ws)]).to(dev) if rank == 0 else None
        out = torch.empty(n, device=dev)
        pg.scatter(out, full, src=0)
        sync()
        if not torch.equal(out.cpu(), val(rank, n)):
            bad.append("scatter/%d" % n)
        g = torch.empty(ws * n, device=dev) if rank == 0 else None
        pg.gather(val(rank, n).to(dev), g, dst=0)
        sync()
        if rank == 0 and not torch.equal(g.cpu(), torch.cat([val(r, n) for r in range(ws)])):
            bad.append("gather/%d" % n)
        buf = pg.alloc_tensor((ws * n,), torch.float32)
        buf.copy_(val(rank, ws * n).to(dev))
        win = pg.register(buf)
        pg.all_to_all_single(buf, buf)
        sync()
        if not torch.equal(buf.cpu(), a2a):
            bad.append("registered_all_to_all/%d" % n)
        pg.deregister(win)
    pg.barrier()
    pg.destroy()
    print("CUDA_SMOKE rank %d of %d on %s: %s" % (rank, ws, dev, "ok" if not bad else "FAIL " + ",".join(bad)), flush=True)
    if bad:
        sys.exit(1)


if __name__ == "__main__":
    for ws in (2, 4):
        d = tempfile.mkdtemp()
        mp.spawn(worker, args=(ws, os.path.join(d, "id")), nprocs=ws, join=True)
        print("CUDA_SMOKE PASS world_size=%d" % ws, flush=True)
PYEOF
    what="CUDA tensors"
    [ "$NVIDIA" = 1 ] || what="CPU tensors, host backend"
    run_step C "smoke: python cecoll on $what, 2 and 4 procs" 90 "$OUT/c/cuda_smoke.log" \
      env PYTHONPATH=python CECOLL_LIBRARY="$LIB" CECOLL_TIMEOUT=30 CECOLL_BOOTSTRAP_TIMEOUT=30 \
      "$PY" "$OUT/c/cuda_smoke.py"
    grep -hE 'CUDA_SMOKE|Error|error' "$OUT/c/cuda_smoke.log" | head -12
    skip_step C "python -m cecoll.bench" "CPU tensors only (cecoll vs gloo), no CUDA mode"
  fi
fi

# ---- D4: overlap ----------------------------------------------------------------------------
if want D4; then
  echo; echo "== D4 (issue 6 target 4): copy-engine collective overlapping a cuBLAS matmul"
  if [ "$NVIDIA" != 1 ]; then
    skip_step D4 "ncclcmp overlap" "needs the nvidia backend"
  elif [ -n "$NCCLCMP" ]; then
    # CLI of lab/gpu/ncclcmp.c (its header): -L library, --ce = ncclMemAlloc
    # buffers in registered windows (cecoll's zero-copy path), -W watchdog.
    run_step D4 "ncclcmp overlap -L libcecoll.so --ce -N 4" 90 "$OUT/d4/overlap.txt" \
      "$NCCLCMP" overlap -L "$LIB" -l cecoll --ce -N 4 -W 60
    grep -E '^OVERLAP' "$OUT/d4/overlap.txt"
  elif [ -f lab/gpu/ncclcmp.c ]; then
    skip_step D4 "ncclcmp overlap" "lab/gpu/ncclcmp.c did not build here"
  else
    skip_step D4 "ncclcmp overlap" "lab/gpu/ncclcmp.c not in the tree"
  fi
fi

# ---- SUMMARY -------------------------------------------------------------------------------
{
  echo
  echo "==================== SUMMARY (cecoll session, backend $BACKEND, $(date -u '+%F %T UTC'), $(since "$T0")s) ===================="
  git log --oneline -1 2>/dev/null | sed 's/^/commit: /'
  md5sum "$LIB" 2>/dev/null | awk '{ print "libcecoll.so md5:", $1 }'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1 | sed 's/^/gpu: /'
  echo "steps: $(awk -F'\t' '{ n[$3]++ } END { for (s in n) printf "%s=%d ", s, n[s] }' "$OUT/results.tsv")"
  awk -F'\t' '$3 == "FAIL" || $3 == "HANG" { printf "  %-4s %-3s %-58s rc=%s %ss %s\n", $3, $1, $2, $4, $5, $6 }' "$OUT/results.tsv"

  if want D3; then
    echo
    echo "-- D3 host cost (issue 6: cecoll <= 1.2x the same driver calls from C; seed runtime-API figure 24-33 us per rank-call)"
    for fl in "$OUT"/d3/hostcost*.txt; do
      [ -f "$fl" ] || continue
      echo "  ${fl##*/}: $(grep -m1 -E '^INFO (cecoll|reference)' "$fl" | grep -oE 'CECOLL_SYNC=[^ ]+ CECOLL_FLAG_WRITE=[^,]+|reference only')"
      grep -hE '^(HOSTCOST|VERIFY.*FAIL)|watchdog' "$fl" | sed 's/^/    /'
      awk '/^HOSTCOST/ && !/ratio=-/ { for (i = 1; i <= NF; i++) if ($i ~ /^ratio=/) { split($i, a, "="); r = a[2] }
                         printf "    %s: %s\n", $2, (r + 0 <= 1.2) ? "meets the 1.2x target" : "above the 1.2x target" }' "$fl"
    done
    grep -qs '^HOSTCOST' "$OUT"/d3/hostcost*.txt || echo "  (no result)"
  fi

  if want D5; then
    echo
    echo "-- D5 host cost split at 8 B (hostcost under cushim; per collective of 4 rank-calls, means over the timed bursts)"
    for fl in "$OUT"/d5/hostsplit_*.txt; do
      [ -f "$fl" ] || continue
      echo "  ${fl##*/}:"
      grep -hE '^HOSTSPLIT|watchdog' "$fl" | sed 's/^/    /'
      awk '/^HOSTSPLIT/ { s = ""; for (i = 1; i <= NF; i++) { split($i, a, "="); v[a[1]] = a[2] }
                          s = v["side"]; c[s] = v["calls_per_coll"]; d[s] = v["driver_us_per_coll"]; o[s] = v["outside_us_per_coll"] }
           END { if (("cecoll" in c) && ("c" in c))
                   printf "    cecoll - c per collective: calls %+.1f, driver %+.2f us, outside the driver %+.2f us\n",
                     c["cecoll"] - c["c"], d["cecoll"] - d["c"], o["cecoll"] - o["c"] }' "$fl"
    done
    grep -hE '^CUSHIM overhead' "$OUT"/d5/overhead.txt 2>/dev/null | sed 's/^/  /'
    grep -qs '^HOSTSPLIT' "$OUT"/d5/hostsplit_*.txt || echo "  (no result)"
  fi

  if want D2; then
    echo
    echo "-- D2 8 B per rank, graph replay, us per replay of all ranks (out of place); AG ratio = AllGather / issue figure (N=2 13, N=4 42, N=8 160 us; target <= 0.5 at N=4,8)"
    printf '  %-20s %3s %9s %9s %9s %9s %8s\n' "sync/flag" "N" "allgather" "alltoall" "scatter" "gather" "AG ratio"
    for combo in $D2_COMBOS; do
      for n in $D2_NS; do
        fl="$OUT/d2/graph_N${n}_$(combo_key "$combo").txt"
        ag=$(perf_us "$fl" allgather)
        ref=
        case $n in 2) ref=13 ;; 4) ref=42 ;; 8) ref=160 ;; esac
        ratio=-
        [ -n "$ag" ] && [ -n "$ref" ] && ratio=$(awk -v a="$ag" -v b="$ref" 'BEGIN { printf "%.2f", a / b }')
        printf '  %-20s %3s %9s %9s %9s %9s %8s\n' "$combo" "$n" "${ag:--}" "$(perf_us "$fl" alltoall)" \
          "$(perf_us "$fl" scatter)" "$(perf_us "$fl" gather)" "$ratio"
      done
    done
    for n in $D2_NS; do
      fl="$OUT/d2/eager_N${n}_default_default.txt"
      printf '  %-20s %3s %9s %9s %9s %9s %8s\n' "eager default" "$n" "$(perf_us "$fl" allgather)" \
        "$(perf_us "$fl" alltoall)" "$(perf_us "$fl" scatter)" "$(perf_us "$fl" gather)" "-"
    done
  fi

  if want D1; then
    echo
    echo "-- D1 large messages: chunk = bytes per rank; %ceil = the N-copy ceiling's time over the collective's (out of place / in place; ~: the ceiling moved); busbw GB/s out of place"
    printf '  %3s %2s %-6s %-10s %9s %9s %8s %8s %7s\n' "N" "R" "mode" "coll" "chunk" "time(us)" "busbw" "%ceil" "ip%ceil"
    for n in $D1_NS; do
      for r in 1 0; do
        for mode in eager graph; do
          fl="$OUT/d1/N${n}_R${r}_${mode}.txt"
          [ -f "$fl" ] || continue
          perf_rows "$fl" | while read -r c sz us bw ce _ _ ice; do
            printf '  %3s %2s %-6s %-10s %9s %9s %8s %8s %7s\n' "$n" "$r" "$mode" "$c" "$((sz / n / 1048576))MiB" "$us" "$bw" "$ce" "$ice"
          done
        done
      done
    done
  fi

  if want A; then
    echo
    echo "-- A thread-per-rank C tests (issue 3): status per CUDA_DEVICE_MAX_CONNECTIONS (unset = the library sets 32 itself)"
    printf '  %-10s %-8s %-6s' "test" "mode" "ranks"
    for conn in $A_CONNS 8; do printf ' %-6s' "$conn"; done
    echo
    a_row() { # test mode ranks
      local line cell v any='' conn
      printf -v line '  %-10s %-8s %-6s' "$1" "$2" "$3"
      for conn in $A_CONNS 8; do
        v=${ARES["$1 $2 $3 $conn"]:-}
        [ -n "$v" ] && any=1
        printf -v cell ' %-6s' "${v:--}"
        line+=$cell
      done
      [ -n "$any" ] && echo "$line"
      return 0
    }
    for t in allgather alltoall scatter gather errors; do
      for r in $A_RANKS; do a_row "$t" threads "$r"; done
      a_row "$t" group "${A_RANKS// /,}"
    done
    grep -h '^PROBE' "$OUT/a/probe.txt" "$OUT/a/probe32.txt" 2>/dev/null | sed 's/^/  /'
    grep -hE 'FATAL watchdog' "$OUT"/a/*.log 2>/dev/null | sort | uniq -c | head -8 | sed 's/^/  /'
    dl=$OUT/a/debug_info.log
    echo "  CECOLL_DEBUG=INFO, test_allgather -r 2 -m threads ($(grep -c ' path ' "$dl" 2>/dev/null) per-call lines," \
      "$(grep -c ' WARN ' "$dl" 2>/dev/null) WARN lines): first 16 set-up lines, 4 per-call lines, 8 WARN lines"
    grep -h -m2 'CUDA_DEVICE_MAX_CONNECTIONS' "$dl" 2>/dev/null | cut -c1-200 | sed 's/^/    /'
    tail -n +4 "$dl" 2>/dev/null | grep -v -e ' path ' -e ' WARN ' -e 'CUDA_DEVICE_MAX_CONNECTIONS' | head -16 | cut -c1-200 | sed 's/^/    /'
    grep ' path ' "$dl" 2>/dev/null | head -4 | cut -c1-200 | sed 's/^/    /'
    grep ' WARN ' "$dl" 2>/dev/null | head -8 | cut -c1-200 | sed 's/^/    /'
  fi

  if want B; then
    echo
    echo "-- B several processes on one GPU (issue 4)"
    grep -hE '^== .*: (PASS|FAIL)|^test_multiproc: [0-9]+ passed|^FATAL|^WATCHDOG' "$OUT/b/multiproc_data.log" \
      "$OUT/b/multiproc_kill.log" 2>/dev/null | sed 's/^/  /'
    printf '  %-12s %-10s %9s %8s %8s\n' "perf" "coll" "8B us" "64M bw" "%ceil"
    for p in 2 4; do
      for r in 1 0; do
        fl="$OUT/b/perf_P${p}_R${r}.txt"
        perf_rows "$fl" | awk -v l="-P $p -R $r" '
          { if (!($1 in s)) { s[$1] = $3; order[++k] = $1 } else { b[$1] = $4; ce[$1] = $5 } }
          END { for (i = 1; i <= k; i++) printf "  %-12s %-10s %9s %8s %8s\n", l, order[i], s[order[i]], b[order[i]], ce[order[i]] }'
        grep -q 'FAILED' "$fl" 2>/dev/null && echo "  -P $p -R $r: wrong values reported (see $fl)"
      done
    done
    if [ -f "$OUT/b/shm_after.txt" ]; then
      echo "  leftovers: /dev/shm entries before $(grep -c . "$OUT/b/shm_before.txt"), after $(grep -c . "$OUT/b/shm_after.txt");" \
        "@cecoll abstract sockets before $(grep -c . "$OUT/b/sock_before.txt"), after $(grep -c . "$OUT/b/sock_after.txt")"
      comm -13 <(sort "$OUT/b/shm_before.txt") <(sort "$OUT/b/shm_after.txt") | head -10 | sed 's|^|  NEW in /dev/shm: |'
      comm -13 <(sort "$OUT/b/sock_before.txt") <(sort "$OUT/b/sock_after.txt") | head -10 | sed 's|^|  NEW socket: |'
    fi
  fi

  if want C; then
    echo
    echo "-- C Python (issue 5)"
    grep -h '^python ' "$OUT/c/torch.txt" 2>/dev/null | sed 's/^/  /'
    grep -q '^python ' "$OUT/c/torch.txt" 2>/dev/null || echo "  skipped: $PY has no torch"
    echo "  pytest: $(grep -hE '[0-9]+ (passed|failed)' "$OUT/c/pytest.log" 2>/dev/null | tail -1) (CECOLL_BACKEND=$BACKEND)"
    grep -hE '^(FAILED|ERROR) ' "$OUT/c/pytest.log" 2>/dev/null | head -5 | sed 's/^/  /'
    grep -h 'CUDA_SMOKE' "$OUT/c/cuda_smoke.log" 2>/dev/null | grep -v 'rank' | sed 's/^/  /'
    grep -h 'CUDA_SMOKE rank.*FAIL' "$OUT/c/cuda_smoke.log" 2>/dev/null | sed 's/^/  /'
  fi

  if want D4; then
    echo
    echo "-- D4 overlap (ncclcmp overlap --ce -N 4: GEMM ms alone / with the collective looping / with an SM copy)"
    if [ -f "$OUT/d4/overlap.txt" ]; then
      grep -E '^OVERLAP' "$OUT/d4/overlap.txt" | sed 's/^/  /'
      grep -qE '^OVERLAP ' "$OUT/d4/overlap.txt" || tail -8 "$OUT/d4/overlap.txt" | sed 's/^/  /'
    else
      echo "  not run: $(awk -F'\t' '$1 == "D4" { print $6 }' "$OUT/results.tsv")"
    fi
  fi
  echo
  echo "-- steps (elapsed s)"
  awk -F'\t' '{ printf "  %-4s %-3s %-58s %6s\n", $3, $1, $2, $5 }' "$OUT/results.tsv"
  echo "==================== END SUMMARY ===================="
} | tee "$OUT/SUMMARY.txt"
# Let tee write the last lines before the script ends.
exec 1>&- 2>&-
wait "$TEE_PID" 2>/dev/null
