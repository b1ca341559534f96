"""Fixtures shared with other test folders: the tiny run data of the baselines' tests (for
`vprom score`) and the synthetic build (for the worked example)."""

from tests.baselines.conftest import tiny_pair  # noqa: F401
from tests.generation.synthetic_build import synthetic_build  # noqa: F401
