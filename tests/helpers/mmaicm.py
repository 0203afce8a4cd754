"""The MMAICM tests' small config."""
from __future__ import annotations


SMALL = {"max_q_len": 10, "max_a_len": 14, "filters": 4, "fc_hidden": 8, "dropout": 0.0}
