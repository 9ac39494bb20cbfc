"""``mlxd dev``: make synthetic checkpoints and LoRA adapters locally, so nothing is ever downloaded."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable, NoReturn

from mlxd.dev import synth_vlm
from mlxd.dev.synth import PRESETS, make_checkpoint
from mlxd.dev.synth_lora import DEFAULT_KEYS


class _UsageError(Exception):
    pass


class _Done(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    # Report usage errors to main() instead of exiting from inside a library function.
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        if message:
            self._print_message(message)
        raise _UsageError("") if status else _Done()


def _parser() -> _Parser:
    parser = _Parser(prog="mlxd dev", description="Developer tools.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    model = commands.add_parser(
        "synth-model",
        help="write a synthetic checkpoint",
        description="Write a synthetic MLX checkpoint (random Qwen3 weights, a BPE tokenizer trained on the Python "
        "standard library, a Qwen3 chat template; tiny-llama: random llama weights, a SentencePiece-style BPE with "
        "BOS <s> = 1, a ChatML template).",
    )
    model.add_argument("out_dir", metavar="OUT_DIR", type=Path)
    model.add_argument("--preset", choices=list(PRESETS) + list(synth_vlm.PRESETS), default="tiny")
    model.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    model.add_argument("--quantize", type=int, choices=[4, 8], default=None, help="quantize to this many bits")
    model.add_argument("--seed", type=int, default=0)
    model.add_argument("--passthrough-layers", type=int, default=0, metavar="N",
                       help="append N layers that add nothing (the plain preset is an always-agreeing draft)")
    lora = commands.add_parser(
        "synth-lora",
        help="write a synthetic LoRA adapter for a checkpoint",
        description="Write a random, seeded LoRA adapter in mlx-lm's format (adapter_config.json, "
        "adapters.safetensors) for MODEL_DIR, for --lora / --lora-scaled. Its B matrices are non-zero, so it "
        "visibly changes greedy output.",
    )
    lora.add_argument("model_dir", metavar="MODEL_DIR", type=Path)
    lora.add_argument("out_dir", metavar="OUT_DIR", type=Path)
    lora.add_argument("--seed", type=int, default=0)
    lora.add_argument("--rank", type=int, default=4)
    lora.add_argument("--scale", type=float, default=2.0, help="the adapter's own scale (its config's)")
    lora.add_argument("--num-layers", type=int, default=-1, metavar="N", help="the last N layers (-1: all)")
    lora.add_argument("--keys", default=",".join(DEFAULT_KEYS),
                      help="comma-separated module paths inside a layer (default: %(default)s)")
    return parser


def main(argv: list[str]) -> int:
    """``mlxd dev COMMAND ...``; ``argv`` is what follows ``mlxd dev``. Returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except _Done:
        return 0
    except _UsageError as exc:
        if str(exc):
            parser.print_usage(sys.stderr)
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    started = time.perf_counter()

    def progress(step: str) -> None:  # on stderr, so stdout keeps only the summary line
        print(f"[{time.perf_counter() - started:5.1f} s] {step}", file=sys.stderr, flush=True)

    try:
        if args.command == "synth-lora":
            return _synth_lora(args, progress, started)
        progress(f"making {args.out_dir} (preset {args.preset})")
        path = make_checkpoint(args.out_dir, args.preset, args.dtype, args.quantize, args.seed,
                               args.passthrough_layers, progress)
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"mlxd dev {args.command}: error: {exc}", file=sys.stderr)
        return 1
    index = json.loads((path / "model.safetensors.index.json").read_text())["metadata"]
    print(
        f"wrote {path}: preset {args.preset}, {index['total_parameters']:,} parameters, "
        f"{index['total_size'] / 2**20:.1f} MiB, {time.perf_counter() - started:.1f} s"
    )
    return 0


def _synth_lora(args: argparse.Namespace, progress: Callable[[str], None], started: float) -> int:
    # mlx-lm's own model loader (no tokenizer): the adapter is shaped by the model's modules, not by its files.
    from mlx_lm.utils import load_model

    from mlxd.dev.synth_lora import make_adapter

    if not (args.model_dir / "config.json").is_file():
        raise ValueError(f"{args.model_dir} is not an MLX checkpoint (no config.json)")
    progress(f"loading {args.model_dir}")
    model, _ = load_model(args.model_dir, lazy=True)
    keys = [k.strip() for k in args.keys.split(",") if k.strip()]
    out = make_adapter(model, args.out_dir, seed=args.seed, rank=args.rank, scale=args.scale,
                       num_layers=args.num_layers, keys=keys)
    tensors = json.loads((out / "adapter_config.json").read_text())["lora_parameters"]
    print(f"wrote {out}: rank {tensors['rank']}, scale {tensors['scale']}, keys {','.join(keys)}, "
          f"{time.perf_counter() - started:.1f} s")
    return 0
