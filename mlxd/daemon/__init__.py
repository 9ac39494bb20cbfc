"""The process: entry points, reconcile loop, file watching, signals, sd_notify, logging setup, graceful drain."""
