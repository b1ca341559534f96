"""The study page in a real browser (headless Chromium driven by Selenium), served by the real
`vprom human-serve`: clicks and keys become exactly the recorded answers, a reload resumes,
and the 16 panels fit a 1280x800 screen.

Chromium and its driver come from Debian's packages (`.ci/run` installs them in CI); where
they are missing these tests skip with the reason, and tests/app/test_human.py still covers
the server and the scoring over HTTP.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.dataset_fixture import build_records, write_dataset, write_images
from vprom.app.api import human_score, human_study
from vprom.app.human.study import load_key

CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="Chromium or chromedriver "
                                "is not installed (apt-get install chromium chromium-driver)")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """`vprom human-serve` on a 12-problem study, on a free port: (base URL, study folder)."""
    root = tmp_path_factory.mktemp("browser")
    crops, matrices = build_records(n_per_relation=6, seed=3)
    dataset, vg = write_dataset(root / "d.h5", crops, matrices), write_images(root / "vg", crops)
    study = human_study(dataset, vg, root / "study", n=12, seed=2).out
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "vprom", "human-serve", str(study), "--port",
                             "0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    line = proc.stdout.readline()  # "serving STUDY at http://127.0.0.1:PORT/?participant=..."
    assert "http://127.0.0.1:" in line, line
    base = line.split(" at ")[1].split("?")[0]
    yield base, study
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1280,800",
                 "--disable-dev-shm-usage"):
        options.add_argument(flag)
    try:
        driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    except Exception as e:  # a broken browser install: say so instead of failing every test
        pytest.skip(f"Chromium would not start: {str(e).splitlines()[0]}")
    yield driver
    driver.quit()


def wait_for(driver, condition, what: str, timeout: float = 20):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = driver.execute_script(condition)
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def current_key(driver) -> str:
    return wait_for(driver, "return !document.getElementById('task').hidden && "
                    "document.getElementById('problem').dataset.key", "a problem")


def right_position(base: str, study: Path, participant: str, key: str) -> int:
    import urllib.request

    with urllib.request.urlopen(f"{base}api/session?participant={participant}") as reply:
        session = json.load(reply)
    shown = next(p for p in session["problems"] if p["key"] == key)["order"]
    return shown.index(load_key(study)["problems"][key]["answer"])


def test_clicked_answers_are_recorded_and_scored(server, browser):
    from selenium.webdriver.common.by import By

    base, study = server
    browser.get(f"{base}?participant=clicker")
    wait_for(browser, "return !document.getElementById('intro').hidden", "the instructions")
    assert browser.find_elements(By.CSS_SELECTOR, "#example .candidate.right")
    browser.find_element(By.ID, "start").click()
    plan = ["right", "wrong", "right", "right", "skip", "reload", "wrong", "right", "key-right",
            "wrong", "right"]
    right = wrong = skipped = 0
    for step in plan:
        if step == "reload":
            browser.refresh()
            continue
        key = current_key(browser)
        position = right_position(base, study, "clicker", key)
        if step == "skip":
            browser.find_element(By.TAG_NAME, "body").send_keys("s")
            skipped += 1
        elif step == "key-right":
            browser.find_element(By.TAG_NAME, "body").send_keys(str(position + 1))
            right += 1
        else:
            if step == "wrong":
                position = (position + 3) % 8
            browser.find_element(By.CSS_SELECTOR,
                                 f"#problem .candidate[data-position='{position}']").click()
            right, wrong = right + (step == "right"), wrong + (step == "wrong")
        wait_for(browser, f"return document.getElementById('problem').dataset.key !== '{key}'"
                 f" || !document.getElementById('done').hidden", "the next problem")
    lines = (study / "responses" / "clicker.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(records) == 10 and len({r["problem"] for r in records}) == 10
    assert sum(r["skipped"] for r in records) == skipped == 1
    assert all(r["rt_ms"] >= 0 for r in records)
    metrics = human_score(study, [study / "responses" / "clicker.jsonl"])
    assert (metrics["test"]["correct"], metrics["test"]["n"]) == (right, right + wrong) == (6, 9)


def test_all_sixteen_panels_fit_the_screen(server, browser, tmp_path):
    from selenium.webdriver.common.by import By

    base, _ = server
    browser.get(f"{base}?participant=looker")
    wait_for(browser, "return !document.getElementById('intro').hidden", "the instructions")
    browser.find_element(By.ID, "start").click()
    current_key(browser)
    wait_for(browser, "return [...document.querySelectorAll('#problem img')]"
             ".every(i => i.complete && i.naturalWidth > 0)", "the pictures")
    view = browser.execute_script("return [window.innerWidth, window.innerHeight]")
    # a 1280x800 browser window: its page area is smaller still (about 1280x660 here)
    assert view[0] == 1280 and 600 <= view[1] <= 800
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('#problem img')].map(i => "
        "{const r = i.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];})")
    assert len(boxes) == 16
    for left, top, right, bottom in boxes:
        assert 0 <= left < right <= view[0] and 0 <= top < bottom <= view[1]
        assert right - left >= 80  # big enough to see
    assert browser.execute_script("return document.documentElement.scrollHeight") <= view[1]
    browser.save_screenshot(str(tmp_path / "problem.png"))
    assert (tmp_path / "problem.png").stat().st_size > 10_000
