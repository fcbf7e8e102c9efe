#!/usr/bin/env python3
"""lab/h200/perfrows.py FILE...: one line per row of cecoll-perf outputs, old (86fb7ac) or new
format: file collective size time_out time_in ceil_out ceil_in wrong_out wrong_in."""
import re
import sys

for f in sys.argv[1:]:
    coll, old = None, False
    for line in open(f, errors="replace"):
        m = re.search(r"Collective test starting: (\w+)_perf", line)
        if m:
            coll = m.group(1).replace("all_gather", "allgather")
            continue
        m = re.match(r"# (allgather|alltoall|scatter|gather)\s*$", line)
        if m:
            coll, old = m.group(1), True
            continue
        if line.startswith("#") or not re.match(r"\s*\d", line):
            continue
        p = line.split() + ["-"] * 15
        if old:  # size count type redop root | time algbw busbw #wrong %ceil | the same in place
            print(f, coll, p[0], p[5], p[10], p[9], p[14], p[8], p[13])
        else:  # size count type redop root | time algbw busbw #wrong | in place | %ceil out, in
            print(f, coll, p[0], p[5], p[9], p[13], p[14], p[8], p[12])
