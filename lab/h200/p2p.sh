#!/usr/bin/env bash
# lab/h200/p2p.sh: point-to-point (ncclSend/ncclRecv) and broadcast on one H200, by stage:
#   matrix   the matrix's sendrecv and broadcast cells in process (layouts group, threads), 2-4 ranks
#   mproc    their process cells (proc, 2proc) under MPS
#   torch    torch with cecoll preloaded, 2 and 4 processes on GPU 0 under MPS
#            (lab/h200/torch_p2p.py: send/recv, batch_isend_irecv, scatter, gather, all_to_all
#            list, uneven all_to_all_single, a 1F1B pipeline, broadcast), then world size 1
#            (dropin.sh's preload and ce steps: everything they passed before)
#   speed    the ring sendrecv at 256 MiB per rank, N = 2, 4, 8 on one device, ROUNDS rounds:
#            one thread grouped (-g N: zero-copy), a thread per rank (-t N: staged), a process
#            per rank under MPS (-P N: staged); %ceil is against N concurrent copies of 256 MiB,
#            one per rank, with no sync
#   bcast    broadcast at 256 MiB, N = 2, 4, 8, ROUNDS rounds: one thread grouped (-g N: every rank
#            copies its block from the root's buffer), a thread per rank with symmetric windows
#            (-t N -R 2: the root copies into every window) and without (-t N: staged), a process
#            per rank under MPS with windows (-P N -R 2); %ceil in place is against N-1 concurrent
#            copies of 256 MiB
#   small    8 B ring sendrecv against an 8 B-per-rank AllGather, one thread grouped, eager and
#            graph, N = 2, 4, 8, ROUNDS rounds (us)
#   graphs   graphs of 20 captured 8 B sendrecv batches, one thread grouped and a thread per
#            rank, 3, 4 and 8 ranks, and of 20 AllGathers at 3 ranks, against build/base and
#            build/ (each run killed after 20 s: rc=124 is a hang); then a graph of staged
#            batches of several rounds (64 MiB, -t 4, every byte checked)
#   graphdiag  where a hung graph of 20 captured 8 B sendrecv batches waits (3 ranks, one thread
#            grouped): thresholds in batches, with 32 hardware queues, and the host threads'
#            kernel wait channels and stacks (gdb, where installed) 8 s into the hang
#   stagedq  what bounds the staged ring at 256 MiB, N = 4, 8 (build/): 32 hardware queues
#            (CUDA_DEVICE_MAX_CONNECTIONS=32), and a 256 MiB staging window, -t N and -P N
#   graphwv  graphs of 12 to 40 captured batches: sendrecv 8 B at 3 ranks (build/), the same
#            and 4 and 8 ranks with captured signals as write-values (build/wv:
#            lab/h200/p2pwv.patch), and AllGather and AlltoAll graphs of 40 calls (build/)
#   graphst  graphs of 20-40 captured calls with a thread per rank: sendrecv at 2 and 3 ranks
#            (build/, build/wv), with 32 hardware queues, after an eager warm-up, and
#            AllGather and AlltoAll graphs of 40 calls at 3 and 4 ranks
#   ringgraph  the captured ring without cecoll (lab/h200/ringgraph.cu): signals by copy or
#            write-value; one thread launching a graph per rank, a thread per rank, or one
#            graph of every rank (ringgraph.cu's header), by copies; 3 ranks, 20 and 40 calls a
#            graph, 3 times each: a thread per rank with and without UPLOAD, one thread with and
#            without JOIN
#   upload   graphs of many captured calls with every graph uploaded at instantiation (build/
#            with lab/h200/upload.patch: the nvidia backend's GraphInstantiate uploads and waits):
#            the rows that hung, 2 or 3 times each, each run under -T 8; then the in-process
#            graph cells of the matrix
#   staged   the staged ring at 256 MiB, -t N and -P N (MPS), build/base against build/, ROUNDS
#            rounds alternating
#   graphtimeout  the graphs that hung, under CECOLL_TIMEOUT=5: each run should end in
#            ncclRemoteError naming CECOLL_TIMEOUT (the watchdog over graph replays), not rc=124
# A GEMM beside the ring exchange is lab/h200/overlap.sh ring. "base" is build/base (another
# build's library, run by build/cecoll-perf), "wv" build/wv (lab/h200/p2pwv.patch).
# build/ comes carried (make all; build/ctests/matrix; build/cecoll-perf):
#
#   run(command="bash lab/h200/p2p.sh matrix mproc torch", carry=["build"])
#
# Knobs: ROUNDS (3), NS ("2 4 8"), BUDGET (seconds, 560). Results in $OUT/p2p.tar.gz.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin p2p${TAG:+-$TAG}
NS=${NS:-2 4 8}
PY=${PYTHON:-python3}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  matrix) mrun sr-inproc "$(cells '^(sendrecv|broadcast)\..*\.(group|threads)\.' --devices dev0)" $(($(left) - 20)) -j 4 -b 64 -t 60 ;;
  mproc)
    mps_on
    mrun sr-proc "$(cells '^(sendrecv|broadcast)\..*\.(proc|2proc)\.' --devices dev0)" $(($(left) - 20)) -j 2 -b 64 -t 60
    mps_off
    ;;
  torch)
    mps_on
    for w in 2 4; do
      rm -f "$R"/torch-w$w.*.json
      # torch initialises CUDA before cecoll can raise the queues, and an MPS client left
      # at the driver's default has 2: the refusal asks for the variable, as a user sets it.
      CUDA_DEVICE_MAX_CONNECTIONS=8 CECOLL_DEBUG=INFO CECOLL_DEBUG_FILE="$R/torch-w$w.cecoll.%p.log" LD_PRELOAD=$PWD/build/libcecoll.so \
        timeout -k 5 150 "$PY" lab/h200/torch_p2p.py $w "$R/torch-w$w.%d.json" > "$R/torch-w$w.out" 2>&1
      echo "torch world $w: rc=$?"
      "$PY" - "$R" $w <<'PY'
import glob, json, sys
R, w = sys.argv[1], sys.argv[2]
for f in sorted(glob.glob("%s/torch-w%s.*.json" % (R, w))):
    d = json.load(open(f))
    line = ["rank %d" % d["rank"]] + ["%s=%s" % (r["op"], "ok" if r["ok"] else "FAIL") for r in d["results"]]
    print("  " + " ".join(line), ("fatal: " + d["fatal"][:300]) if "fatal" in d else "")
    for r in d["results"]:
        if not r["ok"]:
            print("    %s: %s" % (r["op"], r.get("error", "wrong data")[-300:].replace("\n", " ")))
PY
    done
    mps_off
    OUT=$R DROPIN_STEPS="preload ce" DROPIN_TAG=w1 STEP_TO=120 bash lab/h200/dropin.sh > "$R/w1.out" 2>&1
    tar -xzf "$R/w1.tar.gz" -C "$R" 2>/dev/null && grep -v "^#" "$R/w1/SUMMARY.txt" | head -40
    ;;
  speed)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in $NS; do
        [ "$(left)" -lt 40 ] && break 2
        perf new "$R/speed-g-n$n-r$round.txt" sendrecv -g "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        perf new "$R/speed-t-n$n-r$round.txt" sendrecv -t "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        mps_on
        perf new "$R/speed-P-n$n-r$round.txt" sendrecv -P "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        mps_off
      done
    done
    ;;
  bcast)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in $NS; do
        [ "$(left)" -lt 40 ] && break 2
        perf new "$R/bcast-g-n$n-r$round.txt" broadcast -g "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        perf new "$R/bcast-tR-n$n-r$round.txt" broadcast -t "$n" -R 2 -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        perf new "$R/bcast-t-n$n-r$round.txt" broadcast -t "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        mps_on
        perf new "$R/bcast-PR-n$n-r$round.txt" broadcast -P "$n" -R 2 -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        mps_off
      done
    done
    ;;
  small)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in $NS; do
        [ "$(left)" -lt 30 ] && break 2
        for g in 0 50; do
          perf new "$R/small-sr-G$g-n$n-r$round.txt" sendrecv -g "$n" -b 8 -e 8 -d uint8 -n 20 -G $g -w 5 -c 1
          perf new "$R/small-ag-G$g-n$n-r$round.txt" allgather -g "$n" -b $((8 * n)) -e $((8 * n)) -d uint8 -n 20 -G $g -w 5 -c 1
        done
      done
    done
    ;;
  graphs)
    for b in base new; do
      for lay in "-g 3" "-t 3" "-g 4" "-t 4" "-g 8"; do
        PERF_TIMEOUT=20 perf $b "$R/graphs-$b-sr${lay// /}.txt" sendrecv $lay -b 8 -e 8 -d uint8 -n 20 -G 1 -w 0 -c 0
      done
      PERF_TIMEOUT=20 perf $b "$R/graphs-$b-ag-g3.txt" allgather -g 3 -b 24 -e 24 -d uint8 -n 20 -G 1 -w 0 -c 0
    done
    PERF_TIMEOUT=40 perf new "$R/graphs-new-staged-t4.txt" sendrecv -t 4 -b 64M -e 64M -d uint8 -n 4 -G 2 -w 0 -c 1
    mps_on
    PERF_TIMEOUT=40 perf new "$R/graphs-new-staged-P3.txt" sendrecv -P 3 -b 64M -e 64M -d uint8 -n 4 -G 2 -w 0 -c 1
    mps_off
    grep -H -E "^ +[0-9]+ |wrong|rror" "$R"/graphs-*.txt | cut -c1-200 | head -40
    ;;
  graphdiag)
    command -v gdb eu-stack || echo "no gdb, no eu-stack"
    for nb in 3 5 10; do
      PERF_TIMEOUT=12 perf new "$R/gd-g3-b$nb.txt" sendrecv -g 3 -b 8 -e 8 -d uint8 -n $nb -G 1 -w 0 -c 0
    done
    PERF_TIMEOUT=12 perf new "$R/gd-t3-b3.txt" sendrecv -t 3 -b 8 -e 8 -d uint8 -n 3 -G 1 -w 0 -c 0
    CUDA_DEVICE_MAX_CONNECTIONS=32 PERF_TIMEOUT=12 perf new "$R/gd-g3-q32.txt" sendrecv -g 3 -b 8 -e 8 -d uint8 -n 20 -G 1 -w 0 -c 0
    PERF_TIMEOUT=12 perf new "$R/gd-g3-G5.txt" sendrecv -g 3 -b 8 -e 8 -d uint8 -n 1 -G 5 -w 0 -c 0
    CECOLL_DEBUG=INFO CECOLL_DEBUG_SUBSYS=ALL build/cecoll-perf sendrecv -g 3 -b 8 -e 8 -d uint8 -n 20 -G 1 -w 0 -c 0 > "$R/gd-stuck.txt" 2>&1 &
    pid=$!
    sleep 8
    for t in /proc/$pid/task/*; do echo "$t $(cat "$t/comm") $(cat "$t/wchan")"; done > "$R/gd-wchan.txt" 2>&1
    command -v gdb > /dev/null && timeout 40 gdb -p $pid -batch -ex "thread apply all bt 16" > "$R/gd-bt.txt" 2>&1
    kill -9 $pid
    grep -c . "$R/gd-stuck.txt"; cat "$R/gd-wchan.txt" | head -30
    [ -f "$R/gd-bt.txt" ] && grep -E "^Thread|^#[0-9]" "$R/gd-bt.txt" | grep -v "runtime\.\|futex\|epoll" | head -60
    ;;
  stagedq)
    for n in 4 8; do
      for v in q32 s256m; do
        e=CUDA_DEVICE_MAX_CONNECTIONS=32
        [ $v = s256m ] && e=CECOLL_STAGING_BYTES=268435456
        export "${e?}"
        perf new "$R/stagedq-t$v-n$n-r1.txt" sendrecv -t "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        mps_on
        perf new "$R/stagedq-P$v-n$n-r1.txt" sendrecv -P "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        mps_off
        unset "${e%%=*}"
      done
    done
    ;;
  graphwv)
    for nb in 12 15; do
      PERF_TIMEOUT=12 perf new "$R/gw-new-g3-b$nb.txt" sendrecv -g 3 -b 8 -e 8 -d uint8 -n $nb -G 1 -w 0 -c 0
    done
    for lay in "-g 3" "-t 3" "-g 4" "-g 8"; do
      PERF_TIMEOUT=12 perf wv "$R/gw-wv${lay// /}-b20.txt" sendrecv $lay -b 8 -e 8 -d uint8 -n 20 -G 1 -w 0 -c 1
    done
    PERF_TIMEOUT=12 perf new "$R/gw-new-ag-g3-b40.txt" allgather -g 3 -b 24 -e 24 -d uint8 -n 40 -G 1 -w 0 -c 0
    PERF_TIMEOUT=12 perf new "$R/gw-new-a2a-g4-b40.txt" alltoall -g 4 -b 32 -e 32 -d uint8 -n 40 -G 1 -w 0 -c 0
    grep -H -E "^ +[0-9]+ " "$R"/gw-*.txt | cut -c1-160
    ;;
  graphst)
    sr() { PERF_TIMEOUT=12 perf "$1" "$R/gs-$2.txt" sendrecv "${@:3}" -b 8 -e 8 -d uint8 -G 1 -c 0; }
    sr new t2-b20 -t 2 -n 20 -w 0
    sr new t3-b20-w2 -t 3 -n 20 -w 2
    CUDA_DEVICE_MAX_CONNECTIONS=32 sr new t3-b20-q32 -t 3 -n 20 -w 0
    CUDA_DEVICE_MAX_CONNECTIONS=32 sr wv wv-t3-b20-q32 -t 3 -n 20 -w 0
    sr new t3-b10 -t 3 -n 10 -w 0
    sr wv wv-g3-b40 -g 3 -n 40 -w 0
    PERF_TIMEOUT=12 perf new "$R/gs-ag-t3-b40.txt" allgather -t 3 -b 24 -e 24 -d uint8 -n 40 -G 1 -w 0 -c 0
    PERF_TIMEOUT=12 perf new "$R/gs-a2a-t4-b40.txt" alltoall -t 4 -b 32 -e 32 -d uint8 -n 40 -G 1 -w 0 -c 0
    ;;
  ringgraph)
    nvcc -O2 -o /tmp/ringgraph lab/h200/ringgraph.cu -lcuda -lpthread || exit 1
    for _ in 1 2 3; do
      for k in 20 40; do
        for v in "" UPLOAD=1; do
          env $v timeout 20 /tmp/ringgraph copy threads 3 $k 2>&1 | tail -1 | sed "s/^/${v:-plain} /"
        done
        for v in "" JOIN=1 "JOIN=1 UPLOAD=1"; do
          env $v timeout 20 /tmp/ringgraph copy one 3 $k 2>&1 | tail -1 | sed "s/^/${v:-plain} /"
        done
      done
    done | tee "$R/ringgraph.txt"
    ;;
  upload)
    up() { local tag=$1; shift; timeout 20 build/cecoll-perf "$@" -d uint8 -G 1 -w 0 -T 8 > "$R/up-$tag.txt" 2>&1; echo "$tag: rc=$? $(grep -cE '^ +[0-9]+ ' "$R/up-$tag.txt") rows"; }
    for k in 1 2 3; do
      up "sr-t3-n20-$k" sendrecv -t 3 -b 8 -e 8 -n 20 -c 1
      up "sr-g3-n20-$k" sendrecv -g 3 -b 8 -e 8 -n 20 -c 1
    done
    for k in 1 2; do
      up "sr-t2-n20-$k" sendrecv -t 2 -b 8 -e 8 -n 20 -c 1
      up "sr-g8-n20-$k" sendrecv -g 8 -b 8 -e 8 -n 20 -c 1
      up "ag-t3-n40-$k" allgather -t 3 -b 24 -e 24 -n 40 -c 1
      up "a2a-t4-n40-$k" alltoall -t 4 -b 32 -e 32 -n 40 -c 1
    done
    mrun graph-inproc "$(cells '\.(group|threads)\.graph\.' --devices dev0)" $(($(left) - 10)) -j 4 -b 64 -t 60
    ;;
  staged)
    for round in $(seq 1 "${ROUNDS:-3}"); do
      for n in $NS; do
        [ "$(left)" -lt 40 ] && break 2
        for b in base new; do
          perf $b "$R/staged-t-$b-n$n-r$round.txt" sendrecv -t "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        done
        mps_on
        for b in base new; do
          perf $b "$R/staged-P-$b-n$n-r$round.txt" sendrecv -P "$n" -b 256M -e 256M -d uint8 -n 10 -w 2 -c 1
        done
        mps_off
      done
    done
    ;;
  graphtimeout)
    # The rows that hung, under CECOLL_TIMEOUT=5: the watchdog should fail
    # the communicator (ncclRemoteError naming CECOLL_TIMEOUT, rc != 124)
    # and release the replays, within 30 s.
    for lay in "-g 3" "-t 3"; do
      CECOLL_TIMEOUT=5 PERF_TIMEOUT=30 perf new "$R/gt-sr${lay// /}.txt" sendrecv $lay -b 8 -e 8 -d uint8 -n 20 -G 1 -w 0 -c 0
    done
    CECOLL_TIMEOUT=5 PERF_TIMEOUT=30 perf new "$R/gt-ag-t3.txt" allgather -t 3 -b 24 -e 24 -d uint8 -n 40 -G 1 -w 0 -c 0
    grep -H -E "CECOLL_TIMEOUT|rror|^ +[0-9]+ " "$R"/gt-*.txt | cut -c1-220 | head -20
    ;;
  *) echo "unknown stage $stage" ;;
  esac
done
# The speed and small figures: per row, the median over the rounds.
"$PY" - "$R" <<'PY' | tee "$R/SUMMARY.txt"
import glob, os, re, statistics, sys
R = sys.argv[1]
vals = {}
for f in sorted(glob.glob(os.path.join(R, "*-r*.txt"))):
    m = re.match(r"(speed|bcast|small|staged|stagedq)-(.+)-n(\d+)-r\d+\.txt", os.path.basename(f))
    if not m:
        continue
    for line in open(f):
        c = line.split()
        if len(c) < 13 or not c[0].isdigit():
            continue
        # size count type redop root | oop: time algbw busbw #wrong | ip: time algbw busbw #wrong | %ceil oop ip
        key = (m.group(1), m.group(2), int(m.group(3)))
        vals.setdefault(key, []).append((float(c[5]), float(c[9]), c[8], c[12], c[13] if len(c) > 13 else "-", c[14] if len(c) > 14 else "-"))
for key in sorted(vals):
    v = vals[key]
    t_oop = statistics.median(x[0] for x in v)
    t_ip = statistics.median(x[1] for x in v)
    ceil = [x[4] for x in v]
    ceil_ip = [x[5] for x in v]
    print("%-6s %-10s N=%d  us oop %.1f ip %.1f  wrong %s/%s  %%ceil oop %s ip %s  (rounds %d)" %
          (key[0], key[1], key[2], t_oop, t_ip, ",".join(x[2] for x in v), ",".join(x[3] for x in v),
           ",".join(ceil), ",".join(ceil_ip), len(v)))
PY
finish p2p${TAG:+-$TAG}
