"""The memory console: a small web UI over a sidecar's own state (issue 27).

Every page reads the sidecar through :class:`~memevo.sidecar.console.source.ConsoleSource`, a gRPC client
that forwards the browser's bearer token, so the console is exactly as privileged as the caller: the
sidecar's own interceptor and namespace checks decide what a page may read or change; for a sidecar
without tokens the console has a secret of its own (see :mod:`.server`). ``memevo serve
--console-listen`` runs it inside the sidecar process (talking to that sidecar's own listen address);
``memevo console --connect`` runs the same code against a sidecar elsewhere on the machine.
"""
