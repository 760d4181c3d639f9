"""Short-lived shared state: idempotency records, confirmation tokens and the gateway's call counts; the rpc
executor's cache, locks and rate counts.

In-process by default (`MemoryStore`, `LocalCoordinator`); Redis when `CRANK_REDIS_URL` is set (`RedisStore`,
`RedisCoordinator`), so that any replica honours a token issued or a record written by another, and every
worker and replica of an rpc app shares one cache, one lock per method and one count per rate limit.
"""

import lazy_loader

# Each name is imported from its module when first used; `__init__.pyi` lists them (for type checkers, and for
# `attach_stub`). Importing one module of the package so imports no other: docs/architecture.md, "Imports".
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
