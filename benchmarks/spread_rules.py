"""What a spread or anti-affinity below a tree's children costs, and where it
puts the instances.

`python -m benchmarks.spread_rules --requests 40 --rounds 3` builds, in
process, a root over two cells of two 8-VCPU hosts each (the tree of
`tests/zone/test_split.py`) and sends, one at a time, three shapes: two
plain instances, a 2-instance host spread (one cell is enough: the division
finds that with a dry-run round) and a 4-instance one (more instances than a
cell has hosts: divided over both cells, held then confirmed). Each request
is released after it is placed, so every request sees the same empty tree.
It prints each shape's p50 (the median of the rounds' medians) and the hosts
the last request of each shape used. Run it from two checkouts taking turns
to compare two versions of the code in the same hour.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.zone.test_split import make, req

SPREAD = {"type": "spread", "level": "host", "max_skew": 1}
SHAPES: list[tuple[str, int, list[dict[str, Any]]]] = [
    ("2 plain instances", 2, []),
    ("2 instances, host spread", 2, [SPREAD]),
    ("4 instances, host spread", 4, [SPREAD]),
]


async def run(requests: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="strato-bench-spread-") as d:
        tree = await make(Path(d), hosts=2)
        root = tree.client("global")
        p50s: dict[str, list[float]] = {}
        hosts: dict[str, Counter[str]] = {}
        try:
            for _ in range(rounds):
                for name, n, rules in SHAPES:
                    lat = []
                    for _ in range(requests):
                        body = req(n, vcpu=1, constraints=rules)
                        t = time.perf_counter()
                        r = await root.post("/strato/v1/schedule", json=body)
                        lat.append((time.perf_counter() - t) * 1000)
                        if r.status_code != 200:
                            raise SystemExit(f"{name}: {r.status_code} {r.text[:300]}")
                        hosts[name] = Counter(str(p["location"]).rsplit("/", 1)[-1]
                                              for p in r.json()["placements"])
                        for c in body["consumers"]:
                            await root.delete(f"/allocations/{c}")
                    p50s.setdefault(name, []).append(statistics.median(lat))
        finally:
            await tree.aclose()
    for name, _n, _rules in SHAPES:
        used = ", ".join(f"{h} {c}" for h, c in sorted(hosts[name].items()))
        print(f"{name}: p50 {statistics.median(p50s[name]):.2f} ms "
              f"(rounds {', '.join(f'{x:.2f}' for x in p50s[name])}); hosts: {used}")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--requests", type=int, default=40, help="per shape and round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    asyncio.run(run(args.requests, args.rounds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
