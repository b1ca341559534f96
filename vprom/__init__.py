"""vprom: build the V-PROM visual-reasoning benchmark from Visual Genome and run its baselines.

The stages are functions of this package (`vprom.build`, `vprom.train`, ...; docs/python-api.md)
that live in `vprom.app.api` and are looked up on first use (PEP 562 `__getattr__`), so
`import vprom` imports none of the stages, and no torch.
"""

__version__ = "0.1.0"

#: `vprom.app.api`'s stage functions in pipeline order (tests/test_api.py checks the list)
API = ("build", "download", "synth", "mine", "generate", "merge", "verify", "stats",
       "show_matrix", "load_dataset", "export", "extract", "load_features", "train", "evaluate",
       "report", "reproduce", "crops", "perceive", "score", "human_study", "human_serve",
       "human_score")


def __getattr__(name: str):
    if name not in API:
        raise AttributeError(f"module 'vprom' has no attribute {name!r}")
    from vprom.app import api  # the one import that goes up a floor: lazy, by design

    value = globals()[name] = getattr(api, name)
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *API})
