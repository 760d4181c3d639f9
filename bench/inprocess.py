"""What the in-process profilers (profile_client.py, profile_gateway.py) share: the upstream they need."""

from __future__ import annotations

import argparse
import os
from collections.abc import Awaitable, Callable


def run_against_upstream(main: Callable[[argparse.Namespace], Awaitable[None]], args: argparse.Namespace) -> None:
    """Run `main(args)` on uvloop (the server stack's loop), once `BENCH_UPSTREAM` names the upstream."""
    if "BENCH_UPSTREAM" not in os.environ:
        raise SystemExit("set BENCH_UPSTREAM to the upstream's base URL (nginx with bench/upstream/nginx.conf)")
    import uvloop

    uvloop.run(main(args))
