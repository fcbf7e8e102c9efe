#!/usr/bin/env bash
# lab/h200/session10.sh: the tenth session's H200 calls. Stages (arguments, in order):
#   probe    chanpark.cu's graph variants: which resource does a parked graph hold
#            (instantiated before the first launch, uploaded, idle streams beside)
#   graph    the group.graph.two.n8 cells (8 ranks in one process, two streams each, graphs)
#            with build/prev (HEAD before this session), build/ (graphs instantiated when the
#            thread's last capture ends) and build/up (that, and uploaded at instantiation);
#            a cell still running after 25 s gets its threads' stacks dumped by cuda-gdb
#   mixedsym the mixed-symmetric cells that hung after ncclCommAbort under MPS (ninth
#            session), 3 times each under MPS
#   times    a few cells one at a time with MATRIX_TIMES=1 (where a GPU cell's seconds go)
#   inproc   the matrix's in-process cells (build/lists/inproc10.txt: ids of the default
#            matrix, shuffled), -j ${S10_JOBS:-16}, until the budget is spent
#   procmps  the process cells (build/lists/proc10.txt) under MPS, -j ${S10_PJOBS:-10}
#   mpsq     chanpark under MPS: at how many parked streams does a client stall
#   inprocb, procb   inproc and procmps with cells batched (-b ${S10_BATCH:-64}), -j 4
#   mpspool  how many MPS clients with 8 (4) queues each hold a context at once
#   floors   8 B graph N=4 and in-place Scatter/Gather 64 MiB N=2, build/old against build
#   inproc8  the in-process cells at 8 ranks, batched
#   threads  the C tests with a thread per rank, 4 and 8 ranks, 12 runs each (build/gpu)
#   sweep    cecoll-perf's 8-rank eager sweep, 512M..2G
#   diag     in-place AlltoAll N=8 by CECOLL_STAGING_BYTES; 8 B graphs N=4 by flag write and sync
#            (written for the next session: this one had no device time left to run it)
# S10_BACKEND=host checks the plumbing here. S10_LIST=file replaces a matrix stage's list (the ids left from an earlier call).
# Budget: S10_BUDGET seconds for the whole call (default 560). Everything lands in
# $OUT/s10.tar.gz and the log in $OUT/s10.log.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp/s10out}
mkdir -p "$O/s10"
exec > >(tee "$O/s10.log") 2>&1
export CECOLL_BACKEND=${S10_BACKEND:-nvidia} NCCL_NVLS_ENABLE=0 LD_LIBRARY_PATH=$PWD/build:${LD_LIBRARY_PATH:-}
# The device tool carries files, not links: remake build/'s library links.
for f in build/libcecoll.so.*.*.*; do
  [ -f "$f" ] || continue
  ln -sf "$(basename "$f")" build/libcecoll.so.0 && ln -sf libcecoll.so.0 build/libcecoll.so
done
T0=$(date +%s)
BUDGET=${S10_BUDGET:-560}
left() { echo $((BUDGET - ($(date +%s) - T0))); }
mps_on() { nvidia-cuda-mps-control -d && sleep 1; }
mps_off() { echo quit | nvidia-cuda-mps-control; sleep 2; }
stacks() { # pattern, tag: cuda-gdb stacks of every process whose command line matches
  for p in $(pgrep -f -- "$1"); do
    timeout 60 cuda-gdb -p "$p" -batch -ex "info threads" -ex "thread apply all bt 14" > "$O/s10/gdb-$2-$p.txt" 2>&1
    echo "stacks of $p: $(grep -c '^Thread' "$O/s10/gdb-$2-$p.txt") threads; cu frames:"
    grep -oE ' in (cu|cuda)[A-Za-z_0-9]+' "$O/s10/gdb-$2-$p.txt" | sort | uniq -c | head -12
  done
}
matrix_for() { # list-file, seconds, jobs, tag [cells per process]
  local secs=$2
  [ "$secs" -gt 20 ] || { echo "SKIP $4 (budget)"; return; }
  timeout -k 5 "$secs" build/ctests/matrix --run "$(cat "$1")" -j "$3" -b "${5:-1}" -t "${S10_WATCHDOG:-60}" -o "$O/s10/logs-$4" > "$O/s10/matrix-$4.txt" 2>&1
  echo "$4: rc=$? cells reported: $(grep -cE '^(PASS|EXPECTED|FAIL|HANG)' "$O/s10/matrix-$4.txt")"
  grep -E '^(FAIL|HANG)' "$O/s10/matrix-$4.txt" | cut -c1-240 | head -20
  tail -3 "$O/s10/matrix-$4.txt"
}
echo "# session10 $(date -u +%FT%TZ) $(nvidia-smi -L | head -1)"
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  probe)
    nvcc -O2 -o /tmp/chanpark lab/h200/chanpark.cu -lcuda || continue
    run() { # label, env..., args
      local l=$1; shift
      env CHANPARK_GRAPH=1 CHANPARK_TRACE=1 "$@" > /tmp/cp.out 2>&1
      echo "$l: rc=$? launched=$(grep -c '^launched' /tmp/cp.out) $(grep -E '^PARK' /tmp/cp.out | head -2 | tr '\n' ' ')"
    }
    run "P=12 plain     " timeout 15 /tmp/chanpark 12 1 none
    run "P=18 plain     " timeout 15 /tmp/chanpark 18 1 none
    run "P=18 preinst   " CHANPARK_PREINST=1 timeout 15 /tmp/chanpark 18 1 none
    run "P=18 upload    " CHANPARK_UPLOAD=1 timeout 15 /tmp/chanpark 18 1 none
    run "P=24 upload    " CHANPARK_UPLOAD=1 timeout 15 /tmp/chanpark 24 1 none
    run "P=12 idle=12   " CHANPARK_IDLE=12 timeout 15 /tmp/chanpark 12 1 none
    run "P=12 idle=24   " CHANPARK_IDLE=24 timeout 15 /tmp/chanpark 12 1 none
    run "P=18 copy      " timeout 15 /tmp/chanpark 18 1 copy
    ;;
  graph)
    cells=allgather.oop.unreg.group.graph.two.n8,alltoall.inplace.sym.group.graph.two.n8,scatter.inplace.root0.reg.group.graph.two.n8
    for b in prev main up; do
      lp=$PWD/build; [ $b != main ] && lp=$PWD/build/$b:$PWD/build
      c=$cells; [ $b = prev ] && c=${cells%%,*} # prev: the one cell whose stacks are taken
      LD_LIBRARY_PATH=$lp timeout -k 5 100 build/ctests/matrix --run "$c" -r 8 -j 3 -t 30 -o "$O/s10/graph-$b" > "$O/s10/graph-$b.txt" 2>&1 &
      bg=$!
      if [ $b = prev ]; then sleep 25; stacks "cell allgather.oop.unreg.group.graph.two.n8" $b; fi
      wait $bg
      echo "-- $b:"; grep -E '^(PASS|EXPECTED|FAIL|HANG)' "$O/s10/graph-$b.txt" | cut -c1-200
    done
    ;;
  mixedsym)
    cells=gather.oop.root0.mixedsym.2proc.eager.own.n4,scatter.inplace.root0.mixedsym.2proc.eager.own.n4,alltoall.oop.mixedsym.proc.graph.two.n8
    mps_on
    for i in 1 2 3; do
      CECOLL_DEBUG=INFO timeout -k 5 100 build/ctests/matrix --run "$cells" -r 2,4,8 -j 3 -t 40 -o "$O/s10/mixedsym-$i" 2>&1 | grep -E '^(PASS|EXPECTED|FAIL|HANG)' | cut -c1-200
    done
    mps_off
    ;;
  times)
    cells=allgather.oop.unreg.group.eager.own.n2,alltoall.inplace.sym.group.graph.two.n4,scatter.oop.root0.reg.threads.eager.own.n4,gather.inplace.rootlast.win.threads.graph.two.n3,allgather.oop.mixed.proc.eager.own.n3,alltoall.oop.sym.2proc.graph.own.n4
    MATRIX_TIMES=1 timeout 200 build/ctests/matrix --run "$cells" -j 1 -t 60 -K -o "$O/s10/times" 2>&1 | grep -E '^(PASS|EXPECTED|FAIL|HANG)' | cut -c1-200
    grep -h "matrix: +" "$O/s10/times"/*.log | head -80
    ;;
  mpsq) # how many parked streams stall an MPS client (chanpark's probe), variable unset and set
    nvcc -O2 -o /tmp/chanpark lab/h200/chanpark.cu -lcuda || continue
    mps_on
    for v in unset 4 8 16; do
      for P in 1 2 3 4 5 6 7 8 9 16; do
        if [ $v = unset ]; then timeout 10 /tmp/chanpark $P 1 none > /tmp/cp.out 2>&1; else CUDA_DEVICE_MAX_CONNECTIONS=$v timeout 10 /tmp/chanpark $P 1 none > /tmp/cp.out 2>&1; fi
        r=$(grep -oE 'stalled=[01]' /tmp/cp.out || head -c 120 /tmp/cp.out)
        echo "MPS CUDA_DEVICE_MAX_CONNECTIONS=$v P=$P $r"
        [ "$r" = stalled=1 ] && break
      done
    done
    mps_off
    ;;
  mpspool) # how many MPS clients hold a context at once, 8 and 4 queues each (lab/h200/mpsinit.c)
    gcc -O2 -o /tmp/mpsinit lab/h200/mpsinit.c -ldl || continue
    mps_on
    for v in 8 4; do
      for N in 8 12 16 24 32 48; do
        r=$(CUDA_DEVICE_MAX_CONNECTIONS=$v MPSINIT_HOLD=3 timeout 60 /tmp/mpsinit $N 2>&1 | tail -1)
        echo "MPS CUDA_DEVICE_MAX_CONNECTIONS=$v N=$N: $r"
        ok=$(echo "$r" | grep -oE '[0-9]+ ok' | cut -d' ' -f1)
        [ "$v" = 8 ] && [ "${ok:-0}" = "$N" ] && MPS_OK8=$N
        [ "${ok:-0}" = "$N" ] || break
      done
    done
    mps_off
    echo "MPS clients at 8 queues each: ${MPS_OK8:-0} or more held at once"
    ;;
  floors) # the floors the eighth session missed: 8 B graph N=4, in-place Scatter/Gather 64 MiB N=2;
          # old (build/old, 86fb7ac) and new alternating, 3 rounds
    for round in 1 2 3; do
      for b in old new; do
        dir=build; [ $b = old ] && dir=build/old
        if [ $b = old ]; then g=(-N 4 -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all)
        else g=(all -g 4 -b 32 -e 32 -d uint8 -R 2 -n 20 -G 50 -w 5 -c 1); fi
        LD_LIBRARY_PATH=$PWD/$dir timeout 40 $dir/cecoll-perf "${g[@]}" > "$O/s10/g8_${b}_r$round.txt" 2>&1
        echo "graph8 N=4 $b r$round rc=$?"
        for f in scatter gather; do
          if [ $b = old ]; then a=(-N 2 -b 64M -e 64M -n 10 -w 2 -c 0 -o $f -R 1)
          else a=($f -g 2 -b 128M -e 128M -d uint8 -R 2 -n 10 -w 2 -c 0); fi
          LD_LIBRARY_PATH=$PWD/$dir timeout 40 $dir/cecoll-perf "${a[@]}" > "$O/s10/big_${f}_${b}_r$round.txt" 2>&1
          echo "$f 64M N=2 $b r$round rc=$?"
        done
      done
    done
    ;;
  inproc8) # the in-process cells at 8 ranks (the group.graph.two.n8 hang's class), batched
    build/ctests/matrix --list all -r 8 2>/dev/null | awk '$2 ~ /\.(group|threads)\./ {print $1}' | paste -sd, > /tmp/inproc8.txt
    timeout -k 5 $(($(left) - 15)) build/ctests/matrix --run "$(cat /tmp/inproc8.txt)" -r 8 -j 4 -b 64 -t 30 -o "$O/s10/logs-inproc8" > "$O/s10/matrix-inproc8.txt" 2>&1
    echo "inproc8: rc=$? cells reported: $(grep -cE '^(PASS|EXPECTED|FAIL|HANG)' "$O/s10/matrix-inproc8.txt")"
    grep -E '^(FAIL|HANG)' "$O/s10/matrix-inproc8.txt" | cut -c1-240 | head -20
    tail -2 "$O/s10/matrix-inproc8.txt"
    ;;
  threads) # the issue's C tests with a thread per rank: 4 and 8 ranks, 12 runs each, 4 at a time
    run_c() {
      set -- $1
      local s=$(date +%s) rc
      timeout 90 build/gpu/test_$1 -r $2 -m threads -q > /tmp/ct_$1_$2_$3.log 2>&1; rc=$?
      echo "CTEST $1 n=$2 run=$3 rc=$rc $(( $(date +%s)-s ))s $(grep -E '[0-9]+ passed' /tmp/ct_$1_$2_$3.log | tail -1)"
    }
    export -f run_c
    for t in allgather alltoall scatter gather; do for n in 4 8; do for k in $(seq 1 12); do echo "$t $n $k"; done; done; done |
      timeout $(($(left) - 80)) xargs -P 4 -I{} bash -c 'run_c "{}"' | sort > "$O/s10/ctests.txt"
    echo "CTESTS total=$(wc -l < "$O/s10/ctests.txt") rc0=$(grep -c 'rc=0 ' "$O/s10/ctests.txt")"
    grep -v 'rc=0 ' "$O/s10/ctests.txt" | head
    awk '{print $5}' "$O/s10/ctests.txt" | sort -n | sed -n '1p;$p' | tr '\n' ' '; echo "(shortest, longest)"
    ;;
  sweep) # the issue's 8-rank eager sweep: must finish, quickly
    s=$(date +%s)
    timeout 110 build/cecoll-perf all -g 8 -b 512M -e 2G -f 4 -d uint8 -R 2 -n 20 -w 3 -c 0 > "$O/s10/sweep.txt" 2>&1
    echo "SWEEP rc=$? $(( $(date +%s)-s ))s"; grep -vE '^#|^\s*$' "$O/s10/sweep.txt" | cut -c1-150 | head -20
    ;;
  diag) # leads for the two open floors: in-place AlltoAll at N=8 by staging size (rounds),
         # 8 B graph replays at N=4 by flag write and sync
    for st in 32M 128M 256M; do
      CECOLL_STAGING_BYTES=$st timeout 40 build/cecoll-perf alltoall -g 8 -b 2G -e 2G -d uint8 -R 2 -n 5 -w 1 -c 0 2>&1 |
        grep -vE '^#|^\s*$' | sed "s/^/a2a staging=$st /" | tr -s ' ' | cut -c1-160
    done
    for v in "" CECOLL_FLAG_WRITE=copy CECOLL_SYNC=allpairs; do
      env $v timeout 40 build/cecoll-perf all -g 4 -b 32 -e 32 -d uint8 -R 2 -n 20 -G 50 -w 5 -c 1 2>&1 |
        grep -vE '^#|^\s*$' | sed "s/^/g8 ${v:-default} /" | tr -s ' ' | cut -c1-120
    done
    ;;
  inprocb) # the in-process cells, batched
    t=$(($(left) - 15)); [ "$t" -gt "${S10_INPROCB:-220}" ] && t=${S10_INPROCB:-220}
    matrix_for "${S10_LIST:-build/lists/inproc10.txt}" "$t" "${S10_JOBS:-4}" inprocb "${S10_BATCH:-64}" ;;
  procb) # the process cells, batched, under MPS
    mps_on
    j=${S10_PJOBS:-4}
    [ -n "${MPS_OK8:-}" ] && [ $((MPS_OK8 / 5)) -lt "$j" ] && j=$((MPS_OK8 / 5)) # 4 ranks + a coordinator a cell
    [ "$j" -ge 1 ] || j=1
    echo "procb: $j cells at a time"
    t=$(($(left) - 15)); [ -n "${S10_PROCB:-}" ] && [ "$t" -gt "$S10_PROCB" ] && t=$S10_PROCB
    matrix_for "${S10_PLIST:-build/lists/proc10.txt}" "$t" "$j" procb "${S10_BATCH:-64}"
    mps_off
    ;;
  inproc)
    matrix_for "${S10_LIST:-build/lists/inproc10.txt}" "$(($(left) - 15))" "${S10_JOBS:-16}" inproc ;;
  procmps)
    mps_on
    matrix_for "${S10_LIST:-build/lists/proc10.txt}" "$(($(left) - 15))" "${S10_PJOBS:-10}" procmps
    mps_off
    ;;
  esac
done
echo "== done after $(($(date +%s) - T0)) s"
tar -czf "$O/s10.tar.gz" -C "$O" s10 && rm -rf "$O/s10"
