"""Run the chaos suite for several seeds and print a table.

    python -m tests.chaos.run --seeds 1-10 --duration 75

Each seed: a fresh tree, the workload and the nemesis for `duration`
seconds, heal, wait for holds and reconciliation, resend unresolved requests,
check. Exits 1 if any seed found a safety violation (liveness is reported,
not judged, here). Needs root for the network namespace (falls back to
SIGSTOP otherwise, and says so).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.chaos.checker import Checker, Violation, quiesce
from tests.chaos.cluster import ZONE_NAMES, Cluster
from tests.chaos.history import History
from tests.chaos.liveness import Liveness, measure
from tests.chaos.nemesis import KINDS, Nemesis
from tests.chaos.workload import Workload


@dataclass
class SeedResult:
    seed: int
    requests: int = 0
    placed: int = 0
    refused: int = 0
    cancelled: int = 0
    unresolved: int = 0
    status_503: int = 0
    no_answer: int = 0
    resent: int = 0
    events: int = 0
    violations: list[Violation] = field(default_factory=list)
    liveness: Liveness = field(default_factory=Liveness)
    quiesce_s: float = 0.0
    error: str | None = None

    def kinds(self) -> Counter[str]:
        return Counter(v.kind for v in self.violations)


def heal_all(cluster: Cluster) -> None:
    """Whatever the nemesis left: resume paused zones, restart dead ones,
    bring the link up."""
    if cluster.netns is not None:
        with contextlib.suppress(Exception):
            cluster.netns.heal()
    for z in cluster.zones.values():
        if z.paused:
            z.resume()
        if not z.alive():
            z.start()


def run_seed(seed: int, duration: float, workdir: Path, *, clients: int = 16,
             kinds: tuple[str, ...] = KINDS, shuffle: bool = True, use_netns: bool = True,
             postgres: frozenset[str] = frozenset(),
             log: Callable[[str], None] = print) -> SeedResult:
    say = log
    res = SeedResult(seed)
    where = workdir / f"seed-{seed}"
    if where.exists():
        # A seed starts from empty databases: an earlier run's are not reused.
        shutil.rmtree(where)
    cluster = Cluster(where, use_netns=use_netns, postgres=postgres)
    try:
        cluster.start()
        history = History()
        workload = Workload(cluster, history, seed=seed, clients=clients, duration=duration)
        nemesis = Nemesis(cluster, history, seed=seed, duration=duration, kinds=kinds,
                          shuffle=shuffle, log=say)
        nemesis.start()
        try:
            workload.run()
        finally:
            # The nemesis heals the fault in progress as it stops.
            workload.stop()
            nemesis.stop()
        heal_all(cluster)
        if nemesis.error is not None:
            raise RuntimeError(f"nemesis failed: {nemesis.error!r}")
        if workload.errors:
            raise RuntimeError(f"{len(workload.errors)} client error(s), first: "
                               f"{workload.errors[0]}")
        cluster.wait_linked(timeout=90)
        ttl = cluster.hold_ttl()
        # Holds made up to the end of the workload expire `ttl` later.
        end = history.end or history.now()
        _, waited = quiesce(cluster, settle=max(0.5, end + ttl + 2.0 - history.now()),
                            limit=ttl + 60.0, log=say)
        before = history.now()
        res.resent = workload.resolve()
        settle = (before + ttl + 2.0 - history.now()) if res.resent else 0.5
        snap, waited2 = quiesce(cluster, settle=max(0.5, settle), limit=ttl + 60.0, log=say)
        res.quiesce_s = waited + waited2
        res.violations = Checker(cluster, history, snap).run()
        res.liveness = measure(cluster, history)
        _count(res, history)
        history.dump(workdir / f"seed-{seed}" / "history.jsonl")
        (workdir / f"seed-{seed}" / "violations.txt").write_text(
            "\n\n".join(v.report() for v in res.violations) + "\n")
        (workdir / f"seed-{seed}" / "events.txt").write_text(
            "\n".join(e.line() for e in history.events) + "\n" + res.liveness.report() + "\n")
    except Exception as exc:  # reported in the table and the exit code
        res.error = f"{type(exc).__name__}: {exc}"
        say(f"error {res.error}")
    finally:
        cluster.close()
    return res


def _count(res: SeedResult, history: History) -> None:
    res.requests = len(history.requests)
    res.events = len(history.events)
    for req in history.requests.values():
        if req.cancelled_at() is not None or any(a.outcome == "cancelled"
                                                 for a in req.attempts):
            res.cancelled += 1
        elif any(a.answer and a.answer.get("placements") for a in req.oks()):
            res.placed += 1
        elif req.oks():
            pass  # atomic=false with nothing placed: neither placed nor refused
        elif any(a.outcome == "refused" for a in req.attempts):
            res.refused += 1
        else:
            res.unresolved += 1
        res.status_503 += sum(1 for a in req.attempts if a.status == 503)
        res.no_answer += sum(1 for a in req.attempts if a.status is None)


HEADER = (f"{'seed':>4} {'reqs':>5} {'placed':>6} {'refused':>7} {'canc':>4} {'unres':>5} "
          f"{'503s':>5} "
          f"{'noans':>5} {'faults':>6} {'heal->use med/max':>17} {'gap':>5} {'viol':>5}  kinds")


def row(r: SeedResult) -> str:
    if r.error:
        return f"{r.seed:>4} ERROR {r.error}"
    med, mx = r.liveness.median_heal, r.liveness.max_heal
    heal = "-" if med is None or mx is None else f"{med:.1f}/{mx:.1f}s"
    kinds = ", ".join(f"{k}={n}" for k, n in sorted(r.kinds().items())) or "-"
    return (f"{r.seed:>4} {r.requests:>5} {r.placed:>6} {r.refused:>7} {r.cancelled:>4} "
            f"{r.unresolved:>5} "
            f"{r.status_503:>5} {r.no_answer:>5} {r.events:>6} {heal:>17} "
            f"{r.liveness.longest_gap:>4.1f}s {len(r.violations):>5}  {kinds}")


def _progress(seed: int, line: str) -> None:
    print(f"  seed {seed} {line}", flush=True)


def parse_seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def parse_zones(text: str) -> frozenset[str]:
    """`--postgres`: zone names, comma separated, or `all`."""
    if text.strip() == "all":
        return frozenset(ZONE_NAMES)
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - set(ZONE_NAMES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown zone(s) {', '.join(unknown)}; "
                                         f"known: {', '.join(ZONE_NAMES)} or all")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", default="1", help="e.g. 1-10 or 1,4,7")
    ap.add_argument("--duration", type=float, default=75.0, help="workload seconds per seed")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep databases, logs and reports here (default: a temp dir, "
                    "removed unless a seed failed)")
    ap.add_argument("--no-netns", action="store_true", help="partition by SIGSTOP instead")
    ap.add_argument("--show", type=int, default=5, help="violations printed per seed")
    ap.add_argument("--ledger-commit", choices=("sync", "async"), default=None,
                    help="the zones' --ledger-commit (default: theirs, sync)")
    ap.add_argument("--postgres", type=parse_zones, default=frozenset(), metavar="ZONES",
                    help="zones kept in a fresh PostgreSQL database each (e.g. "
                    "root,mid1,cell2 or all; created for the seed, dropped after it; "
                    "server: $STRATO_CHAOS_PG, default postgresql+psycopg://"
                    "postgres@127.0.0.1:5432); the others on SQLite")
    args = ap.parse_args(argv)
    if args.ledger_commit:
        os.environ["STRATO_LEDGER_COMMIT"] = args.ledger_commit  # the servers inherit it
    # A plain `kill` of the runner must still stop our servers and remove the
    # namespace: SystemExit runs every cleanup on its way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="strato-chaos-"))
    results = []
    for seed in parse_seeds(args.seeds):
        began = time.monotonic()
        on_pg = ",".join(z for z in ZONE_NAMES if z in args.postgres) or "none"
        print(f"seed {seed}: starting ({args.duration:.0f}s workload, {workdir}, "
              f"PostgreSQL: {on_pg})", flush=True)
        r = run_seed(seed, args.duration, workdir, clients=args.clients,
                     use_netns=not args.no_netns, postgres=args.postgres,
                     log=functools.partial(_progress, seed))
        results.append(r)
        print(f"seed {seed}: done in {time.monotonic() - began:.0f}s: "
              f"{len(r.violations)} violation(s) {dict(r.kinds())}", flush=True)
        for v in r.violations[:args.show]:
            print("    " + v.report().replace("\n", "\n    "), flush=True)
        if not r.error:
            print(r.liveness.report(), flush=True)
    print()
    print(HEADER)
    for r in results:
        print(row(r))
    bad = any(r.violations or r.error for r in results)
    if bad:
        print(f"\nfull reports: {workdir}/seed-*/violations.txt")
    elif args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
