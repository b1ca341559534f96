"""The paper's reported numbers, as data, for reports to print beside ours.

Teney et al., "V-PROM: A Benchmark for Visual Reasoning Using Visual Progressive Matrices",
AAAI 2020, Table 2: test accuracy (%) on the neutral split.
"""

from __future__ import annotations

#: Table 2's feature types, in its column order
FEATURE_TYPES: tuple[str, ...] = ("ResNet", "bottom-up")
PAPER_NAMES: dict[str, str] = {
    "mlp-sum-6": "MLP-sum-6",
    "gru-shared": "GRU-shared",
    "vqa": "VQA-like",
    "rn": "RN",
}
#: Table 2's columns (feature type, aux), and model -> the accuracy in each
COLUMNS = (("ResNet", False), ("ResNet", True), ("bottom-up", False), ("bottom-up", True))
TABLE2_NEUTRAL = {model: dict(zip(COLUMNS, row)) for model, row in {
    "mlp-sum-6": (40.7, 44.5, 50.4, 55.7),
    "gru-shared": (43.4, 48.2, 46.7, 52.7),
    "vqa": (36.7, 39.7, 37.9, 41.0),
    "rn": (51.2, 55.8, 55.4, 61.3),
}.items()}
#: later solvers, not in the paper, and the work each follows; reports list them after its models
LATER_SOLVERS: dict[str, str] = {
    "wren": "WReN (Barrett et al. 2018)",
    "scl": "SCL (Wu et al. 2020)",
    "predrnet": "PredRNet (Yang et al. 2023)",
    "predrnet-maps": "PredRNet (Yang et al. 2023) over maps",
    "panel-transformer": "panel transformer after SAViR-T (Sahu et al. 2022)",
    "panel-transformer-pooled": "panel transformer after SAViR-T, pooled tokens",
}
#: human accuracy on the neutral split (%), and the share of questions humans skipped
HUMANS = 77.8
HUMANS_SKIPPED = 4.5
CHANCE = 12.5


def display_name(model: str) -> str:
    return PAPER_NAMES.get(model, model)


def paper_accuracy(model: str, feature_type: str, aux: bool) -> float | None:
    return TABLE2_NEUTRAL.get(model, {}).get((feature_type, aux))


def feature_type(backbone: str | None) -> str:
    """The paper's name for `backbone`'s features; any other backbone is its own column."""
    name = (backbone or "unknown").lower()
    if name == "resnet101":
        return "ResNet"
    if name.startswith(("bottomup", "bottom-up")):
        return "bottom-up"
    return backbone or "unknown"
