"""Every collective on 2 and 4 spawned processes, checked against torch.

One spawned session per world size runs every case (spawning ranks that
import torch costs seconds; a session per case would not fit the time
budget); each case is then its own pytest test reading that session's log.
"""

import os
import re

import pytest

import cases
from harness import RanksFailed, free_port, read_results, run_ranks

WORLD_SIZES = (2, 4)
_sessions = {}


def _session(world_size, tmp_path_factory):
    if world_size not in _sessions:
        outdir = str(tmp_path_factory.mktemp("ws%d" % world_size))
        if world_size == 2:
            # the file share, and a small staging window so large messages run in rounds
            share = ("file", os.path.join(outdir, "unique.id"))
            # INFO log: which path each call took (test_paths_taken)
            env = {
                "CECOLL_STAGING_BYTES": "64K",
                "CECOLL_DEBUG": "INFO",
                "CECOLL_DEBUG_FILE": os.path.join(outdir, "cecoll.%p.log"),
            }
        else:
            # the TCP store share, and cecoll's cross-rank signature check
            share = ("tcp", free_port())
            env = {"CECOLL_CHECK": "1"}
        failure = None
        try:
            run_ranks(cases.session, world_size, args=(outdir, share), env=env, timeout=120)
        except RanksFailed as e:
            failure = str(e)
        _sessions[world_size] = (read_results(outdir, world_size), failure, outdir)
    return _sessions[world_size]


@pytest.mark.parametrize("case", cases.case_names())
@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_case(world_size, case, tmp_path_factory):
    results, failure, _ = _session(world_size, tmp_path_factory)
    per_rank = results.get(case, {})
    missing = [r for r in range(world_size) if r not in per_rank]
    if missing:
        pytest.fail("ranks %s never finished case %s; session failure: %s" % (missing, case, failure))
    errors = {r: e for r, e in per_rank.items() if e}
    assert not errors, "\n".join("rank %d: %s" % (r, e) for r, e in sorted(errors.items()))


@pytest.mark.parametrize("world_size", WORLD_SIZES)
def test_session_clean(world_size, tmp_path_factory):
    """The session ended cleanly (barrier, destroy, exit) and ran every case."""
    results, failure, _ = _session(world_size, tmp_path_factory)
    assert failure is None, failure
    assert set(results) == set(cases.case_names())


def test_rank_failure_is_reported():
    """A rank that raises fails the run, naming the error (no silent pass)."""
    with pytest.raises(RanksFailed, match="deliberate failure"):
        run_ranks(cases.failing, 2, timeout=60)


def test_hanging_rank_is_killed():
    """The watchdog kills ranks that outlive their time and fails the run."""
    with pytest.raises(RanksFailed, match="killed"):
        run_ranks(cases.hanging, 2, timeout=3)


def test_paths_taken(tmp_path_factory):
    """The 2-rank session's INFO log: registered tensors went zero-copy, and
    large unregistered ones through the 64K staging window in several rounds
    (this also shows the rank environment reached the library)."""
    _, _, outdir = _session(2, tmp_path_factory)
    logs = [f for f in os.listdir(outdir) if f.startswith("cecoll.") and f.endswith(".log")]
    assert len(logs) == 2, logs
    text = "".join(open(os.path.join(outdir, f)).read() for f in logs)
    for op in ("AllGather", "AlltoAll", "Scatter", "Gather"):
        assert re.search(r"ce %s: .* path zero-copy" % op, text), "no zero-copy %s in the log" % op
        assert re.search(r"ce %s: .* path staged plan \w+ rounds ([2-9]|\d\d)" % op, text), "no multi-round staged %s" % op
