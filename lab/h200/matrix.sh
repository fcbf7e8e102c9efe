#!/usr/bin/env bash
# lab/h200/matrix.sh: the correctness matrix (ctests/matrix.c) on the H200, by stage:
#   inproc   every in-process cell (layouts group and threads) at 2, 3 and 4 ranks, all on GPU 0
#   inproc8  the same at 8 ranks
#   proc     the process cells (proc, 2proc) at 2 to 4 ranks, all on GPU 0, under MPS
#   dev      the cells with a GPU per rank (names ending .dev: rank r on GPU r) at 2 to 4
#            ranks, in-process then the process cells under MPS; needs nvidia-h200-x4 (on
#            fewer GPUs the cells of more ranks than GPUs are SKIP lines, with both counts)
#   dev8     the in-process .dev cells at 8 ranks (nvidia-h200-x8)
#   rooted   the in-place rooted process cells (Scatter and Gather, root first and last,
#            symmetric windows plain and mixed, 2 to 4 ranks) without MPS, at most ROOTED (150) s
#   times    six cells of every layout one at a time with MATRIX_TIMES=1: where a GPU cell's
#            seconds go (the CUDA context of a cell's own process, communicator creation)
# The dimensions and their values are the matrix's own (ctests/README.md); --devices picks the
# device value (dev0: every rank on GPU 0; dev: a GPU per rank), given to --list and --run alike
# so that the ids agree. Each stage prints its FAIL and HANG lines and its summary; logs of
# unexpected cells and the outputs are in $OUT/matrix.tar.gz. build/ctests/matrix and
# build/libcecoll.so come carried:
#
#   run(command="bash lab/h200/matrix.sh inproc", carry=["build"])
#   run(command="bash lab/h200/matrix.sh dev", carry=["build"], kind="nvidia-h200-x4")
set -u
cd "$(dirname "$0")/../.." || exit 2
source lab/h200/lib.sh
begin matrix
nvidia-smi -L 2>/dev/null | sed 's/^/# /'
for stage in "$@"; do
  echo "== $stage ($(left) s left)"
  case $stage in
  inproc) mrun inproc "$(cells '\.(group|threads)\.' --devices dev0)" $(($(left) - 20)) --devices dev0 -j 4 -b 64 -t 60 ;;
  inproc8)
    mrun inproc8 "$(cells '\.(group|threads)\.' --devices dev0 -r 8)" $(($(left) - 20)) --devices dev0 -r 8 -j 4 -b 64 -t 30
    ;;
  proc)
    mps_on
    mrun proc "$(cells '\.(proc|2proc)\.' --devices dev0)" $(($(left) - 20)) --devices dev0 -j 2 -b 64 -t 60
    mps_off
    ;;
  dev)
    mrun dev-inproc "$(cells '\.(group|threads)\.' --devices dev)" $(($(left) / 2)) --devices dev -j 4 -b 64 -t 60
    mps_on
    mrun dev-proc "$(cells '\.(proc|2proc)\.' --devices dev)" $(($(left) - 20)) --devices dev -j 2 -b 64 -t 60
    mps_off
    ;;
  rooted)
    t=$(($(left) - 10)); [ "$t" -gt "${ROOTED:-150}" ] && t=${ROOTED:-150}
    mrun rooted "$(cells '^(scatter|gather)\.inplace\..*\.(sym|mixedsym)\.(proc|2proc)\.' --devices dev0)" "$t" --devices dev0 -j 2 -b 16 -t 60
    ;;
  times)
    ids=allgather.oop.unreg.group.eager.own.n2,alltoall.inplace.sym.group.graph.two.n4,scatter.oop.root0.reg.threads.eager.own.n4,gather.inplace.rootlast.win.threads.graph.two.n3,allgather.oop.mixed.proc.eager.own.n3,alltoall.oop.sym.2proc.graph.own.n4
    MATRIX_TIMES=1 timeout 200 build/ctests/matrix --run "$ids" --devices dev0 -j 1 -t 60 -K -o "$R/times" 2>&1 | grep -E '^(PASS|EXPECTED|FAIL|HANG)' | cut -c1-200
    grep -h "matrix: +" "$R/times"/*.log | head -80
    ;;
  dev8) mrun dev8 "$(cells '\.(group|threads)\.' --devices dev -r 8)" $(($(left) - 20)) --devices dev -r 8 -j 4 -b 64 -t 30 ;;
  *) echo "unknown stage $stage" ;;
  esac
done
finish matrix
