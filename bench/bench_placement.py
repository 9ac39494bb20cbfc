"""Thread placement on mlx's CPU device, measured on mlx-lm's own decode loop: ``mlx_lm.stream_generate`` run on a
thread placed three ways, side by side.

    .venv/bin/python bench/bench_placement.py CHECKPOINT [--tokens 256] [--repeat 7] [--out FILE.json]

- ``kernel``: the thread as Python starts it, its placement left to the kernel;
- ``pinned``: pinned to the CPU it runs on before it makes its MLX stream, which therefore shares that CPU;
- ``pinned+batch``: pinned, and both threads under Linux's batch scheduling policy: what mlxd's model worker does
  with ``--worker-affinity auto`` (``mlxd.engine.affinity.keep_on_one_cpu``).

Each placement decodes in a process of its own that stays loaded, and the three take turns (0.3 s apart), so that
each turn meets the same moment's load; a figure is the median of its turns. OpenBLAS is preloaded as mlxd does.
Linux only. Prints a markdown table; the JSON keeps every turn. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT  # noqa: E402

PLACEMENTS = ("kernel", "pinned", "pinned+batch")

# One placement's process: a thread placed as asked loads nothing itself (the model is shared, read-only), decodes
# one request per line in (tokens) and prints its decode tokens/s. mlx-lm's generation stream is thread-local, so
# the thread's first generation makes the stream, and its MLX thread, after the placement is set.
DECODER = """
import json, os, queue, sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import bench_engine as e
from mlxd.engine import affinity
from mlxd.engine.threads import release_streams
placement = sys.argv[3]
loaded = e.load_model(Path(sys.argv[2]))
prompt = e.prompt_of(loaded, 16)
asked = queue.Queue()

def decode():
    if placement == "pinned":
        os.sched_setaffinity(0, {affinity.current_cpu()})
    elif placement == "pinned+batch":
        assert affinity.keep_on_one_cpu() is not None, "no pin here: Linux, MLX on the CPU, 2 CPUs or more"
    e.mlx_lm_one_stream(loaded, prompt, 16)
    print("ready", flush=True)
    while (n := asked.get()) is not None:
        print(json.dumps(e.mlx_lm_one_stream(loaded, prompt, n)[1]), flush=True)
    release_streams()  # the thread's MLX stream ends with it, not at interpreter exit

thread = threading.Thread(target=decode)
thread.start()
for line in sys.stdin:
    asked.put(int(line))
asked.put(None)
thread.join()
"""

PAUSE_S = 0.3  # between turns, as bench_http: the last process's BLAS threads go back to sleep


class Decoder:
    """One placement's long-lived decoding process."""

    def __init__(self, checkpoint: Path, placement: str) -> None:
        self.process = subprocess.Popen([sys.executable, "-c", DECODER, str(ROOT), str(checkpoint), placement],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if self._line() != "ready":
            raise RuntimeError(f"the {placement} decoder did not start")

    def _line(self) -> str:
        assert self.process.stdout is not None
        return self.process.stdout.readline().strip()

    def decode_tps(self, tokens: int) -> float:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{tokens}\n")
        self.process.stdin.flush()
        return float(self._line())

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--tokens", type=int, default=256, help="tokens decoded per turn")
    parser.add_argument("--repeat", type=int, default=7, help="turns, every placement in a row each time")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not sys.platform.startswith("linux"):
        raise SystemExit("bench_placement: thread placement is Linux's (sched_setaffinity, SCHED_BATCH)")

    decoders = {placement: Decoder(args.checkpoint, placement) for placement in PLACEMENTS}
    turns: dict[str, list[float]] = {placement: [] for placement in PLACEMENTS}
    try:
        for _ in range(args.repeat):
            for placement, decoder in decoders.items():
                turns[placement].append(decoder.decode_tps(args.tokens))
                time.sleep(PAUSE_S)
    finally:
        for decoder in decoders.values():
            decoder.close()

    medians = {placement: statistics.median(values) for placement, values in turns.items()}
    print(f"| `stream_generate` decode tok/s, {args.tokens} tokens, median of {args.repeat} turns | "
          + " | ".join(PLACEMENTS) + " |")
    print("|---|" + "---|" * len(PLACEMENTS))
    print("| median | " + " | ".join(f"{medians[p]:.4g}" for p in PLACEMENTS) + " |")
    print("| / kernel | " + " | ".join(f"{medians[p] / medians['kernel']:.2f}" for p in PLACEMENTS) + " |")
    print("| turns | " + " | ".join(", ".join(f"{v:.0f}" for v in turns[p]) for p in PLACEMENTS) + " |")
    out = args.out or ROOT / ".cache" / "bench-results" / f"placement-{args.checkpoint.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "checkpoint": str(args.checkpoint), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "command": " ".join(["bench/bench_placement.py", *sys.argv[1:]]), "tokens": args.tokens,
        "turns": turns, "medians": medians,
    }, indent=2))
    print(f"\nJSON: {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
