"""Test set-up: the ranks run on the caller's CECOLL_BACKEND, host (CPU
tensors) when unset; see harness.py for running on GPUs."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The spawned ranks import harness/cases by name: keep this folder on the path
# they inherit.
if HERE not in sys.path:
    sys.path.insert(0, HERE)
