"""Run llama.cpp's own tools/server/tests/unit/test_vision_api.py against mlxd on the synthetic Qwen2-VL checkpoint.

    .venv/bin/python tests/upstream/vision/run.py [--suite DIR] [-- PYTEST_ARGS...]

The suite (``--suite`` or ``$UPSTREAM_SUITE``, default the unpacked llama.cpp sources' tools/server/tests) starts
``shim.py`` as its llama-server. Prints each test's outcome and exits 0 when every test that fails is one listed in
EXPECTED_FAILURES (a test needing the network or a trained model's answer), 1 otherwise.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
DEFAULT_SUITE = Path("/root/.cache/llama-ref/src/tools/server/tests")

# Tests that cannot pass on a synthetic checkpoint without the network, each with its reason (docs/compat.md).
NETWORK = "downloads its image from huggingface.co (no network here)"
ANSWER = "expects a trained model's answer (cat, frog) where the synthetic model's text is random"
EXPECTED_FAILURES = {
    "test_vision_chat_completion[What is this:\\n-IMG_URL_0-True-(cat)+]": f"{NETWORK}; {ANSWER}",
    "test_vision_chat_completion[What is this:\\n-IMG_BASE64_URI_0-True-(cat)+]": f"{NETWORK}; {ANSWER}",
    "test_vision_chat_completion[What is this:\\n-IMG_URL_1-True-(frog)+]": f"{NETWORK}; {ANSWER}",
    "test_vision_chat_completion[Test test\\n-IMG_URL_1-True-(frog)+]": f"{NETWORK}; {ANSWER}",
    "test_vision_chat_completion_token_count": NETWORK,
    "test_vision_completion[What is this: <__media__>\\n-IMG_BASE64_0-True-(cat)+|(automobile)+]": f"{NETWORK}; "
                                                                                                  f"{ANSWER}",
    "test_vision_completion[What is this: <__media__>\\n-IMG_BASE64_1-True-(frog)+]": f"{NETWORK}; {ANSWER}",
    "test_vision_embeddings[What is this: <__media__>\\n-IMG_BASE64_0-True]": f"{NETWORK}; embeddings of media "
                                                                              "prompts are not served",
    "test_vision_embeddings[What is this: <__media__>\\n-IMG_BASE64_1-True]": f"{NETWORK}; embeddings of media "
                                                                              "prompts are not served",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suite", type=Path, default=Path(os.environ.get("UPSTREAM_SUITE", DEFAULT_SUITE)))
    parser.add_argument("pytest_args", nargs="*")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.conftest import synthetic_checkpoint

    env = {**os.environ, "LLAMA_SERVER_BIN_PATH": str(HERE / "shim.py"),
           "MLXD_SERVER": str(Path(sys.executable).with_name("mlxd-server")),
           "VISION_MODEL": str(synthetic_checkpoint("qwen2-vl-tiny")), "TEXT_MODEL": str(synthetic_checkpoint()),
           "PYTHONPATH": os.pathsep.join([str(HERE / "stubs"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-p", "vision_plugin", "-q", "-rA", "-p", "no:cacheprovider",
           "unit/test_vision_api.py", *args.pytest_args]
    done = subprocess.run(cmd, cwd=args.suite, env=env, text=True, capture_output=True)
    outcomes = re.findall(r"^(PASSED|FAILED|ERROR) unit/test_vision_api.py::(\S.*?)(?: - .*)?$", done.stdout, re.M)
    failed = [name for state, name in outcomes if state != "PASSED"]
    unexpected = [name for name in failed if name not in EXPECTED_FAILURES]
    for state, name in outcomes:
        note = f"  ({EXPECTED_FAILURES[name]})" if state != "PASSED" and name in EXPECTED_FAILURES else ""
        print(f"{state:6} {name}{note}")
    passed = len(outcomes) - len(failed)
    print(f"{passed} passed, {len(failed)} failed ({len(failed) - len(unexpected)} expected, listed above)")
    if unexpected or not outcomes:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
