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
