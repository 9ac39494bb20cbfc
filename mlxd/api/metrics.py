"""``/metrics``: b10621's ``llamacpp:*`` families name for name, then mlxd's own ``mlxd_*`` families.

``ServerMetrics`` owns a prometheus-client registry. The generation routes report each request
(``on_request(route)``) and each finished generation (``on_final(final_event)``), and have the worker that
serves it followed (``follow(worker)``): its decode counters (engine.batching.counters) are read at scrape time and kept
when the worker goes (a reload, sleep), so the totals never go back. The load gauges are read from the worker at
scrape time. The two
throughput gauges average over the window since the previous scrape, as b10621's do. The text is written here
rather than by ``generate_latest`` because prometheus-client renames counters to ``*_total`` and b10621 has one
that is not (``llamacpp:n_tokens_max``).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Iterator

from prometheus_client.core import CollectorRegistry, Metric

from mlxd.engine import disk_cache_summary
from mlxd.engine import DecodeCounter

CONTENT_TYPE = "text/plain; version=0.0.4"

# (name, type, help) in b10621's order.
LLAMACPP_FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "counter", "Total time spent processing prompts"),
    ("tokens_predicted_total", "counter", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "counter", "Total time spent generating tokens"),
    ("n_decode_total", "counter",
     "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "counter", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "counter", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "counter",
     "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "counter", "Speculative: Total speculative decoding verification steps"),
    ("prompt_tokens_seconds", "gauge", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "gauge", "Average generation throughput in tokens/s"),
    ("requests_processing", "gauge", "Number of requests processing"),
    ("requests_deferred", "gauge", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "gauge", "Average number of busy slots per llama_decode() call"),
)


# The prompt cache's disk tier (--cache-disk), over every directory the process opened: (name, type, help, key of
# engine.disk_cache_summary()).
CACHE_DISK_FAMILIES: tuple[tuple[str, str, str, str], ...] = (
    ("mlxd_cache_disk_hits_total", "counter", "Prompts whose cached prefix was read from the disk tier", "hits"),
    ("mlxd_cache_disk_misses_total", "counter",
     "Prompt-cache lookups the disk tier did not serve (no entry, or not worth reading)", "misses"),
    ("mlxd_cache_disk_evictions_total", "counter",
     "Disk-tier entries removed under --cache-disk-max or expired", "evictions"),
    ("mlxd_cache_disk_read_bytes_total", "counter", "Bytes read from the disk tier", "bytes_read"),
    ("mlxd_cache_disk_written_bytes_total", "counter", "Bytes written to the disk tier", "bytes_written"),
    ("mlxd_cache_disk_dropped_total", "counter",
     "Entries not written to the disk tier (writer queue full, or the tier read-only)", "dropped"),
    ("mlxd_cache_disk_corrupt_total", "counter",
     "Disk-tier files refused as corrupt, truncated or foreign", "corrupt"),
    ("mlxd_cache_disk_bytes", "gauge", "Bytes the disk tier holds", "bytes"),
    ("mlxd_cache_disk_entries", "gauge", "Entries the disk tier holds", "entries"),
)


class ServerMetrics:
    """The counters behind ``/metrics``; every ``on_*`` method is safe to call from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.prompt_tokens_cached = 0
        self.prompt_seconds = 0.0
        self.tokens_predicted = 0
        self.tokens_predicted_seconds = 0.0
        self.n_decode = 0
        self.n_busy_slots = 0
        self._followed: dict[int, DecodeCounter] = {}  # by id(worker): the decode counters of live workers
        self.n_tokens_max = 0
        self.requests_processing = 0
        self.requests_deferred = 0
        self.requests_total: dict[str, int] = {}
        self.draft_tokens = self.draft_accepted = self.draft_steps = 0  # speculative decoding
        # the window since the last scrape, for the throughput gauges
        self._bucket = [0, 0.0, 0, 0.0]  # prompt tokens, prompt seconds, predicted tokens, predicted seconds
        self.config_hash = ""
        self.model_name = ""
        self.generation = 0  # the owner's generation and its last change's outcome (committed, unchanged, refused)
        self.last_change = "none"
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # -- what the routes and the worker report --------------------------------------------------------------

    def on_prompt(self, n_tokens: int, seconds: float, n_cached: int = 0) -> None:
        """A prompt was processed: ``n_tokens`` evaluated (cached ones excluded) in ``seconds``."""
        with self._lock:
            self.prompt_tokens += n_tokens
            self.prompt_tokens_cached += n_cached
            self.prompt_seconds += seconds
            self._bucket[0] += n_tokens
            self._bucket[1] += seconds

    def on_predicted(self, n_tokens: int, seconds: float, n_sequence: int = 0) -> None:
        """A generation ended with ``n_tokens`` generated in ``seconds``; ``n_sequence`` is prompt + generated."""
        with self._lock:
            self.tokens_predicted += n_tokens
            self.tokens_predicted_seconds += seconds
            self.n_tokens_max = max(self.n_tokens_max, n_sequence)
            self._bucket[2] += n_tokens
            self._bucket[3] += seconds

    def on_final(self, final: Any) -> None:
        """Both of the above from an engine ``FinalEvent`` (its ``timings`` in milliseconds)."""
        t = final.timings
        self.on_prompt(t.prompt_n, t.prompt_ms / 1e3, t.cache_n)
        self.on_predicted(t.predicted_n, t.predicted_ms / 1e3, final.n_prompt_tokens + t.predicted_n)
        if getattr(t, "draft_n", 0):
            with self._lock:
                self.draft_tokens += t.draft_n
                self.draft_accepted += t.draft_n_accepted
                self.draft_steps += t.draft_steps

    def follow(self, worker: Any) -> None:
        """Count ``worker``'s forward passes (its ``decode_counter``, engine.batching.counters) from now on; idempotent.

        A followed counter is read at each scrape. When its worker is freed (a reload, sleep), what it counted is
        folded into the totals, so they never go back; only the small counter is held here, never the worker.
        """
        with self._lock:
            if id(worker) in self._followed:
                return
            self._followed[id(worker)] = worker.decode_counter
        weakref.finalize(worker, self._unfollow, id(worker))

    def _unfollow(self, key: int) -> None:
        with self._lock:
            counter = self._followed.pop(key, None)
            if counter is not None:
                n_decode, n_busy = counter.read()
                self.n_decode += n_decode
                self.n_busy_slots += n_busy

    def on_request(self, route: str) -> None:
        """A generation request arrived on ``route`` (``mlxd_requests_total{route}``)."""
        with self._lock:
            self.requests_total[route] = self.requests_total.get(route, 0) + 1

    def set_load(self, processing: int, deferred: int) -> None:
        """Requests running in a slot and requests waiting for one, read from the worker at scrape time."""
        with self._lock:
            self.requests_processing = max(0, processing)
            self.requests_deferred = max(0, deferred)

    # -- prometheus-client collector ------------------------------------------------------------------------

    def _llamacpp_values(self) -> dict[str, float]:
        with self._lock:
            counts = [counter.read() for counter in self._followed.values()]
            n_decode = self.n_decode + sum(n for n, _ in counts)
            n_busy_slots = self.n_busy_slots + sum(n for _, n in counts)
            p_tok, p_sec, g_tok, g_sec = self._bucket
            self._bucket = [0, 0.0, 0, 0.0]  # each scrape starts a new window, as b10621's does
            return {
                "prompt_tokens_total": self.prompt_tokens,
                "prompt_tokens_cached_total": self.prompt_tokens_cached,
                "prompt_seconds_total": self.prompt_seconds,
                "tokens_predicted_total": self.tokens_predicted,
                "tokens_predicted_seconds_total": self.tokens_predicted_seconds,
                "n_decode_total": n_decode,
                "n_tokens_max": self.n_tokens_max,
                "spec_decode_num_draft_tokens_total": self.draft_tokens,
                "spec_decode_num_accepted_tokens_total": self.draft_accepted,
                "spec_decode_num_drafts_total": self.draft_steps,
                "prompt_tokens_seconds": p_tok / p_sec if p_sec > 0 else 0.0,
                "predicted_tokens_seconds": g_tok / g_sec if g_sec > 0 else 0.0,
                "requests_processing": self.requests_processing,
                "requests_deferred": self.requests_deferred,
                "n_busy_slots_per_decode": n_busy_slots / n_decode if n_decode else 0.0,
            }

    def collect(self) -> Iterator[Metric]:
        values = self._llamacpp_values()
        for name, kind, doc in LLAMACPP_FAMILIES:
            family = Metric(f"llamacpp:{name}", doc, kind)
            family.add_sample(f"llamacpp:{name}", {}, float(values[name]))
            yield family
        info = Metric("mlxd_config_info", "The configuration in service, by content hash", "gauge")
        info.add_sample("mlxd_config_info", {"config_hash": self.config_hash}, 1.0)
        yield info
        generation = Metric("mlxd_config_generation", "The generation in service (one per committed change)", "gauge")
        generation.add_sample("mlxd_config_generation", {}, float(self.generation))
        yield generation
        last = Metric("mlxd_config_last_change", "The last change's result: committed, unchanged or refused", "gauge")
        last.add_sample("mlxd_config_last_change", {"result": self.last_change}, 1.0)
        yield last
        model = Metric("mlxd_model_info", "The model in service", "gauge")
        if self.model_name:
            model.add_sample("mlxd_model_info", {"model": self.model_name}, 1.0)
        yield model
        disk = disk_cache_summary()
        if disk is not None:
            for name, kind, doc, key in CACHE_DISK_FAMILIES:
                family = Metric(name, doc, kind)
                family.add_sample(name, {}, float(disk[key]))
                yield family
            state = Metric("mlxd_cache_disk_state", "Each disk-tier directory's state: rw, ro (reads only) or off",
                           "gauge")
            for directory, st in sorted(disk["dirs"].items()):
                state.add_sample("mlxd_cache_disk_state", {"dir": directory, "state": st}, 1.0)
            yield state
        requests = Metric("mlxd_requests_total", "Generation requests received, by route", "counter")
        with self._lock:
            for route, n in sorted(self.requests_total.items()):
                requests.add_sample("mlxd_requests_total", {"route": route}, float(n))
        yield requests


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _labels(labels: dict[str, str]) -> str:
    if not labels:
        return ""
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in labels.items()) + "}"


def render(registry: CollectorRegistry) -> str:
    """Prometheus text format 0.0.4; families are named as their samples are (``*_total`` for counters that have it)."""
    lines: list[str] = []
    for family in registry.collect():
        lines.append(f"# HELP {family.name} {family.documentation}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            lines.append(f"{sample.name}{_labels(sample.labels)} {_number(sample.value)}")
    return "\n".join(lines) + "\n"


def process_start_time(started_at: float | None = None) -> str:
    """The ``Process-Start-Time-Unix`` header value."""
    return str(int(started_at if started_at is not None else time.time()))
