"""`strato tree` against a real root over two cells: capacity bars, health,
and a cell that stops shown unhealthy (exit code 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strato.process import ServerProcess
from tests.cli.test_schedule_cli import invoke
from tests.e2e.test_zone_split import cells  # noqa: F401 (the fixture)
from tests.e2e.test_zone_tree import children, wait_for, zone
from tests.helpers import api

pytestmark = pytest.mark.slow


def test_tree_view(cells: dict[str, ServerProcess]) -> None:  # noqa: F811
    url = cells["root"].url
    result = invoke("tree", "--url", url)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "root" in out and "dfw" in out and "ord" in out and "healthy" in out
    assert "VCPU" in out and "0/64" in out  # the root's pool: 2 cells x 4 x 8
    got = json.loads(invoke("tree", "--url", url, "--json").output)
    assert [z["summary"]["zone"] for z in got] == ["root", "dfw", "ord"]
    cells["ord"].stop()
    with api.client(url) as c:
        wait_for(lambda: not children(c)["ord"]["health"]["healthy"], timeout=30)
    result = invoke("tree", "--url", url)
    assert result.exit_code == 1 and "unhealthy" in result.output


def test_a_child_with_its_own_token_is_shown_as_its_parent_sees_it(tmp_path: Path) -> None:
    """A hardened tree: each zone has its own admin token, so the root's token
    is refused at the child (401). The child is shown from the root's cached
    summary of it, healthy, and the command does not fail for it."""
    root = zone(tmp_path, "root").start()
    try:
        kid = zone(tmp_path, "kid", root, extra=["--auth-token", "KIDADMIN",
                                                 "--link-token", "KIDLINK"]).start()
        try:
            with api.client(root.url) as c:
                wait_for(lambda: children(c).get("kid", {}).get("summary") is not None
                         and children(c)["kid"]["health"]["healthy"], timeout=30)
            result = invoke("tree", "--url", root.url)
            assert result.exit_code == 0, result.output
            assert "kid" in result.output and "as its parent sees it" in result.output
        finally:
            kid.stop()
    finally:
        root.stop()
