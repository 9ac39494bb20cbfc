"""The suite's utils.py imports wget for its downloads; nothing is downloaded here."""


def download(*args: object, **kwargs: object) -> None:
    raise RuntimeError("no downloads: the upstream vision run uses local synthetic checkpoints")
