"""netguard.run: the library's synchronous door, inside and outside a running event loop."""

import pytest


def test_ctrl_c_stops_a_run_started_inside_a_running_loop_at_once(tmp_path):
    # A notebook's "interrupt kernel": the run went on to its end in its helper thread, its result thrown away
    import asyncio
    import os
    import signal
    import threading
    import time

    from benchfill import netguard

    stopped = []

    async def long_run():
        try:
            await asyncio.sleep(30)
        finally:
            stopped.append(time.monotonic())

    async def cell():
        return netguard.run(long_run())

    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(cell())
    assert stopped and stopped[0] - started < 5 and time.monotonic() - started < 5


def test_ctrl_c_as_a_notebook_kernel_raises_it_stops_the_run_too():
    # ipykernel's SIGINT raises KeyboardInterrupt in the waiting thread itself
    import asyncio
    import os
    import signal
    import threading
    import time

    from benchfill import netguard

    stopped = []

    async def long_run():
        try:
            await asyncio.sleep(30)
        finally:
            stopped.append(True)

    async def cell():
        signal.signal(signal.SIGINT, signal.default_int_handler)
        return netguard.run(long_run())

    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(cell())
    assert stopped and time.monotonic() - started < 5
