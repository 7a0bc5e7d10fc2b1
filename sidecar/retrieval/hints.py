"""How to read a recalled memory: the hint attached to each item, in English or Chinese."""

from __future__ import annotations

from memevo.v1 import memory_pb2

from ..domain import RecallQuery

LANGUAGES = ("en", "zh")

# key -> (English, Chinese); {id}, {n} and {version} are filled in.
_TEXTS: dict[str, tuple[str, str]] = {
    "current": ("current", "当前有效"),
    "archived": ("archived — still true, rarely needed", "已归档——仍然成立，但很少用到"),
    "historical": ("historical reference — the situation may have changed", "历史参考——情况可能已经变化"),
    "superseded_by": ("superseded by memory {id}", "已被记忆 {id} 取代"),
    "as_of": ("valid at the requested time, replaced since", "在所询问的时间有效，之后已被取代"),
    "consolidated": ("absorbed into pattern memory {id}", "已并入模式记忆 {id}"),
    "pattern": ("pattern distilled from {n} successful experiences", "从 {n} 次成功经验中提炼的模式"),
    "pattern_unproven": ("pattern distilled from {n} experiences", "从 {n} 次经验中提炼的模式"),
    "counter_example": (
        "historical reference / counter-example (strategy {id} did better)",
        "历史参考／反例（策略 {id} 效果更好）",
    ),
    "possibly_outdated": (
        "possibly outdated — memory {id} may replace it",
        "可能已过时——记忆 {id} 可能取代了它",
    ),
    "old_framework": ("formed under an older framework ({version})", "形成于较早的认知框架（{version}）"),
}
_SEPARATOR = {"en": "; ", "zh": "；"}

# The English texts by name, for callers that match hints (tests, clients that branch on them).
HINT_CURRENT = _TEXTS["current"][0]
HINT_AS_OF = _TEXTS["as_of"][0]
HINT_HISTORICAL = _TEXTS["historical"][0]
HINT_COUNTER_EXAMPLE = "historical reference / counter-example"
HINT_OLD_FRAMEWORK = "formed under an older framework"
HINT_POSSIBLY_OUTDATED = "possibly outdated"


HintParts = list[tuple[str, dict[str, object]]]
"""A hint as (text key, format arguments), rendered per language by render_hint."""


def hint_keys(record: memory_pb2.Memory, query: RecallQuery, framework_version: str) -> HintParts:
    """The parts of ``record``'s hint as (key, arguments), language-free.

    ``framework_version`` is the agent's current one: memories formed under
    another are flagged for re-interpretation.
    """
    parts: HintParts = []
    state = record.state
    if state == memory_pb2.MEMORY_STATE_OBSOLETE and query.as_of_s is not None:
        parts.append(("as_of", {}))
    elif state == memory_pb2.MEMORY_STATE_OBSOLETE:
        parts.append(("historical", {}))
        if record.superseded_by:
            parts.append(("superseded_by", {"id": record.superseded_by}))
    elif state == memory_pb2.MEMORY_STATE_CONSOLIDATED:
        parts.append(("consolidated", {"id": record.consolidated_into}))
    elif record.possibly_outdated_by:
        parts.append(("possibly_outdated", {"id": record.possibly_outdated_by}))
    elif record.demoted_by:
        parts.append(("counter_example", {"id": record.demoted_by}))
    elif record.kind == memory_pb2.MEMORY_KIND_ABSTRACTION and record.members:
        # "Successful" only when the members' outcomes say so.
        proven = record.successes > record.failures
        parts.append(("pattern" if proven else "pattern_unproven", {"n": len(record.members)}))
    elif state == memory_pb2.MEMORY_STATE_ARCHIVED:
        parts.append(("archived", {}))
    else:
        parts.append(("current", {}))
    if framework_version and record.framework_version != framework_version:
        parts.append(("old_framework", {"version": record.framework_version or "unversioned"}))
    return parts


def render_hint(parts: HintParts, language: str = "en") -> str:
    """The hint text of ``parts`` in ``language`` ("en" or "zh")."""
    column = LANGUAGES.index(language)
    return _SEPARATOR[language].join(_TEXTS[key][column].format(**args) for key, args in parts)


def hint_for(record: memory_pb2.Memory, query: RecallQuery, framework_version: str = "", language: str = "en") -> str:
    """The reading hint of ``record`` in the answer to ``query``."""
    return render_hint(hint_keys(record, query, framework_version), language)
