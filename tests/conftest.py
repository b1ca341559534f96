"""Under pytest-xdist, each worker and the commands it runs keep to one thread: `-n auto`
starts a worker per core, and torch's or BLAS's own threads on top of those (two per process
by default here) oversubscribe the cores and make torch's tests several times slower."""

import os

if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
