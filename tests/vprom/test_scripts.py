"""vprom called from a plain script, with no `if __name__ == "__main__":`, runs once, whatever
multiprocessing's start method: the workers vprom starts never import the script again.
A vprom call made while a pool of the user's own re-imports the script stops that process
with one line that says what to do.

Each script runs in a fresh interpreter, in a folder of its own, as a user runs it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

METHODS = ["fork", "forkserver", "spawn"]


def run_script(folder: Path, code: str) -> subprocess.CompletedProcess:
    script = folder / "a.py"
    script.write_text(textwrap.dedent(code), encoding="utf-8")
    return subprocess.run([sys.executable, script.name], cwd=folder, capture_output=True,
                          text=True, timeout=300, check=False)


@pytest.mark.parametrize("method", METHODS)
def test_a_script_without_a_main_guard_runs_once_with_vprom_workers(tmp_path, method):
    done = run_script(tmp_path, f"""
        from vprom import processes
        print("script ran", flush=True)
        with processes.ordered_map(abs, range(-50, 50), 2, "test", method="{method}") as out:
            print("sum", sum(out))
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["script ran", "sum 2500"]


@pytest.mark.parametrize("method", ["forkserver", "spawn"])
def test_a_dataloader_on_vprom_context_does_not_rerun_the_script(tmp_path, method):
    """As `vprom extract` starts its decoding workers, under the program's start method."""
    done = run_script(tmp_path, f"""
        import multiprocessing
        multiprocessing.set_start_method("{method}")
        import torch.utils.data
        from vprom import processes
        print("script ran", flush=True)
        loader = torch.utils.data.DataLoader(range(6), batch_size=2, num_workers=2,
                                             multiprocessing_context=processes.context(None))
        print([batch.tolist() for batch in loader])
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["script ran", "[[0, 1], [2, 3], [4, 5]]"]


def test_the_synthetic_corpus_is_written_from_a_plain_script(tmp_path):
    """`vprom.synth` starts spawned workers: the docs' pipeline begins so."""
    done = run_script(tmp_path, """
        import vprom
        print(vprom.synth("vg", images=8, workers=2).images)
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8"]


def test_a_call_while_a_users_pool_reimports_the_script_stops_it_in_one_line(tmp_path):
    done = run_script(tmp_path, """
        import multiprocessing
        import vprom
        vprom.synth("vg", images=2, workers=1)
        if __name__ == "__main__":
            child = multiprocessing.get_context("spawn").Process(target=print)
            child.start()
            child.join()
            print("child exit code", child.exitcode)
        """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "child exit code 1"
    line = (f"vprom: the writing of vg was called again while a worker process re-imported "
            f"{tmp_path / 'a.py'}; put the script's calls under `if __name__ == \"__main__\":`")
    assert done.stderr.splitlines() == [line]
