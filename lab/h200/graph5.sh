#!/usr/bin/env bash
# lab/h200/graph5.sh: the eighth session's last call: 8 B graph replays (N=4, 8) of engine 2 with
# one stream per rank under capture (the capturing stream) against the old engine, and the old
# engine's hostcost. Everything lands in one tarball ($OUT/res.tgz: only 8 files come back).
# build/old's cecoll-perf predates nccl-tests' flags (issue 19): it gets the old ones.
set -u
cd "$(dirname "$0")/../.."
O=${OUT:-/tmp}; R=/tmp/res; mkdir -p $R
export CECOLL_BACKEND=nvidia NCCL_NVLS_ENABLE=0
gcc -O2 -Wall -o /tmp/hostcost lab/h200/hostcost.c -ldl -lpthread
for b in new old new old; do
  dir=build; [ $b = old ] && dir=build/old
  for n in 4 8; do
    if [ $b = old ]; then args=(-N $n -b 8 -e 8 -n 50 -w 5 -c 1 -G -K 20 -o all)
    else args=(all -g $n -b $((8 * n)) -e $((8 * n)) -d uint8 -R 2 -n 20 -G 50 -w 5 -c 1); fi
    s=$(date +%s); timeout 40 $dir/cecoll-perf "${args[@]}" > $R/g8_${b}_N${n}_$RANDOM.txt 2>&1
    echo "graph8 $b N=$n rc=$? $(( $(date +%s)-s ))s"
  done
done
for b in old new; do
  dir=build; [ $b = old ] && dir=build/old
  timeout 40 /tmp/hostcost -l $dir/libcecoll.so -n 4 -s 8,65536 -r 20 -k 64 -t 30 2>&1 | grep -E "HOSTCOST|watchdog|rror" | sed "s/^/$b /" | tee -a $R/hostcost.txt
done
tar -C /tmp -czf $O/res.tgz res
