"""A start that asks for a bundled model the install lacks is refused, not served without it."""

from __future__ import annotations

from pathlib import Path

import pytest

from memevo.sidecar.config import SidecarConfig
from memevo.sidecar.embedding import EmbedderConfig
from memevo.sidecar.engine import Engine
from memevo.sidecar.errors import FailedPrecondition
from memevo.sidecar.perception import judge
from memevo.sidecar.retrieval import rerank


# The reranker's order asks the pair judge too (answers about no entity): --rerank local needs both.
@pytest.mark.parametrize(("module", "flag"), [(judge, "judge"), (rerank, "rerank"), (judge, "rerank")])
def test_a_missing_model_refuses_the_start_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: object, flag: str
) -> None:
    monkeypatch.setattr(module, "MODEL_PATH", tmp_path / "gone.onnx")
    data = tmp_path / "data"
    config = SidecarConfig(data_dir=data, embedder=EmbedderConfig(kind="none"), dimension=8, **{flag: "local"})
    try:
        with pytest.raises(FailedPrecondition, match=f"--{flag} local: this install holds no .* pass --{flag} none"):
            Engine(config)
    finally:  # a load under the patched path must not stay cached for the tests after this one
        judge.shipped.cache_clear()
        rerank.shipped.cache_clear()
    assert not data.exists()


@pytest.mark.parametrize("flag", ["judge", "rerank"])
def test_the_shipped_model_starts(tmp_path: Path, flag: str) -> None:
    config = SidecarConfig(data_dir=tmp_path, embedder=EmbedderConfig(kind="none"), dimension=8, **{flag: "local"})
    engine = Engine(config)
    try:
        assert (engine.judge if flag == "judge" else engine.reranker) is not None
    finally:
        engine.close()
