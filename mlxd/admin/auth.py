"""The admin listener's bearer token: read once from --admin-token-file, compared in constant time."""

from __future__ import annotations

import hmac

from mlxd.errors import AdminError, ConfigError, ConfigProblem

OPTION = "admin-token-file"


def read_token(path: str) -> str:
    """The token in ``path`` (surrounding whitespace dropped); ConfigError if unreadable or empty."""
    try:
        with open(path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([ConfigProblem(OPTION, None, f"cannot read the token: {exc}", path)]) from exc
    if not token:
        raise ConfigError([ConfigProblem(OPTION, None, "the token file is empty", path)])
    return token


def check_bearer(header: str | None, token: str | None) -> None:
    """Raise ``unauthorized`` unless ``header`` is ``Bearer TOKEN``; no token configured means a Unix socket,
    whose file mode is the access control."""
    if token is None:
        return
    scheme, _, given = (header or "").partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise AdminError("unauthorized", "a bearer token is required (Authorization: Bearer TOKEN)", 401)
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise AdminError("unauthorized", "invalid bearer token", 401)
