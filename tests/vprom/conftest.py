"""Fixtures shared with other test folders: the build of tests/own_model_fixture.py."""

from tests.own_model_fixture import own_build  # noqa: F401
