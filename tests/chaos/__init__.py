"""Jepsen-style fault injection for the zone tree (issue 12).

Real `strato serve` processes (a root, two mids, four cells, shared pools at
two levels), a concurrent workload with duplicates and retries, a seeded
nemesis (kill -9 and restart, SIGSTOP/SIGCONT, a real network partition of one
cell in its own network namespace), then a checker that reads every zone's own
Placement API. Entry points: tests/chaos/test_chaos_short.py (pytest -m chaos)
and `python -m tests.chaos.run` (make chaos).
"""
