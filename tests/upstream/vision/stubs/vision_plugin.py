"""pytest plugin for the upstream vision run: the suite's session fixture starts every preset once to download its
model (ServerPreset.load_all); with local checkpoints there is nothing to fetch, so it is skipped."""


def pytest_sessionstart(session: object) -> None:
    import utils  # the suite's own module, on sys.path from its rootdir

    utils.ServerPreset.load_all = staticmethod(lambda: None)
