"""``mlxd serve`` / ``mlxd-server``: resolve the configuration, prepare the process, and run the daemon."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Coroutine, cast

from mlxd.daemon.logs import LogSettings, configure_logging
from mlxd.errors import ConfigError, MlxdError

if TYPE_CHECKING:
    from mlxd.config import Config
    from mlxd.engine import BlasMode, BlasReport, GemvMode, JitMode

log = logging.getLogger("mlxd.daemon")

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2


def log_settings(cfg: Config) -> LogSettings:
    """The logging part of a Config, with every secret the process knows of."""
    secrets: list[str] = list(cfg.api_key or [])
    if cfg.hf_token:
        secrets.append(cfg.hf_token)
    if cfg.api_key_file:
        try:
            with open(cfg.api_key_file, encoding="utf-8") as fh:
                secrets += [line.strip() for line in fh if line.strip() and not line.startswith("#")]
        except OSError:
            pass
    token_file = cfg.admin_token_file
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as fh:
                secrets.append(fh.read().strip())
        except OSError:
            pass
    return LogSettings(
        log_disable=cfg.log_disable, log_file=cfg.log_file, log_verbosity=cfg.log_verbosity,
        log_verbose=cfg.log_verbose, log_colors=cfg.log_colors, log_prefix=bool(cfg.log_prefix),
        log_timestamps=bool(cfg.log_timestamps), secrets=tuple(secrets),
    )


def run_loop(main: Coroutine[Any, Any, int]) -> int:
    """Run the daemon's coroutine on uvloop where it is installed (sanic's own dependency on Linux and macOS), else
    on asyncio's loop.

    Every streamed token crosses the event loop (a wake-up from the model worker, a chunk written to a socket), and
    uvloop's C loop does that for less: side by side on tiny-llama, one stream decoded 1.19x and 8 streams 1.23x
    faster over HTTP (docs/benchmarks.md, section 7).
    """
    try:
        import uvloop
    except ImportError:
        log.info("event loop: asyncio")
        return asyncio.run(main)
    log.info("event loop: uvloop %s", uvloop.__version__)
    return uvloop.run(main)


def _print_problems(exc: ConfigError) -> None:
    for problem in exc.problems:
        print(f"error: {problem.render()}", file=sys.stderr)


def main(argv: list[str]) -> int:
    """Serve with a llama-server command line; returns the exit status."""
    from mlxd.daemon.discovery import resolve_serving
    from mlxd.daemon.preflight import preflight

    env = dict(os.environ)
    chosen: list[BlasReport] = []

    def setup(cfg: Config) -> None:
        configure_logging(log_settings(cfg))
        # Must run before anything imports mlx, so that mlx's BLAS calls resolve to the system library.
        from mlxd.engine import preload_blas, prepare_jit

        jit = prepare_jit(cast("JitMode", cfg.cpu_jit))
        chosen.append(preload_blas(cast("BlasMode", cfg.cpu_blas), threads=cfg.threads,
                                   gemv=cast("GemvMode", cfg.cpu_gemv)))
        if jit.directory is not None:  # attention's softmax fused, now that its kernel is built for this CPU
            from mlxd.engine import install_cpu_attention

            install_cpu_attention()

    try:
        resolved = resolve_serving(argv, env)
        # Everything `mlxd config check` checks, before a socket is bound or a weight is read.
        preflight(resolved, env, setup=lambda: setup(resolved.config))
    except ConfigError as exc:
        _print_problems(exc)
        return EXIT_CONFIG
    [blas] = chosen

    from mlxd.daemon.loading import load_served_model
    from mlxd.daemon.server import Daemon

    daemon = Daemon(resolved, load_model=load_served_model, log_settings=log_settings, argv=argv,
                    env=env, build_info={"cpu_blas": blas.summary()})
    try:
        return run_loop(daemon.serve())
    except ConfigError as exc:
        _print_problems(exc)
        return EXIT_CONFIG
    except MlxdError as exc:
        log.error("%s", exc)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_OK
