#!/usr/bin/env bash
# shellcheck disable=SC2046 # the argument helpers' words are split on purpose
# lab/h200/compare.sh: two builds of the library side by side on one H200, in alternating rounds:
# the 256 MiB floors (cecoll-perf -g N of each of the four collectives at 256 MiB per rank, out of and in place, N = 2, 4, 8:
# %ceil) and the 8 B graph replays (lib.sh's g8args, N = 2, 4, 8: us). "new" is build/, the other
# build/BASE (BASE, default base: its libcecoll.so.*, run by build/cecoll-perf). Prints, per
# figure, the median of the rounds for each build and new / base; results (the raw outputs and
# SUMMARY.txt) in $OUT/compare.tar.gz.
#
#   run(command="bash lab/h200/compare.sh floors g8", carry=["build"])
#
# Knobs: ROUNDS (3), NS ("2 4 8"), BASE (base), BUDGET (seconds, 560): a stage stops early when
# too little is left, and the summary says how many rounds ran.
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin compare
B=${BASE:-base}
NS=${NS:-2 4 8}
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  for round in $(seq 1 "${ROUNDS:-3}"); do
    for n in $NS; do
      for b in new "$B"; do
        [ "$(left)" -lt 30 ] && break 3
        case $stage in
        floors) # the four collectives every build runs (all also times newer operations)
          for c in allgather alltoall scatter gather; do
            perf "$b" "$R/one.out" "$c" -g "$n" -b $((256 * n))M -e $((256 * n))M -d uint8 -R 2 -n 10 -w 2 -c 0
            cat "$R/one.out" >> "$R/floors-$b-n$n-r$round.txt"
          done
          rm -f "$R/one.out" ;;
        g8) perf "$b" "$R/g8-$b-n$n-r$round.txt" $(g8args "$n") ;;
        *) echo "unknown stage $stage"; break 3 ;;
        esac
      done
    done
  done
done
# One line per figure: stage, N, collective, place, the medians of new and base, and new / base.
python3 - "$R" "$B" <<'PY' | tee "$R/SUMMARY.txt"
import glob, os, re, statistics, subprocess, sys
R, base = sys.argv[1], sys.argv[2]
rows = {}  # (stage, n, coll, place, build) -> [values]
for f in sorted(glob.glob(os.path.join(R, "*-r*.txt"))):
    m = re.match(r"(floors|g8)-(.+)-n(\d+)-r(\d+)\.txt", os.path.basename(f))
    if not m:
        continue
    stage, build, n = m.group(1), m.group(2), int(m.group(3))
    out = subprocess.run(["python3", "lab/h200/perfrows.py", f], capture_output=True, text=True).stdout
    for line in out.splitlines():
        p = line.split()  # file coll size time_out time_in ceil_out ceil_in wrong_out wrong_in
        for place, t, c in (("out", p[3], p[5]), ("in", p[4], p[6])):
            v = c if stage == "floors" else t
            try:
                rows.setdefault((stage, n, p[1], place, build), []).append(float(v))
            except ValueError:
                pass
print("# stage N collective place  new(median)  %s(median)  new/%s  rounds" % (base, base))
for (stage, n, coll, place, build), vs in sorted(rows.items()):
    if build != "new":
        continue
    bs = rows.get((stage, n, coll, place, base), [])
    mn = statistics.median(vs)
    mb = statistics.median(bs) if bs else float("nan")
    print("%-6s %d %-9s %-3s  %9.2f  %9.2f  %6.3f  %d/%d" % (stage, n, coll, place, mn, mb, mn / mb if bs else float("nan"), len(vs), len(bs)))
PY
finish compare
