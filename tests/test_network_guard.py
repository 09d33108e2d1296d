import socket

import pytest
from conftest import NetworkBlocked


def test_remote_connect_is_blocked():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(NetworkBlocked):
            s.connect(("93.184.216.34", 80))
    finally:
        s.close()


def test_remote_resolution_is_blocked():
    with pytest.raises(NetworkBlocked):
        socket.getaddrinfo("api.openai.com", 443)


def test_datagrams_and_fast_open_beyond_loopback_are_blocked():
    """A datagram names its address on the send, not on a connect: UDP to this machine's own non-loopback
    address had got through, and so had a TCP Fast Open connect (sendto with MSG_FASTOPEN)."""
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        with pytest.raises(NetworkBlocked):
            u.sendto(b"hello", ("192.0.2.2", 9))
        with pytest.raises(NetworkBlocked):
            u.sendto(b"hello", 0, ("192.0.2.2", 9))
        with pytest.raises(NetworkBlocked):
            u.sendmsg([b"hello"], [], 0, ("192.0.2.2", 9))
        # loopback stays open
        r = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        r.bind(("127.0.0.1", 0))
        u.sendto(b"hi", r.getsockname())
        u.sendmsg([b"there"], [], 0, r.getsockname())
        assert r.recv(16) == b"hi" and r.recv(16) == b"there"
        r.close()
    finally:
        u.close()
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        with pytest.raises(NetworkBlocked):
            t.sendto(b"GET /", getattr(socket, "MSG_FASTOPEN", 0x20000000), ("192.0.2.2", 80))
    finally:
        t.close()


@pytest.mark.parametrize("lookup", ["gethostbyname", "gethostbyname_ex", "gethostbyaddr"])
def test_the_older_name_lookups_are_blocked_too(lookup):
    with pytest.raises(NetworkBlocked):
        getattr(socket, lookup)("api.openai.com" if lookup != "gethostbyaddr" else "8.8.8.8")
    if lookup != "gethostbyaddr":  # (127.0.0.1's reverse entry depends on the machine's /etc/hosts)
        assert getattr(socket, lookup)("localhost")


def test_a_reverse_look_up_by_getnameinfo_is_blocked_and_the_stdlib_copes_with_a_blocked_one():
    with pytest.raises(NetworkBlocked):
        socket.getnameinfo(("8.8.8.8", 53), 0)
    assert socket.getnameinfo(("127.0.0.1", 80), socket.NI_NUMERICHOST | socket.NI_NUMERICSERV) == ("127.0.0.1", "80")
    # an OSError, as the standard library expects of a failed look-up (getfqdn, http.server's bind)
    assert isinstance(socket.getfqdn(), str)
    from http.server import BaseHTTPRequestHandler, HTTPServer

    HTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler).server_close()


def test_loopback_is_allowed():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.socket()
    try:
        c.connect(srv.getsockname())
    finally:
        c.close()
        srv.close()


def test_processes_the_tests_start_are_held_to_loopback_too():
    import os
    import subprocess
    import sys

    assert os.environ["BENCHFILL_LOOPBACK_ONLY"] == "1"  # inherited by every child process
    code = ("from benchfill.cli import main; import socket\n"
            "main([])\n"
            "socket.create_connection(('192.0.2.1', 80), timeout=2)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "NetworkBlocked" in out.stderr and "192.0.2.1" in out.stderr
    assert "(loopback only)" in out.stderr
    for call in ("socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.1', 9))",
                 "socket.gethostbyname('api.openai.com')", "socket.getnameinfo(('8.8.8.8', 53), 0)"):
        out = subprocess.run([sys.executable, "-c", code.rsplit("\n", 1)[0] + "\n" + call], capture_output=True,
                             text=True, timeout=60)
        assert out.returncode != 0 and "NetworkBlocked" in out.stderr and "(loopback only)" in out.stderr, call


def test_a_ray_workers_unit_holds_itself_to_loopback_too():
    # a Ray worker is no CLI process: run_unit had never installed the guard its environment asked for
    import subprocess
    import sys

    code = ("from benchfill.executors import run_unit; import socket\n"
            "try:\n"
            "    run_unit({'benchmark': 'demo', 'gaps': 0}, None, None)\n"
            "except Exception:\n"
            "    pass\n"
            "socket.getaddrinfo('usage-stats.ray.io', 443)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "NetworkBlocked" in out.stderr and "usage-stats.ray.io" in out.stderr


def test_a_fixture_outside_any_test_is_held_to_loopback(remote_lookup_in_a_module_fixture):
    # the guard was a function-scoped fixture: a module fixture (probe traffic among them) ran unguarded
    assert isinstance(remote_lookup_in_a_module_fixture, NetworkBlocked)


@pytest.fixture(scope="module")
def remote_lookup_in_a_module_fixture():
    try:
        socket.getaddrinfo("example.com", 80)
    except NetworkBlocked as exc:
        return exc
    except OSError as exc:  # a real look-up was tried
        return exc
    return None
