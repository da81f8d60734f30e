"""`strato agent --once` against a zone that refuses it: one report, exit 1,
and no "retrying in N s" (it does not retry)."""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest

from strato.agent.agent import Agent
from strato.agent.client import ZoneRefused
from strato.agent.config import AgentConfig


class _Refusing:
    def close(self) -> None:
        return None

    def __getattr__(self, name: str) -> Any:
        def refuse(*a: Any, **kw: Any) -> Any:
            raise ZoneRefused(401, "placement.undefined_code", "The X-Auth-Token is not valid")
        return refuse


@pytest.mark.parametrize("once", [True, False])
def test_once_says_it_failed_without_promising_a_retry(
        once: bool, caplog: pytest.LogCaptureFixture) -> None:
    config = AgentConfig(zone_url="http://127.0.0.1:1", uuid="8413fa1f-1091-55db-8d79-"
                         "945b5d03b8ee", name="h1", interval=30.0)
    agent = Agent(config, client=_Refusing())  # type: ignore[arg-type]
    stop = threading.Event()
    if not once:
        stop.wait = lambda timeout=None: stop.set() or True  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="strato.agent"):
        assert agent.run(stop, once=once) == 1
    said = [r.getMessage() for r in caplog.records if "report failed" in r.getMessage()]
    assert said and "The X-Auth-Token is not valid" in said[0], said
    assert ("retrying in" in said[0]) is not once, said
