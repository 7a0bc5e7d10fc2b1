"""Word search counts a memory's reasoning context at half weight, over gRPC and across restarts."""

from __future__ import annotations

from pathlib import Path

from conftest import Sidecar, start_sidecar
from helpers import memory, pack, stub

from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc

QUERY = "Who went to the pride parade?"


def axis(i: int) -> bytes:
    """A unit vector on axis ``i`` (1..7): orthogonal to the query's (axis 0), so only words rank."""
    vector = [0.0] * 8
    vector[i] = 1.0
    return pack(vector)


def remember(service: memory_service_pb2_grpc.MemoryServiceStub, item: memory_pb2.MemoryInput) -> int:
    return int(service.Remember(memory_service_pb2.RememberRequest(memory=item)).result.memory.id)


def ranked(service: memory_service_pb2_grpc.MemoryServiceStub, k: int = 3) -> list[int]:
    request = memory_service_pb2.RecallRequest(query=QUERY, query_vector=axis(0), k=k)
    return [m.memory.id for m in service.Recall(request).memories]


def write_conversation(service: memory_service_pb2_grpc.MemoryServiceStub) -> tuple[int, int, int]:
    """Fillers first (lower ids win ties), then a question and its answer naming it, then a noted answer."""
    for i, text in enumerate(("I baked bread all weekend.", "The cat sat on the mat.", "Lunch was great.")):
        remember(service, memory(text, axis(1 + i)))
    asked = remember(service, memory("Did you go to the pride parade?", axis(4)))
    answer = memory("Yes! Last Saturday, it was amazing.", axis(5))
    answer.reasoning_context.memory_ids.append(asked)
    answered = remember(service, answer)
    noted = memory("Ana came along with me.", axis(6))
    noted.reasoning_context.text = "talking about the pride parade"
    return asked, answered, remember(service, noted)


def test_a_reply_is_found_by_the_words_it_answered_below_the_memory_that_says_them(data_dir: Path) -> None:
    sidecar = start_sidecar(data_dir)
    try:
        service = stub(sidecar.unix_target)
        asked, answered, noted = write_conversation(service)
        first = ranked(service)
        assert first[0] == asked
        assert set(first[1:]) == {answered, noted}
        # A context's words count for less than the same words said: the reply stays below the question.
        alone = service.Recall(memory_service_pb2.RecallRequest(query="parade", query_vector=axis(0), k=3)).memories
        assert alone[0].memory.id == asked
        assert alone[0].score > max(m.score for m in alone[1:])
    finally:
        assert sidecar.stop() == 0, sidecar.log()


def test_the_context_counts_again_after_a_clean_restart_and_after_a_crash(data_dir: Path) -> None:
    sidecar: Sidecar = start_sidecar(data_dir)
    try:
        service = stub(sidecar.unix_target)
        asked, answered, noted = write_conversation(service)
        before = ranked(service)
    finally:
        assert sidecar.stop() == 0, sidecar.log()
    # A clean stop leaves a snapshot of the word index; a crash leaves none, and the index is rebuilt from RocksDB.
    for stop_by_kill in (False, True):
        sidecar = start_sidecar(data_dir)
        try:
            assert ranked(stub(sidecar.unix_target)) == before
            assert set(before) == {asked, answered, noted}
        finally:
            if stop_by_kill:
                sidecar.kill()
            else:
                assert sidecar.stop() == 0, sidecar.log()
        if not stop_by_kill:
            (data_dir / "startup.snapshot").unlink()


def test_a_memory_of_another_namespace_lends_no_words(data_dir: Path) -> None:
    """Its words could otherwise be probed by word search from a namespace that may not read it."""
    sidecar = start_sidecar(data_dir)
    try:
        service = stub(sidecar.unix_target)
        secret = remember(service, memory("The launch code is marmalade.", axis(1), namespace="team-b"))
        for i, text in enumerate(("Lunch was great.", "The cat sat on the mat.")):
            remember(service, memory(text, axis(2 + i), namespace="team-a"))
        probe = memory("Noted.", axis(4), namespace="team-a")
        probe.reasoning_context.memory_ids.append(secret)
        probed = remember(service, probe)
        same = memory("Noted too.", axis(5), namespace="team-b")
        same.reasoning_context.memory_ids.append(secret)
        lent = remember(service, same)

        def found(namespace: str) -> list[int]:
            request = memory_service_pb2.RecallRequest(query="marmalade", query_vector=axis(0), k=2)
            request.filter.namespace = namespace
            return [m.memory.id for m in service.Recall(request).memories]

        assert probed not in found("team-a")
        assert found("team-b") == [secret, lent]
    finally:
        assert sidecar.stop() == 0, sidecar.log()
