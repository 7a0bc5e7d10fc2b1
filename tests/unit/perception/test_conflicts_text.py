"""The pure helpers of perception.conflicts: statement normalisation and the keys built from it."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memevo.sidecar.perception.conflicts import dedup_key, entity_prefix, fact_key
from memevo.sidecar.perception.slots import normalise_text
from memevo.v1 import memory_pb2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", ""),
        ("Light", "light"),
        ("  user A   prefers\tdark\nmode  ", "user a prefers dark mode"),
        ("Light!", "light"),
        ("light-mode", "light mode"),
        ("snake_case_value", "snake case value"),
        ("...!?", ""),
        ("ops/deploy.sh", "ops deploy sh"),
        ("Version 3.12", "version 3 12"),
        ("ＬＩＧＨＴ　ｍｏｄｅ", "light mode"),  # full-width letters and space (NFKC)
        ("Straße", "strasse"),  # casefold, not lower
        ("Café", "café"),
        ("Cafe\u0301", "café"),  # combining accent composed by NFKC
        ("東京に住んでいる。", "東京に住んでいる"),
        ("ﬁle", "file"),  # ligature
    ],
)
def test_normalise_text(text: str, expected: str) -> None:
    assert normalise_text(text) == expected


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("User A prefers LIGHT mode!", "user a prefers light mode"),
        ("dark", "  Dark. "),
        ("high-contrast", "High contrast"),
    ],
)
def test_restatements_normalise_alike(a: str, b: str) -> None:
    assert normalise_text(a) == normalise_text(b)


@pytest.mark.parametrize(("a", "b"), [("light", "lights"), ("dark mode", "darkmode"), ("3.12", "3.1.2")])
def test_different_statements_stay_different(a: str, b: str) -> None:
    assert normalise_text(a) != normalise_text(b)


@given(st.text())
def test_normalise_text_is_idempotent(text: str) -> None:
    once = normalise_text(text)
    assert normalise_text(once) == once


@given(st.text())
def test_normalised_text_has_single_spaces_and_no_edges(text: str) -> None:
    normal = normalise_text(text)
    assert "  " not in normal
    assert normal == normal.strip()
    assert "\n" not in normal
    assert "\t" not in normal


def test_dedup_key_ignores_case_and_punctuation_but_not_namespace_or_kind() -> None:
    fact = memory_pb2.MEMORY_KIND_FACT
    base = dedup_key("default", fact, "The build uses Bazel.")
    assert dedup_key("default", fact, "the build uses bazel") == base
    assert dedup_key("other", fact, "The build uses Bazel.") != base
    assert dedup_key("default", memory_pb2.MEMORY_KIND_PREFERENCE, "The build uses Bazel.") != base
    assert dedup_key("default", fact, "The build uses Make.") != base


def test_fact_key_and_entity_prefix_do_not_collide_across_parts() -> None:
    assert fact_key("ns", "user:a", "mode") != fact_key("ns", "user:am", "ode")
    assert fact_key("ns", "a", "b") != fact_key("nsa", "", "b")
    assert fact_key("ns", "user:a", "mode").startswith(entity_prefix("ns", "user:a"))
    assert not fact_key("ns", "user:ab", "mode").startswith(entity_prefix("ns", "user:a"))
