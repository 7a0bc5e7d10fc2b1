"""Corrections from the memory console (issue 42, item 2): forget, restore, accept or reject a doubt, correct a value.

Each is one sidecar call made with the browser's token, asked for in the page first; the change log records it with
the console as its actor, and the page shows the new state. In a real headless Chromium at 1440 and 390 px (set
MEMEVO_CONSOLE_SCREENSHOTS=docs/console to refresh the README's screenshots), and over plain HTTP for the endpoints'
rules: a bad parameter is a 400 naming it, a GET or another origin's POST is refused, so is a token of other
namespaces.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
import zlib
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar
from helpers import pack, stub, unit, wait_until, watch_events
from test_console import (
    ADMIN,
    DIM,
    PAGE_WAIT_S,
    TEAM,
    _fits,
    _http,
    _no_console_errors,
    _shot_at,
    _stamp,
    _wait_css,
    browser,  # noqa: F401 (a fixture: pytest finds it by name in this module)
    form_post,
    start_console_sidecar,
)

from memevo.v1 import memory_pb2, memory_service_pb2, review_pb2

pytestmark = pytest.mark.integration

ACTIVE = memory_pb2.MEMORY_STATE_ACTIVE
OBSOLETE = memory_pb2.MEMORY_STATE_OBSOLETE
FACT = memory_pb2.MEMORY_KIND_FACT
WIDTHS = ((1440, ""), (390, "-390"))


def _remember(service: Any, ns: str, content: str, entity: str, **fields: Any) -> Any:
    item = memory_pb2.MemoryInput(content=content, namespace=ns, kind=FACT, entity=entity, **fields)
    return service.Remember(memory_service_pb2.RememberRequest(memory=item)).result


def _keyed(service: Any, ns: str, content: str, entity: str, attribute: str, value: str, **fields: Any) -> int:
    fact = memory_pb2.Fact(attribute=attribute, value=value)
    return int(_remember(service, ns, content, entity, fact=fact, **fields).memory.id)


def _doubt(service: Any, ns: str, name: str, seed: int) -> tuple[int, int]:
    """A keyed note and a later statement close to it (cosine 0.8) in other words: a soft conflict, an open doubt."""
    rng = np.random.default_rng(seed)
    base = unit(rng.standard_normal(DIM))
    raw = rng.standard_normal(DIM)
    other = unit(raw - raw.dot(base) * base)
    entity = f"user:{name.lower()}"
    older = _keyed(
        service,
        ns,
        f"{name} keeps her notes in a paper notebook",
        entity,
        "note_tool",
        "a paper notebook",
        vector=pack(base),
    )
    newer = _remember(
        service,
        ns,
        f"these days {name} writes everything down in Obsidian",
        entity,
        vector=pack(0.8 * base + 0.6 * other),
    ).memory.id
    held = service.Get(memory_service_pb2.GetRequest(ids=[older])).memories[0]
    assert held.possibly_outdated_by == newer, "no longer a soft conflict: pick another pair"
    return older, int(newer)


def write_world(service: Any, tag: str) -> dict[str, Any]:
    """One entity a correction, in a namespace of its own named after ``tag``: each window width corrects its own,
    and what perception learns from one namespace's keyed facts cannot turn the next one's doubts into changes."""
    ns = f"w{tag}"
    start = datetime.now(timezone.utc) - timedelta(days=30)
    user = memory_pb2.MEMORY_SOURCE_USER_STATEMENT
    world: dict[str, Any] = {}
    ana = f"user:ana{tag}"
    world["lisbon"] = _keyed(
        service, ns, "Ana lives in Lisbon.", ana, "city", "Lisbon", source=user, valid_from=_stamp(start)
    )
    world["porto"] = _keyed(
        service,
        ns,
        "Ana moved to Porto.",
        ana,
        "city",
        "Porto",
        source=user,
        valid_from=_stamp(start + timedelta(days=20)),
    )
    bo = f"user:bo{tag}"
    world["shopify"] = _keyed(service, ns, "Bo works at Shopify.", bo, "employer", "Shopify")
    prose = _remember(service, ns, "Bo's employer is Canva now.", bo)
    assert list(prose.affected_ids) == [world["shopify"]], "perception no longer reads this change"
    world["canva"] = int(prose.memory.id)
    world["fay"] = _keyed(service, ns, "Fay drinks coffee every morning.", f"user:fay{tag}", "drink", "coffee")
    seed = zlib.crc32(tag.encode())
    world["dee"] = _doubt(service, ns, f"Dee{tag.replace('-', '')}", seed)
    # A namespace of its own: beside Dee's pair, perception reads Eve's alike pair as the same change, and retires.
    world["eve"] = _doubt(service, f"{ns}-b", f"Eve{tag.replace('-', '')}", seed + 1)
    world.update(ns=ns, ana=ana, bo=bo, fay_entity=f"user:fay{tag}", dee_entity=f"user:dee{tag.replace('-', '')}")
    world["eve_entity"] = f"user:eve{tag.replace('-', '')}"
    return world


@pytest.fixture(scope="module")
def console_sidecar() -> Iterator[tuple[Sidecar, str]]:
    process, url = start_console_sidecar("console-corrections-")
    yield process, url
    process.stop()


def _events(service: Any, memory_id: int) -> list[Any]:
    return list(service.History(memory_service_pb2.HistoryRequest(memory_id=memory_id)).events)


def _by_console(service: Any, memory_id: int, verb: str) -> list[Any]:
    """The change-log events of a memory that the console wrote, ``verb`` being the engine's (forget, ...)."""
    return [
        e for e in _events(service, memory_id) if e.memory_id == memory_id and e.reason.startswith(f"{verb}: console")
    ]


# ---- in a real browser ----------------------------------------------------------------------------


def _ask_and_confirm(driver: Any, row: Any, act: str, *, value: str = "", note: str = "") -> None:
    """Click a row's action, check that nothing changed before the page's confirmation, then confirm."""
    from selenium.webdriver.common.by import By

    row.find_element(By.CSS_SELECTOR, f"button[data-act='{act}']").click()
    form = _wait_css(driver, f"form.confirm[data-asking='{act}']")[0]
    if value:
        form.find_element(By.CSS_SELECTOR, "input[name='value']").send_keys(value)
    if note:
        form.find_element(By.CSS_SELECTOR, "input[name='note']").send_keys(note)
    form.find_element(By.CSS_SELECTOR, "button[data-confirm]").click()


def _done(driver: Any, action: str) -> str:
    box = _wait_css(driver, f"#correction-done[data-done='{action}']")[0]
    text = str(box.text)
    assert "change log #" in text, text
    return text


def test_each_correction_in_a_browser(console_sidecar: tuple[Sidecar, str], browser: Any) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By

    process, url = console_sidecar
    service = stub(process.unix_target, ADMIN)
    driver = browser
    for width, suffix in WIDTHS:
        w = write_world(service, suffix or "-1440")
        driver.set_window_size(width, 1000)
        driver.get(f"{url}/#token={ADMIN}")
        _wait_css(driver, "#entities-status")  # the token is kept for the pages that follow

        # Correct: the person types the right value; a keyed statement supersedes the current one.
        driver.get(f"{url}/beliefs?ns={w['ns']}&entity={w['ana']}")
        city = _wait_css(driver, "#beliefs tr[data-belief='city']")[0]
        assert city.get_attribute("data-memory-id") == str(w["porto"])
        city.find_element(By.CSS_SELECTOR, "button[data-act='correct']").click()
        form = _wait_css(driver, "form.confirm[data-asking='correct']")[0]
        assert "city = Porto" in form.text
        form.find_element(By.CSS_SELECTOR, "input[name='value']").send_keys("Braga")
        form.find_element(By.CSS_SELECTOR, "input[name='note']").send_keys("she told me on the phone")
        _shot_at(driver, f"correct-ask{suffix}", width)
        assert service.Get(memory_service_pb2.GetRequest(ids=[w["porto"]])).memories[0].state == ACTIVE
        form.find_element(By.CSS_SELECTOR, "button[data-confirm]").click()
        text = _done(driver, "correct")
        assert "superseded: console: she told me on the phone" in text
        city = _wait_css(driver, "#beliefs tr[data-belief='city']")[0]
        for shown in ("Braga", "keyed", "user statement"):
            assert shown in city.text
        new_id = int(str(city.get_attribute("data-memory-id")))
        old, new = service.Get(memory_service_pb2.GetRequest(ids=[w["porto"], new_id])).memories
        assert (old.state, old.superseded_by, new.state, new.fact.value) == (OBSOLETE, new_id, ACTIVE, "Braga")
        assert new.metadata["written_by"] == "console"
        (logged,) = _by_console(service, w["porto"], "superseded")
        assert logged.reason == "superseded: console: she told me on the phone"
        assert logged.request_id.startswith("console-")
        _fits(driver, f"a correction at {width} px")
        _no_console_errors(driver, "correct")
        _shot_at(driver, f"correct{suffix}", width)
        # Its life lists the corrected value as current and the transition with its reason class.
        city.find_element(By.CSS_SELECTOR, "a[data-life]").click()
        current = _wait_css(driver, "#versions tr[data-current]")
        assert [c.get_attribute("data-version") for c in current] == [str(new_id)]
        assert "superseded: console: she told me on the phone" in driver.find_element(By.ID, "transitions").text

        # Forget, keeping history: the belief leaves the page, the memory stays OBSOLETE.
        driver.get(f"{url}/beliefs?ns={w['ns']}&entity={w['fay_entity']}")
        drink = _wait_css(driver, "#beliefs tr[data-belief='drink']")[0]
        _ask_and_confirm(driver, drink, "forget", note="she quit coffee")
        text = _done(driver, "forget")
        assert "OBSOLETE" in text
        assert "forget: console: she quit coffee" in text
        _wait_css(driver, "#beliefs-status")
        assert not driver.find_elements(By.CSS_SELECTOR, "#beliefs tr[data-belief='drink']")
        (record,) = service.Get(memory_service_pb2.GetRequest(ids=[w["fay"]])).memories
        assert record.state == OBSOLETE
        assert [e.to_state for e in _by_console(service, w["fay"], "forget")] == [OBSOLETE]
        _no_console_errors(driver, "forget")
        _shot_at(driver, f"forget{suffix}", width)

        # Accept a doubt: the newer statement supersedes the doubted value.
        older, newer = w["dee"]
        gone = f"#beliefs [data-memory-id='{older}']"
        driver.get(f"{url}/beliefs?ns={w['ns']}&entity={w['dee_entity']}")
        note = _wait_css(driver, "#beliefs tr[data-belief='note_tool']")[0]
        assert note.find_element(By.CSS_SELECTOR, f"[data-doubt='{newer}']")
        _ask_and_confirm(driver, note, "accept")
        text = _done(driver, "accept")
        assert "superseded: console" in text
        wait_until(
            lambda: not driver.find_elements(By.CSS_SELECTOR, gone),  # noqa: B023 (called before the loop goes on)
            "the doubted value gone from the beliefs",
            timeout_s=PAGE_WAIT_S,
        )
        (record,) = service.Get(memory_service_pb2.GetRequest(ids=[older])).memories
        assert (record.state, record.superseded_by) == (OBSOLETE, newer)
        assert _by_console(service, older, "superseded")
        _no_console_errors(driver, "accept a doubt")
        _shot_at(driver, f"accept{suffix}", width)

        # Reject a doubt, on the fact's life page: both hold, the doubt is cleared.
        older, newer = w["eve"]
        driver.get(f"{url}/life?ns={w['ns']}-b&entity={w['eve_entity']}&attribute=note_tool")
        row = _wait_css(driver, f"#versions tr[data-version='{older}']")[0]
        _ask_and_confirm(driver, row, "reject", note="she uses both")
        text = _done(driver, "reject")
        assert "restored: console: she uses both" in text
        row = _wait_css(driver, f"#versions tr[data-version='{older}']")[0]
        assert row.get_attribute("data-current") == "1"
        assert not row.find_elements(By.CSS_SELECTOR, "button[data-act='reject']")
        assert "restored: console: she uses both" in driver.find_element(By.ID, "transitions").text
        (record,) = service.Get(memory_service_pb2.GetRequest(ids=[older])).memories
        assert (record.state, record.possibly_outdated_by) == (ACTIVE, 0)
        _no_console_errors(driver, "reject a doubt")
        _shot_at(driver, f"reject{suffix}", width)

        # Restore a retired version: Bo's keyed employer, which a prose statement had retired.
        driver.get(f"{url}/life?ns={w['ns']}&entity={w['bo']}&attribute=employer")
        row = _wait_css(driver, f"#versions tr[data-version='{w['shopify']}']")[0]
        assert row.get_attribute("data-current") is None
        _ask_and_confirm(driver, row, "restore")
        text = _done(driver, "restore")
        assert "restored: console" in text
        row = _wait_css(driver, f"#versions tr[data-version='{w['shopify']}']")[0]
        assert row.get_attribute("data-current") == "1"
        (record,) = service.Get(memory_service_pb2.GetRequest(ids=[w["shopify"]])).memories
        assert (record.state, record.superseded_by) == (ACTIVE, 0)
        assert _by_console(service, w["shopify"], "restored")
        _fits(driver, f"the life page after a restore at {width} px")
        _no_console_errors(driver, "restore")
        _shot_at(driver, f"restore{suffix}", width)

        # A refused correction shows the sidecar's own message and changes nothing.
        driver.get(f"{url}/life?ns={w['ns']}&entity={w['ana']}&attribute=city")
        row = _wait_css(driver, f"#versions tr[data-version='{w['lisbon']}']")[0]
        _ask_and_confirm(driver, row, "restore")
        error = _wait_css(driver, "#correction-error .error")[0]
        assert error.text.startswith("409: ")
        assert f"is held by memory {new_id}" in error.text
        (record,) = service.Get(memory_service_pb2.GetRequest(ids=[w["lisbon"]])).memories
        assert record.state == OBSOLETE
        _shot_at(driver, f"refused{suffix}", width)
        driver.get_log("browser")  # drained: the browser logs the expected 409 as an error
    driver.set_window_size(1400, 1000)


# ---- the endpoints, over plain HTTP ------------------------------------------------------------------


def test_bad_correction_parameters_are_a_400_naming_them(console_sidecar: tuple[Sidecar, str]) -> None:
    process, url = console_sidecar
    service = stub(process.unix_target, ADMIN)
    w = write_world(service, "-api")
    cases: list[tuple[str, dict[str, Any], str]] = [
        ("/api/forget", {}, "id: "),
        ("/api/forget", {"id": "abc"}, "id: "),
        ("/api/forget", {"id": 0}, "id: "),
        ("/api/forget", {"id": True}, "id: "),
        ("/api/restore", {"id": w["shopify"], "note": "x" * 2000}, "note: "),
        ("/api/restore", {"id": w["shopify"], "note": 7}, "note: "),
        ("/api/doubt", {"id": w["dee"][0], "by": w["dee"][1], "verdict": "maybe"}, "verdict: "),
        ("/api/doubt", {"id": w["dee"][0], "verdict": "accept"}, "by: "),
        ("/api/correct", {"id": w["porto"]}, "value: "),
        ("/api/correct", {"id": w["porto"], "value": "  "}, "value: "),
        ("/api/correct", {"id": w["porto"], "value": "Porto"}, "value: "),
    ]
    for path, body, field in cases:
        status, answer = _http(f"{url}{path}", ADMIN, body=body)
        assert (status, answer["error"][: len(field)]) == (400, field), (path, body, answer)
    # A doubt that is not (or no longer) open: a conflict that says which doubt there is.
    status, answer = _http(f"{url}/api/doubt", ADMIN, body={"id": w["eve"][0], "by": w["dee"][1], "verdict": "reject"})
    assert (status, f"doubted by memory {w['eve'][1]}" in answer["error"]) == (409, True), answer
    # The sidecar's own refusal comes through with its message.
    status, answer = _http(f"{url}/api/restore", ADMIN, body={"id": w["porto"]})
    assert (status, answer["code"]) == (409, "FAILED_PRECONDITION"), answer
    assert "neither superseded nor possibly outdated" in answer["error"]
    ids = [w["porto"], w["shopify"], w["dee"][0], w["eve"][0]]
    records = service.Get(memory_service_pb2.GetRequest(ids=ids)).memories
    assert [r.state for r in records] == [ACTIVE, OBSOLETE, ACTIVE, ACTIVE]
    assert all(not _by_console(service, i, verb) for i in ids for verb in ("forget", "superseded", "restored"))


def test_corrections_need_a_post_from_the_console_with_a_permitted_token(
    console_sidecar: tuple[Sidecar, str],
) -> None:
    process, url = console_sidecar
    service = stub(process.unix_target, ADMIN)
    w = write_world(service, "-rules")
    forget = {"id": w["fay"]}
    for path in ("/api/forget", "/api/restore", "/api/doubt", "/api/correct"):
        status, answer = _http(f"{url}{path}?id={w['fay']}", ADMIN)  # a GET: a link or an image cannot change memory
        assert (status, "POST" in answer["error"]) == (405, True), (path, answer)
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(
            urllib.request.Request(f"{url}/api/correct", headers={"Authorization": f"Bearer {ADMIN}"})
        )
    assert refused.value.headers["Allow"] == "POST"
    assert _http(f"{url}/api/forget", body=forget)[0] == 401
    status, answer = _http(f"{url}/api/forget", TEAM, body=forget)  # a token of namespace team-b only
    assert (status, answer["code"]) == (403, "PERMISSION_DENIED"), answer
    assert "may not use (allowed: team-b)" in answer["error"]  # the sidecar's own words
    evil = {"Origin": "http://evil.example"}
    assert _http(f"{url}/api/forget", ADMIN, body=forget, headers=evil)[0] == 403
    correct = {"id": w["porto"], "value": "Faro"}
    assert _http(f"{url}/api/correct", ADMIN, body=correct, headers=evil)[0] == 403
    assert _http(f"{url}/api/forget", ADMIN, body=forget, headers={"Host": "evil.example"})[0] == 403
    assert form_post(f"{url}/api/forget", f"id={w['fay']}".encode()) == 415
    records = service.Get(memory_service_pb2.GetRequest(ids=[w["fay"], w["porto"]])).memories
    assert [r.state for r in records] == [ACTIVE, ACTIVE]

    # The console's own page may: the same origin, the namespace's token.
    status, done = _http(f"{url}/api/forget", ADMIN, body=forget, headers={"Origin": url})
    assert status == 200, done
    assert [(int(m["id"]), m["state"], m["current"]) for m in done["memories"]] == [
        (w["fay"], "MEMORY_STATE_OBSOLETE", False)
    ]
    assert [e["reason"] for e in done["events"]] == ["forget: console"]
    assert done["events"][0]["reason_class"] == "console"
    status, done = _http(f"{url}/api/correct", ADMIN, body=correct)
    assert status == 200, done
    old, new = done["memories"]
    assert (int(old["id"]), old["state"], new["fact"], new["current"]) == (
        w["porto"],
        "MEMORY_STATE_OBSOLETE",
        {"attribute": "city", "value": "Faro"},
        True,
    )
    assert {e["reason"] for e in done["events"]} == {"superseded: console: corrected to 'Faro'"}
    # Watch, the agent's own view of the change log, reads the console's events as they were answered.
    first = min(int(e["sequence"]) for e in done["events"])
    (watched,) = watch_events(service, 1, after_sequence=first - 1)
    assert watched.reason.startswith("superseded: console")
    assert watched.request_id == done["events"][0]["request_id"]


def test_a_doubt_the_agents_reviewer_was_asked_about_is_settled_through_the_queue(
    console_sidecar: tuple[Sidecar, str],
) -> None:
    """With a supersession proposal open, the console answers it (it leaves the queue, the reviewer is told)."""
    from memevo.client import MemoryClient

    process, url = console_sidecar
    service = stub(process.unix_target, ADMIN)
    w = write_world(service, "-queue")
    pairs = {"accept": w["dee"], "reject": w["eve"]}
    proposals: dict[int, review_pb2.Proposal] = {}
    with (
        MemoryClient(process.unix_target, token=ADMIN) as client,
        client.reviewer("agent-llm", kinds=[review_pb2.PROPOSAL_KIND_SUPERSEDE], timeout_s=60) as session,
    ):

        def listen() -> None:  # the agent's reviewer reads proposals and leaves them open
            for proposal in session.proposals():
                proposals[proposal.memories[0].id] = proposal

        threading.Thread(target=listen, daemon=True).start()
        wanted = {older for older, _ in pairs.values()}
        wait_until(lambda: client.govern() is not None and wanted <= set(proposals), "two proposals", timeout_s=30)
        for verdict, (older, newer) in pairs.items():
            body = {"id": older, "by": newer, "verdict": verdict, "note": f"a person said {verdict}"}
            status, done = _http(f"{url}/api/doubt", ADMIN, body=body)
            assert status == 200, done
            assert done["proposal_id"] == proposals[older].id
            reasons = [e["reason"] for e in done["events"] if int(e["memory_id"]) == older]
            assert reasons, done["events"]
            assert all(f"reviewer console: a person said {verdict}" in r for r in reasons), reasons
        answered = {proposals[older].id for older in wanted}
        wait_until(lambda: answered <= session.settled, "the reviewer told", timeout_s=30)
    (accepted, rejected) = service.Get(memory_service_pb2.GetRequest(ids=[w["dee"][0], w["eve"][0]])).memories
    assert (accepted.state, accepted.superseded_by) == (OBSOLETE, w["dee"][1])
    assert (rejected.state, rejected.possibly_outdated_by) == (ACTIVE, 0)
    still_open = {p["id"] for p in _http(f"{url}/api/review", ADMIN)[1]["proposals"]}
    assert not answered & still_open
