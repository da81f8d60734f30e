"""OpenStack Placement's own API tests (its gabbi YAML files) against Strato.

All 79 files of the openstack-placement 16.0.0 wheel run here, each with
`gabbi-run` against a fresh Strato server. The wheel is downloaded once and
kept under `.cache/placement/` (ignored by git), so the suite still runs when
the registry cannot be reached; without it the suite fails, never skips.
Each file names a Placement fixture; tests/e2e/placement_fixtures.py builds
the same data through the HTTP API and exports the same variables.
`XFAIL` holds what cannot pass in our stack, each with its reason (docs/api.md
lists them too).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.placement_fixtures import FIXTURES, SERVER_FLAGS, build
from tests.helpers.server import ServerProcess

pytestmark = pytest.mark.slow

WHEEL = "openstack-placement==16.0.0"
GABBITS = "placement/tests/functional/gabbits/"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "placement"

# Every gabbi file of the wheel (test_the_wheel_has_these_files keeps the list true),
# so collecting the tests needs neither the wheel nor the network.
GABBI_FILES = (
    "aggregate", "aggregate-legacy-rbac", "aggregate-policy", "aggregate-secure-rbac",
    "allocation-bad-class", "allocation-candidates", "allocation-candidates-any-traits",
    "allocation-candidates-any-traits-groups", "allocation-candidates-bug-1792503",
    "allocation-candidates-legacy-rbac", "allocation-candidates-mappings-numa",
    "allocation-candidates-mappings-sharing", "allocation-candidates-member-of",
    "allocation-candidates-policy", "allocation-candidates-root-required",
    "allocation-candidates-secure-rbac", "allocations", "allocations-1-12", "allocations-1-8",
    "allocations-1.28", "allocations-bug-1714072", "allocations-bug-1778591",
    "allocations-bug-1778743", "allocations-bug-1779717", "allocations-legacy-rbac",
    "allocations-mappings", "allocations-policy", "allocations-post",
    "allocations-secure-rbac", "basic-http", "bug-1674694", "confirm-auth",
    "consumer-types-1.38", "consumer-types-bug-story-2009167", "cors", "ensure-consumer",
    "granular", "granular-same-subtree", "inventory", "inventory-legacy-rbac",
    "inventory-policy", "inventory-secure-rbac", "microversion", "microversion-bug-1724065",
    "non-cors", "reshaper", "reshaper-legacy-rbac", "reshaper-policy", "reshaper-secure-rbac",
    "resource-class-in-use", "resource-classes", "resource-classes-1-6",
    "resource-classes-1-7", "resource-classes-last-modified", "resource-classes-legacy-rbac",
    "resource-classes-policy", "resource-classes-secure-rbac", "resource-provider",
    "resource-provider-aggregates", "resource-provider-any-traits",
    "resource-provider-bug-1779818", "resource-provider-duplication",
    "resource-provider-legacy-rbac", "resource-provider-links", "resource-provider-policy",
    "resource-provider-resources-query", "resource-provider-secure-rbac", "same-subtree-deep",
    "shared-resources", "traits", "traits-legacy-rbac", "traits-policy", "traits-secure-rbac",
    "unicode", "usage", "usage-legacy-rbac", "usage-policy", "usage-secure-rbac",
    "with-allocations",
)

# file name → why it cannot pass in our stack (docs/api.md lists them too).
XFAIL: dict[str, str] = {
    "basic-http": "its 'bad content length not int' request cannot be sent over a socket: "
                  "gabbi's client (httpx over h11) refuses a non-numeric Content-Length "
                  "before sending (Placement runs it in-process through wsgi-intercept), "
                  "and uvicorn would refuse it before the application",
}


def _wheel() -> Path:
    wheels = sorted(CACHE.glob("openstack_placement-16.0.0-*.whl"))
    if not wheels:
        CACHE.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                               WHEEL, "-d", str(CACHE)], capture_output=True, text=True,
                              timeout=300)
        wheels = sorted(CACHE.glob("openstack_placement-16.0.0-*.whl"))
        if not wheels:
            pytest.fail(f"cannot download {WHEEL} into {CACHE}: {done.stderr[-300:]}")
    return wheels[0]


@pytest.fixture(scope="module")
def gabbits(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("placement")
    with zipfile.ZipFile(_wheel()) as z:
        for name in z.namelist():
            if name.startswith(GABBITS) and name.endswith(".yaml"):
                z.extract(name, where)
    return where / GABBITS


def _fixture_of(path: Path) -> str:
    named = yaml.safe_load(path.read_text()).get("fixtures") or ["APIFixture"]
    known = [n for n in named if n in FIXTURES]
    assert known, f"{path.name}: no known fixture in {named}"
    return known[0]


# The files that lean on the store most, also run against a zone on
# PostgreSQL (all 79 took about 6 minutes there and answered as on SQLite,
# response for response, in the session that added this).
POSTGRESQL_FILES = (
    "allocation-candidates", "allocation-candidates-member-of", "allocations",
    "allocations-1.28", "allocations-post", "granular", "inventory", "reshaper",
    "resource-provider", "resource-provider-resources-query", "shared-resources", "traits",
    "unicode", "usage",
)


def _cases() -> list[Any]:
    assert set(POSTGRESQL_FILES) <= set(GABBI_FILES), set(POSTGRESQL_FILES) - set(GABBI_FILES)
    cases = []
    for n in GABBI_FILES:
        wheres = ["zone", "root"] + (["zone-postgresql"] if n in POSTGRESQL_FILES else [])
        for where in wheres:
            marks = [pytest.mark.xfail(reason=XFAIL[n], strict=True)] if n in XFAIL else []
            if where == "zone-postgresql":
                marks.append(pytest.mark.postgres)
            cases.append(pytest.param(n, where, marks=marks, id=f"{where}-{n}"))
    return cases


@pytest.mark.parametrize(("name", "where"), _cases())
def test_placement_gabbit(name: str, where: str, gabbits: Path, tmp_path: Path,
                          request: pytest.FixtureRequest) -> None:
    """`zone`: one zone. `root`: the root of a tree with two cells (each its own
    process and database): the root answers for its subtree, and must still
    answer as Placement does. `zone-postgresql`: one zone on PostgreSQL (a
    fresh database per file), for POSTGRESQL_FILES."""
    path = gabbits / f"{name}.yaml"
    assert path.exists(), path
    fixture = _fixture_of(path)
    cells: list[ServerProcess] = []
    db_url = (str(request.getfixturevalue("pg_db_url")) if where == "zone-postgresql"
              else f"sqlite:///{tmp_path / 'strato.db'}")
    with ServerProcess(db_url, log_path=tmp_path / "server.log",
                       extra=[*SERVER_FLAGS.get(fixture, []), "--zone", "root"]) as server:
        try:
            if where == "root":
                cells = [ServerProcess(f"sqlite:///{tmp_path / f'{c}.db'}",
                                       log_path=tmp_path / f"{c}.log",
                                       extra=["--zone", c, "--parent", server.url,
                                              "--summary-interval", "0.5"]).start()
                         for c in ("dfw", "ord")]
                _wait_children(server, {"dfw", "ord"})
            env = build(fixture, server.url)
            runner = Path(sys.executable).with_name("gabbi-run")
            done = subprocess.run([str(runner), f"127.0.0.1:{server.port}", "--", str(path)],
                                  env={**os.environ, **env}, capture_output=True,
                                  text=True, timeout=300)
        finally:
            for c in cells:
                c.stop()
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]


def _wait_children(root: ServerProcess, names: set[str]) -> None:
    deadline = time.monotonic() + 30
    with httpx.Client(base_url=root.url, headers={"x-auth-token": "admin"}) as c:
        while time.monotonic() < deadline:
            got = c.get("/strato/v1/children").json().get("children", [])
            if {k["name"] for k in got if k.get("summary")} >= names:
                return
            time.sleep(0.1)
    raise AssertionError(f"{names} did not register with the root")


def test_the_wheel_has_these_files(gabbits: Path) -> None:
    assert sorted(p.stem for p in gabbits.glob("*.yaml")) == list(GABBI_FILES)
