"""The top floor: the command line, the Python API, and the orchestration of stages."""
