"""The console's command-line parts: ``serve --console-listen`` and ``memevo console --connect``."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import FailedPrecondition
from ..service.auth import EVERYTHING, is_loopback

if TYPE_CHECKING:
    from ..service.server import Sidecar
    from .server import Console

DEFAULT_CONSOLE_LISTEN = "127.0.0.1:8787"
SIGNAL_POLL_S = 0.1


def check_console_listen(address: str) -> None:
    """FailedPrecondition unless ``address`` is a loopback ``host:port``: the console is never served beyond it."""
    if not is_loopback(address):
        raise FailedPrecondition(
            f"--console-listen {address}: the console listens on loopback only (127.0.0.1:PORT, [::1]:PORT or "
            "localhost:PORT); reach it from elsewhere through an SSH tunnel",
            reason="LISTEN_REFUSED",
        )


def add_console_listen_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--console-listen",
        default="",
        help="serve the web console at http://HOST:PORT/, loopback only, e.g. 127.0.0.1:8787; with tokens on, "
        "every page needs a token as gRPC calls do; without, the console makes its own at each start and logs the "
        "URL that carries it (default: off)",
    )


def console_for(sidecar: Sidecar, address: str) -> Console:
    """A console inside a started sidecar, talking to the sidecar's own listen address.

    With tokens on, the change-log digest reads with a token made for it here (random, sidecar-wide,
    never shown); every page still calls with the browser's own token. Without, the console gets a secret of its
    own (see :mod:`.server`): the loopback port would otherwise serve every local user what the 0600 socket
    refuses them.
    """
    from .server import Console
    from .source import ConsoleSource

    target = next((a for a in sidecar.addresses if a.startswith("unix://")), "")
    if not target:
        if sidecar.config.tls is not None:
            raise FailedPrecondition(
                "--console-listen with TLS on TCP needs a unix socket among the --listen addresses too",
                reason="BAD_FLAGS",
            )
        host, _, port = sidecar.addresses[0].rpartition(":")
        target = f"{'127.0.0.1' if host in ('0.0.0.0', '[::]', '') else host}:{port}"
    token = secret = None
    if sidecar.tokens:
        token = secrets.token_urlsafe(32)
        sidecar.tokens.add(token, EVERYTHING)
    else:
        secret = secrets.token_urlsafe(32)

    def calls() -> dict[str, int]:
        counts: dict[str, int] = {}
        for (_, method, _), n in sidecar.metrics.calls().items():
            counts[method] = counts.get(method, 0) + n
        return counts

    text_search = sidecar.engine.embedder is not None
    return Console(address, ConsoleSource(target), token=token, calls=calls, secret=secret, text_search=text_search)


def write_ready(path: Path, ready: dict[str, object]) -> None:
    """Write a ready file atomically, readable by this user only: its console URL may carry the console's secret."""
    tmp = Path(str(path) + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(ready))
    os.replace(tmp, path)


def add_console_command(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], *, default_target: str, token_env: str
) -> None:
    parser = commands.add_parser("console", help="serve the web console of a running sidecar on loopback")
    parser.add_argument(
        "--connect",
        default=os.environ.get("MEMEVO_ADDRESS") or default_target,
        help="the sidecar's address, unix:///abs/path.sock or host:port (default: $MEMEVO_ADDRESS, else "
        f"{default_target})",
    )
    parser.add_argument(
        "--listen",
        default=DEFAULT_CONSOLE_LISTEN,
        help="loopback HOST:PORT to serve the console on; port 0 picks a free one (default: %(default)s)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help=f"file holding a bearer token; the console's own change-log reader uses it, and the printed URL "
        f"carries it for the browser (default: ${token_env})",
    )
    parser.add_argument(
        "--metrics-url",
        default="",
        help="the sidecar's Prometheus endpoint (its --metrics-listen), for write and recall rates, e.g. "
        "http://127.0.0.1:9464/metrics (default: none)",
    )
    parser.add_argument(
        "--ready-file", type=Path, default=None, help="write JSON {pid, console} here once serving (default: none)"
    )
    parser.set_defaults(run=lambda args: run_console(args, token_env=token_env))


def run_console(args: argparse.Namespace, *, token_env: str) -> int:
    """``memevo console``: serve the console against ``--connect`` until SIGTERM or SIGINT."""
    from .server import Console, scrape_calls
    from .source import ConsoleSource

    check_console_listen(args.listen)
    if args.metrics_url and not is_loopback(args.metrics_url.split("//", 1)[-1].split("/", 1)[0]):
        raise FailedPrecondition("--metrics-url: a loopback URL only", reason="BAD_FLAGS")
    token = os.environ.get(token_env) or None
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip() or None
        except OSError as exc:
            raise FailedPrecondition(f"--token-file {args.token_file}: {exc}", reason="BAD_TOKEN_FILE") from exc
    calls = scrape_calls(args.metrics_url) if args.metrics_url else None
    source = ConsoleSource(args.connect)
    # Unless the sidecar itself refuses a call without a token, the console needs a secret of its own; an
    # unreachable sidecar gets one too, since it may come up without tokens.
    refuses, embedder = source.probe()
    secret = None if refuses else secrets.token_urlsafe(32)
    text_search = None if embedder is None else embedder != "none"
    console = Console(args.listen, source, token=token, calls=calls, secret=secret, text_search=text_search)
    signals: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        signals.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    console.start()
    # The sidecar's token goes in the URL's fragment: the browser keeps it for its own requests and never sends
    # it as part of a URL, so it stays out of history-sharing and server logs. The console's own secret cannot
    # (the console must see it to set its cookie) and is traded for the cookie at once.
    print(f"memevo console for {args.connect} on {console.url}" + (f"#token={token}" if token else ""), flush=True)
    if args.ready_file is not None:
        write_ready(args.ready_file, {"pid": os.getpid(), "console": console.address, "console_url": console.url})
    while not signals:
        time.sleep(SIGNAL_POLL_S)
    console.stop()
    print("memevo console stopped", file=sys.stderr)
    return 0
