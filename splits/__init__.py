"""The split specs: one declarative JSON file per split and their loader (`load_rules`)."""

from vprom.splits.specs import load_rules

__all__ = ["load_rules"]
