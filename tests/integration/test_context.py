"""BuildContext and ranked recall over gRPC: hints, budgets, as_of and history, lexical matches, outcomes."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Sidecar, start_sidecar
from google.protobuf.timestamp_pb2 import Timestamp
from helpers import pack, stub

from memevo.sidecar.retrieval.tokens import estimate_tokens
from memevo.v1 import memory_pb2, memory_service_pb2

pytestmark = pytest.mark.integration

FACT = memory_pb2.MEMORY_KIND_FACT
PREFERENCE = memory_pb2.MEMORY_KIND_PREFERENCE
STRATEGY = memory_pb2.MEMORY_KIND_STRATEGY
EPISODE = memory_pb2.MEMORY_KIND_EPISODE


@pytest.fixture(scope="module")
def sidecar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path_factory.mktemp("context"), "--sweep-interval-s", "0")
    yield process
    process.stop()


def around(seed: int, noise: float = 0.05) -> bytes:
    """A vector near the seed's direction (seeds pick topics)."""
    rng = np.random.default_rng(seed)
    base = np.random.default_rng(1000 + seed // 10).normal(size=8)
    return pack(base + rng.normal(scale=noise, size=8))


def remember(service: Any, namespace: str, text: str, vector: bytes, **fields: Any) -> memory_pb2.Memory:
    memory = memory_pb2.MemoryInput(content=text, vector=vector, namespace=namespace, **fields)
    return service.Remember(memory_service_pb2.RememberRequest(memory=memory)).result.memory


def context(service: Any, namespace: str, vector: bytes, **fields: Any) -> memory_service_pb2.BuildContextResponse:
    request = memory_service_pb2.BuildContextRequest(
        query_vector=vector, filter=memory_service_pb2.RecallFilter(namespace=namespace), **fields
    )
    return service.BuildContext(request)


def hints_by_content(response: memory_service_pb2.BuildContextResponse) -> dict[str, str]:
    return {item.memory.content: item.hint for item in response.items}


def test_current_and_superseded_hints_in_both_languages(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    ns = "ctx-hints"
    old = remember(
        service,
        ns,
        "Bob prefers tea",
        around(10),
        entity="user:bob",
        kind=PREFERENCE,
        fact=memory_pb2.Fact(attribute="drink", value="tea"),
        valid_from=Timestamp(seconds=1_000),
    )
    new = remember(
        service,
        ns,
        "Bob prefers coffee",
        around(11),
        entity="user:bob",
        kind=PREFERENCE,
        fact=memory_pb2.Fact(attribute="drink", value="coffee"),
        valid_from=Timestamp(seconds=2_000),
    )
    current = context(service, ns, around(10))
    assert hints_by_content(current) == {"Bob prefers coffee": "current"}
    assert "Bob prefers tea" not in current.text
    history = context(service, ns, around(10), mode=memory_service_pb2.RECALL_MODE_HISTORY)
    hints = hints_by_content(history)
    assert hints["Bob prefers tea"] == (
        f"historical reference — the situation may have changed; superseded by memory {new.id}"
    )
    chinese = context(service, ns, around(10), mode=memory_service_pb2.RECALL_MODE_HISTORY, language="zh")
    assert hints_by_content(chinese)["Bob prefers tea"] == f"历史参考——情况可能已经变化；已被记忆 {new.id} 取代"
    assert chinese.text.startswith("相关记忆:")
    assert "## 事实" in chinese.text
    as_of = context(service, ns, around(10), as_of=Timestamp(seconds=1_500))
    assert hints_by_content(as_of) == {"Bob prefers tea": "valid at the requested time, replaced since"}
    assert old.id in [item.memory.id for item in as_of.items]


def test_groups_and_strategy_counter_example_and_framework_hints(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    ns = "ctx-groups"
    remember(service, ns, "The API gateway runs on port 8443", around(20), kind=FACT)
    older = remember(
        service, ns, "Deploy by copying files with rsync", around(21), kind=STRATEGY, task_signature="deploy"
    )
    newer = remember(
        service, ns, "Deploy with the container pipeline", around(22), kind=STRATEGY, task_signature="deploy"
    )
    remember(service, ns, "Last Tuesday's deploy broke the gateway", around(23), kind=EPISODE)
    for _ in range(8):
        for memory_id, outcome in (
            (older.id, memory_service_pb2.OUTCOME_FAILURE),
            (newer.id, memory_service_pb2.OUTCOME_SUCCESS),
        ):
            service.ReportOutcome(memory_service_pb2.ReportOutcomeRequest(outcome=outcome, used_memory_ids=[memory_id]))
    response = context(service, ns, around(20, noise=1.0))
    groups = [item.group for item in response.items]
    assert groups == sorted(groups, key=["facts", "strategies", "patterns", "episodes"].index)
    assert {"facts", "strategies", "episodes"} <= set(groups)
    hints = hints_by_content(response)
    assert hints["Deploy by copying files with rsync"] == (
        f"historical reference / counter-example (strategy {newer.id} did better)"
    )
    assert hints["Deploy with the container pipeline"] == "current"
    assert response.text.index("## Facts") < response.text.index("## Strategies") < response.text.index("## Episodes")
    service.DeclareFramework(memory_service_pb2.DeclareFrameworkRequest(version="planner-v2"))
    later = remember(service, ns, "The gateway moved to port 9443", around(24), kind=FACT)
    flagged = hints_by_content(context(service, ns, around(20, noise=1.0)))
    assert flagged["The API gateway runs on port 8443"] == "current; formed under an older framework (unversioned)"
    assert flagged[later.content] == "current"


@pytest.mark.parametrize("budget", [1, 8, 25, 60, 200, 5_000])
def test_the_budget_is_never_exceeded(sidecar: Sidecar, budget: int) -> None:
    service = stub(sidecar.unix_target)
    ns = f"ctx-budget-{budget}"
    rng = np.random.default_rng(budget)
    words = ["alpha", "gateway", "deploy", "東京", "port", "8443", "retry", "timeout", "Zürich", "build"]
    for i in range(40):
        text = " ".join(rng.choice(words, size=int(rng.integers(3, 30))))
        remember(service, ns, f"{i}: {text}", around(30 + i % 3, noise=0.3), kind=[FACT, STRATEGY, EPISODE][i % 3])
    response = context(service, ns, around(30), token_budget=budget)
    assert response.tokens_used <= budget
    assert estimate_tokens(response.text) == response.tokens_used
    assert sum(item.tokens for item in response.items) <= budget
    if budget >= 200:
        assert len(response.items) >= 3
    if budget == 1:
        assert response.text == ""
        assert not response.items


def test_the_retrieval_id_of_a_context_takes_outcome_feedback(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    ns = "ctx-outcome"
    placed = remember(service, ns, "Use the staging database for migrations", around(40), kind=STRATEGY)
    response = context(service, ns, around(40))
    assert [item.memory.id for item in response.items] == [placed.id]
    updated = service.ReportOutcome(
        memory_service_pb2.ReportOutcomeRequest(
            retrieval_id=response.retrieval_id, outcome=memory_service_pb2.OUTCOME_SUCCESS
        )
    )
    assert updated.updated_count == 1
    after = service.Get(memory_service_pb2.GetRequest(ids=[placed.id])).memories[0]
    assert after.successes == 1.0
    assert after.confidence > placed.confidence


def test_only_what_the_context_holds_counts_as_an_access(sidecar: Sidecar) -> None:
    service = stub(sidecar.unix_target)
    ns = "ctx-access"
    written = [remember(service, ns, f"Deploy note {i}: " + "details " * 20, around(50 + i % 2)) for i in range(6)]
    response = context(service, ns, around(50), token_budget=60)
    placed = {item.memory.id for item in response.items}
    assert placed, "the budget holds at least one memory"
    assert len(placed) < len(written), "the budget leaves candidates out"
    found = service.Get(memory_service_pb2.GetRequest(ids=[m.id for m in written])).memories
    counts = {m.id: m.access_count for m in found}
    assert {i for i, count in counts.items() if count} == placed
    assert all(counts[i] == 1 for i in placed)


def test_bad_context_requests_are_refused(sidecar: Sidecar) -> None:
    import grpc
    from helpers import bad_fields

    service = stub(sidecar.unix_target)
    for fields, name in (
        ({"language": "fr"}, "language"),
        ({"token_budget": 10_000_000}, "token_budget"),
    ):
        with pytest.raises(grpc.RpcError) as caught:
            context(service, "ctx-bad", around(1), **fields)
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert bad_fields(caught.value) == [name]


@pytest.fixture
def text_sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    process = start_sidecar(tmp_path / "data", "--sweep-interval-s", "0", embedder="local")
    yield process
    process.stop()


def test_names_and_numbers_are_found_by_words(text_sidecar: Sidecar) -> None:
    """The lexical signal: an exact identifier wins over texts that are merely about the same topic."""
    service = stub(text_sidecar.unix_target)
    texts = [
        "The invoice service listens on port 8080 in staging.",
        "The invoice service listens on port 9090 in production.",
        "Invoices are generated nightly by the billing service.",
        "The billing team owns invoice templates.",
        "Port numbers for services are documented in the wiki.",
    ]
    ids = [
        service.Remember(
            memory_service_pb2.RememberRequest(memory=memory_pb2.MemoryInput(content=t, kind=FACT))
        ).result.memory.id
        for t in texts
    ]
    found = service.Recall(memory_service_pb2.RecallRequest(query="which service uses port 9090?", k=3)).memories
    assert found[0].memory.id == ids[1]
    diverse = service.Recall(
        memory_service_pb2.RecallRequest(query="invoice service port", k=2, diversity=0.7)
    ).memories
    assert len({m.memory.id for m in diverse}) == 2


def _tilted(axis: int, amount: float) -> bytes:
    """Axis 0 (the query's direction) tilted towards ``axis``: cosine 1 / sqrt(1 + amount**2) to the query."""
    vector = np.zeros(8)
    vector[0], vector[axis] = 1.0, amount
    return pack(vector)


def test_structured_evidence_ranks_the_answer_over_closer_remarks_and_log_lines(sidecar: Sidecar) -> None:
    """Over the wire: the fact whose attribute the question names and the lesson for the task come first."""
    service = stub(sidecar.unix_target)
    ns = "ctx-structured"
    remark = remember(service, ns, "Bianca was out sick today.", _tilted(1, 0.2), entity="user:bianca")
    hours = remember(
        service,
        ns,
        "Don't ping Bianca outside 9:00-17:00.",
        _tilted(2, 0.75),
        kind=FACT,
        entity="user:bianca",
        fact=memory_pb2.Fact(attribute="working_hours", value="9:00-17:00"),
    )
    log = remember(
        service,
        ns,
        "Started getting a code review from Bianca; notes are in BIA-8271.",
        _tilted(3, 0.2),
        entity="user:bianca",
    )
    lesson = remember(
        service,
        ns,
        "Playbook: book a 20-minute walkthrough before the pull request.",
        _tilted(4, 0.75),
        kind=STRATEGY,
        entity="user:bianca",
        task_signature="code_review:bianca",
    )

    def first(question: str) -> int:
        request = memory_service_pb2.RecallRequest(
            query=question,
            query_vector=_tilted(1, 0.0),
            k=4,
            filter=memory_service_pb2.RecallFilter(namespace=ns),
        )
        return int(service.Recall(request).memories[0].memory.id)

    assert first("What are Bianca's working hours?") == hours.id
    assert first("How should I ask Bianca for a code review?") == lesson.id
    # The remark and the log line are the closer ones by cosine: the structured evidence decided.
    recalled = service.Recall(
        memory_service_pb2.RecallRequest(
            query="What are Bianca's working hours?",
            query_vector=_tilted(1, 0.0),
            k=4,
            filter=memory_service_pb2.RecallFilter(namespace=ns),
        )
    ).memories
    similarity = {int(m.memory.id): m.similarity for m in recalled}
    assert min(similarity[remark.id], similarity[log.id]) > max(similarity[hours.id], similarity[lesson.id])


def _ranked(service: Any, namespace: str, question: str, vector: bytes | None = None) -> list[int]:
    """Ids recalled for ``question`` in ``namespace``, best first (query vector: the axis _tilted tilts from)."""
    request = memory_service_pb2.RecallRequest(
        query=question,
        query_vector=_tilted(1, 0.0) if vector is None else vector,
        k=2,
        filter=memory_service_pb2.RecallFilter(namespace=namespace),
    )
    return [int(m.memory.id) for m in service.Recall(request).memories]


def test_a_how_to_question_gets_the_lesson_before_a_closer_fact(sidecar: Sidecar) -> None:
    """Over the wire: the same memories answer "how do I …" with the strategy and "which …" with the fact."""
    service = stub(sidecar.unix_target)
    ns = "ctx-how-to"
    fact = remember(service, ns, "Runs v2.3 in eu-west-1.", _tilted(1, 0.2), kind=FACT)
    lesson = remember(service, ns, "Canary at 5 %, then promote.", _tilted(2, 0.45), kind=STRATEGY)

    assert _ranked(service, ns, "Should I ship the new build?") == [fact.id, lesson.id]
    assert _ranked(service, ns, "How should I ship the new build?") == [lesson.id, fact.id]
    assert _ranked(service, ns, "新版本应该如何发布？") == [lesson.id, fact.id]


def test_a_new_lesson_for_a_task_leads_until_its_outcomes_show_the_older_one_is_better(sidecar: Sidecar) -> None:
    """Over the wire: one unlucky failure does not bury a new strategy under the old one; five do."""
    service = stub(sidecar.unix_target)
    ns = "ctx-new-lesson"
    signature = "incident:export-service"
    older = remember(
        service,
        ns,
        "Restart every pod at once.",
        _tilted(2, 0.1),
        kind=STRATEGY,
        task_signature=signature,
        importance=8,
    )

    def report(memory_id: int, outcome: memory_service_pb2.Outcome.ValueType, times: int) -> None:
        for _ in range(times):
            request = memory_service_pb2.ReportOutcomeRequest(outcome=outcome, used_memory_ids=[memory_id])
            service.ReportOutcome(request)

    report(older.id, memory_service_pb2.OUTCOME_SUCCESS, 6)
    report(older.id, memory_service_pb2.OUTCOME_FAILURE, 5)
    newer = remember(
        service,
        ns,
        "Turn off the newest feature flags one by one.",
        _tilted(3, 0.6),
        kind=STRATEGY,
        task_signature=signature,
        importance=7,
    )
    question = "How do I handle an outage of the export service?"
    report(newer.id, memory_service_pb2.OUTCOME_FAILURE, 1)
    assert _ranked(service, ns, question) == [newer.id, older.id]
    report(newer.id, memory_service_pb2.OUTCOME_FAILURE, 4)  # 0 of 5 against 6 of 11: reliably worse
    assert _ranked(service, ns, question) == [older.id, newer.id]


def test_the_person_a_question_names_wins_over_a_namesake_worded_like_the_question(sidecar: Sidecar) -> None:
    """Over the wire: the namesake's memory is closer by cosine and by words; the named entity decides."""
    service = stub(sidecar.unix_target)
    ns = "ctx-entities"
    namesake = remember(
        service,
        ns,
        "The best way to reach Nadia Dubois is a Loom video.",
        _tilted(1, 0.1),
        kind=FACT,
        entity="user:nadia-dubois",
        fact=memory_pb2.Fact(attribute="contact", value="Loom video"),
    )
    named = remember(
        service,
        ns,
        "Nadia Yilmaz prefers a phone call.",
        _tilted(2, 0.3),
        kind=FACT,
        entity="user:nadia-yilmaz",
        fact=memory_pb2.Fact(attribute="contact", value="phone call"),
    )

    assert _ranked(service, ns, "What's the best way to reach Nadia?") == [namesake.id, named.id]
    assert _ranked(service, ns, "What's the best way to reach Nadia Yilmaz?") == [named.id, namesake.id]


def test_a_question_gets_a_fact_whose_value_has_the_shape_it_asks_for(sidecar: Sidecar) -> None:
    """Over the wire: "who" is not answered by a URL, "when" not by an amount, "which URL" not by a region."""
    service = stub(sidecar.unix_target)
    ns = "ctx-answer-types"
    entity = "service:audit-scheduler"

    def fact(text: str, attribute: str, value: str, axis: int, tilt: float) -> int:
        fact = memory_pb2.Fact(attribute=attribute, value=value)
        return int(remember(service, ns, text, _tilted(axis, tilt), kind=FACT, entity=entity, fact=fact).id)

    region = fact("Deployed in eu-west-1 now.", "region", "eu-west-1", 1, 0.0)
    url = fact("Endpoint: https://audit.example.dev/v3.", "base_url", "https://audit.example.dev/v3", 2, 0.2)
    oncall = fact("Ivan Rossi carries the pager this week.", "oncall", "Ivan Rossi", 3, 0.35)
    due = fact("Decommission due 2027-03-01.", "decommission_date", "2027-03-01", 4, 0.45)
    fact("Budget approved: $40,000.", "budget", "$40,000", 5, 0.2)

    def ranked(question: str) -> list[int]:
        request = memory_service_pb2.RecallRequest(
            query=question, query_vector=_tilted(1, 0.0), k=5, filter=memory_service_pb2.RecallFilter(namespace=ns)
        )
        return [int(m.memory.id) for m in service.Recall(request).memories]

    plain = ranked("Audit scheduler down, what now?")  # no shape asked: the closest first
    assert plain.index(region) < plain.index(url) < plain.index(oncall) < plain.index(due)
    who = ranked("Who should I page, audit scheduler down?")  # a region may name someone; a URL may not
    assert who.index(oncall) < who.index(url)
    assert ranked("When is the audit scheduler going away?")[0] == due
    assert ranked("审计调度器什么时候下线？")[0] == due
    assert ranked("Which address does the audit scheduler use? I need the URL.")[0] == url


def test_what_other_peoples_facts_of_an_attribute_say_picks_between_one_persons_facts(sidecar: Sidecar) -> None:
    """Over the wire, no embedder: "based" means location because other people's location facts lie that way.

    Olga's editor fact is closer to the query and names her in full; her location fact is what is asked.
    """
    service = stub(sidecar.unix_target)
    ns = "ctx-attribute-examples"

    def fact(person: str, attribute: str, text: str, vector: bytes) -> int:
        fact = memory_pb2.Fact(attribute=attribute, value=text.split()[-1])
        return int(remember(service, ns, text, vector, kind=FACT, entity=f"user:{person}", fact=fact).id)

    location = fact("olga-lopez", "location", "Olga works from Athens", _tilted(2, 0.8))
    editor = fact("olga-lopez", "editor", "Olga Lopez moved to Kate", _tilted(3, 0.6))

    def ranked() -> list[int]:
        request = memory_service_pb2.RecallRequest(
            query="Where is Olga Lopez based?",
            query_vector=_tilted(1, 0.0),
            k=20,
            filter=memory_service_pb2.RecallFilter(namespace=ns),
        )
        return [int(m.memory.id) for m in service.Recall(request).memories]

    assert ranked() == [editor, location]  # her two facts alone: nothing says what "based" means
    for person in ("ana", "ben", "caro"):
        fact(person, "location", f"{person} works from Oslo", _tilted(1, 0.3))
        fact(person, "editor", f"{person} uses Vim", _tilted(5, 1.5))
    recalled = ranked()
    assert recalled.index(location) < recalled.index(editor)


def _facts_alike(service: Any, ns: str, entity: str, text: str, values: dict[str, str]) -> dict[str, int]:
    """One fact per attribute -> value, all with the same vector and the same words but the value; ids by attribute."""
    vector = np.zeros(384)
    vector[0] = 1.0
    return {
        attribute: remember(
            service,
            ns,
            text.format(value=value),
            pack(vector),
            kind=FACT,
            entity=entity,
            fact=memory_pb2.Fact(attribute=attribute, value=value),
        ).id
        for attribute, value in values.items()
    }


def test_a_question_that_paraphrases_an_attribute_finds_that_fact(text_sidecar: Sidecar) -> None:
    """Over the wire, with the sidecar's embedder: "order for the team lunch" asks for ``diet``, not ``location``.

    The two facts share their vector and every word but the value; the query is embedded by the sidecar.
    """
    service = stub(text_sidecar.unix_target)
    ns = "ctx-attributes"
    zane = _facts_alike(
        service, ns, "user:zane-cohen", "Zane Cohen said: {value}.", {"location": "Lisbon", "diet": "halal"}
    )
    lunch = "What should I order for Zane at the team lunch?"
    assert _ranked(service, ns, lunch, vector=b"") == [zane["diet"], zane["location"]]
    assert _ranked(service, ns, "Where is Zane based these days?", vector=b"") == [zane["location"], zane["diet"]]
    # Bare, "stakeholder" is nearer this question than "status"; said of a project ("the project's status"), it is not.
    orca = _facts_alike(
        service, ns, "project:orca", "Orca update: {value}.", {"status": "blocked", "stakeholder": "Initech"}
    )
    assert _ranked(service, ns, "How is Project Orca going?", vector=b"") == [orca["status"], orca["stakeholder"]]
