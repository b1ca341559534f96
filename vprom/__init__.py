"""vprom: build the V-PROM visual-reasoning benchmark from Visual Genome and run its baselines."""

__version__ = "0.1.0"
