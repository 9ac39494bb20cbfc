"""Command-line entry points: ``mlxd`` (subcommands) and ``mlxd-server`` (a drop-in for llama-server).

The configuration tools (``mlxd config ...``, ``mlxd compat report``) live here; ``serve``, ``dev`` and ``admin``
are dispatched lazily to their own modules. Exit codes: 0 ok, 1 failure, 2 configuration or usage error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mlxd.errors import ConfigError, ConfigProblem, MlxdError

if TYPE_CHECKING:
    from mlxd.config import ResolvedConfig

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_CONFIG = 2

# subcommand -> (module, what it is), each module exposing main(argv: list[str]) -> int
_DISPATCH = {
    "serve": ("mlxd.daemon.serve", "the server"),
    "dev": ("mlxd.dev.cli", "the developer tools"),
    "admin": ("mlxd.admin.client", "the admin client"),
    "rpc-server": ("mlxd.engine.distributed.rpc_server", "the distributed model's peer"),
}


def _split_dashdash(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _report(problems: list[ConfigProblem]) -> int:
    for problem in problems:
        print(f"error: {problem.render()}", file=sys.stderr)
    return EXIT_CONFIG


def _dispatch(module_name: str, what: str, argv: list[str]) -> int:
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"error: {what} ({module_name}) is not available in this build", file=sys.stderr)
        else:
            print(f"error: {what} cannot start: missing module {exc.name}", file=sys.stderr)
        return EXIT_CONFIG
    entry: Callable[[list[str]], int] = module.main
    return int(entry(argv))


def _resolve(args: list[str], config: str | None, *, preflight: bool = False) -> ResolvedConfig:
    """The configuration as the daemon would serve it: in router mode, with the model store's models; with
    ``preflight``, refused as ``serve`` refuses it (mlxd.daemon.preflight)."""
    from mlxd.daemon.discovery import resolve_serving

    env = dict(os.environ)
    resolved = resolve_serving((["--config", config] if config else []) + args, env)
    if preflight:
        from mlxd.daemon.preflight import preflight as check

        check(resolved, env)
    return resolved


def _config_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mlxd config", description="inspect and convert configuration")
    sub = parser.add_subparsers(dest="command", required=True)
    explain = sub.add_parser("explain", help="the resolved configuration with each value's source")
    explain.add_argument("--config", help="TOML configuration file")
    explain.add_argument("--format", choices=("text", "json"), default="text")
    check = sub.add_parser("check", help="refuse what serve refuses, short of binding and reading weights")
    check.add_argument("file", nargs="?", help="a TOML file (as --config) or a presets INI file (as --models-preset)")
    check.add_argument("--config", help="TOML configuration file")
    dump = sub.add_parser("dump", help="the resolved configuration as TOML")
    dump.add_argument("--config", help="TOML configuration file")
    dump.add_argument("--all", action="store_true", help="every option, not only those that differ from the default")
    dump.add_argument("--show-secrets", action="store_true", help="print secrets instead of redacting them")
    from_args = sub.add_parser("from-args", help="a llama-server command line (after --) as TOML")
    from_args.add_argument("--show-secrets", action="store_true", help="print secrets instead of redacting them")
    return parser


def _config_command(argv: list[str]) -> int:
    from mlxd.config import render

    own, rest = _split_dashdash(argv)
    args = _config_parser().parse_args(own)
    if args.command == "check":
        return _check(args.file, args.config, rest)
    if args.command == "explain":
        resolved = _resolve(rest, args.config, preflight=True)
        text = render.explain_json(resolved) if args.format == "json" else render.explain_text(resolved)
    elif args.command == "dump":
        resolved = _resolve(rest, args.config)
        text = render.dump_toml(resolved, all_values=args.all, secrets=args.show_secrets)
    else:
        from mlxd.config import resolve

        text = render.from_args_toml(resolve(rest, {}, read_config_ini=False), secrets=args.show_secrets)
    for warning in resolved.warnings if args.command in ("explain", "dump") else ():
        print(f"warning: {warning}", file=sys.stderr)
    sys.stdout.write(text)
    return EXIT_OK


def _check(file: str | None, config: str | None, rest: list[str]) -> int:
    """``mlxd config check [FILE] [--config FILE] [-- ARGS]``: what ``mlxd serve`` with those files and arguments
    (and this environment) would refuse before binding a socket or reading a weight, with the same messages."""
    args = list(rest)
    what, kind = "configuration", ""
    if file is not None:
        path = Path(file)
        if not path.is_file():
            return _report([ConfigProblem(None, file, "no such file")])
        is_toml = _looks_like_toml(path)
        args = ["--config" if is_toml else "--models-preset", file, *args]
        what, kind = file, "TOML" if is_toml else "presets INI"
    resolved = _resolve(args, config, preflight=True)
    for warning in resolved.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    mode = f"router, {len(resolved.models)} model(s)" if resolved.is_router else "single model"
    print(f"{what}: ok ({', '.join(filter(None, (kind, mode)))})")
    return EXIT_OK


def _looks_like_toml(path: Path) -> bool:
    if path.suffix.lower() == ".toml":
        return True
    if path.suffix.lower() == ".ini":
        return False
    import tomllib

    try:
        tomllib.loads(path.read_text(encoding="utf-8", errors="replace"))
    except tomllib.TOMLDecodeError:
        return False
    return True


def _compat_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="mlxd compat", description="the b10621 compat manifest")
    sub = parser.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="counts by state and kind")
    report.add_argument("--format", choices=("text", "json"), default="text")
    flags = sub.add_parser("flags", help="every accepted command-line spelling with its option and state")
    flags.add_argument("--format", choices=("text", "json"), default="text")
    args = parser.parse_args(argv)
    if args.command == "flags":
        from mlxd.compat import surface

        sys.stdout.write(surface.render(args.format))
    else:
        from mlxd.compat import report as compat_report

        sys.stdout.write(compat_report.render(args.format))
    return EXIT_OK


def _usage() -> str:
    return ("usage: mlxd {serve|config|compat|dev|admin|rpc-server} ...\n"
            "  mlxd serve LLAMA_SERVER_ARGS...        run the server (same options as mlxd-server)\n"
            "  mlxd config explain [--config FILE] [--format text|json] [-- ARGS...]\n"
            "  mlxd config check [FILE] [--config FILE] [-- ARGS...]\n"
            "  mlxd config dump [--all] [--config FILE] [-- ARGS...]\n"
            "  mlxd config from-args [--show-secrets] -- ARGS...   a llama-server command line as TOML\n"
            "  mlxd compat report                     the b10621 compat manifest by state and kind\n"
            "  mlxd compat flags                      every accepted spelling, its option and state\n"
            "  mlxd dev synth-model ...               make a synthetic checkpoint\n"
            "  mlxd admin ...                         talk to a running daemon's admin listener\n"
            "  mlxd rpc-server -H HOST -p PORT        hold a share of a model for a front end's --rpc\n"
            "  mlxd admin config [KEY=VALUE ...]      show the running configuration, or set options live\n")


def run(argv: list[str]) -> int:
    """Run the ``mlxd`` command line; returns the exit code. Never raises for user errors."""
    try:
        if not argv or argv[0] in ("-h", "--help", "help"):
            sys.stdout.write(_usage())
            return EXIT_OK if argv else EXIT_CONFIG
        command, rest = argv[0], argv[1:]
        if command == "serve":
            from mlxd.daemon.early_exit import early_exit

            if (early := early_exit(rest)) is not None:
                return early
        if command in _DISPATCH:
            module_name, what = _DISPATCH[command]
            return _dispatch(module_name, what, rest)
        if command == "config":
            return _config_command(rest)
        if command == "compat":
            return _compat_command(rest)
        print(f"error: unknown command '{command}'", file=sys.stderr)
        sys.stderr.write(_usage())
        return EXIT_CONFIG
    except ConfigError as exc:
        return _report(exc.problems)
    except MlxdError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except SystemExit as exc:  # argparse's usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_CONFIG
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `mlxd admin events | head -1`: the reader has all it wanted
        _drop_stdout()
        return EXIT_OK
    except Exception as exc:  # a bug: one line for the user, the traceback only when asked for
        if os.environ.get("MLXD_DEBUG") == "1":
            raise
        print(f"error: internal error: {type(exc).__name__}: {exc} (set MLXD_DEBUG=1 for a traceback)",
              file=sys.stderr)
        return EXIT_FAILURE


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush of what is still buffered does not fail again on
    the closed pipe (Python would print "Exception ignored ... BrokenPipeError" and exit 120)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def main() -> None:
    """Console script ``mlxd``."""
    sys.exit(run(sys.argv[1:]))


def server_main() -> None:
    """Console script ``mlxd-server``: a llama-server command line, served."""
    sys.exit(run(["serve", *sys.argv[1:]]))
