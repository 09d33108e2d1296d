"""Loopback-only mode: with ``BENCHFILL_LOOPBACK_ONLY=1`` a benchfill process refuses to connect to,
or look up, anything beyond this machine.

The test suite sets it so that the processes it starts (the CLI, probe workers) are held to the same
rule as the tests themselves; a user can set it to prove that a run on the simulated world stays
offline. It works at the level of Python's ``socket`` module (connect, connect_ex, sendto, sendmsg and the
name look-ups getaddrinfo, gethostbyname, gethostbyname_ex, gethostbyaddr, getnameinfo), so a process that honours it
runs its event loop on asyncio, not uvloop (whose C sockets would go around it): ``run`` picks the loop.
Code that calls the C module ``_socket`` itself, or a C library's own sockets, is not held by it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import errno
import ipaddress
import os
import re
import socket
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

ENV = "BENCHFILL_LOOPBACK_ONLY"


class NetworkBlocked(ConnectionRefusedError):
    """A connection or name lookup beyond loopback, refused in loopback-only mode."""

    def __init__(self, message: str):
        # errno and strerror set, so that libraries quoting an OSError's strerror (aiohttp) keep the reason
        super().__init__(errno.ECONNREFUSED, message)


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes")


# The functions ``install`` replaced, by (owner, name): the test suite's ``live`` marker puts them back.
REAL: dict[tuple[Any, str], Any] = {}


def install() -> None:
    """Refuse every connection, datagram and name lookup that is not loopback, for the rest of this process."""
    if getattr(socket.socket.connect, "_benchfill_guard", False):
        return
    for owner, names in ((socket.socket, ("connect", "connect_ex", "sendto", "sendmsg")),
                         (socket, ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr", "getnameinfo"))):
        REAL.update({(owner, name): getattr(owner, name) for name in names})
    real = {name: fn for (_, name), fn in REAL.items()}

    def connect(self, address):
        _check(address)
        return real["connect"](self, address)

    def connect_ex(self, address):
        _check(address)
        return real["connect_ex"](self, address)

    # A datagram (or a TCP Fast Open connect) names its address on the send, not on a connect
    def sendto(self, data, *args):
        if args:  # sendto(data, address) or sendto(data, flags, address); none: the real one says what is missing
            _check(args[-1])
        return real["sendto"](self, data, *args)

    def sendmsg(self, buffers, *args):
        if len(args) >= 3 and args[2] is not None:  # sendmsg(buffers, ancdata, flags, address)
            _check(args[2])
        return real["sendmsg"](self, buffers, *args)

    def lookup(name):
        def guarded(host, *args, **kwargs):
            _check_host(host)
            return real[name](host, *args, **kwargs)
        return guarded

    def getnameinfo(sockaddr, flags):  # a reverse look-up of the address's host
        _check_host(sockaddr[0])
        return real["getnameinfo"](sockaddr, flags)

    connect._benchfill_guard = True
    socket.socket.connect, socket.socket.connect_ex = connect, connect_ex
    socket.socket.sendto, socket.socket.sendmsg = sendto, sendmsg
    for name in ("getaddrinfo", "gethostbyname", "gethostbyname_ex", "gethostbyaddr"):
        setattr(socket, name, lookup(name))
    socket.getnameinfo = getnameinfo


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to completion on uvloop where it is installed (about a fifth less CPU per event
    than asyncio's loop: probe traffic is CPU-bound on small machines), or on asyncio in
    loopback-only mode, whose guard sits on Python's sockets that uvloop does not use.

    Called where an event loop already runs in this thread (a Jupyter cell), it runs ``coro`` on a
    loop of its own in a helper thread and waits for it: the synchronous API works there unchanged.
    """
    from benchfill import proxies

    try:
        proxies.prepare()
    except BaseException:
        coro.close()  # never started: closed, not left to warn "never awaited"
        raise
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        running = False
    else:
        running = True
    if not running:
        # run outside the except block: there, every exception of the run had carried the RuntimeError
        # "no running event loop" as its context, and messages that follow the cause chain (llm._describe)
        # stopped at it and said "HTTP 500" for a refused connection
        return _run_here(coro)
    from concurrent.futures import ThreadPoolExecutor

    held: dict[str, Any] = {}

    async def tracked() -> T:
        held["loop"], held["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await coro

    def stop() -> None:
        if "loop" in held:
            held["loop"].call_soon_threadsafe(held["task"].cancel)
        with contextlib.suppress(BaseException):
            done.result()  # the run's own cleanup, as on Ctrl-C outside a loop

    # Ctrl-C stops the run at once, as it does outside a loop: a notebook's "interrupt kernel" raises
    # KeyboardInterrupt in this thread; asyncio.run's runner only cancels its task, which waits here. Either
    # way the pool's exit had waited for the whole run to end, and its result was thrown away.
    outer = asyncio.current_task()
    with ThreadPoolExecutor(1, thread_name_prefix="benchfill-run") as pool:
        # in the caller's context: its context variables (how refusals name options, benchfill.run) go along
        done = pool.submit(contextvars.copy_context().run, _run_here, tracked())
        while True:
            try:
                return done.result(timeout=0.1)
            except TimeoutError:
                if outer is not None and outer.cancelling():
                    stop()
                    raise asyncio.CancelledError from None
            except KeyboardInterrupt:
                stop()
                raise


def _run_here(coro: Coroutine[Any, Any, T]) -> T:
    if not enabled():
        try:
            import uvloop
        except ImportError:  # pragma: no cover - uvloop is POSIX-only
            pass
        else:
            return uvloop.run(_stoppable(coro))
    return asyncio.run(_stoppable(coro))


async def _stoppable(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``, cancelled on SIGTERM as the runner cancels it on Ctrl-C, then ``Terminated``: raised from
    a signal handler instead, the exception could land inside one of the loop's own callbacks, which logs
    it and goes on."""
    import signal
    import warnings

    from benchfill.errors import Terminated

    loop, task, hit = asyncio.get_running_loop(), asyncio.current_task(), []
    previous = signal.getsignal(signal.SIGTERM)
    # litellm's acompletion has a worker thread build the provider's request coroutine, then awaits it.
    # Cancelled while that thread runs (Ctrl-C, SIGTERM, a failed sibling call), the coroutine is never
    # handed over, and Python warns "coroutine 'OpenAIChatCompletion.acompletion' was never awaited"
    # when it is collected, in the middle of the cancellation or after the one-line "interrupted". The
    # request was never sent, so that one warning is noise; any other never-awaited coroutine still shows.
    warnings.filterwarnings("ignore", message=r"coroutine '\w+\.acompletion' was never awaited",
                            category=RuntimeWarning)

    def on_term() -> None:
        hit.append(True)
        task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_term)
        added = True
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
        added = False
    from benchfill import llm_loop
    from benchfill.limits import watch_stalls

    watch = asyncio.ensure_future(watch_stalls())  # says so when an endpoint stops answering
    llm_loop.hold()  # litellm's clients stay open while this runs, and are closed after the last run
    try:
        return await coro
    except asyncio.CancelledError:
        if hit:
            raise Terminated() from None
        raise
    finally:
        watch.cancel()
        if added:
            loop.remove_signal_handler(signal.SIGTERM)
            signal.signal(signal.SIGTERM, previous)  # removal leaves the default, not the CLI's handler
        await llm_loop.let_go()


async def off_loop(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    """``fn(*args, **kw)`` in a daemon thread, awaited: a long computation inside a run (a fit, the misfit
    allowance: 20 s on mmlu-pro) would hold the loop, and Ctrl-C and SIGTERM, which the loop handles, would
    wait for it to end. A stop does not wait for the thread either (``asyncio.to_thread``'s are joined at
    exit): what it computes is recomputed by the rerun."""
    import threading

    loop = asyncio.get_running_loop()
    done: asyncio.Future = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not done.done():
            done.set_result(value) if ok else done.set_exception(value)

    def work() -> None:
        try:
            ok, value = True, fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001  (the caller's error, raised where it awaits)
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop has closed: nobody waits any more
            pass

    threading.Thread(target=work, name=f"benchfill-{getattr(fn, '__name__', 'work')}", daemon=True).start()
    return await done


def _check(address) -> None:
    if isinstance(address, (str, bytes)):  # a Unix socket path
        return
    if address[0] not in ("localhost", "") and not is_loopback(address[0]):
        raise NetworkBlocked(f"{ENV}: refused to connect to {address[0]}:{address[1]} (loopback only)")


def _check_host(host) -> None:
    """A name or address to look up: loopback only (None, "" and "localhost" are this machine)."""
    if host not in (None, "", "localhost") and not is_loopback(host):
        raise NetworkBlocked(f"{ENV}: refused to look up {host!r} (loopback only)")


def is_loopback(host) -> bool:
    """Whether ``host`` is a loopback address (names other than ``localhost`` are not)."""
    if isinstance(host, bytes):
        host = host.decode()
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def on_this_machine(host: str) -> bool:
    """Whether a connection to ``host`` stays on this machine, without a DNS lookup: the loopback names, a
    loopback address however written (127.1, 0x7f000001, an IPv4-mapped IPv6 one) and the unspecified
    address, which Linux connects to locally. Wider than ``is_loopback``, which the guard holds to the
    addresses a socket is given."""
    host = host.rstrip(".")  # "localhost." is localhost
    if host in ("localhost", "ip6-localhost", "ip6-loopback") or host.endswith(".localhost"):
        return True
    try:
        addr = ipaddress.ip_address(host.split("%")[0])
    except ValueError:
        if not re.fullmatch(r"[0-9A-Fa-fXx.]+", host):  # (inet_aton stops at a space: "127.0.0.1 evil.com")
            return False
        try:  # the shorthand forms inet_aton takes, as the socket will (127.1 is 127.0.0.1)
            addr = ipaddress.ip_address(socket.inet_aton(host))
        except (OSError, ValueError):
            return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback or addr.is_unspecified
