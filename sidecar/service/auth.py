"""Who may call: bearer tokens scoped to namespaces, the interceptor that checks them, and listen-address policy.

A sidecar without tokens trusts every caller that can reach it (a 0600 unix
socket or a loopback port). With tokens, every call except the health checks
must carry ``authorization: Bearer <token>`` (else UNAUTHENTICATED), and the
servicer asks :func:`authorize` before it reads or writes: a token scoped to
some namespaces gets PERMISSION_DENIED for any other namespace, for a memory
id that lives in another namespace, and for sidecar-wide operations (stats,
policy updates, framework declarations, unscoped sweeps, review).

Tokens file format (``--tokens-file``), one token a line, ``#`` comments::

    <token> *                        # every namespace, sidecar-wide operations too
    <token> team-a                   # only namespace team-a
    <token> team-a,team-b            # two namespaces
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from ..config import SidecarConfig
from ..errors import FailedPrecondition, MemevoError, Unauthenticated
from .validation import NAMESPACE_PATTERN

if TYPE_CHECKING:
    from ..store.columns import MemoryColumns

log = logging.getLogger(__name__)

ALL_NAMESPACES = "*"
HEALTH_METHOD_PREFIX = "/grpc.health.v1.Health/"
BEARER = "Bearer "
DENIED_MESSAGE = "missing or wrong sidecar token: send metadata 'authorization: Bearer <token>'"


class PermissionDenied(MemevoError):
    """The token is valid but its namespaces do not cover what the call touches."""

    code = grpc.StatusCode.PERMISSION_DENIED
    reason = "NAMESPACE_NOT_ALLOWED"


@dataclass(frozen=True)
class Scope:
    """What one token may touch: some namespaces, or (``namespaces`` None) everything."""

    namespaces: frozenset[str] | None

    @property
    def everything(self) -> bool:
        """Whether the token covers every namespace and sidecar-wide operations."""
        return self.namespaces is None

    def allows(self, namespace: str) -> bool:
        """Whether ``namespace`` is one of the token's."""
        return self.namespaces is None or namespace in self.namespaces

    def describe(self) -> str:
        """The namespaces for messages: ``*`` or ``a, b``."""
        return ALL_NAMESPACES if self.namespaces is None else ", ".join(sorted(self.namespaces))


EVERYTHING = Scope(None)


def _digest(token: str) -> bytes:
    # Looked up by digest: a dict probe on the secret itself would leak timing about it.
    return hashlib.sha256(token.encode()).digest()


class TokenTable:
    """Bearer tokens and their scopes. Empty means "no authentication"."""

    def __init__(self, entries: Mapping[str, Scope] | None = None) -> None:
        self._scopes: dict[bytes, Scope] = {}
        for token, scope in (entries or {}).items():
            self.add(token, scope)

    def add(self, token: str, scope: Scope) -> None:
        """Accept ``token`` with ``scope``; ValueError for an empty token or one with whitespace."""
        if not token or any(c.isspace() for c in token):
            raise ValueError("a token must be non-empty and contain no whitespace")
        self._scopes[_digest(token)] = scope

    def __len__(self) -> int:
        return len(self._scopes)

    def merge(self, other: TokenTable) -> None:
        """Accept every token of ``other`` too."""
        self._scopes.update(other._scopes)

    def scope_of_token(self, token: str) -> Scope | None:
        """The scope of ``token``, None when it is not one of ours."""
        return self._scopes.get(_digest(token))

    def scope_of(self, metadata: Iterable[tuple[str, Any]] | None) -> Scope | None:
        """The scope of the bearer token in call metadata; None when missing or unknown."""
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith(BEARER):
                return self.scope_of_token(value[len(BEARER) :])
        return None

    @classmethod
    def from_file(cls, path: Path) -> TokenTable:
        """Parse a tokens file (see the module docstring); FailedPrecondition naming the line when malformed."""
        table = cls()
        try:
            text = path.read_text()
            mode = path.stat().st_mode
        except (OSError, UnicodeDecodeError) as exc:
            raise FailedPrecondition(f"cannot read tokens file {path}: {exc}", reason="BAD_TOKENS_FILE") from exc
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("tokens file %s is readable by other users; chmod 600 it", path)
        for number, line in enumerate(text.splitlines(), start=1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            where = f"{path}:{number}"
            if len(parts) != 2:
                raise FailedPrecondition(
                    f"{where}: expected '<token> <namespace>[,<namespace>...]|*'", reason="BAD_TOKENS_FILE"
                )
            token, spec = parts
            if table.scope_of_token(token) is not None:
                raise FailedPrecondition(f"{where}: this token is listed twice", reason="BAD_TOKENS_FILE")
            table.add(token, parse_scope(spec, where))
        if not table:
            raise FailedPrecondition(f"tokens file {path} lists no token", reason="BAD_TOKENS_FILE")
        return table


def parse_scope(spec: str, where: str) -> Scope:
    """``*`` or a comma list of namespaces; FailedPrecondition (naming ``where``) on a bad namespace."""
    if spec == ALL_NAMESPACES:
        return EVERYTHING
    names = [n for n in spec.split(",") if n]
    bad = [n for n in names if not NAMESPACE_PATTERN.fullmatch(n)]
    if not names or bad:
        raise FailedPrecondition(
            f"{where}: bad namespace list {spec!r}: names of [A-Za-z0-9_.:-], comma-separated, or *",
            reason="BAD_TOKENS_FILE",
        )
    return Scope(frozenset(names))


# ---- the checks the servicer makes ------------------------------------------------------------


def authorize(
    scope: Scope,
    columns: MemoryColumns,
    *,
    namespaces: Iterable[tuple[str, str]] = (),
    ids: Iterable[tuple[str, int]] = (),
    sidecar_wide: str = "",
) -> None:
    """PERMISSION_DENIED unless ``scope`` covers everything the call touches.

    ``namespaces`` are (field, namespace) pairs the request names; ``ids`` are
    (field, memory id) pairs whose memories must lie in the scope (ids that
    never existed pass: the engine reports them missing); a non-empty
    ``sidecar_wide`` names an operation that needs a ``*`` token.
    """
    if scope.everything:
        return
    if sidecar_wide:
        raise PermissionDenied(
            f"{sidecar_wide} acts on the whole data directory; this token is limited to namespaces "
            f"{scope.describe()} (a '*' token is required)",
            metadata={"allowed_namespaces": scope.describe()},
        )
    for field, namespace in namespaces:
        if not scope.allows(namespace):
            raise PermissionDenied(
                f"{field}: namespace {namespace!r} is not allowed for this token (allowed: {scope.describe()})",
                metadata={"field": field, "namespace": namespace, "allowed_namespaces": scope.describe()},
            )
    # Imported here, not above: the columns import the numeric kernels, which the CLI must not load (and compile,
    # after an install) to build its parser; this module is on that path through the console's flags.
    from ..store.columns import NO_CODE

    size = columns.size
    for field, memory_id in ids:
        code = int(columns.namespace[memory_id]) if 0 < memory_id < size else NO_CODE
        # The other tenant's namespace is not named: its name is theirs.
        if code != NO_CODE and not scope.allows(columns.namespaces.string(code)):
            raise PermissionDenied(
                f"{field}: memory {memory_id} is in a namespace this token may not use (allowed: {scope.describe()})",
                metadata={"field": field, "memory_id": str(memory_id), "allowed_namespaces": scope.describe()},
            )


# ---- the interceptor ------------------------------------------------------------------------


class AuthInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses every call without a known bearer token (UNAUTHENTICATED), except health checks."""

    def __init__(self, tokens: TokenTable) -> None:
        self._tokens = tokens
        self._deny = grpc.unary_unary_rpc_method_handler(self._deny_unary)

    def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], grpc.RpcMethodHandler[Any, Any] | None],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler[Any, Any] | None:
        if handler_call_details.method.startswith(HEALTH_METHOD_PREFIX):
            return continuation(handler_call_details)
        if self._tokens.scope_of(handler_call_details.invocation_metadata) is not None:
            return continuation(handler_call_details)
        handler = continuation(handler_call_details)
        if handler is None:
            return None
        # Answer with the same streaming shape as the real method, so the client reads the status.
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(self._deny_stream)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(self._deny_unary)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(self._deny_stream)
        return self._deny

    @staticmethod
    def _deny_unary(request: Any, context: grpc.ServicerContext) -> None:
        from .servicer import to_status

        context.abort_with_status(to_status(Unauthenticated(DENIED_MESSAGE)))

    @staticmethod
    def _deny_stream(request: Any, context: grpc.ServicerContext) -> Any:
        from .servicer import to_status

        context.abort_with_status(to_status(Unauthenticated(DENIED_MESSAGE)))
        yield  # pragma: no cover


# ---- where the sidecar may listen -------------------------------------------------------------


def is_loopback(address: str) -> bool:
    """Whether a ``host:port`` address binds only the loopback interface (``localhost``, 127/8, ::1)."""
    host = address.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_listen_policy(config: SidecarConfig, *, has_tokens: bool) -> None:
    """FailedPrecondition (naming the flag to add) when a listen address would expose the sidecar.

    Unix sockets and loopback ports are always allowed. Any other address
    needs ``--allow-remote``, TLS (``--tls-cert``/``--tls-key``) and a way to
    authenticate callers: tokens or a client CA (mutual TLS).
    """
    tls = config.tls
    if tls is not None and tls.client_ca_file is not None and not tls.client_ca_file.is_file():
        raise FailedPrecondition(f"--tls-client-ca {tls.client_ca_file} is not a file", reason="LISTEN_REFUSED")
    for address in config.listen:
        if address.startswith("unix://") or is_loopback(address):
            continue
        if not config.allow_remote:
            raise FailedPrecondition(
                f"{address} is not a loopback address: a sidecar is reachable by other hosts only with "
                "--allow-remote (plus --tls-cert/--tls-key and a token or --tls-client-ca)",
                reason="LISTEN_REFUSED",
            )
        if tls is None:
            raise FailedPrecondition(
                f"{address}: listening beyond loopback requires TLS (--tls-cert and --tls-key)",
                reason="LISTEN_REFUSED",
            )
        if not has_tokens and tls.client_ca_file is None:
            raise FailedPrecondition(
                f"{address}: listening beyond loopback requires caller authentication: "
                "--token-file/--tokens-file/$MEMEVO_TOKEN or --tls-client-ca",
                reason="LISTEN_REFUSED",
            )


def server_credentials(config: SidecarConfig) -> grpc.ServerCredentials | None:
    """TLS credentials for the TCP ports when ``config.tls`` is set (client certificates required with a CA)."""
    tls = config.tls
    if tls is None:
        return None
    try:
        key = tls.key_file.read_bytes()
        cert = tls.cert_file.read_bytes()
        ca = tls.client_ca_file.read_bytes() if tls.client_ca_file is not None else None
    except OSError as exc:
        raise FailedPrecondition(f"cannot read a TLS file: {exc}", reason="LISTEN_REFUSED") from exc
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=ca, require_client_auth=ca is not None)


def caller_scope(tokens: TokenTable | None, context: grpc.ServicerContext) -> Scope:
    """The scope of the call's token; everything when the sidecar has no tokens."""
    if not tokens:
        return EVERYTHING
    scope = tokens.scope_of(context.invocation_metadata())
    if scope is None:  # the interceptor lets no such call through; be safe if it is not installed
        raise Unauthenticated(DENIED_MESSAGE)
    return scope


def caller_identity(tokens: TokenTable | None, context: grpc.ServicerContext) -> str:
    """Who called, for scoping request ids and stream caps: a digest of the verified token, else of the certificate.

    "" when the token is not one of the sidecar's, or when the sidecar authenticates nobody (then every
    caller is the same trusted one). A digest under its own label, so the stored value is not the one
    tokens are looked up by.
    """
    label = hashlib.sha256(b"memevo request scope\0")
    if tokens:
        metadata = context.invocation_metadata()
        # Only a token the sidecar accepted is an identity: an invented one would be a new caller per call.
        if tokens.scope_of(metadata) is None:
            return ""
        for key, value in metadata or ():
            if key == "authorization" and isinstance(value, str) and value.startswith(BEARER):
                label.update(b"token\0" + value[len(BEARER) :].encode())
                return label.hexdigest()[:32]
        return ""
    peers = context.peer_identities()
    if not peers:
        return ""
    for peer in peers:
        label.update(b"peer\0" + peer + b"\0")
    return label.hexdigest()[:32]


def ids_of(field: str, ids: Sequence[int]) -> list[tuple[str, int]]:
    """(field[i], id) pairs for :func:`authorize`."""
    return [(f"{field}[{i}]", int(memory_id)) for i, memory_id in enumerate(ids)]
