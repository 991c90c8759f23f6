"""The viewer in a real headless browser (Debian's chromium and chromium-driver, driven by
selenium): pages load, filters apply, origins are coloured, the leak is marked, and the
source page holds the runbooks, verdicts and rewrites. Screenshots go to
``test-artifacts/viewer/``.

Under ``CI=1`` a missing browser fails the tests (CI installs it: ``scripts/setup.sh``);
elsewhere they are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, run_cli_env

from .runs import CLEAN, LEAK, LEAKY, SOURCE, STATEM_SOURCE, XSS

CHROMEDRIVER = Path("/usr/bin/chromedriver")
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = REPO / "test-artifacts" / "viewer"
WAIT_S = 30


def _browser_parts() -> str | None:
    """Why the browser cannot run here (None when it can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[dev]')"
    for path, package in ((CHROMEDRIVER, "chromium-driver"), (CHROMIUM, "chromium")):
        if not path.exists():
            return f"{path} is missing (apt-get install -y {package}; scripts/setup.sh does it as root)"
    return None


@pytest.fixture(scope="module")
def viewer_url(run_dir: Path) -> Iterator[str]:
    """``python -m rsr_async view RUN_DIR --port 0`` in a subprocess, stopped afterwards."""
    process = subprocess.Popen(
        [sys.executable, "-m", "rsr_async", "view", str(run_dir), "--port", "0"],
        env=run_cli_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline()  # written once the server listens
        assert " at http://127.0.0.1:" in line, line
        yield line.split(" at ", 1)[1].split()[0].rstrip("/")
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    missing = _browser_parts()
    if missing is not None:
        if os.environ.get("CI") == "1":
            pytest.fail(f"browser tests need a browser under CI=1: {missing}")
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must never go online
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1440,1000", "--force-device-scale-factor=1"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        driver.set_page_load_timeout(WAIT_S)
        yield driver
    finally:
        driver.quit()  # ends chromium and chromedriver


def _shot(driver: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    # the whole page, not just the window: size the window to the document first
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1440, min(max(int(height), 600), 6000))
    assert driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    driver.set_window_size(1440, 1000)


def _wait(driver: Any, condition: Any) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, WAIT_S).until(condition)


def _style(driver: Any, element: Any, prop: str) -> str:
    return str(driver.execute_script("return getComputedStyle(arguments[0])[arguments[1]]", element, prop))


def test_tasks_lead_to_episodes_and_a_trajectory(browser: Any, viewer_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(viewer_url + "/")
    tasks = browser.find_elements(By.CSS_SELECTOR, "table#tasks tbody tr[data-task]")
    assert {t.get_attribute("data-task") for t in tasks} == {"csv-report", "nginx-fix", "hash-crack"}
    _shot(browser, "overview")
    browser.find_element(By.LINK_TEXT, "csv-report").click()
    _wait(browser, lambda d: d.current_url.endswith("/task/csv-report"))
    assert "Summarise /app/data.csv" in browser.find_element(By.CSS_SELECTOR, "details.instruction").text
    episode = browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{STATEM_SOURCE}"]')
    episode.find_element(By.LINK_TEXT, "trajectory").click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "ol.trajectory li.msg"))
    assert browser.find_element(By.TAG_NAME, "h1").text == STATEM_SOURCE


def test_filters_keep_only_matching_rows(browser: Any, viewer_url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(viewer_url + "/jobs")
    every = browser.find_elements(By.CSS_SELECTOR, "table#jobs tbody tr[data-key]")
    assert len({r.get_attribute("data-harness") for r in every}) == 3
    Select(browser.find_element(By.NAME, "harness")).select_by_value("rsrt")  # submits itself
    _wait(browser, lambda d: "harness=rsrt" in d.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "table#jobs tbody tr[data-key]")
    assert len(rows) == 3 and {r.get_attribute("data-harness") for r in rows} == {"rsrt"}
    assert "status=" not in browser.current_url  # empty filters are left out of the URL
    Select(browser.find_element(By.NAME, "status")).select_by_value("failed")
    _wait(browser, lambda d: "status=failed" in d.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "table#jobs tbody tr[data-key]")
    assert [(r.get_attribute("data-harness"), r.get_attribute("data-status")) for r in rows] == [
        ("rsrt", "failed"), ("rsrt", "failed")]
    Select(browser.find_element(By.NAME, "harness")).select_by_value("")
    _wait(browser, lambda d: "harness=" not in d.current_url)
    Select(browser.find_element(By.NAME, "domain")).select_by_value("system-administration")
    _wait(browser, lambda d: "domain=system-administration" in d.current_url)
    rows = browser.find_elements(By.CSS_SELECTOR, "table#jobs tbody tr[data-key]")
    assert rows and {(r.get_attribute("data-domain"), r.get_attribute("data-status")) for r in rows} == {
        ("system-administration", "failed")}
    _shot(browser, "jobs-filtered")


def test_a_trajectory_colours_origins_and_shows_text_as_text(browser: Any, viewer_url: str) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By

    browser.get(f"{viewer_url}/job/{STATEM_SOURCE}")
    colours = {}
    for origin in ("task", "model", "env", "harness"):
        message = browser.find_element(By.CSS_SELECTOR, f"li.msg.origin-{origin}")
        colours[origin] = _style(browser, message, "backgroundColor")
    assert colours == {"task": "rgb(231, 240, 254)", "model": "rgb(230, 244, 234)",
                       "env": "rgb(241, 243, 244)", "harness": "rgb(254, 247, 224)"}
    reply = browser.find_element(By.CSS_SELECTOR, 'li.msg[data-origin="model"] pre.content')
    assert _style(browser, reply, "whiteSpace") == "pre-wrap"
    assert "monospace" in _style(browser, reply, "fontFamily")
    assert XSS.replace('"', '\\"') in reply.text  # shown, not run
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018
    command = browser.find_element(By.CSS_SELECTOR, "div.command pre.keys")
    assert command.text == "wc -l /app/data.csv"
    assert "tokens" in browser.find_element(By.CSS_SELECTOR, 'li.msg[data-origin="model"] .usage').text
    _shot(browser, "trajectory")


def test_the_leaked_value_is_marked_in_the_rewrite(browser: Any, viewer_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{viewer_url}/job/{LEAKY}")
    turn = browser.find_element(By.CSS_SELECTOR, 'li.msg[data-origin="model"][data-turn="1"]')
    marks = turn.find_elements(By.CSS_SELECTOR, "mark.leak")
    assert [m.text for m in marks] == [LEAK, LEAK]  # in the reply and in the command
    assert _style(browser, marks[0], "backgroundColor") == "rgb(197, 34, 31)"
    assert [m.text for m in turn.find_elements(By.CSS_SELECTOR, "mark.flag")] == ["1337", "1337"]
    others = browser.find_elements(By.CSS_SELECTOR, 'li.msg:not([data-turn="1"]) mark')
    assert others == []
    assert "rejected" in browser.find_element(By.CSS_SELECTOR, "section.audit .verdict").text
    _shot(browser, "rewrite-leak")


def test_the_source_page_holds_runbooks_verdicts_and_rewrites(browser: Any, viewer_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{viewer_url}/source/{SOURCE}")
    drafts = browser.find_elements(By.CSS_SELECTOR, "article.draft")
    assert [d.get_attribute("data-runbook") for d in drafts] == ["r0d0", "r0d1", "r1d0"]
    assert "/app/report.txt holds the row count" in drafts[0].find_element(By.CSS_SELECTOR, "pre.runbook").text
    rejected = drafts[0].find_element(By.CSS_SELECTOR, ".verdict")
    assert "deterministic" in rejected.text and "rejected" in rejected.text and "rule:literal_value" in rejected.text
    assert "judge" in drafts[1].find_element(By.CSS_SELECTOR, ".verdict").text
    leaky = browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{LEAKY}"]')
    assert "dropped" in leaky.text and LEAK in leaky.text
    assert "kept" in browser.find_element(By.CSS_SELECTOR, f'tr[data-key="{CLEAN}"]').text
    left, right = browser.find_elements(By.CSS_SELECTOR, ".side-by-side > section")
    assert left.location["y"] == right.location["y"] and left.location["x"] < right.location["x"]  # beside
    _shot(browser, "source")
    leaky.find_element(By.LINK_TEXT, "e0").click()
    _wait(browser, lambda d: d.current_url.endswith(LEAKY))
    assert browser.find_elements(By.CSS_SELECTOR, "mark.leak")


def test_an_unknown_key_is_a_404_page(browser: Any, viewer_url: str) -> None:
    from selenium.webdriver.common.by import By

    browser.get(f"{viewer_url}/job/discover/no-such-task/terminus2/a0/-/e-1")
    assert browser.find_element(By.TAG_NAME, "h1").text == "404 not found"
    assert "no job" in browser.find_element(By.CSS_SELECTOR, ".message").text
