"""Test set-up: the suite runs the ranks on the host device (CPU tensors)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The spawned ranks import harness/cases by name: keep this folder on the path
# they inherit.
if HERE not in sys.path:
    sys.path.insert(0, HERE)
