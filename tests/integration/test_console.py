"""The memory console (issue 27) against a live sidecar holding a generated history, in a real headless Chromium.

Chromium and its driver come from the distribution's packages (``.ci/run`` installs them); selenium drives
them. Set MEMEVO_CONSOLE_SCREENSHOTS=DIR to save a screenshot of each page (docs/console/ holds the README's).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import RUN_ROOT, Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import pack, stub, unit, wait_until

from memevo.v1 import memory_pb2, memory_service_pb2, policy_pb2

pytestmark = pytest.mark.integration

ADMIN = "console-admin-token"
TEAM = "console-team-token"
DIM = 384
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
PAGE_WAIT_S = 20.0


def _stamp(when: datetime) -> Timestamp:
    stamp = Timestamp()
    stamp.FromDatetime(when)
    return stamp


def _group(rng: np.random.Generator, task: str, words: str) -> list[memory_pb2.MemoryInput]:
    """Six near-identical strategies (cosine ~0.99): a consolidation group."""
    centre = unit(rng.normal(size=DIM))
    return [
        memory_pb2.MemoryInput(
            content=f"{words}, attempt {i}",
            vector=pack(unit(centre + 0.01 * rng.normal(size=DIM))),
            kind=memory_pb2.MEMORY_KIND_STRATEGY,
            task_signature=task,
        )
        for i in range(6)
    ]


def generate_history(target: str) -> dict[str, Any]:
    """A small history: facts that changed, preferences, episodes, two consolidation groups, a sweep."""
    service = stub(target, ADMIN)
    policy = service.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    policy.consolidation.without_reviewer = policy_pb2.CONSOLIDATION_MODE_WAIT
    service.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy))
    start = datetime.now(timezone.utc) - timedelta(days=30)
    old = service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory_pb2.MemoryInput(
                content="Ana lives in Lisbon.",
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity="user:ana",
                fact=memory_pb2.Fact(attribute="city", value="Lisbon"),
                source=memory_pb2.MEMORY_SOURCE_USER_STATEMENT,
                valid_from=_stamp(start),
            )
        )
    ).result.memory.id
    new = service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory_pb2.MemoryInput(
                content="Ana moved to Porto.",
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity="user:ana",
                fact=memory_pb2.Fact(attribute="city", value="Porto"),
                source=memory_pb2.MEMORY_SOURCE_USER_STATEMENT,
                valid_from=_stamp(start + timedelta(days=20)),
            )
        )
    ).result.memory.id
    # A fact changed in prose: the keyed version, then a statement without a key that perception reads as it.
    keyed = service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory_pb2.MemoryInput(
                content="Bo works at Shopify.",
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity="user:bo",
                fact=memory_pb2.Fact(attribute="employer", value="Shopify"),
                valid_from=_stamp(start + timedelta(days=2)),
            )
        )
    ).result.memory.id
    prose = service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory_pb2.MemoryInput(
                content="Bo's employer is Canva now.",
                kind=memory_pb2.MEMORY_KIND_FACT,
                entity="user:bo",
                valid_from=_stamp(start + timedelta(days=25)),
            )
        )
    ).result
    assert list(prose.affected_ids) == [keyed], "perception no longer reads this change: pick a wording it reads"
    texts = [
        ("Ana prefers tea over coffee.", memory_pb2.MEMORY_KIND_PREFERENCE),
        ("Ben likes short answers with code first.", memory_pb2.MEMORY_KIND_PREFERENCE),
        ("The deploy on Monday failed because the database migration timed out.", memory_pb2.MEMORY_KIND_EPISODE),
        ("We talked about the quarterly roadmap with Ana.", memory_pb2.MEMORY_KIND_EPISODE),
        ("The staging cluster runs Kubernetes 1.29.", memory_pb2.MEMORY_KIND_FACT),
        ("Ben is on call this week.", memory_pb2.MEMORY_KIND_EPISODE),
    ]
    service.RememberBatch(
        memory_service_pb2.RememberBatchRequest(memories=[memory_pb2.MemoryInput(content=t, kind=k) for t, k in texts])
    )
    service.Remember(
        memory_service_pb2.RememberRequest(
            memory=memory_pb2.MemoryInput(content="Team B ships on Fridays.", namespace="team-b")
        )
    )
    rng = np.random.default_rng(7)
    groups = [
        _group(rng, "upload", "Retry the flaky upload with backoff"),
        _group(rng, "deploy", "Deploy behind a flag"),
    ]
    group_ids = [
        [r.memory.id for r in service.RememberBatch(memory_service_pb2.RememberBatchRequest(memories=g)).results]
        for g in groups
    ]
    service.Govern(memory_service_pb2.GovernRequest())
    return {"old": old, "new": new, "keyed": keyed, "prose": prose.memory.id, "groups": group_ids}


def start_console_sidecar(prefix: str) -> tuple[Sidecar, str]:
    """A sidecar with the local embedder, tokens ADMIN (every namespace) and TEAM (team-b), and its console's URL."""
    RUN_ROOT.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=RUN_ROOT))
    tokens = root / "tokens"
    tokens.write_text(f"{ADMIN} *\n{TEAM} team-b\n")
    tokens.chmod(0o600)
    process = start_sidecar(
        root / "data",
        "--tokens-file",
        str(tokens),
        "--console-listen",
        "127.0.0.1:0",
        "--sweep-interval-s",
        "0",
        embedder="local",
    )
    ready = json.loads((Path(process.args[process.args.index("--ready-file") + 1])).read_text())
    return process, f"http://{ready['console']}"


@pytest.fixture(scope="module")
def console_sidecar() -> Iterator[tuple[Sidecar, str, dict[str, Any]]]:
    process, url = start_console_sidecar("console-")
    history = generate_history(process.unix_target)
    yield process, url, history
    process.stop()


def _http(
    url: str, token: str | None = None, *, body: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None)
    if body is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def form_post(url: str, body: bytes) -> int:
    """The status of a form's POST (what a page elsewhere can send without asking), with the ADMIN token."""
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("Authorization", f"Bearer {ADMIN}")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    return refused.value.code


# ---- in a real browser ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        message = "Chromium and chromedriver are needed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def _no_console_errors(driver: Any, page: str) -> None:
    severe = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, f"{page}: console errors {severe}"


def _wait_css(driver: Any, css: str) -> Any:
    from selenium.webdriver.common.by import By

    found: list[Any] = []

    def present() -> bool:
        found[:] = driver.find_elements(By.CSS_SELECTOR, css)
        return bool(found)

    try:
        wait_until(present, f"{css} on {driver.current_url}", timeout_s=PAGE_WAIT_S)
    except AssertionError as missing:
        raise AssertionError(f"{missing}; browser log: {driver.get_log('browser')}") from None
    return found


def _shot(driver: Any, name: str) -> None:
    folder = os.environ.get("MEMEVO_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(1400, min(max(int(height) + 40, 700), 2400))
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))
        driver.set_window_size(1400, 1000)


def test_every_page_in_a_browser(console_sidecar: tuple[Sidecar, str, dict[str, Any]], browser: Any) -> None:
    from selenium.webdriver.common.by import By

    process, url, history = console_sidecar
    service = stub(process.unix_target, ADMIN)
    driver = browser

    # Overview: its counts are GetStats'.
    wait_until(lambda: _http(f"{url}/api/overview", ADMIN)[1]["log"]["cursor"] > 0, "the log digest", timeout_s=30)
    driver.get(f"{url}/overview#token={ADMIN}")
    total = _wait_css(driver, "#total-count")[0]
    stats = service.GetStats(memory_service_pb2.GetStatsRequest())
    assert int(total.text) == stats.total_count
    shown = {
        cell.get_attribute("data-count"): int(cell.text)
        for cell in driver.find_elements(By.CSS_SELECTOR, "#counts td[data-count]")
    }
    for count in stats.counts:
        state = memory_pb2.MemoryState.Name(count.state).removeprefix("MEMORY_STATE_")
        kind = memory_pb2.MemoryKind.Name(count.kind).removeprefix("MEMORY_KIND_")
        if state != "EVICTED":
            assert shown[f"{state}/{kind}"] == count.count, (state, kind)
    assert sum(v for k, v in shown.items() if not k.endswith("/*")) == stats.total_count
    _wait_css(driver, "#values svg line[data-threshold='archive']")
    _no_console_errors(driver, "overview")
    _shot(driver, "overview")

    # Search: each hit with its score breakdown and hint.
    driver.get(f"{url}/search?q=Where+does+Ana+live%3F&ns=default&k=5")
    rows = _wait_css(driver, "#hits tr[data-hit]")
    assert rows[0].get_attribute("data-hit") == str(history["new"])
    assert driver.find_elements(By.CSS_SELECTOR, "#hits td.hint")[0].text
    _no_console_errors(driver, "search")
    _shot(driver, "search")

    # A superseded fact's life: both versions and the reason.
    driver.get(f"{url}/life?ns=default&entity=user%3Aana&attribute=city")
    versions = _wait_css(driver, "#versions tr[data-version]")
    assert [v.get_attribute("data-version") for v in versions] == [str(history["old"]), str(history["new"])]
    transitions = driver.find_element(By.ID, "transitions").text
    assert f"superseded by memory {history['new']}" in transitions
    assert "keyed" in transitions
    assert "Lisbon" in driver.page_source
    assert "Porto" in driver.page_source
    _no_console_errors(driver, "life")
    _shot(driver, "life")

    # A fact changed in prose: the statement without a key is the current version, with the slot read from it.
    driver.get(f"{url}/life?ns=default&entity=user%3Abo&attribute=employer")
    versions = _wait_css(driver, "#versions tr[data-version]")
    assert [v.get_attribute("data-version") for v in versions] == [str(history["keyed"]), str(history["prose"])]
    current = driver.find_elements(By.CSS_SELECTOR, "#versions tr[data-current]")
    assert [v.get_attribute("data-version") for v in current] == [str(history["prose"])]
    assert "read from the text: user:bo · employer" in current[0].text
    assert "current" in current[0].text
    assert f"superseded by memory {history['prose']}" in driver.find_element(By.ID, "transitions").text
    _no_console_errors(driver, "life of a fact changed in prose")

    # The review queue: accepting a proposal from the page consolidates its members.
    driver.get(f"{url}/review")
    boxes = _wait_css(driver, "[data-proposal]")
    assert len(boxes) == 2
    _shot(driver, "review")
    first = boxes[0]
    proposal_id = first.get_attribute("data-proposal")
    members = [int(a.get_attribute("data-memory")) for a in first.find_elements(By.CSS_SELECTOR, "a[data-memory]")]
    first.find_element(By.CSS_SELECTOR, "button[data-action='accept']").click()
    wait_until(
        lambda: "accepted" in driver.find_element(By.ID, "review-status").text, "the decision", timeout_s=PAGE_WAIT_S
    )
    records = service.Get(memory_service_pb2.GetRequest(ids=members)).memories
    assert {r.state for r in records} == {memory_pb2.MEMORY_STATE_CONSOLIDATED}
    assert len({r.consolidated_into for r in records}) == 1
    wait_until(
        lambda: (
            proposal_id
            not in [b.get_attribute("data-proposal") for b in driver.find_elements(By.CSS_SELECTOR, "[data-proposal]")]
            and bool(driver.find_elements(By.CSS_SELECTOR, "[data-proposal]"))
        ),
        "the queue reloaded",
        timeout_s=PAGE_WAIT_S,
    )
    _no_console_errors(driver, "review")

    # Live changes: a write shows up.
    driver.get(f"{url}/live")
    _wait_css(driver, "#live-list tr")
    written = service.Remember(
        memory_service_pb2.RememberRequest(memory=memory_pb2.MemoryInput(content="Ana's new phone arrived today."))
    ).result.memory.id
    _wait_css(driver, f"#live-list a[data-memory='{written}']")
    _no_console_errors(driver, "live")
    _shot(driver, "live")


def _shot_at(driver: Any, name: str, width: int) -> None:
    """Save a screenshot ``width`` px wide (the page's full height) when MEMEVO_CONSOLE_SCREENSHOTS is set."""
    folder = os.environ.get("MEMEVO_CONSOLE_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        height = driver.execute_script("return document.body.scrollHeight")
        driver.set_window_size(width, min(max(int(height) + 40, 600), 2400))
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def _fits(driver: Any, page: str) -> None:
    """Nothing on the page is wider than the window: a phone never scrolls sideways."""
    wide, inner = driver.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
    assert wide <= inner, f"{page}: {wide} px wide in a {inner} px window"


def test_entities_then_beliefs_then_a_facts_life_in_a_browser(
    console_sidecar: tuple[Sidecar, str, dict[str, Any]], browser: Any
) -> None:
    """The first page: entities (search, counts, last change) -> an entity's beliefs -> a fact's life (issue 42)."""
    from selenium.webdriver.common.by import By

    process, url, history = console_sidecar
    service = stub(process.unix_target, ADMIN)
    driver = browser
    listed = service.ListEntities(memory_service_pb2.ListEntitiesRequest(namespace="default"))
    for width, suffix in ((1440, ""), (390, "-390")):
        driver.set_window_size(width, 1000)
        driver.get(f"{url}/#token={ADMIN}")
        rows = _wait_css(driver, "#entities tr[data-entity]")
        assert [r.get_attribute("data-entity") for r in rows] == [e.entity for e in listed.entities]
        bo = driver.find_element(By.CSS_SELECTOR, "#entities tr[data-entity='user:bo']")
        (summary,) = [e for e in listed.entities if e.entity == "user:bo"]
        cells = [c.text for c in bo.find_elements(By.CSS_SELECTOR, "td.num")]
        counts = [summary.belief_count, summary.current_count, summary.memory_count]
        assert [int(c.split()[-1]) for c in cells[:3]] == counts
        _fits(driver, f"entities at {width} px")
        _no_console_errors(driver, "entities")
        _shot_at(driver, f"entities{suffix}", width)

        # Search narrows the list; the entity opens its beliefs.
        box = driver.find_element(By.CSS_SELECTOR, "#entities-form input[name='q']")
        box.send_keys("BO")
        driver.find_element(By.CSS_SELECTOR, "#entities-form button[type=submit]").click()
        wait_until(
            lambda: (
                [r.get_attribute("data-entity") for r in driver.find_elements(By.CSS_SELECTOR, "#entities tr")[1:]]
                == ["user:bo"]
            ),
            "the search",
            timeout_s=PAGE_WAIT_S,
        )
        driver.find_element(By.CSS_SELECTOR, "#entities a[href*='entity=user%3Abo']").click()
        employer = _wait_css(driver, "#beliefs tr[data-belief='employer']")[0]
        # Bo's employer was changed in prose: the statement without a key is the belief, marked as read.
        assert employer.get_attribute("data-read") == "1"
        assert employer.get_attribute("data-memory-id") == str(history["prose"])
        assert "read from text" in employer.text
        assert "Bo's employer is Canva now." in employer.text
        assert "2 versions" in employer.text
        _fits(driver, f"beliefs at {width} px")
        _no_console_errors(driver, "beliefs")
        _shot_at(driver, f"beliefs{suffix}", width)

        # Its life: the keyed version it retired and the prose one, current.
        employer.find_element(By.CSS_SELECTOR, "a[data-life]").click()
        versions = _wait_css(driver, "#versions tr[data-version]")
        assert [v.get_attribute("data-version") for v in versions] == [str(history["keyed"]), str(history["prose"])]
        _no_console_errors(driver, "a fact's life from the beliefs page")
    driver.set_window_size(1400, 1000)

    # A keyed change: Ana's city is Porto, the Lisbon version is history.
    driver.get(f"{url}/beliefs?ns=default&entity=user%3Aana")
    city = _wait_css(driver, "#beliefs tr[data-belief='city']")[0]
    assert city.get_attribute("data-read") is None
    assert city.get_attribute("data-memory-id") == str(history["new"])
    assert "Porto" in city.text
    assert "keyed" in city.text
    assert "user statement" in city.text
    _no_console_errors(driver, "a keyed belief")

    # As of ten days ago, from the page's own field: Bo's keyed Shopify, superseded since, and no corrections.
    driver.get(f"{url}/beliefs?ns=default&entity=user%3Abo")
    _wait_css(driver, "#beliefs tr[data-belief='employer']")
    at = (datetime.now(timezone.utc) - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%S")
    field = driver.find_element(By.CSS_SELECTOR, "#as-of-form input[name='as_of']")
    driver.execute_script("arguments[0].value = arguments[1]", field, at)  # typing into it depends on the locale
    driver.find_element(By.CSS_SELECTOR, "#as-of-form button[type=submit]").click()
    wait_until(
        lambda: (
            "as_of=" in driver.current_url
            and any(
                r.get_attribute("data-memory-id") == str(history["keyed"])
                for r in driver.find_elements(By.CSS_SELECTOR, "#beliefs tr[data-belief='employer']")
            )
        ),
        "the beliefs as of ten days ago",
        timeout_s=PAGE_WAIT_S,
    )
    employer = driver.find_element(By.CSS_SELECTOR, "#beliefs tr[data-belief='employer']")
    assert "Shopify" in employer.text
    assert "OBSOLETE" in employer.text  # superseded since, held then
    assert not driver.find_elements(By.CSS_SELECTOR, "#beliefs button[data-act]")
    assert "held at" in driver.find_element(By.ID, "beliefs-status").text
    _no_console_errors(driver, "beliefs as of a past instant")
    _shot_at(driver, "beliefs-as-of", 1440)
    driver.find_element(By.ID, "as-of-now").click()
    now = _wait_css(driver, f"#beliefs tr[data-belief='employer'][data-memory-id='{history['prose']}']")[0]
    assert "canva" in now.text.lower()


def test_the_beliefs_api_answers_as_the_sidecar_does(console_sidecar: tuple[Sidecar, str, dict[str, Any]]) -> None:
    _, url, history = console_sidecar
    status, entities = _http(f"{url}/api/entities?ns=default&q=bo", ADMIN)
    assert status == 200, entities
    assert [e["entity"] for e in entities["entities"]] == ["user:bo"]
    status, beliefs = _http(f"{url}/api/beliefs?ns=default&entity=user%3Abo", ADMIN)
    assert status == 200, beliefs
    (employer,) = [b for b in beliefs["beliefs"] if b["attribute"] == "employer"]
    assert (int(employer["memory"]["id"]), employer["read_from_text"]) == (history["prose"], True)
    assert employer["history_key"] == {"namespace": "default", "entity": "user:bo", "attribute": "employer"}
    assert _http(f"{url}/api/beliefs?ns=default", ADMIN)[1]["error"].startswith("entity: required")
    # As of ten days ago (between the keyed Shopify, 28 days ago, and the prose Canva, 5 days ago): Shopify.
    at = (datetime.now(timezone.utc) - timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%S")
    status, then = _http(f"{url}/api/beliefs?ns=default&entity=user%3Abo&as_of={at}", ADMIN)
    assert status == 200, then
    (employer,) = [b for b in then["beliefs"] if b["attribute"] == "employer"]
    assert (int(employer["memory"]["id"]), employer["value"], employer["read_from_text"]) == (
        history["keyed"],
        "Shopify",
        False,
    )
    assert then["as_of"].startswith(at)
    status, bad = _http(f"{url}/api/beliefs?ns=default&entity=user%3Abo&as_of=yesterday", ADMIN)
    assert (status, bad["error"].split(":")[0]) == (400, "as_of")
    # A token of another namespace: the sidecar refuses, the page shows why.
    assert _http(f"{url}/api/entities?ns=default", TEAM)[0] == 403
    assert _http(f"{url}/api/beliefs?ns=default&entity=user%3Abo", TEAM)[0] == 403
    assert _http(f"{url}/api/entities?ns=team-b", TEAM)[0] == 200
    assert _http(f"{url}/api/entities?ns=bad%20ns", ADMIN)[0] == 400


# ---- tokens, loopback and the write path, over plain HTTP ------------------------------------------


def test_the_life_of_a_fact_changed_in_prose_lists_the_prose_version_as_current(
    console_sidecar: tuple[Sidecar, str, dict[str, Any]],
) -> None:
    _, url, history = console_sidecar
    status, life = _http(f"{url}/api/life?ns=default&entity=user%3Abo&attribute=employer", ADMIN)
    assert status == 200, life
    # Before issue 40 the page listed the keyed version alone, retired, and no current value.
    assert [int(v["id"]) for v in life["versions"]] == [history["keyed"], history["prose"]]
    assert [v["current"] for v in life["versions"]] == [False, True]
    assert [v["state"] for v in life["versions"]] == ["MEMORY_STATE_OBSOLETE", "MEMORY_STATE_ACTIVE"]
    assert life["versions"][1]["inferred"]["attribute"] == "employer"
    assert int(life["versions"][0]["superseded_by"]) == history["prose"]
    assert {int(e["memory_id"]) for e in life["events"]} == {history["keyed"], history["prose"]}
    status, keyed = _http(f"{url}/api/life?ns=default&entity=user%3Aana&attribute=city", ADMIN)
    assert [v["current"] for v in keyed["versions"]] == [False, True]


def test_tokens_are_enforced_and_scoped(console_sidecar: tuple[Sidecar, str, dict[str, Any]]) -> None:
    _, url, _ = console_sidecar
    assert _http(f"{url}/api/overview")[0] == 401
    assert _http(f"{url}/api/overview", "not-a-token")[0] == 401
    assert _http(f"{url}/api/overview", TEAM)[0] == 403  # sidecar-wide, as GetStats is
    assert _http(f"{url}/api/overview", ADMIN)[0] == 200
    assert _http(f"{url}/api/search?q=ships&ns=default", TEAM)[0] == 403
    status, found = _http(f"{url}/api/search?q=ships&ns=team-b", TEAM)
    assert status == 200
    assert found["memories"][0]["memory"]["namespace"] == "team-b"
    # The pages themselves hold no data and load without a token.
    with urllib.request.urlopen(f"{url}/review", timeout=10) as response:
        assert response.status == 200


def test_a_search_only_looks(console_sidecar: tuple[Sidecar, str, dict[str, Any]]) -> None:
    """A person searching must not raise what they see in the agent's ranking: no access, no retrieval."""
    process, url, _ = console_sidecar
    service = stub(process.unix_target, ADMIN)
    status, found = _http(f"{url}/api/search?q=ships&ns=team-b", ADMIN)
    assert status == 200
    assert found["memories"]
    assert not found.get("retrieval_id")
    ids = [int(m["memory"]["id"]) for m in found["memories"]]

    def accesses() -> list[int]:
        return [m.access_count for m in service.Get(memory_service_pb2.GetRequest(ids=ids)).memories]

    before = accesses()
    for _ in range(3):
        assert _http(f"{url}/api/search?q=ships&ns=team-b", ADMIN)[0] == 200
    assert accesses() == before
    request = memory_service_pb2.RecallRequest(query="ships", k=len(ids))
    request.filter.namespace = "team-b"
    service.Recall(request)  # the agent's own recall does count, so the check above could fail
    assert accesses() != before


def test_no_write_without_a_permitted_token(console_sidecar: tuple[Sidecar, str, dict[str, Any]]) -> None:
    process, url, _history = console_sidecar
    status, queue = _http(f"{url}/api/review", ADMIN)
    assert status == 200
    assert queue["proposals"]
    proposal = queue["proposals"][-1]
    decision = {"proposal_id": proposal["id"], "verdict": "accept"}
    assert _http(f"{url}/api/review/decide", body=decision)[0] == 401
    assert _http(f"{url}/api/review/decide", TEAM, body=decision)[0] == 403
    # A page elsewhere cannot post through the user's browser: another origin, or no JSON, is refused.
    assert _http(f"{url}/api/review/decide", ADMIN, body=decision, headers={"Origin": "http://evil.example"})[0] == 403
    assert form_post(f"{url}/api/review/decide", b"proposal_id=x") == 415
    ids = [int(m["id"]) for m in proposal["memories"]]
    states = {m.state for m in stub(process.unix_target, ADMIN).Get(memory_service_pb2.GetRequest(ids=ids)).memories}
    assert states == {memory_pb2.MEMORY_STATE_ACTIVE}
    assert proposal["id"] in [p["id"] for p in _http(f"{url}/api/review", ADMIN)[1]["proposals"]]
    # A request for another host name (DNS rebinding) is refused.
    assert _http(f"{url}/api/overview", ADMIN, headers={"Host": "evil.example"})[0] == 403


def test_console_listens_on_loopback_only(tmp_path: Path) -> None:
    for command in (
        [
            "serve",
            "--data",
            str(tmp_path / "d"),
            "--embedder",
            "none",
            "--dimension",
            "8",
            "--console-listen",
            "0.0.0.0:0",
        ],
        ["console", "--connect", "127.0.0.1:1", "--listen", "192.168.1.1:8787"],
    ):
        done = subprocess.run(
            [sys.executable, "-m", "memevo.sidecar.cli", *command], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2, done.stderr
        assert "loopback only" in done.stderr
    assert not (tmp_path / "d" / "rocksdb").exists()  # refused before the data directory was touched


def test_memevo_console_connects_to_a_running_sidecar(console_sidecar: tuple[Sidecar, str, dict[str, Any]]) -> None:
    process, _, _ = console_sidecar
    ready = Path(tempfile.mkdtemp(prefix="console-cli-", dir=RUN_ROOT)) / "ready.json"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memevo.sidecar.cli",
            "console",
            "--connect",
            process.tcp_target,
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ],
        env={**os.environ, "MEMEVO_TOKEN": ADMIN},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_until(ready.exists, "the console's ready file", timeout_s=60)
        url = f"http://{json.loads(ready.read_text())['console']}"
        stats = stub(process.unix_target, ADMIN).GetStats(memory_service_pb2.GetStatsRequest())
        wait_until(
            lambda: _http(f"{url}/api/overview", ADMIN)[1]["log"]["cursor"] >= stats.last_sequence,
            "the digest to read the log",
            timeout_s=60,
        )
        status, overview = _http(f"{url}/api/overview", ADMIN)
        assert status == 200
        assert int(overview["stats"]["total_count"]) == stats.total_count
        live = sum(v[-1] for k, v in overview["series"]["states"].items() if k != "MEMORY_STATE_EVICTED")
        assert live == stats.total_count  # the change log's counts agree with GetStats'
        assert _http(f"{url}/api/overview")[0] == 401  # the console's own token is not lent to the browser
    finally:
        child.terminate()
        child.wait(timeout=30)
    time.sleep(0)


# ---- a sidecar without tokens: the console's own secret (issue 41) --------------------------------------


@pytest.fixture(scope="module")
def open_sidecar() -> Iterator[tuple[Sidecar, dict[str, Any]]]:
    """A sidecar without tokens and without an embedder (client vectors), serving the console."""
    RUN_ROOT.mkdir(exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="console-open-", dir=RUN_ROOT))
    process = start_sidecar(root / "data", "--console-listen", "127.0.0.1:0", "--sweep-interval-s", "0")
    ready_path = Path(process.args[process.args.index("--ready-file") + 1])
    ready = json.loads(ready_path.read_text())
    ready["mode"] = ready_path.stat().st_mode & 0o777
    rng = np.random.default_rng(41)
    stub(process.unix_target).Remember(
        memory_service_pb2.RememberRequest(
            memory=memory_pb2.MemoryInput(content="A memory of an open sidecar.", vector=pack(unit(rng.normal(size=8))))
        )
    )
    yield process, ready
    process.stop()


def _raw(url: str, *, headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
    """One GET that does not follow redirects, read to the end."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.netloc, timeout=30)
    connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers or {})
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


def test_a_sidecar_without_tokens_gets_a_console_with_its_own_token(
    open_sidecar: tuple[Sidecar, dict[str, Any]],
) -> None:
    process, ready = open_sidecar
    url = f"http://{ready['console']}"
    printed = urllib.parse.urlsplit(ready["console_url"])
    secret = urllib.parse.parse_qs(printed.query)["token"][0]
    assert len(secret) >= 32
    assert ready["console_url"] in process.log()  # the URL to open is printed, as notebook servers do
    assert ready["mode"] == 0o600  # the ready file carries the secret: this user's only

    # Before issue 41 every local user read every memory here: the 0600 socket refused them, this did not.
    status, refused = _http(f"{url}/api/overview")
    assert status == 401
    assert refused["code"] == "CONSOLE_TOKEN_MISSING"
    assert "open the URL it printed" in refused["error"]
    status, refused = _http(f"{url}/api/search?q=x&ns=default", "a-guess")
    assert status == 403
    assert "wrong console token" in refused["error"]
    assert _http(f"{url}/api/life?id=1")[0] == 401
    assert _http(f"{url}/api/review")[0] == 401
    assert _http(f"{url}/api/live")[0] == 401
    assert _http(f"{url}/api/review/decide", body={"proposal_id": "p", "verdict": "accept"})[0] == 401
    # The pages hold no data and load without it; the wrong secret in a URL is refused, not traded for a cookie.
    assert _raw(f"{url}/search").status == 200
    wrong = _raw(f"{url}/?token=not-it")
    assert wrong.status == 403
    assert wrong.getheader("Set-Cookie") is None

    # The printed URL: a cookie the page's scripts cannot read nor another site send, and the same page without it.
    taken = _raw(f"{url}/search?q=ships&token={secret}&k=3")
    assert taken.status == 303
    assert taken.getheader("Location") == "/search?q=ships&k=3"
    cookie = taken.getheader("Set-Cookie") or ""
    attributes = {part.strip().split("=", 1)[0] for part in cookie.split(";")[1:]}
    assert {"HttpOnly", "SameSite", "Path"} <= attributes
    assert "SameSite=Strict" in cookie
    name_value = cookie.split(";", 1)[0]
    assert name_value == f"memevo_console_{url.rsplit(':', 1)[1]}={secret}"
    assert _raw(f"{url}/?token={secret}").getheader("Location") == "/"

    status, overview = _http(f"{url}/api/overview", headers={"Cookie": name_value})
    assert status == 200, overview
    assert int(overview["stats"]["total_count"]) == 1
    assert _http(f"{url}/api/overview", secret)[0] == 200  # scripts send it as a bearer token
    # An old cookie (a console started anew makes a new secret) is told so.
    status, stale = _http(f"{url}/api/overview", headers={"Cookie": f"{name_value.split('=')[0]}=old"})
    assert status == 403
    assert "new one each time it starts" in stale["error"]


def test_console_search_on_a_sidecar_without_an_embedder_says_why(
    open_sidecar: tuple[Sidecar, dict[str, Any]], console_sidecar: tuple[Sidecar, str, dict[str, Any]]
) -> None:
    assert _http(f"{console_sidecar[1]}/api/about", ADMIN) == (200, {"text_search": True})  # the local embedder
    _, ready = open_sidecar
    url = f"http://{ready['console']}"
    secret = urllib.parse.parse_qs(urllib.parse.urlsplit(ready["console_url"]).query)["token"][0]
    assert _http(f"{url}/api/about", secret) == (200, {"text_search": False})
    status, refused = _http(f"{url}/api/search?q=anything&ns=default", secret)
    assert status == 409
    assert refused["code"] == "NO_EMBEDDER"
    assert "--embedder none" in refused["error"]
    assert "Life page" in refused["error"]


def test_bad_console_parameters_answer_400_with_a_message(console_sidecar: tuple[Sidecar, str, dict[str, Any]]) -> None:
    _, url, _ = console_sidecar
    cases = {
        "/api/search?q=x&k=abc": "k: 'abc'",
        "/api/search?q=x&k=0": "k: '0'",
        "/api/search?q=x&k=-3": "k: '-3'",
        "/api/search?q=x&k=%C2%B2": "k: '²'",
        "/api/search?q=x&k=99999999999": "k: '99999999999'",
        "/api/search?q=x&kind=BOGUS": "kind: 'BOGUS' is not a memory kind; one of FACT, ",
        "/api/search?q=x&mode=sideways": "mode: 'sideways'",
        "/api/life?id=-5": "id: '-5' is not a memory id",
        "/api/life?id=abc": "id: 'abc' is not a memory id",
        "/api/live?kind=BOGUS": "kind: 'BOGUS' is not a memory kind",
        "/api/live?type=BOGUS": "type: 'BOGUS' is not a change event type",
        "/api/live?after=soon": "after: 'soon'",
    }
    for path, message in cases.items():
        # Before issue 41: 500 with "ValueError: ..." for k and kind, and no answer at all from /api/live.
        status, body = _http(f"{url}{path}", ADMIN)
        assert (status, body["code"]) == (400, "Bad Request"), (path, body)
        assert body["error"].startswith(message), (path, body)
        assert "Error" not in body["error"], (path, body)
    # Kinds by their short name, as typed, work as the page's full names do.
    status, found = _http(f"{url}/api/search?q=Ana&kind=preference&k=5", ADMIN)
    assert status == 200, found
    assert {m["memory"]["kind"] for m in found["memories"]} == {"MEMORY_KIND_PREFERENCE"}
    connection = http.client.HTTPConnection(url.removeprefix("http://"), timeout=30)
    connection.request(
        "POST",
        "/api/review/decide",
        body=b"{}",
        headers={"Content-Type": "application/json", "Content-Length": "lots", "Authorization": f"Bearer {ADMIN}"},
    )
    response = connection.getresponse()
    assert response.status == 400
    assert "Content-Length" in json.loads(response.read())["error"]
    connection.close()


def test_memevo_console_makes_its_own_token_for_a_sidecar_without_tokens(
    open_sidecar: tuple[Sidecar, dict[str, Any]],
) -> None:
    process, _ = open_sidecar
    ready = Path(tempfile.mkdtemp(prefix="console-cli-", dir=RUN_ROOT)) / "ready.json"
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "memevo.sidecar.cli",
            "console",
            "--connect",
            process.tcp_target,
            "--listen",
            "127.0.0.1:0",
            "--ready-file",
            str(ready),
        ],
        env={k: v for k, v in os.environ.items() if k != "MEMEVO_TOKEN"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(ready.exists, "the console's ready file", timeout_s=60)
        written = json.loads(ready.read_text())
        assert ready.stat().st_mode & 0o777 == 0o600
        url = f"http://{written['console']}"
        secret = urllib.parse.parse_qs(urllib.parse.urlsplit(written["console_url"]).query)["token"][0]
        assert _http(f"{url}/api/overview")[0] == 401
        assert _http(f"{url}/api/overview", secret)[0] == 200
        assert _http(f"{url}/api/about", secret) == (200, {"text_search": False})
    finally:
        child.terminate()
        output, _ = child.communicate(timeout=30)
    assert f"on {written['console_url']}" in output


def test_the_printed_url_opens_the_console_in_a_browser(
    open_sidecar: tuple[Sidecar, dict[str, Any]], browser: Any
) -> None:
    """The cookie the printed URL leaves works for the pages' own calls, the live stream too; search says why not."""
    from selenium.webdriver.common.by import By

    process, ready = open_sidecar
    url = f"http://{ready['console']}"
    driver = browser
    driver.delete_all_cookies()
    driver.get(f"{url}/")
    refused = _wait_css(driver, "#main .error")[0]
    assert "open the URL it printed" in refused.text
    driver.get_log("browser")  # the 401 above is logged as an error; what follows must not be

    driver.get(ready["console_url"])
    assert "token=" not in driver.current_url
    assert "no entities yet" in _wait_css(driver, "#entities-status")[0].text  # the first page: what is believed
    driver.get(f"{url}/overview")
    assert int(_wait_css(driver, "#total-count")[0].text) == 1
    assert not driver.execute_script("return document.cookie")  # HttpOnly: no script on the page can read it
    driver.get(f"{url}/search?q=anything")
    notice = _wait_css(driver, "[data-no-embedder]")[0]
    assert "--embedder none" in notice.text
    assert not driver.find_element(By.CSS_SELECTOR, "#search-form button[type=submit]").is_enabled()
    driver.get(f"{url}/live")
    _wait_css(driver, "#live-list tr")
    written = (
        stub(process.unix_target)
        .Remember(
            memory_service_pb2.RememberRequest(
                memory=memory_pb2.MemoryInput(content="Seen live.", vector=pack(unit(np.ones(8))))
            )
        )
        .result.memory.id
    )
    _wait_css(driver, f"#live-list a[data-memory='{written}']")
    driver.get(f"{url}/overview")
    _wait_css(driver, "#total-count")
    _no_console_errors(driver, "the console of a sidecar without tokens")
