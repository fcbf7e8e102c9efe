#!/bin/bash
# lab/h200/dropin.sh: forward mode under torch on one H200 (no Go there):
# run from the repository root with build/ carried, built beforehand with
# `make all dropin` (build/libcecoll.so and build/dropin/libnccl.so.2).
# Figures: docs/performance.md, "Forward mode under torch".
#
#   run(command="bash lab/h200/dropin.sh", carry=["build"])
#
# Everything it writes ends in ONE tar file, $OUT/dropin.tar.gz (the
# folder it was made from is removed), with SUMMARY.txt at its top.
#
# Steps (each under its own timeout; DROPIN_STEPS picks some):
#   env       nvidia-smi, python, torch and its NCCL (version, file), the
#             libraries under test
#   base      torch alone, world size 1: the probe's ops with torch's own
#             NCCL (the control: every op must pass)
#   preload   the same with LD_PRELOAD=build/libcecoll.so, CECOLL_DEBUG=INFO
#   ce        the same preloaded with CECOLL_ROUTE=ce (the four collectives
#             all take the copy engines)
#   dropin    the same with build/dropin first on LD_LIBRARY_PATH (cecoll as
#             libnccl.so.2); the probe records which libnccl the process
#             mapped: torch's DT_RPATH names the wheel's, which wins
#   dropinpre the same with build/dropin/libnccl.so.2 preloaded: its SONAME
#             stands for libnccl.so.2, and it finds the wheel's itself
#   twoproc   two processes on the one GPU, preloaded: NCCL refuses the
#             layout ("Duplicate GPU"), the communicator stays CE-only,
#             all_gather_into_tensor and all_to_all_single must work,
#             all_reduce, broadcast and barrier must fail with that reason
#   sym       what a drop-in libnccl.so.2 must export: the functions the
#             wheel's NCCL exports, those libtorch_cuda.so takes from it, and
#             which of either cecoll lacks (nm; every line of the last two
#             lists is a missing function)
#   q1, q2    preloaded with CUDA_DEVICE_MAX_CONNECTIONS=1 and 2 (as
#             Megatron-LM sets): too few hardware queues for the copy
#             engines, so every call goes to torch's NCCL (one WARN says
#             so) and every op must pass; with an older library the init
#             failed with ncclInvalidUsage (DROPIN_LIB names another build)
#
# The probe (world size 1): a DDP step, all_reduce, broadcast, barrier,
# reduce_scatter_tensor, all_gather_into_tensor and all_to_all_single at 4
# KiB and 128 MiB (past CECOLL_ROUTE_BYTES, 64M), new_group and an
# all_reduce on it; each op's result is checked against the expected
# values and recorded (ok, error text, seconds) as JSON.
#
# Knobs: OUT (default /tmp/cecoll_dropin), PYTHON (default python3),
# DROPIN_STEPS (default "env base preload ce dropin dropinpre twoproc"), STEP_TO
# (seconds per step, default 120), DROPIN_LIB (the library the preload
# steps load, default build/libcecoll.so), DROPIN_TAG (the results' name,
# default dropin).
set -u
cd "$(dirname "$0")/../.." || exit 2
root=$PWD
OUT=${OUT:-/tmp/cecoll_dropin}
TAG=${DROPIN_TAG:-dropin}
dir="$OUT/$TAG"
rm -rf "$dir"
mkdir -p "$dir"
PYTHON=${PYTHON:-python3}
STEPS=${DROPIN_STEPS:-env base preload ce dropin dropinpre twoproc}
STEP_TO=${STEP_TO:-120}
lib="${DROPIN_LIB:-$root/build/libcecoll.so}"
dropin="$root/build/dropin"
summary="$dir/SUMMARY.txt"
say() { echo "$*" | tee -a "$summary"; }

say "# dropin.sh $(date -u +%FT%TZ) on $(hostname), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
for f in "$lib" "$dropin/libnccl.so.2"; do
  [ -f "$f" ] || say "MISSING $f: build with 'make all dropin' before carrying build/"
done

# torch initialises CUDA before cecoll: its queue count only counts from the
# start (README, nvidia backend).
export CUDA_DEVICE_MAX_CONNECTIONS=${CUDA_DEVICE_MAX_CONNECTIONS:-32}

cat >"$dir/probe.py" <<'PY'
"""Forward-mode probe: torch.distributed ops on NCCL, each checked and recorded."""
import json, os, sys, time

import torch
import torch.distributed as dist

MODE, OUTFILE = sys.argv[1], sys.argv[2]


def mapped():
    libs = set()
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 6 and any(k in parts[5] for k in ("nccl", "cecoll", "rccl")):
                libs.add(parts[5])
    return sorted(libs)


def run(results, name, fn):
    t = time.time()
    try:
        ok = fn()
        torch.cuda.synchronize()
        results.append({"op": name, "ok": bool(ok), "s": round(time.time() - t, 4)})
    except Exception as e:  # the refusal text is the point in twoproc
        results.append({"op": name, "ok": False, "error": str(e)[-3000:], "s": round(time.time() - t, 4)})


def ops(rank, world, dev, results):
    def all_reduce():
        x = torch.full((1024,), float(rank + 1), device=dev)
        dist.all_reduce(x)
        return bool((x == world * (world + 1) / 2).all())

    def broadcast():
        x = torch.full((1024,), float(rank), device=dev)
        dist.broadcast(x, src=0)
        return bool((x == 0).all())

    def reduce_scatter():
        x = torch.ones(world * 1024, device=dev)
        y = torch.empty(1024, device=dev)
        dist.reduce_scatter_tensor(y, x)
        return bool((y == world).all())

    def all_gather(nbytes):
        def f():
            n = nbytes // 4
            x = torch.full((n,), float(rank), device=dev)
            y = torch.empty(world * n, device=dev)
            dist.all_gather_into_tensor(y, x)
            return all(bool((y[r * n:(r + 1) * n] == r).all()) for r in range(world))
        return f

    def all_to_all(nbytes):
        def f():
            n = nbytes // 4 // world
            x = torch.cat([torch.full((n,), float(rank * 100 + p), device=dev) for p in range(world)])
            y = torch.empty_like(x)
            dist.all_to_all_single(y, x)
            return all(bool((y[p * n:(p + 1) * n] == p * 100 + rank).all()) for p in range(world))
        return f

    def new_group():
        g = dist.new_group(list(range(world)))
        x = torch.ones(16, device=dev)
        dist.all_reduce(x, group=g)
        return bool((x == world).all())

    def ddp_step():
        model = torch.nn.Linear(256, 256).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index])
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        loss = ddp(torch.randn(32, 256, device=dev)).sum()
        loss.backward()
        opt.step()
        return bool(torch.isfinite(loss).item())

    run(results, "ddp_step", ddp_step)
    run(results, "all_reduce", all_reduce)
    run(results, "broadcast", broadcast)
    run(results, "barrier", lambda: dist.barrier() or True)
    run(results, "reduce_scatter_tensor", reduce_scatter)
    for nbytes in (4096, 128 << 20):
        run(results, "all_gather_into_tensor %d" % nbytes, all_gather(nbytes))
        run(results, "all_to_all_single %d" % nbytes, all_to_all(nbytes))
    run(results, "new_group", new_group)


def worker(rank, world, outfile):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    info = {"mode": MODE, "rank": rank, "world": world, "torch": torch.__version__}
    results = []
    try:
        torch.cuda.set_device(0)
        dev = torch.device("cuda", 0)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=dev)
        info["nccl_version"] = list(torch.cuda.nccl.version())
        ops(rank, world, dev, results)
        dist.destroy_process_group()
    except Exception as e:
        info["fatal"] = str(e)[-3000:]
    info["mapped"] = mapped()
    info["results"] = results
    with open(outfile % rank, "w") as f:
        json.dump(info, f, indent=1)


if __name__ == "__main__":
    if MODE == "twoproc":
        import torch.multiprocessing as mp
        mp.spawn(worker, args=(2, OUTFILE), nprocs=2, join=True)
    else:
        worker(0, 1, OUTFILE)
PY

step() { # name, env..., -- then the probe mode
  local name=$1
  shift
  local envs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  case " $STEPS " in *" $name "*) ;; *) return ;; esac
  say "== $name: ${envs[*]} probe $*"
  local t0
  t0=$(date +%s)
  env "${envs[@]}" CECOLL_DEBUG_FILE="$dir/$name.cecoll.%p.log" \
    timeout -k 10 "$STEP_TO" "$PYTHON" "$dir/probe.py" "$@" "$dir/$name.rank%d.json" >"$dir/$name.out" 2>&1
  say "   rc=$? in $(($(date +%s) - t0)) s"
  for j in "$dir/$name".rank*.json; do
    [ -f "$j" ] || { say "   no result (see $name.out)"; continue; }
    "$PYTHON" - "$j" <<'PY' | tee -a "$summary"
import json, sys
d = json.load(open(sys.argv[1]))
print("   rank %s nccl %s fatal %s" % (d["rank"], d.get("nccl_version"), d.get("fatal", "-")[:300]))
print("   mapped: %s" % ", ".join(d["mapped"]))
for r in d["results"]:
    why = "" if r["ok"] else "  " + r.get("error", "wrong result")[:240].replace("\n", " ")
    print("   %-34s %-4s %7.3fs%s" % (r["op"], "ok" if r["ok"] else "FAIL", r["s"], why))
PY
  done
  if ls "$dir/$name".cecoll.*.log >/dev/null 2>&1; then
    say "   cecoll: $(cat "$dir/$name".cecoll.*.log | grep -c WARN) WARN lines; forward and route lines:"
    grep -hE "forward:|route:|paired|refused this communicator|every call goes to the real library" "$dir/$name".cecoll.*.log | sed 's/^[^ ]* cecoll /   /' |
      sort | uniq -c | sed 's/^/  /' | tee -a "$summary"
  fi
}

case " $STEPS " in
*" env "*)
  {
    echo "== env"
    nvidia-smi -L 2>&1
    "$PYTHON" -c 'import torch, os; import torch.cuda.nccl as n; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", n.version()); import importlib.util as u; s = u.find_spec("nvidia"); print("nvidia wheel dir", list(s.submodule_search_locations) if s else None)' 2>&1
    "$PYTHON" -c 'import glob, os, site; [print("nccl file", p, os.path.realpath(p)) for d in site.getsitepackages() for p in glob.glob(d + "/nvidia/nccl/lib/libnccl.so*")]' 2>&1
    ls -la "$lib" "$dropin" 2>&1
    readelf -d "$dropin/libnccl.so.2" 2>/dev/null | grep SONAME
    for so in $("$PYTHON" -c 'import torch, os; print(os.path.dirname(torch.__file__) + "/lib/libtorch_cuda.so")' 2>/dev/null); do
      echo "$so:"
      readelf -d "$so" 2>/dev/null | grep -E "NEEDED.*nccl|RPATH|RUNPATH"
    done
  } 2>&1 | tee -a "$summary"
  ;;
esac

case " $STEPS " in
*" sym "*)
  {
    echo "== sym"
    w=$("$PYTHON" -c 'import os, nvidia; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)/nvidia/nccl/lib/libnccl.so.2
    t=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)/lib/libtorch_cuda.so
    nm -D --defined-only "$w" | awk '$2 ~ /[TW]/ {print $3}' | sort > "$dir/nccl-exports.txt"
    nm -D --undefined-only "$t" | awk '{print $2}' | grep -E '^p?nccl' | sort > "$dir/torch-needs.txt"
    nm -D --defined-only "$lib" | awk '{print $3}' | sort > "$dir/cecoll-exports.txt"
    echo "$w: $(wc -l < "$dir/nccl-exports.txt") exports; $t takes $(wc -l < "$dir/torch-needs.txt")"
    echo "torch takes, cecoll lacks: $(comm -23 "$dir/torch-needs.txt" "$dir/cecoll-exports.txt" | tr '\n' ' ')"
    echo "nccl exports, cecoll lacks: $(comm -23 "$dir/nccl-exports.txt" "$dir/cecoll-exports.txt" | tr '\n' ' ')"
  } 2>&1 | tee -a "$summary"
  ;;
esac

step base -- single
step preload "LD_PRELOAD=$lib" CECOLL_DEBUG=INFO -- single
step ce "LD_PRELOAD=$lib" CECOLL_DEBUG=INFO CECOLL_ROUTE=ce -- single
step dropin "LD_LIBRARY_PATH=$dropin:${LD_LIBRARY_PATH:-}" CECOLL_DEBUG=INFO -- single
# torch's libtorch_cuda.so names the wheel's NCCL in its DT_RPATH, which the
# loader searches before LD_LIBRARY_PATH: the drop-in reaches torch preloaded.
step dropinpre "LD_PRELOAD=$dropin/libnccl.so.2" CECOLL_DEBUG=INFO -- single
step twoproc "LD_PRELOAD=$lib" CECOLL_DEBUG=INFO -- twoproc
step q1 "LD_PRELOAD=$lib" CECOLL_DEBUG=INFO CUDA_DEVICE_MAX_CONNECTIONS=1 -- single
step q2 "LD_PRELOAD=$lib" CECOLL_DEBUG=INFO CUDA_DEVICE_MAX_CONNECTIONS=2 -- single

say "== expected: base/preload/ce/dropin every op ok; ce: route lines to copy engines for all four sizes;"
say "   dropin: mapped shows build/dropin/libnccl.so.2 and torch's libnccl (else torch bypassed the drop-in);"
say "   twoproc: all_gather/all_to_all ok, all_reduce/broadcast/barrier FAIL naming 'Duplicate GPU'"
say "   q1, q2: every op ok, a WARN 'every call goes to the real library', route lines to the real library"

tar -czf "$OUT/$TAG.tar.gz" -C "$OUT" "$TAG" && rm -rf "$dir"
echo "results: $OUT/$TAG.tar.gz"
