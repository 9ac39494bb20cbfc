"""``mlxd admin``: the admin API's command-line client.

The address defaults to the daemon's own default (``MLXD_ADMIN_LISTEN``, else the runtime directory's socket);
``--json`` prints the API's answer as it is, otherwise a short table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Iterator

import httpx

from mlxd.admin.address import AdminAddress, client_default, parse, trusted_socket
from mlxd.admin.auth import read_token
from mlxd.errors import ConfigError, MlxdError

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


class ClientError(MlxdError):
    """A refusal from the daemon or a failure to reach it, already worded for the user."""


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's parser must not reset a --json given before the subcommand.
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON answer")
    parser = argparse.ArgumentParser(prog="mlxd admin", description="control a running mlxd", parents=[common])
    parser.add_argument("--admin-listen", help="unix:PATH or HOST:PORT (default: the daemon's default socket)")
    parser.add_argument("--admin-token-file", help="file holding the bearer token")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for an answer")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("status", parents=[common], help="generation, config hash, last error, models")
    config = sub.add_parser("config", parents=[common], help="show the resolved configuration with each value's "
                            "source, or set options (KEY=VALUE: an admin override; KEY=null removes it)")
    config.add_argument("settings", nargs="*", metavar="KEY=VALUE")
    sub.add_parser("reload", parents=[common], help="re-read the configuration files")
    sub.add_parser("persist", parents=[common], help="write the admin overrides into the TOML file")
    for name, what in (("load", "load (swap to) a model"), ("unload", "stop serving a model")):
        cmd = sub.add_parser(name, parents=[common], help=what)
        cmd.add_argument("name")
    lora = sub.add_parser("lora", parents=[common], help="show or set LoRA scales")
    lora.add_argument("scales", nargs="*", metavar="NAME=SCALE")
    logging_ = sub.add_parser("logging", parents=[common], help="show or set the log options")
    logging_.add_argument("settings", nargs="*", metavar="KEY=VALUE")
    sub.add_parser("events", parents=[common], help="follow the daemon's change events")
    return parser


def _pairs(items: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` words; a value that reads as JSON (4, true, 0.5) is typed, otherwise it is a string."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ClientError(f"expected KEY=VALUE, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def connect(address: AdminAddress, token: str | None, timeout: float) -> httpx.Client:
    """An httpx client for the admin listener (a Unix socket through httpx's ``uds`` transport)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if address.is_unix:
        transport = httpx.HTTPTransport(uds=address.unix_path)
        return httpx.Client(transport=transport, base_url="http://mlxd", headers=headers, timeout=timeout)
    host = f"[{address.host}]" if address.host and ":" in address.host else address.host
    return httpx.Client(base_url=f"http://{host}:{address.port}", headers=headers, timeout=timeout)


def call(client: httpx.Client, method: str, path: str, body: Any = None) -> Any:
    """One request; the daemon's error envelope becomes a ClientError with its code and message."""
    response = client.request(method, path, json=body)
    try:
        payload = response.json()
    except ValueError:
        payload = None
    if response.status_code >= 400:
        error = payload.get("error", {}) if isinstance(payload, dict) else {}
        raise ClientError(f"{error.get('code', response.status_code)}: {error.get('message', response.text)}")
    return payload


def _rows(rows: list[tuple[str, Any]]) -> str:
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


def render_status(data: dict[str, Any]) -> str:
    last = data.get("last_error")
    rows = [("state", data["state"]), ("generation", data["generation"]),
            ("config hash", data["config_hash"][:16]), ("uptime", f"{data['uptime']:.0f} s"),
            ("pending restart", ", ".join(data["pending_restart"]) or "none"),
            ("last error", f"{last['trigger']}: {last['message']}" if last else "none")]
    lines = [_rows(rows), "", "models:"] if data["models"] else [_rows(rows), "", "models: none"]
    for model in data["models"]:
        error = f"  ({model['error']})" if model.get("error") else ""
        lines.append(f"  {model['state']:<9} {model['name']}{error}")
    if data.get("peers"):
        lines += ["", "distributed group:"]
        for peer in data["peers"]:
            beat = f"{time.time() - peer['last_heartbeat']:.1f} s ago" if peer.get("last_heartbeat") else "never"
            lines.append(f"  rank {peer['rank']}  {peer['address']:<21} {peer['state']:<10} {peer['shard'] or '-':<28} "
                         f"{peer['memory_bytes'] / 2**20:8.1f} MiB  heartbeat {beat}")
    disk = data.get("cache_disk")
    if disk:
        dirs = ", ".join(f"{d} ({state})" for d, state in disk["dirs"].items()) or "closed"
        lines += ["", "prompt cache on disk:", _rows([
            ("  directory", dirs), ("  entries", f"{disk['entries']} ({disk['bytes'] / 2**20:.1f} MiB)"),
            ("  hits / misses", f"{disk['hits']} / {disk['misses']}"),
            ("  read / written", f"{disk['bytes_read'] / 2**20:.1f} / {disk['bytes_written'] / 2**20:.1f} MiB"),
            ("  evictions", disk["evictions"]),
            ("  dropped / corrupt", f"{disk['dropped']} / {disk['corrupt']}")])]
    return "\n".join(lines)


def render_options(options: dict[str, dict[str, Any]], *, only_set: bool) -> str:
    lines = [f"{name} = {json.dumps(o['value'], ensure_ascii=False)}  ({o['source']})"
             for name, o in options.items() if not only_set or o["source"] != "default"]
    return "\n".join(lines) or "(every option at its default)"


def render_change(data: dict[str, Any]) -> str:
    if data.get("applied"):
        text = f"generation {data['generation']}: changed {', '.join(data['changed']) or 'models'}"
    else:
        text = f"no change (generation {data['generation']})"
    if data.get("pending_restart"):
        text += f"\npending restart: {', '.join(data['pending_restart'])}"
    return text


def sse_events(client: httpx.Client) -> Iterator[dict[str, Any]]:
    """The events of ``GET /v1/events``, one dict each, until the daemon ends the stream."""
    with client.stream("GET", "/v1/events", timeout=httpx.Timeout(None, connect=10)) as response:
        if response.status_code >= 400:
            response.read()
            call_error = response.json().get("error", {})
            raise ClientError(f"{call_error.get('code')}: {call_error.get('message')}")
        for line in response.iter_lines():
            if line.startswith("data: "):
                yield json.loads(line[len("data: "):])


def render_event(event: dict[str, Any]) -> str:
    stamp = time.strftime("%H:%M:%S", time.localtime(event.get("time", 0)))
    rest = " ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in event.items()
                    if k not in ("id", "type", "time"))
    return f"{stamp} {event['type']} {rest}"


def run(args: argparse.Namespace, client: httpx.Client) -> tuple[Any, str]:
    """Do one request-answer command; returns the JSON answer and its human rendering."""
    command = args.command
    if command == "status":
        data = call(client, "GET", "/v1/status")
        return data, render_status(data)
    if command == "config" and args.settings:
        data = call(client, "PATCH", "/v1/config", _pairs(args.settings))
        return data, render_change(data)
    if command == "config":
        data = call(client, "GET", "/v1/config")
        return data, f"# generation {data['generation']}, config {data['config_hash'][:16]}\n" + render_options(
            data["options"], only_set=True)
    if command == "reload":
        data = call(client, "POST", "/v1/reload")
        return data, render_change(data)
    if command == "persist":
        data = call(client, "POST", "/v1/persist")
        return data, f"wrote {', '.join(data['written']) or 'nothing'} to {data['path']}"
    if command in ("load", "unload"):
        data = call(client, "POST", "/v1/models", {"action": command, "name": args.name})
        return data, render_change(data)
    if command == "lora":
        if args.scales:
            data = call(client, "PUT", "/v1/lora", _pairs(args.scales))
            return data, render_change(data)
        data = call(client, "GET", "/v1/lora")
        lines = [f"{a['id']:>3}  {a['scale']:<6g} {a['path']}" for a in data["adapters"]]
        return data, "\n".join(lines) or "no LoRA adapters"
    if command == "logging":
        if args.settings:
            data = call(client, "PUT", "/v1/logging", _pairs(args.settings))
            return data, render_change(data)
        data = call(client, "GET", "/v1/logging")
        return data, render_options(data["options"], only_set=False)
    raise ClientError(f"unknown command {command}")


def main(argv: list[str]) -> int:
    """``mlxd admin ...``; returns the exit status."""
    args = _parser().parse_args(argv)
    as_json = getattr(args, "json", False)
    try:
        given = args.admin_listen or os.environ.get("MLXD_ADMIN_LISTEN")
        address = parse(given) if given else AdminAddress(unix_path=client_default())
        if address.unix_path:
            trusted_socket(address.unix_path)
        token_file = args.admin_token_file or os.environ.get("MLXD_ADMIN_TOKEN_FILE")
        token = read_token(token_file) if token_file else None
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        with connect(address, token, args.timeout) as client:
            if args.command == "events":
                for event in sse_events(client):
                    print(json.dumps(event, ensure_ascii=False) if as_json else render_event(event), flush=True)
                return EXIT_OK
            data, text = run(args, client)
    except ClientError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except httpx.TransportError as exc:
        print(f"error: cannot reach the admin listener at {address}: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return EXIT_OK
    print(json.dumps(data, indent=2, ensure_ascii=False) if as_json else text)
    return EXIT_OK
