"""KeystoneAuth's own bookkeeping (the real Keystone is in
tests/e2e/test_keystone.py): one validation per new token however many
requests carry it, at most MAX_VALIDATING at once, and a bounded cache."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from strato.api import keystone
from strato.api.auth import Context, Unauthorized


def test_validations_are_shared_bounded_and_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    auth = keystone.KeystoneAuth("http://127.0.0.1:9/v3", username="u", password="p",
                                 project="service", max_cached=10)
    asked: list[str] = []
    at_once = [0, 0]
    lock = threading.Lock()

    def validate(token: str) -> tuple[Context | None, float]:
        with lock:
            asked.append(token)
            at_once[0] += 1
            at_once[1] = max(at_once[1], at_once[0])
        time.sleep(0.05)
        with lock:
            at_once[0] -= 1
        if token.startswith("bad"):
            return None, 10.0
        return Context(token, "p1", frozenset({"reader"})), 60.0

    monkeypatch.setattr(auth, "_validate", validate)

    async def main() -> list[object]:
        calls = [auth.authenticate_async({"x-auth-token": t})
                 for t in ["good-1"] * 20 + [f"good-{i}" for i in range(2, 40)] + ["bad-1"] * 5]
        return await asyncio.gather(*calls, return_exceptions=True)

    out = asyncio.run(main())
    assert sorted(set(asked)) == sorted(asked)           # one validation per token
    assert len(asked) == 40
    assert at_once[1] <= keystone.MAX_VALIDATING
    assert sum(isinstance(o, Unauthorized) for o in out) == 5
    assert all(isinstance(o, Context) for o in out[:20])
    assert len(auth._cache) <= 10                          # bounded
    asked.clear()
    assert asyncio.run(auth.authenticate_async({"x-auth-token": "good-39"})).user_id == \
        "good-39"
    assert asked == []                                     # from the cache
