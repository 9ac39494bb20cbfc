"""The one error of constrained decoding: a grammar, schema or trigger that cannot be used."""

from __future__ import annotations

from mlxd.errors import InvalidRequest


class ConstraintError(InvalidRequest):
    """A constraint that does not compile or cannot be honoured; ``message`` carries the parser's own words.

    It is a request error (400 ``invalid_request_error``) on the public API; at startup the configuration layer
    reports it against the option (``--json-schema``, ``--grammar``) that carried the source.
    """
