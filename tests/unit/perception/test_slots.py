"""Slot evidence of plain-text statements: entity names, keyed templates, one-span differences, directions."""

from __future__ import annotations

import numpy as np

from memevo.sidecar.perception.slots import (
    ENTITY_MARK,
    NAME_MARGIN,
    AttributeCentroids,
    AttributeNames,
    AttributeWords,
    EntityNames,
    Templates,
    Values,
    ValueShapes,
    attribute_words,
    clause_words,
    differing_spans,
    fits,
    last_clause_spans,
    masked,
    name_of,
    shapes_in,
    template_of,
    words,
)
from memevo.sidecar.retrieval.answer_type import ValueType


def names(*entities: str) -> EntityNames:
    found = EntityNames()
    for entity in entities:
        found.add(entity)
    return found


def test_entity_ids_name_their_entities() -> None:
    assert name_of("user:viktor-petrov") == ("viktor", "petrov")
    assert name_of("billing_api") == ("billing", "api")
    known = names("user:viktor-petrov", "user:viktor-lund", "service:billing-api", "project:vega")
    assert [m.entity for m in known.mentions("Viktor Petrov asked for French.")] == ["user:viktor-petrov"]
    # A first name two entities share names neither; a unique capitalised word names its owner.
    assert known.mentions("Viktor asked for French.") == []
    assert [m.entity for m in known.mentions("Petrov asked for French.")] == ["user:viktor-petrov"]
    assert [m.entity for m in known.mentions("Rolled billing-api forward.")] == ["service:billing-api"]
    # One word of a longer name must be a proper noun ("API" in capitals is not); a whole name matches as written.
    assert known.mentions("the API is slow; petrov") == []
    assert [m.entity for m in known.mentions("vega ships in May.")] == ["project:vega"]


def test_templates_of_keyed_facts_name_the_attribute_and_the_value() -> None:
    known = names("service:billing-api", "service:search-api")
    templates = Templates()
    for entity, text, value in (
        ("service:billing-api", "billing-api now listens on port 8080.", "8080"),
        ("service:search-api", "Heads-up: search-api now listens on port 9000.", "9000"),
    ):
        tokens = masked(words(text), known.mentions(text, only=entity), entity)
        templates.learn(tokens, words(value), "port")
    text = "search-api now listens on port 9443."
    tokens = masked(words(text), known.mentions(text, only="service:search-api"), "service:search-api")
    assert tokens[0] == ENTITY_MARK
    match = templates.match(tokens)
    assert match is not None
    assert (match.attribute, match.value) == ("port", ("9443",))
    assert templates.match(words("the weather is nice on port day")) is None
    head_tail = template_of(tokens, ("9443",))
    assert head_tail is not None
    assert fits(head_tail, tokens)
    assert not fits(head_tail, tokens[:-1])
    assert template_of(["<e>", "x"], ("x",)) is None, "a template must fix at least two words"


def test_templates_two_attributes_share_name_neither() -> None:
    templates = Templates()
    for attribute in ("editor", "language", "editor"):
        templates.learn([ENTITY_MARK, "switched", "to", "x"], ["x"], attribute)
    assert templates.match([ENTITY_MARK, "switched", "to", "vim"]) is None


def test_differing_spans_finds_one_short_difference() -> None:
    first = words("Escalations about billing go to Ana.")
    second = words("Escalations about billing go to Bo Kim.")
    assert differing_spans(first, second) == (("ana",), ("bo", "kim"))
    assert differing_spans(first, first) is None
    assert differing_spans(words("Ana likes jazz"), words("Ana likes rock music a lot more than anything")) is None
    assert differing_spans(words("Alice s editor is vim"), words("Alice s language is go")) is None


def test_differing_spans_takes_a_value_as_long_as_its_frame() -> None:
    first = [*words("The best way to reach"), ENTITY_MARK, *words("is a calendar invite with context")]
    second = [*words("The best way to reach"), ENTITY_MARK, *words("is a Slack DM")]
    assert differing_spans(first, second) == (("calendar", "invite", "with", "context"), ("slack", "dm"))


def test_differing_spans_refuses_everything_said_after_the_entity() -> None:
    preamble = words("Double-checked today and it still holds:")
    first = [*preamble, ENTITY_MARK, *words("relocated to Warsaw (CET)")]
    second = [*preamble, ENTITY_MARK, *words("uses GoLand as their editor now")]
    assert differing_spans(first, second) is None
    # The same preamble around one value is still one template.
    third = [*preamble, ENTITY_MARK, *words("relocated to Lisbon (WET)")]
    assert differing_spans(first, third) == (("warsaw", "cet"), ("lisbon", "wet"))


def test_centroids_say_which_attribute_a_vector_is_nearer() -> None:
    rng = np.random.default_rng(0)
    port, owner, region = rng.standard_normal(16), rng.standard_normal(16), rng.standard_normal(16)
    centroids = AttributeCentroids()
    assert centroids.margin("service", "port", port.astype(np.float32)) is None, "no keyed facts yet"

    def add(attribute: str, direction: np.ndarray) -> None:
        vector = direction + 0.3 * rng.standard_normal(16)
        centroids.add("service", attribute, (vector / np.linalg.norm(vector)).astype(np.float32))

    unit = (port / np.linalg.norm(port)).astype(np.float32)
    for _ in range(5):
        add("port", port)
        add("owner", owner)
    # Two attributes' centred directions are opposite: every text lies nearer one of them, so they judge none.
    assert centroids.margin("service", "port", unit) is None
    assert centroids.margin("service", "owner", (region / np.linalg.norm(region)).astype(np.float32)) is None
    for _ in range(5):
        add("region", region)
    own = centroids.margin("service", "port", unit)
    assert own is not None
    assert own > 0
    margin = centroids.margin("service", "owner", unit)
    assert margin is not None
    assert margin < 0
    assert centroids.margin("user", "port", unit) is None


def test_a_statement_is_judged_by_directions_of_other_entities_facts() -> None:
    # While an attribute's keyed facts are one entity's, their mean says that entity's name: a statement naming
    # it lies near that attribute whatever it says. Judged for that entity, its own facts are left out.
    rng = np.random.default_rng(1)
    ana, port, owner = (rng.standard_normal(32) for _ in range(3))

    def unit(vector: np.ndarray) -> np.ndarray:
        return (vector / np.linalg.norm(vector)).astype(np.float32)

    diet = rng.standard_normal(32)
    centroids = AttributeCentroids()
    for _ in range(3):
        centroids.add("user", "port", unit(ana + 0.5 * port + 0.1 * rng.standard_normal(32)), "user:ana")
        centroids.add("user", "owner", unit(rng.standard_normal(32) + 0.5 * owner), "user:bob")
        centroids.add("user", "diet", unit(rng.standard_normal(32) + 0.5 * diet), "user:dan")
    about_ana = unit(ana + 0.5 * owner)  # Ana's owner, said with her name
    with_her = centroids.margin("user", "port", about_ana)
    assert with_her is not None
    assert with_her > 0, "her own facts pull the statement toward port"
    assert centroids.margin("user", "port", about_ana, "user:ana") is None, "port is known only from Ana's facts"
    centroids.add("user", "port", unit(rng.standard_normal(32) + 0.5 * port), "user:carl")
    left_out = centroids.margin("user", "port", about_ana, "user:ana")
    assert left_out is not None
    assert left_out < 0, "without her facts the statement lies nearer owner"
    assert centroids.margin("user", "port", about_ana, "user:carl") is not None


def test_attribute_names_read_the_clearly_nearest_name_and_embed_each_once() -> None:
    rng = np.random.default_rng(2)
    space = {phrase: rng.standard_normal(24) for phrase in ("the user's port", "the user's owner", "the user's diet")}
    calls: list[list[str]] = []

    def embed(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        return np.stack([space[t] for t in texts]).astype(np.float32)

    names = AttributeNames(embed, lambda attribute, kind: f"the {kind}'s {attribute}")
    port = space["the user's port"] / np.linalg.norm(space["the user's port"])
    assert names.read("user", ["port"], port.astype(np.float32)) is None, "one name tells nothing apart"
    found = names.read("user", ["port", "owner", "diet"], port.astype(np.float32))
    assert found is not None
    assert found[0] == "port"
    assert found[1] > NAME_MARGIN
    names.read("user", ["port", "owner", "diet"], port.astype(np.float32))
    assert sorted(text for call in calls for text in call) == sorted(space), "each name embedded once"


def test_attribute_names_never_fail_a_write_when_the_embedder_fails() -> None:
    def broken(texts: list[str]) -> np.ndarray:
        raise RuntimeError("embedder down")

    names = AttributeNames(broken, lambda attribute, kind: attribute)
    assert names.read("user", ["port", "owner"], np.ones(4, dtype=np.float32)) is None


def test_the_mark_takes_in_how_the_entity_was_called() -> None:
    known = names("service:ledger-worker", "project:falcon")
    for text in ("the ledger-worker service now listens on port 1", "The ledger worker now listens on port 1"):
        assert masked(words(text), known.mentions(text), "service:ledger-worker") == [
            ENTITY_MARK, "now", "listens", "on", "port", "1"]  # fmt: skip
    for text in ("Project Falcon ships soon", "the Falcon project ships soon", "Falcon ships soon"):
        assert masked(words(text), known.mentions(text), "project:falcon") == [ENTITY_MARK, "ships", "soon"]


def test_a_preamble_before_a_known_wording_is_read_past() -> None:
    templates = Templates()
    templates.learn([ENTITY_MARK, "now", "listens", "on", "port", "8080"], ["8080"], "port")
    match = templates.match(["reminder", ENTITY_MARK, "now", "listens", "on", "port", "9"])
    assert match is not None
    assert match.value == ("9",)
    first = words("As noted before, page Ana if the API breaks")
    assert differing_spans(first, words("Page Bo Kim if the API breaks")) == (("ana",), ("bo", "kim"))


def test_a_span_holding_the_entity_is_another_sentence() -> None:
    first = [*words("double checked today and it still holds"), ENTITY_MARK, "is", "now", "aiming", "for", "x"]
    second = [*words("double checked today and it still holds the deadline for"), ENTITY_MARK, "moved", "to", "y"]
    assert differing_spans(first, second) is None


def test_known_values_name_their_attribute_once_seen_twice() -> None:
    values = Values()
    values.learn(["helix"], "editor")
    tokens = [ENTITY_MARK, "moved", "to", "helix", "for", "editing"]
    assert values.match(tokens) is None, "seen once"
    values.learn(["helix"], "editor")
    match = values.match(tokens)
    assert match is not None
    assert (match.attribute, match.value, match.method) == ("editor", ("helix",), "value")
    values.learn(["go"], "language")
    values.learn(["go"], "language")
    assert values.match([*tokens, "and", "go"]) is None, "two attributes' values in one text: neither"


def test_a_number_never_names_an_entity() -> None:
    known = names("entity:12", "ticket:abc-7")
    assert known.mentions("a note on topic 12, number 77") == []
    assert [m.entity for m in known.mentions("closed abc 7 today")] == ["ticket:abc-7"]


def test_two_different_preambles_are_read_past_where_the_entity_is_named() -> None:
    first = ["reminder", ENTITY_MARK, "now", "takes", "escalations", "about", "refunds"]
    second = ["as", "noted", "before", ENTITY_MARK, "now", "takes", "escalations", "about", "chargebacks"]
    assert differing_spans(first, second) == (("refunds",), ("chargebacks",))


def test_without_an_entity_only_a_difference_in_the_last_clause_is_a_value() -> None:
    assert clause_words("Who chairs the board? Ana Lima.") == ["who", "chairs", "the", "board", "<c>", "ana", "lima"]
    same_question = last_clause_spans(
        clause_words("Who chairs the board? Ana Lima"), clause_words("Who chairs the board? Bo")
    )
    assert same_question == (("ana", "lima"), ("bo",))
    one_clause = last_clause_spans(
        clause_words("The rate limit is 500 per second"), clause_words("The rate limit is 700 per second")
    )
    assert one_clause == (("500",), ("700",))
    # Another subject, same answer: another question.
    other = clause_words("When did England last reach the final of a world cup? 1966")
    assert last_clause_spans(other, clause_words("When did Spain last reach the final of a world cup? 1966")) is None
    # A difference across the question and the answer: another question too.
    seasons = clause_words("How many seasons are there of Nurse Jackie? 7")
    assert last_clause_spans(seasons, clause_words("How many seasons are there of Dexter? 9")) is None


def test_attribute_names_back_off_after_an_embedder_failure() -> None:
    calls = 0

    def broken(texts: list[str]) -> np.ndarray:
        nonlocal calls
        calls += 1
        raise RuntimeError("embedder down")

    names = AttributeNames(broken, lambda attribute, kind: attribute)
    for _ in range(3):
        assert names.read("user", ["port", "owner"], np.ones(4, dtype=np.float32)) is None
    assert calls == 1, "a down embedder is not asked again by every write"


def test_one_word_of_a_name_beside_another_capitalised_word_names_someone_else() -> None:
    known = names("user:cyrus-tanaka", "user:luca-silva", "project:vega", "user:bianca-larsen")
    assert [m.entity for m in known.mentions("Page Joaquin Tanaka if it breaks")] == []
    assert [m.entity for m in known.mentions("Luca Yamada works from Austin")] == []
    assert [m.entity for m in known.mentions("Tickets for Project Vega moved")] == ["project:vega"], "its type"
    assert [m.entity for m in known.mentions("Hi Bianca, welcome back")] == ["user:bianca-larsen"], "a sentence start"
    assert [m.entity for m in known.mentions("Reviewed a PR from Bianca today")] == ["user:bianca-larsen"]
    assert [m.entity for m in known.mentions("Cyrus Tanaka moved")] == ["user:cyrus-tanaka"], "the whole name"


def test_an_attribute_is_named_by_every_word_of_its_name_in_any_form() -> None:
    assert attribute_words("rate_limit") == ("rate", "limit")
    assert attribute_words("meetingPreference") == ("meeting", "preference")
    reader = AttributeWords(["status", "working_hours", "repository", "lead", "port"])
    assert reader.named(words("Atlas status: blocked on the vendor contract.")) == "status"
    assert reader.named(words("Mateo's working hours changed to 7:30-15:30.")) == "working_hours"
    assert reader.named(words("Leadership of Sequoia passed to Dalia.")) == "lead", "a longer word begins with it"
    assert reader.named(words("The repo moved to GitLab.")) == "repository", "a word that begins the name"
    assert reader.named(words("Mateo is still working from Athens.")) is None, "one word of a two-word name"
    assert reader.named(words("Sequoia is led by Yusuf.")) is None, "a short word only when equal"
    assert reader.named(words("The status of the lead is unclear.")) is None, "two attributes named: neither"
    assert reader.named(words("Opened a support ticket.")) is None, "'support' is not 'port'"
    assert AttributeWords([]).named(words("status")) is None


def test_a_shape_only_one_attribute_of_a_type_holds_names_it() -> None:
    assert shapes_in("Lives at https://a.example.com/v1, reach ops@example.com at 9:30.") == {
        ValueType.URL,
        ValueType.EMAIL,
        ValueType.TIME,
    }
    assert shapes_in("Aiming for the load test at 10x with 2 engineers on v3.8.6 since May 2, 2023.") == set()
    shapes = ValueShapes()
    assert shapes.match("service", "lives at https://b.example.com/api") is None, "nothing learnt"
    shapes.learn("service", "https://a.example.com/v1", "endpoint")
    shapes.learn("service", "blue team", "owner")  # no shape a text is read by
    match = shapes.match("service", "Billing lives at https://b.example.com/api.")
    assert match is not None
    assert (match.attribute, match.value, match.method) == ("endpoint", (), "value shape")
    assert shapes.match("project", "Code at https://git.example.com/p") is None, "learnt of services only"
    shapes.learn("user", "9:00-17:00", "working_hours")
    shapes.learn("user", "10:30", "standup")
    assert shapes.match("user", "Don't ping Theo outside 9:30-18:00.") is None, "two attributes hold times"
    shapes.learn("service", "02:00-03:00", "maintenance_window")
    assert shapes.match("service", "Moved to https://c.example.com at 02:00.") is None, "two shapes, two attributes"
