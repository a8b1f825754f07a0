"""A threaded fake upstream on a free port of 127.0.0.1, for the tests of what zarrgate does
with a source object store that misbehaves or counts its requests."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def serve(server_class, handler) -> Iterator[str]:
    """Runs `server_class` (a socketserver class) with `handler` while the block runs; yields
    its base URL, ending in `/`."""
    server = server_class(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
