"""How a namespace's slot evidence reads a statement: an attribute's name must not go against its directions."""

from __future__ import annotations

import numpy as np

from memevo.sidecar.perception.conflicts import _Slots
from memevo.sidecar.perception.slots import AttributeNames

DIMENSION = 48
ATTRIBUTES = ("contact", "meeting_preference", "diet")


def _unit(vector: np.ndarray) -> np.ndarray:
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def _slots(rng: np.random.Generator, facts: dict[str, np.ndarray] | None) -> tuple[_Slots, dict[str, np.ndarray]]:
    named = {a: rng.standard_normal(DIMENSION) for a in ATTRIBUTES}

    def embed(texts: list[str]) -> np.ndarray:
        return np.stack([named[t.removeprefix("the user's ").replace(" ", "_")] for t in texts]).astype(np.float32)

    slots = _Slots(attribute_names=AttributeNames(embed, lambda attribute, kind: f"the {kind}'s {attribute}"))
    slots.attributes["user"] = list(ATTRIBUTES)
    for attribute, direction in (facts or {}).items():
        for who in ("ana", "bob", "cleo"):
            slots.centroids.add(
                "user", attribute, _unit(direction + 0.3 * rng.standard_normal(DIMENSION)), f"user:{who}"
            )
    return slots, named


def test_a_name_reading_the_directions_contradict_is_not_believed() -> None:
    rng = np.random.default_rng(7)
    facts = {a: rng.standard_normal(DIMENSION) for a in ATTRIBUTES}
    slots, named = _slots(rng, facts)
    # Worded like the name "the user's meeting preference", said like other users' contact facts.
    against = _unit(named["meeting_preference"] + facts["contact"])
    assert slots.read_name("user", against, "user:dan") is None
    # Worded like that name and said like other users' meeting preferences: read.
    agreeing = _unit(named["meeting_preference"] + facts["meeting_preference"])
    found = slots.read_name("user", agreeing, "user:dan")
    assert found is not None
    assert found.attribute == "meeting_preference"
    assert found.method == "attribute name"


def test_without_directions_a_clear_name_reads_alone() -> None:
    rng = np.random.default_rng(8)
    slots, named = _slots(rng, None)
    found = slots.read_name("user", _unit(named["diet"]), "user:dan")
    assert found is not None
    assert found.attribute == "diet"


def test_a_clock_time_names_its_attribute_only_where_the_directions_agree_and_a_url_also_without_them() -> None:
    rng = np.random.default_rng(9)
    text = "Don't ping Dan outside 9:30-18:00."
    tokens = ["don", "t", "ping", "<e>", "outside", "9", "30", "18", "00"]
    slots = _Slots()  # no embedded names: only the shapes read here
    slots.shapes.learn("user", "9:00-17:00", "contact")  # the only clock times keyed for users
    slots.shapes.learn("user", "https://cal.example.com/ana", "meeting_preference")
    noise = _unit(rng.standard_normal(DIMENSION))
    assert slots.read(tokens, "user", noise, "user:dan", text) is None, "a time, and no directions to agree"
    url = slots.read(["book", "via", "cal"], "user", noise, "user:dan", "Book via https://cal.example.com/dan.")
    assert url is not None
    assert (url.attribute, url.method) == ("meeting_preference", "value shape")
    facts = {a: rng.standard_normal(DIMENSION) for a in ATTRIBUTES}
    for attribute, direction in facts.items():
        for who in ("ana", "bob", "cleo"):
            slots.centroids.add("user", attribute, _unit(direction + 0.3 * rng.standard_normal(DIMENSION)), who)
    said = slots.read(tokens, "user", _unit(facts["contact"]), "user:dan", text)
    assert said is not None
    assert (said.attribute, said.method) == ("contact", "value shape")
    assert slots.read(tokens, "user", _unit(facts["diet"]), "user:dan", text) is None, "said like others' diets"
