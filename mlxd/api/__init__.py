"""The public HTTP surface (sanic): llama-server b10621's native routes and the OpenAI/Anthropic-compatible ones.

This is what the daemon uses of it: the app and the serving state it reads, the views a sleeping server answers
from, b10621's error envelope, the API key file's reader, the live slots and load counters the operator console
shows, Google Cloud's Vertex AI settings and the heap settings taken at startup."""

from mlxd.api import gcp
from mlxd.api.app import api_prefix, create_app
from mlxd.api.errors import json_error, json_response
from mlxd.api.live import load_summary, slots_by_model
from mlxd.api.middleware import read_key_file
from mlxd.api.model_facts import ftype, n_embd
from mlxd.api.offload import freeze_startup_objects, share_one_heap
from mlxd.api.sleeping import sleeping_views
from mlxd.api.state import ServingState

__all__ = ["ServingState", "api_prefix", "create_app", "freeze_startup_objects", "ftype", "gcp",
           "json_error", "json_response", "load_summary", "n_embd", "read_key_file", "share_one_heap",
           "sleeping_views", "slots_by_model"]
