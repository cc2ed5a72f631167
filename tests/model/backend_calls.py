"""Which op implementations a model run calls: for tests that check a backend really served the ops."""
from qwen_ops.ops import _backend


def record_backend_calls(monkeypatch) -> set[str]:
    """From now on (for the test), every op implementation called adds its target ("module:function",
    as in ``_backend.IMPLEMENTATIONS``) to the returned set."""
    called: set[str] = set()
    load = _backend._load

    def recording_load(target):
        implementation = load(target)

        def run(**arguments):
            called.add(target)
            return implementation(**arguments)

        return run

    monkeypatch.setattr(_backend, "_load", recording_load)
    return called
