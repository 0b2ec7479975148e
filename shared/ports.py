"""One port is one server: refuse a listening address that is invalid or already bound, before anything is written.

granian binds with SO_REUSEPORT, so a second server on a bound port would start beside the first and the kernel
would split connections between two servers with different configs. A plain bind (SO_REUSEADDR, which on Linux
still refuses a port someone listens on, but not one left in TIME_WAIT by a server just stopped) tells first."""

from __future__ import annotations

import errno
import socket

__all__ = ["PortUnavailable", "check_listen"]


class PortUnavailable(Exception):
    """The address cannot be served: an invalid port, or one already bound. The message names the port."""


def check_listen(host: str, port: int) -> None:
    """Raise PortUnavailable unless `host:port` is a valid address that nothing listens on now."""
    shown = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise PortUnavailable(f"invalid port {port}: a port is a number from 1 to 65535")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host or "0.0.0.0", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise PortUnavailable(
                    f"address in use: port {port} ({shown}) is already bound by another process "
                    "(another flux7 serve?); stop it or choose another --port"
                ) from None
            raise PortUnavailable(f"cannot listen on {shown}: {e.strerror or e}") from None
