"""A process forked after it loaded cecoll (multiprocessing's 'fork' start
method, Linux's default) gets CecollError(ncclInvalidUsage) saying to use
spawn, never a hang. Runs in a fresh interpreter: the pytest process must
not load the library."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import multiprocessing as mp, sys, torch
    import cecoll

    def child(pg):
        for what, call in (
            ("get_unique_id", cecoll.get_unique_id),
            ("all_gather_into_tensor", lambda: pg.all_gather_into_tensor(torch.empty(4), torch.zeros(4))),
        ):
            try:
                call()
            except cecoll.CecollError as e:
                text = e.last_error
                if e.name != "ncclInvalidUsage" or "forked" not in e.last_error or "spawn" not in e.last_error:
                    print("child: %s: %s" % (what, e))
                    sys.exit(1)
            else:
                print("child: %s did not fail" % what)
                sys.exit(1)
        print("child: refused: " + text)

    if __name__ == "__main__":
        pg = cecoll.ProcessGroup(0, 1, cecoll.get_unique_id())  # loads the library
        p = mp.get_context("fork").Process(target=child, args=(pg,))
        p.start()
        p.join(30)
        if p.is_alive():
            p.kill()
            print("child hung")
            sys.exit(1)
        out = torch.empty(4)
        pg.all_gather_into_tensor(out, torch.ones(4))  # the parent still works
        pg.barrier()
        pg.destroy()
        sys.exit(p.exitcode)
    """
)


def test_forked_child_is_refused(tmp_path):
    script = tmp_path / "fork_child.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, CECOLL_BACKEND=os.environ.get("CECOLL_BACKEND") or "host")
    r = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "child: refused: ncclAllGather: this process" in r.stdout, r.stdout
