"""Security against a live sidecar: namespace-scoped tokens isolate tenants, listen policy, TLS and mutual TLS."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import Sidecar, start_sidecar
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers import DEADLINE_S, channel, counts, memory, status_details, stub, vec

from memevo.v1 import memory_pb2, memory_service_pb2, memory_service_pb2_grpc, policy_pb2

pytestmark = pytest.mark.integration

ADMIN, ALICE, BOB, BOTH = "admin-t0ken", "alice-t0ken", "bob-t0ken", "both-t0ken"
TOKENS_FILE = f"""# token    namespaces
{ADMIN} *
{ALICE} team-a   # alice's agent
{BOB} team-b
{BOTH} team-a,team-b
"""
DENIED = grpc.StatusCode.PERMISSION_DENIED


def _denied(call: Callable[[], object], *mentions: str) -> dict[str, str]:
    """Assert the call fails with PERMISSION_DENIED whose message mentions ``mentions``; returns ErrorInfo metadata."""
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error = caught.value
    assert error.code() == DENIED, (error.code(), error.details())
    for text in mentions:
        assert text in error.details(), error.details()
    return status_details(error)[1]


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sidecar]:
    tokens = tmp_path_factory.mktemp("tokens") / "tokens"
    tokens.write_text(TOKENS_FILE)
    tokens.chmod(0o600)
    process = start_sidecar(tmp_path_factory.mktemp("tenants-data"), "--tokens-file", str(tokens))
    yield process
    process.stop()


def _remember(service: memory_service_pb2_grpc.MemoryServiceStub, content: str, seed: int, namespace: str) -> int:
    response = service.Remember(
        memory_service_pb2.RememberRequest(memory=memory(content, vec(seed), namespace=namespace))
    )
    return int(response.result.memory.id)


def test_a_token_scoped_to_one_namespace_cannot_write_another(tenants: Sidecar) -> None:
    admin, alice = stub(tenants.unix_target, ADMIN), stub(tenants.tcp_target, ALICE)
    before = counts(admin)
    metadata = _denied(lambda: _remember(alice, "into b", 1, "team-b"), "team-b", "memory.namespace")
    assert metadata["namespace"] == "team-b"
    # An empty namespace means "default", which is not alice's either.
    _denied(lambda: _remember(alice, "into default", 2, ""), "'default'")
    batch = memory_service_pb2.RememberBatchRequest(
        memories=[memory("a ok", vec(3), namespace="team-a"), memory("b not", vec(4), namespace="team-b")]
    )
    _denied(lambda: alice.RememberBatch(batch), "memories[1].namespace", "team-b")
    stream = [
        memory_service_pb2.RememberStreamRequest(memory=memory("s0", vec(5), namespace="team-a")),
        memory_service_pb2.RememberStreamRequest(memory=memory("s1", vec(6), namespace="team-b")),
    ]
    metadata = _denied(lambda: alice.RememberStream(iter(stream)), "[1].memory.namespace")
    assert metadata["failed_index"] == "1"
    # The stream's first item was alice's own and may be committed; nothing reached team-b.
    committed = int(metadata["committed_count"])
    assert counts(admin)[1] == before[1] + committed
    found = admin.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=vec(6), k=50, filter=memory_service_pb2.RecallFilter(namespace="team-b")
        )
    )
    assert all(m.memory.content not in {"into b", "b not", "s1"} for m in found.memories)
    # Her own namespace works.
    assert _remember(alice, "mine", 7, "team-a") > 0


def test_a_token_scoped_to_one_namespace_cannot_read_another(tenants: Sidecar) -> None:
    admin, alice, bob = (stub(tenants.unix_target, t) for t in (ADMIN, ALICE, BOB))
    secret_vector_seed = 100
    bobs = _remember(bob, "bob's secret plan", secret_vector_seed, "team-b")
    alices = _remember(alice, "alice's note", 101, "team-a")
    # By id: every id-based RPC refuses bob's memory to alice.
    _denied(lambda: alice.Get(memory_service_pb2.GetRequest(ids=[alices, bobs])), "ids[1]", f"memory {bobs}")
    _denied(lambda: alice.Forget(memory_service_pb2.ForgetRequest(ids=[bobs])), "ids[0]")
    _denied(lambda: alice.History(memory_service_pb2.HistoryRequest(memory_id=bobs)), "memory_id")
    fact_key = memory_service_pb2.FactKey(namespace="team-b", entity="plan", attribute="status")
    _denied(lambda: alice.History(memory_service_pb2.HistoryRequest(fact_key=fact_key)), "team-b")
    _denied(
        lambda: alice.Supersede(
            memory_service_pb2.SupersedeRequest(old_id=bobs, new_memory=memory("hijack", vec(102), namespace="team-a"))
        ),
        "old_id",
    )
    _denied(
        lambda: alice.Supersede(memory_service_pb2.SupersedeRequest(old_id=alices, new_id=bobs)),
        "new_id",
    )
    _denied(
        lambda: alice.ReportOutcome(
            memory_service_pb2.ReportOutcomeRequest(used_memory_ids=[bobs], outcome=memory_service_pb2.OUTCOME_FAILURE)
        ),
        "used_memory_ids[0]",
    )
    # A retrieval bob made cannot be scored by alice either.
    bobs_recall = bob.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=vec(secret_vector_seed), k=5, filter=memory_service_pb2.RecallFilter(namespace="team-b")
        )
    )
    assert bobs in [m.memory.id for m in bobs_recall.memories]
    _denied(
        lambda: alice.ReportOutcome(
            memory_service_pb2.ReportOutcomeRequest(
                retrieval_id=bobs_recall.retrieval_id, outcome=memory_service_pb2.OUTCOME_FAILURE
            )
        ),
        "retrieval_id",
    )
    # By namespace: recall and context of team-b are refused; her own recall never shows bob's memory.
    team_b = memory_service_pb2.RecallFilter(namespace="team-b")
    _denied(lambda: alice.Recall(memory_service_pb2.RecallRequest(query_vector=vec(100), filter=team_b)), "team-b")
    _denied(
        lambda: alice.BuildContext(memory_service_pb2.BuildContextRequest(query_vector=vec(100), filter=team_b)),
        "team-b",
    )
    _denied(lambda: alice.Recall(memory_service_pb2.RecallRequest(query_vector=vec(100))), "'default'")
    own = alice.Recall(
        memory_service_pb2.RecallRequest(
            query_vector=vec(secret_vector_seed), k=50, filter=memory_service_pb2.RecallFilter(namespace="team-a")
        )
    )
    assert own.memories, "alice's own recall returned nothing"
    assert all(m.memory.namespace == "team-a" for m in own.memories)
    assert bobs not in [m.memory.id for m in own.memories]
    # Bob's memory is untouched; the admin token sees both.
    found = admin.Get(memory_service_pb2.GetRequest(ids=[bobs, alices]))
    assert [m.id for m in found.memories] == [bobs, alices]
    assert found.memories[0].state == memory_pb2.MEMORY_STATE_ACTIVE
    assert found.memories[0].content == "bob's secret plan"
    # The refused outcome reports left no feedback on it.
    assert (found.memories[0].successes, found.memories[0].failures) == (0.0, 0.0)
    # A token for both namespaces reads both.
    both = stub(tenants.unix_target, BOTH)
    assert len(both.Get(memory_service_pb2.GetRequest(ids=[bobs, alices])).memories) == 2


def test_a_scoped_token_cannot_report_the_outcome_of_another_namespaces_retrieval(tenants: Sidecar) -> None:
    admin, alice, bob = (stub(tenants.unix_target, t) for t in (ADMIN, ALICE, BOB))
    _remember(alice, "alice's outcome subject", 40, "team-a")
    found = alice.Recall(memory_service_pb2.RecallRequest(query_vector=vec(40), k=5, filter={"namespace": "team-a"}))
    nothing = alice.Recall(
        memory_service_pb2.RecallRequest(query_vector=vec(41), k=5, filter={"namespace": "team-a", "entity": "none"})
    )
    assert found.memories
    assert not nothing.memories
    before = counts(admin)
    # Even a retrieval that returned nothing (no memory id to refuse): its outcome would count for an experiment.
    for retrieval in (found, nothing):
        request = memory_service_pb2.ReportOutcomeRequest(
            retrieval_id=retrieval.retrieval_id, outcome=memory_service_pb2.OUTCOME_FAILURE
        )
        metadata = _denied(lambda request=request: bob.ReportOutcome(request), "retrieval_id: ", "allowed: team-b")
        assert metadata["field"] == "retrieval_id"
    # Asked in a namespace of its own, a token covering both still gets another namespace's retrieval as unknown.
    request = memory_service_pb2.ReportOutcomeRequest(
        retrieval_id=found.retrieval_id, outcome=memory_service_pb2.OUTCOME_FAILURE, namespace="team-b"
    )
    with pytest.raises(grpc.RpcError) as caught:
        stub(tenants.unix_target, BOTH).ReportOutcome(request)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND, caught.value.details()
    assert counts(admin) == before
    request = memory_service_pb2.ReportOutcomeRequest(
        retrieval_id=found.retrieval_id, outcome=memory_service_pb2.OUTCOME_FAILURE
    )
    assert alice.ReportOutcome(request).updated_count == len(found.memories)


def test_sidecar_wide_operations_need_an_all_namespace_token(tenants: Sidecar) -> None:
    alice, admin = stub(tenants.unix_target, ALICE), stub(tenants.unix_target, ADMIN)
    _denied(lambda: alice.GetStats(memory_service_pb2.GetStatsRequest()), "GetStats", "team-a")
    _denied(lambda: alice.Govern(memory_service_pb2.GovernRequest(dry_run=True)), "Govern")
    _denied(lambda: alice.Govern(memory_service_pb2.GovernRequest(namespace="team-b", dry_run=True)), "team-b")
    _denied(
        lambda: alice.DeclareFramework(memory_service_pb2.DeclareFrameworkRequest(version="v9")), "DeclareFramework"
    )
    policy = admin.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy
    _denied(lambda: alice.UpdatePolicy(memory_service_pb2.UpdatePolicyRequest(policy=policy)), "UpdatePolicy")
    review = alice.Review(
        iter([memory_service_pb2.ReviewRequest(hello=memory_service_pb2.ReviewerHello(reviewer="alice"))])
    )
    _denied(lambda: next(iter(review)), "Review")
    # What a scoped token may do: read the policy, sweep its own namespace.
    assert isinstance(alice.GetPolicy(memory_service_pb2.GetPolicyRequest()).policy, policy_pb2.Policy)
    alice.Govern(memory_service_pb2.GovernRequest(namespace="team-a", dry_run=True))
    assert admin.GetStats(memory_service_pb2.GetStatsRequest()).framework_version != "v9"


def test_watch_never_shows_another_namespace_to_a_scoped_token(tenants: Sidecar) -> None:
    admin, alice, bob = (stub(tenants.unix_target, t) for t in (ADMIN, ALICE, BOB))
    start = admin.GetStats(memory_service_pb2.GetStatsRequest()).last_sequence
    written = []
    for i in range(4):
        written.append(_remember(alice if i % 2 == 0 else bob, f"w{i}", 200 + i, "team-a" if i % 2 == 0 else "team-b"))
    marker = _remember(admin, "marker", 299, "team-a")
    _denied(
        lambda: next(iter(alice.Watch(memory_service_pb2.WatchRequest(namespace="team-b", after_sequence=0)))),
        "team-b",
    )
    seen: list[Any] = []
    call = alice.Watch(memory_service_pb2.WatchRequest(after_sequence=start), timeout=DEADLINE_S)
    try:
        for response in call:
            seen.append(response.event)
            if response.event.memory_id == marker:
                break
    finally:
        call.cancel()
    ids = [e.memory_id for e in seen]
    assert {written[0], written[2], marker} <= set(ids), ids
    assert written[1] not in ids, ids
    assert written[3] not in ids, ids
    assert all(e.namespace in ("", "team-a") for e in seen), [e.namespace for e in seen]
    # The admin's watch over the same range has bob's events.
    everything = []
    call = admin.Watch(memory_service_pb2.WatchRequest(after_sequence=start), timeout=DEADLINE_S)
    try:
        for response in call:
            everything.append(response.event.memory_id)
            if response.event.memory_id == marker:
                break
    finally:
        call.cancel()
    assert written[1] in everything
    assert written[3] in everything


def test_unknown_tokens_are_unauthenticated_and_health_is_open(tenants: Sidecar) -> None:
    for token in (None, "carol-t0ken", ALICE + "x"):
        with pytest.raises(grpc.RpcError) as caught:
            stub(tenants.unix_target, token).GetPolicy(memory_service_pb2.GetPolicyRequest())
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    health = health_pb2_grpc.HealthStub(channel(tenants.tcp_target))
    assert health.Check(health_pb2.HealthCheckRequest()).status == health_pb2.HealthCheckResponse.SERVING


def test_token_from_the_environment(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMEVO_TOKEN", "env-t0ken")
    process = start_sidecar(data_dir)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            stub(process.unix_target).GetStats(memory_service_pb2.GetStatsRequest())
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        # The environment token is an all-namespace token.
        service = stub(process.unix_target, "env-t0ken")
        _remember(service, "x", 1, "anything")
        assert counts(service) == (1, 1)
    finally:
        process.stop()


# ---- refusals at start-up --------------------------------------------------------------------


def _serve(data_dir: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "memevo.sidecar.cli", "serve", "--data", str(data_dir), "--embedder", "none",
        "--dimension", "8", "--ready-file", str(tmp_path / "ready.json"), *args,
    ]  # fmt: skip
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize(
    ("extra", "mentions"),
    [
        ([], "--allow-remote"),
        (["--allow-remote"], "--tls-cert"),
        (["--allow-remote", "--tls-cert", "{cert}", "--tls-key", "{key}"], "--tls-client-ca"),
    ],
    ids=["no-allow-remote", "no-tls", "no-caller-auth"],
)
def test_non_loopback_listening_is_refused_unless_secured(
    tmp_path: Path, extra: list[str], mentions: str, server_cert: tuple[Path, Path, Path]
) -> None:
    cert, key, _ = server_cert
    data_dir = tmp_path / "data"
    args = [a.format(cert=cert, key=key) for a in extra]
    result = _serve(data_dir, tmp_path, "--listen", "0.0.0.0:0", *args)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert mentions in output, output
    assert "Traceback" not in output, output
    assert not (data_dir / "rocksdb").exists(), "the data directory was opened before the refusal"
    assert not (tmp_path / "ready.json").exists()


def test_a_malformed_tokens_file_is_refused(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ADMIN} *\nbroken-line-without-namespaces\n")
    result = _serve(
        tmp_path / "data", tmp_path, "--listen", f"unix://{tmp_path / 's.sock'}", "--tokens-file", str(tokens)
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert f"{tokens}:2" in output, output
    assert "Traceback" not in output, output


# ---- TLS ------------------------------------------------------------------------------------


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None, *, ca: bool
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.timezone.utc)
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer_name)]))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate it signed (localhost, 127.0.0.1), a client certificate it signed, a stranger's."""
    root = tmp_path_factory.mktemp("pki")
    ca_key, stranger_key = _key(), _key()
    ca = _cert("memevo test CA", ca_key, None, ca=True)
    files: dict[str, bytes] = {"ca.pem": _pem(ca)}
    for name, issuer in (("server", ("memevo test CA", ca_key)), ("client", ("memevo test CA", ca_key))):
        key = _key()
        files[f"{name}.pem"] = _pem(_cert(name, key, issuer, ca=False))
        files[f"{name}.key"] = _pem_key(key)
    stranger_ca = _cert("stranger CA", stranger_key, None, ca=True)
    stranger_client_key = _key()
    files["stranger.pem"] = _pem(_cert("stranger", stranger_client_key, ("stranger CA", stranger_key), ca=False))
    files["stranger.key"] = _pem_key(stranger_client_key)
    files["stranger-ca.pem"] = _pem(stranger_ca)
    paths = {}
    for name, data in files.items():
        (root / name).write_bytes(data)
        paths[name] = root / name
    return paths


@pytest.fixture
def server_cert(pki: dict[str, Path]) -> tuple[Path, Path, Path]:
    return pki["server.pem"], pki["server.key"], pki["ca.pem"]


def _tls_stub(target: str, pki: dict[str, Path], client: str | None) -> memory_service_pb2_grpc.MemoryServiceStub:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=pki["ca.pem"].read_bytes(),
        private_key=pki[f"{client}.key"].read_bytes() if client else None,
        certificate_chain=pki[f"{client}.pem"].read_bytes() if client else None,
    )
    return memory_service_pb2_grpc.MemoryServiceStub(grpc.secure_channel(target, credentials))


def test_tls_on_the_tcp_port(data_dir: Path, pki: dict[str, Path]) -> None:
    process = start_sidecar(data_dir, "--tls-cert", str(pki["server.pem"]), "--tls-key", str(pki["server.key"]))
    try:
        secure = _tls_stub(process.tcp_target, pki, None)
        response = secure.Remember(memory_service_pb2.RememberRequest(memory=memory("over tls", vec(1))), timeout=30)
        assert response.result.memory.id == 1
        # Plaintext on the TLS port fails; the unix socket stays plain (its file mode is the protection).
        with pytest.raises(grpc.RpcError) as caught:
            stub(process.tcp_target).GetStats(memory_service_pb2.GetStatsRequest(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
        assert counts(stub(process.unix_target)) == (1, 1)
    finally:
        assert process.stop() == 0, process.log()


def test_mutual_tls_requires_a_client_certificate_from_the_ca(data_dir: Path, pki: dict[str, Path]) -> None:
    process = start_sidecar(
        data_dir,
        "--tls-cert", str(pki["server.pem"]), "--tls-key", str(pki["server.key"]),
        "--tls-client-ca", str(pki["ca.pem"]),
    )  # fmt: skip
    try:
        for client in (None, "stranger"):
            with pytest.raises(grpc.RpcError) as caught:
                _tls_stub(process.tcp_target, pki, client).GetStats(memory_service_pb2.GetStatsRequest(), timeout=10)
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE, client
        trusted = _tls_stub(process.tcp_target, pki, "client")
        trusted.Remember(memory_service_pb2.RememberRequest(memory=memory("mtls", vec(2))), timeout=30)
        assert trusted.GetStats(memory_service_pb2.GetStatsRequest(), timeout=30).total_count == 1
    finally:
        assert process.stop() == 0, process.log()
