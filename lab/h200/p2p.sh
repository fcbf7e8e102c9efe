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
# build/ comes carried (make all; build/ctests/matrix; build/cecoll-perf):
#
#   run(command="bash lab/h200/p2p.sh matrix mproc torch", carry=["build"])
#
# Knobs: ROUNDS (3), NS ("2 4 8"), BUDGET (seconds, 560). Results in $OUT/p2p.tar.gz.
set -u
cd "$(dirname "$0")/../.."
source lab/h200/lib.sh
begin p2p
NS=${NS:-2 4 8}
PY=${PYTHON:-python3}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  matrix) mrun sr-inproc "$(cells '^(sendrecv|broadcast)\..*\.(group|threads)\.')" $(($(left) - 20)) -j 4 -b 64 -t 60 ;;
  mproc)
    mps_on
    mrun sr-proc "$(cells '^(sendrecv|broadcast)\..*\.(proc|2proc)\.')" $(($(left) - 20)) -j 2 -b 64 -t 60
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
  *) echo "unknown stage $stage" ;;
  esac
done
# The speed and small figures: per row, the median over the rounds.
"$PY" - "$R" <<'PY' | tee "$R/SUMMARY.txt"
import glob, os, re, statistics, sys
R = sys.argv[1]
vals = {}
for f in sorted(glob.glob(os.path.join(R, "*-r*.txt"))):
    m = re.match(r"(speed|bcast|small)-(.+)-n(\d+)-r\d+\.txt", os.path.basename(f))
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
finish p2p
