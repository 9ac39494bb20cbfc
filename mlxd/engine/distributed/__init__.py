"""One model across several processes or machines on mx.distributed (``--rpc``, ``--split-mode``,
``--tensor-split``): the split (split.py), the replicated scheduler (replicate.py), the rank processes (rank.py,
link.py), `mlxd rpc-server` (rpc_server.py) and the front end's supervised group (group.py, remote.py)."""
