"""A network namespace with a veth pair, so one zone can be cut off for real.

The host side of the pair carries 10.203.N.1/30, the namespace side
10.203.N.2/30. `partition()` takes the host side down: the kernel drops the
connected route, so packets either way fail (not a process that is merely
slow). Names carry our pid so parallel runs by other engineers do not clash,
and `remove()` is idempotent so it can run from every cleanup path.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from dataclasses import dataclass


class NetnsUnavailable(RuntimeError):
    """`ip netns` cannot be used here (not root, no iproute2, no CAP_NET_ADMIN)."""


def _ip(*args: str, netns: str | None = None, check: bool = True) -> None:
    cmd = ["ip", *args] if netns is None else ["ip", "netns", "exec", netns, "ip", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
    if check and done.returncode != 0:
        raise NetnsUnavailable(f"{' '.join(cmd)}: {done.stderr.strip()}")


@dataclass
class Netns:
    """One namespace and its veth pair; `index` picks the /30 and the names."""

    index: int

    def __post_init__(self) -> None:
        tag = f"{os.getpid() % 100000}x{self.index}"
        self.name = f"strato-chaos-{tag}"
        # Interface names are limited to 15 characters.
        self.host_if = f"sch{tag}"[:15]
        self.inner_if = f"scn{tag}"[:15]
        subnet = 16 + (os.getpid() + self.index) % 230
        self.host_addr = f"10.203.{subnet}.1"
        self.inner_addr = f"10.203.{subnet}.2"
        self.created = False

    def create(self) -> Netns:
        try:
            _ip("netns", "add", self.name)
            self.created = True
            _ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.inner_if)
            _ip("link", "set", self.inner_if, "netns", self.name)
            _ip("addr", "add", f"{self.host_addr}/30", "dev", self.host_if)
            _ip("link", "set", self.host_if, "up")
            _ip("addr", "add", f"{self.inner_addr}/30", "dev", self.inner_if, netns=self.name)
            _ip("link", "set", self.inner_if, "up", netns=self.name)
            _ip("link", "set", "lo", "up", netns=self.name)
        except (NetnsUnavailable, OSError, subprocess.SubprocessError) as exc:
            self.remove()
            raise NetnsUnavailable(str(exc)) from exc
        return self

    def exec_prefix(self) -> list[str]:
        # `ip netns exec` execs the command after setns: the pid we get from
        # Popen is the server's own, so signals reach it directly.
        return ["ip", "netns", "exec", self.name]

    def partition(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def remove(self) -> None:
        # Deleting one end of a veth pair deletes both; the namespace last.
        _ip("link", "del", self.host_if, check=False)
        if self.created:
            _ip("netns", "del", self.name, check=False)
            self.created = False


class Relay:
    """TCP from the veth's host side to a server on loopback: the namespaced
    cell reaches its parent while every server listens on 127.0.0.1 only.
    When the link is down the namespace cannot reach it: a real partition."""

    def __init__(self, listen_host: str, listen_port: int, target_port: int) -> None:
        self.listen = (listen_host, listen_port)
        self.target_port = target_port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="chaos-relay")
        self._server: asyncio.Server | None = None
        self.port = listen_port  # the port it listens on, once started (0: any)

    def start(self) -> Relay:
        self._thread.start()
        fut = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)
        fut.result(10)
        return self

    async def _serve(self) -> None:
        self._server = await asyncio.start_server(self._handle, *self.listen)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _upstream(self, writer: asyncio.StreamWriter
                        ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the target for a client's; None (the client's
        closed) if the target does not take it."""
        try:
            return await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return None

    async def _handle(self, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        up = await self._upstream(writer)
        if up is not None:
            await asyncio.gather(pipe(reader, up[1]), pipe(up[0], writer))

    def stop(self) -> None:
        if not self._thread.is_alive():
            return
        # Plain callbacks, no coroutine: nothing is left un-awaited however the
        # loop ends.
        if self._server is not None:
            self._loop.call_soon_threadsafe(self._server.close)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    """Copy `src` to `dst` until it ends or fails, then close `dst`."""
    try:
        while data := await src.read(65536):
            dst.write(data)
            await dst.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        dst.close()
