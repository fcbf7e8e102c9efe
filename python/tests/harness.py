"""Spawning ranks for the tests: torch.multiprocessing.spawn (never fork),
with a watchdog that kills the ranks and fails the test instead of hanging.

Backend: the ranks use the CECOLL_BACKEND of the caller's environment
(host when unset: CPU tensors, what CI runs). To run the suite on GPUs:

    make && CECOLL_BACKEND=nvidia CECOLL_LIBRARY=$PWD/build/libcecoll.so \
        PYTHONPATH=python python3 -m pytest python/tests -q -x

Each rank then uses CUDA device rank % torch.cuda.device_count() (cecoll
allows several ranks on one GPU) and the cases run on CUDA tensors. That CUDA
path was written against torch 2.x but has not been run on a GPU yet.
"""

import json
import os
import socket
import time

import torch
import torch.multiprocessing as mp

# Environment every rank gets: the caller's backend (default host), and
# cecoll's own timeouts short enough that a stuck collective fails inside the
# watchdog's window.
RANK_ENV = {
    "CECOLL_BACKEND": os.environ.get("CECOLL_BACKEND") or "host",
    "CECOLL_TIMEOUT": "30",
    "CECOLL_BOOTSTRAP_TIMEOUT": "30",
}


class RanksFailed(Exception):
    pass


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank, fn, world_size, env, args):
    for k, v in env.items():
        if os.environ.get(k) != v:
            raise RuntimeError("rank %d started without %s=%s in its environment" % (rank, k, v))
    if env["CECOLL_BACKEND"] in ("nvidia", "amd"):
        # ProcessGroup takes torch's current device (ROCm torch uses the cuda
        # names too): pick it before any group exists, as torch users do.
        count = torch.cuda.device_count()
        if count == 0:
            raise RuntimeError("CECOLL_BACKEND=%s but torch sees no CUDA device" % env["CECOLL_BACKEND"])
        torch.cuda.set_device(rank % count)
    fn(rank, world_size, *args)


def run_ranks(fn, world_size, args=(), env=None, timeout=90.0):
    """Runs fn(rank, world_size, *args) in world_size spawned processes.
    Raises RanksFailed with the first failure, or after `timeout` seconds
    (having killed the ranks)."""
    full_env = dict(RANK_ENV)
    full_env.update(env or {})
    # The library's Go runtime reads the environment the process started
    # with, not later os.environ changes: the children must inherit it.
    saved = {k: os.environ.get(k) for k in full_env}
    os.environ.update(full_env)
    try:
        ctx = mp.spawn(_entry, args=(fn, world_size, full_env, tuple(args)), nprocs=world_size, join=False)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                if ctx.join(timeout=0.2):
                    return
            except Exception as e:  # ProcessRaisedException / ProcessExitedException
                raise RanksFailed(str(e)) from e
            if time.monotonic() > deadline:
                raise RanksFailed("ranks still running after %.0f s: killed" % timeout)
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
        for p in ctx.processes:
            p.join(5)


class Recorder:
    """Per-rank JSON-lines log of case outcomes, flushed after each case so a
    hang or crash still tells which cases finished."""

    def __init__(self, directory, rank):
        self.f = open(os.path.join(directory, "rank%d.jsonl" % rank), "w")

    def record(self, case, error):
        self.f.write(json.dumps({"case": case, "error": error}) + "\n")
        self.f.flush()

    def close(self):
        self.f.close()


def read_results(directory, world_size):
    """{case: {rank: error-or-None}} from every rank's log."""
    out = {}
    for rank in range(world_size):
        path = os.path.join(directory, "rank%d.jsonl" % rank)
        if not os.path.exists(path):
            continue
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    d = json.loads(line)
                    out.setdefault(d["case"], {})[rank] = d["error"]
    return out
