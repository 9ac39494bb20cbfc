"""Thread placement on mlx's CPU device, measured on mlx-lm's own decode loop: ``mlx_lm.stream_generate`` run on a
thread placed three ways, side by side, and mlxd's scheduler stepped by hand on the same thread.

    .venv/bin/python bench/bench_placement.py CHECKPOINT [--tokens 256] [--repeat 7] [--out FILE.json]

- ``kernel``: the thread as Python starts it, its placement left to the kernel;
- ``pinned``: pinned to the CPU it runs on before it makes its MLX stream, which therefore shares that CPU;
- ``pinned+batch``: pinned, and both threads under Linux's batch scheduling policy: what mlxd's model worker does
  with ``--worker-affinity auto`` (``mlxd.engine.cpu.affinity.keep_on_one_cpu``).

Each placement decodes in a process of its own that stays loaded, and the three take turns (0.3 s apart), so that
each turn meets the same moment's load; a figure is the median of its turns. In each turn the placed thread also
steps mlxd's scheduler through the same request (``bench_engine.scheduler_one_stream``, on the same MLX stream), so
the two loops are compared on one thread, one placement, one moment. OpenBLAS is preloaded as mlxd does. Linux
only. Prints a markdown table; the JSON keeps every turn. Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import PAUSE_S, ROOT, ScriptProcess  # noqa: E402

PLACEMENTS = ("kernel", "pinned", "pinned+batch")

# One placement's process: a thread placed as asked decodes one request per line in (tokens), with stream_generate
# and then with mlxd's scheduler, and prints both decode tokens/s. mlx-lm's generation stream is thread-local, so
# the thread's first generation makes the stream, and its MLX thread, after the placement is set.
DECODER = """
import json, os, queue, sys, threading
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench import bench_engine as e
from mlxd.engine.cpu import affinity
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
    e.scheduler_one_stream(loaded, prompt, 16)
    print("ready", flush=True)
    while (n := asked.get()) is not None:
        reference = e.mlx_lm_one_stream(loaded, prompt, n)[1]
        print(json.dumps([reference, e.scheduler_one_stream(loaded, prompt, n)]), flush=True)
    release_streams()  # the thread's MLX stream ends with it, not at interpreter exit

thread = threading.Thread(target=decode)
thread.start()
for line in sys.stdin:
    asked.put(int(line))
asked.put(None)
thread.join()
"""

class Decoder(ScriptProcess):
    """One placement's long-lived decoding process."""

    def __init__(self, checkpoint: Path, placement: str) -> None:
        super().__init__(DECODER, str(ROOT), str(checkpoint), placement, what=f"the {placement} decoder")

    def decode_tps(self, tokens: int) -> tuple[float, float]:
        """One turn: (``stream_generate``'s, the scheduler's) decode tokens/s."""
        reference, scheduler = json.loads(self.ask(str(tokens)))
        return float(reference), float(scheduler)


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
    turns: dict[str, list[tuple[float, float]]] = {placement: [] for placement in PLACEMENTS}
    try:
        for _ in range(args.repeat):
            for placement, decoder in decoders.items():
                turns[placement].append(decoder.decode_tps(args.tokens))
                time.sleep(PAUSE_S)
    finally:
        for decoder in decoders.values():
            decoder.close()

    reference = {p: statistics.median(t[0] for t in turns[p]) for p in PLACEMENTS}
    scheduler = {p: statistics.median(t[1] for t in turns[p]) for p in PLACEMENTS}
    ratio = {p: statistics.median(t[1] / t[0] for t in turns[p]) for p in PLACEMENTS}
    medians = {"stream_generate": reference, "scheduler": scheduler, "scheduler_over_stream_generate": ratio}

    def row(label: str, cells: list[str]) -> None:
        print(f"| {label} | " + " | ".join(cells) + " |")

    row(f"decode tok/s, {args.tokens} tokens, median of {args.repeat} turns", list(PLACEMENTS))
    print("|---|" + "---|" * len(PLACEMENTS))
    row("`stream_generate`", [f"{reference[p]:.4g}" for p in PLACEMENTS])
    row("  / kernel", [f"{reference[p] / reference['kernel']:.2f}" for p in PLACEMENTS])
    row("  turns", [", ".join(f"{t[0]:.0f}" for t in turns[p]) for p in PLACEMENTS])
    row("mlxd scheduler, same thread", [f"{scheduler[p]:.4g}" for p in PLACEMENTS])
    row("  / `stream_generate`, turn by turn", [f"{ratio[p]:.2f}" for p in PLACEMENTS])
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
