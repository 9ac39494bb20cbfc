"""The reliability suite: the daemon under hostile or unlucky conditions (signals mid-stream, floods of
connections, fuzzed bodies, kill -9), through the e2e tier's real daemon processes on 127.0.0.1.

The quick parts run in ``make test``; the long ones are marked ``soak`` and run with ``make soak``.
"""

from __future__ import annotations

from tests.e2e.conftest import server, start_server  # noqa: F401 - the e2e fixtures, shared
