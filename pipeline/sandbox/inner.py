"""The first process inside every sandbox: a lifeline, a proxy port, then the command.

Usage (as ``python -I -S -c <this source> LIFELINE_FD PROXY_SOCKET|- -- COMMAND...``):

- **Lifeline.** ``LIFELINE_FD`` is the read end of a pipe whose write end only
  the daemon holds, for as long as it supervises this command. When the daemon
  closes it (the command ended, was stopped, or the daemon died, even by
  SIGKILL), this process kills every process of the sandbox and exits, so
  nothing the command started outlives it, whatever bwrap's own parent-death
  handling did.
- **Proxy port** (``allowlist`` mode). The sandbox's network namespace has only
  loopback. A forked relay listens on a free loopback port and copies each
  connection to the daemon's proxy socket; the standard proxy variables point
  at it. The relay holds no policy: the daemon's proxy decides, so killing or
  replacing it opens nothing.

It is source text for ``python -I -S -c``, so it imports only built-in modules
(``_socket``, ``select``, ``os``: no ``subprocess``, ``socket`` or
``threading``, whose imports would dominate the start-up) and never ``pipeline``.
"""

import _socket
import os
import select
import sys

PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
)
NO_PROXY_VARIABLES = ("NO_PROXY", "no_proxy")
Peers = dict[_socket.socket, _socket.socket]


def relay_forever(listener: _socket.socket, proxy_socket: str) -> None:
    """One select loop for every connection: loopback client <-> daemon proxy socket."""
    peers: Peers = {}
    while True:
        readable, _, _ = select.select([listener, *peers], [], [])
        for sock in readable:
            if sock is listener:
                _accept(listener, proxy_socket, peers)
                continue
            if sock not in peers:
                continue
            try:
                data = sock.recv(65536)
                if data:
                    peers[sock].sendall(data)
                    continue
            except OSError:
                pass
            _close_pair(sock, peers)


def _accept(listener: _socket.socket, proxy_socket: str, peers: Peers) -> None:
    # The C-level socket has only ``_accept`` (``socket.socket.accept`` wraps it); the
    # ``socket`` module itself is not imported because its import costs more than the rest.
    descriptor, _ = listener._accept()  # type: ignore[attr-defined]
    client = _socket.socket(fileno=descriptor)
    upstream = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        upstream.connect(proxy_socket)
    except OSError:
        client.close()
        upstream.close()
        return
    peers[client], peers[upstream] = upstream, client


def _close_pair(sock: _socket.socket, peers: Peers) -> None:
    peer = peers.pop(sock, None)
    if peer is not None:
        peers.pop(peer, None)
        peer.close()
    sock.close()


def start_relay(proxy_socket: str, env: dict[str, str]) -> None:
    """Fork the relay and point ``env``'s proxy variables at its port."""
    listener = _socket.socket(_socket.AF_INET, _socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(128)
    if os.fork() == 0:
        os.setsid()  # out of the command's process group: its signals are not ours
        relay_forever(listener, proxy_socket)
        os._exit(0)
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()
    env.update(dict.fromkeys(PROXY_VARIABLES, url))
    for name in NO_PROXY_VARIABLES:
        env.pop(name, None)


def spawn(command: list[str], env: dict[str, str], lifeline: int) -> int:
    """Fork and exec the command; its pid."""
    pid = os.fork()
    if pid == 0:
        os.close(lifeline)
        try:
            os.execvpe(command[0], command, env)
        except OSError as exc:
            os.write(2, f"sandbox: cannot run {command[0]!r}: {exc}\n".encode())
        os._exit(127)
    return pid


def supervise(pid: int, lifeline: int) -> int:
    """Wait for the command or the lifeline's end; the command's exit status."""
    exited = os.pidfd_open(pid)
    while True:
        readable, _, _ = select.select([exited, lifeline], [], [])
        if exited in readable:
            _, status = os.waitpid(pid, 0)
            code = os.waitstatus_to_exitcode(status)
            return 128 - code if code < 0 else code  # a signal, as a shell reports it
        if lifeline in readable and not os.read(lifeline, 1):
            os.kill(-1, 9)  # the daemon let go: end every process of the sandbox
            return 137


def main(argv: list[str]) -> int:
    lifeline, proxy_socket, separator, command = int(argv[1]), argv[2], argv[3], argv[4:]
    if separator != "--" or not command:
        os.write(2, b"usage: inner LIFELINE_FD PROXY_SOCKET|- -- COMMAND...\n")
        return 2
    env = dict(os.environ)
    if proxy_socket != "-":
        start_relay(proxy_socket, env)
    return supervise(spawn(command, env, lifeline), lifeline)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
