"""A TCP proxy that a test controls, in front of a real service (PostgreSQL, Redis): it forwards, refuses, or
black-holes, so a test can take the network away from Crank without stopping or reconfiguring the service.

- `forward()`: every connection is piped to the target, both ways.
- `refuse()`: nothing listens on the port any more (a connection is refused), and the open connections are
  reset, as when the service's host is up but the service is down.
- `black_hole()`: connections are accepted and never answered; open connections stay open, and what either
  side sends is dropped, as when a network path silently loses everything.

Going back to `forward()` resets the connections that were black-holed (their lost bytes cannot be made
good: a real black hole ends their TCP sessions too), so a client waiting on one sees an error and
connects again.

    with TCPProxy(port) as proxy:     # proxy.port listens on 127.0.0.1
        proxy.black_hole(); ...; proxy.forward()
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType
from typing import Literal

from tests.services import HOST, free_port

Mode = Literal["forward", "refuse", "black_hole"]
_CHUNK = 65536


class _Link:
    """One client connection and, once forwarded, its connection to the target."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.target: asyncio.StreamWriter | None = None
        self.held = False  # black-holed: nothing it carries is delivered any more

    def reset(self) -> None:
        for writer in (self.client, self.target):
            if writer is not None:
                writer.transport.abort()


class TCPProxy:
    """Listens on a free port of 127.0.0.1 and forwards to `target_port` there (`HOST`) until told otherwise.
    It runs its own event loop in a thread, so that it serves while the test thread waits."""

    def __init__(self, target_port: int, *, target_host: str = HOST) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self.mode: Mode = "forward"
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._call(self._listen())

    def _call(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)  # type: ignore[arg-type]

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._accept, HOST, self.port, reuse_address=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = _Link(writer)
        self._links.add(link)
        try:
            if self.mode != "forward":
                link.held = True
                while await reader.read(_CHUNK):  # accepted, read, never answered
                    pass
                return
            target_reader, link.target = await asyncio.open_connection(*self.target)
            await asyncio.gather(self._pipe(reader, link.target, link), self._pipe(target_reader, writer, link))
        except OSError:
            pass
        finally:
            self._links.discard(link)
            link.reset()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link) -> None:
        while data := await reader.read(_CHUNK):
            if self.mode == "black_hole" or link.held:
                link.held = True  # dropped, now and after: the session cannot be made whole again
                continue
            writer.write(data)
            await writer.drain()
        writer.transport.abort()

    def forward(self) -> None:
        self.mode = "forward"
        self._call(self._forward())

    async def _forward(self) -> None:
        for link in [link for link in self._links if link.held]:
            link.reset()
        await self._listen()

    def black_hole(self) -> None:
        self.mode = "black_hole"
        self._call(self._listen())

    def refuse(self) -> None:
        self.mode = "refuse"
        self._call(self._refuse())

    async def _refuse(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self._links):
            link.reset()

    def close(self) -> None:
        self._call(self._refuse())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        with contextlib.suppress(RuntimeError):
            self._loop.close()

    def __enter__(self) -> TCPProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
