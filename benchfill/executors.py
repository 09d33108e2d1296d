"""Where a sweep's units run: in this process (``local``), or as Ray tasks on a cluster (``ray``).

A run of the sweep is three steps, each the run's own ``benchfill.run.execute``. *Prepare*: the fit
(``gaps_only=[]``), whose probe-panel rollouts every gap search needs, done once before the searches so
that no two units make the same call. *Search*: one unit per gap (``gaps_only=[g]``), the gap's search
and the confirmation of its chosen item, each call cached in the store as it comes back. *Finish*:
``execute`` on the driver, which finds every call of the run in the cache, so it repeats none, and
writes the run directory exactly as ``benchfill run`` does (report, plots, review queue). ``local``
runs the three in one go per run (``execute`` alone).

With Ray every node reads and writes one PostgreSQL store, so a unit retried on another node after its
node died finds every call it had completed there (the units write each call as it comes back,
``cache.write_through``). The simulated world of a run is served from the driver, one server per run on
the port its run directory fixes, so that the cache keys of all units are those of the run itself.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from benchfill.errors import BenchfillError, ConfigError

INSTALL_RAY = "--executor ray needs Ray, an optional extra: pip install 'benchfill[ray]'"


# -- local -------------------------------------------------------------------------------------------
def run_local(sweep, tracker) -> list[tuple[str, str]]:
    """Every run in this process, one after another (its gaps searched concurrently, as in a run)."""
    from dataclasses import replace

    from benchfill import netguard
    from benchfill.run import execute

    failed: list[tuple[str, str]] = []
    for plan in sweep.to_run:
        n = max(len(plan.units), 1)
        tracker.started(n)
        before = _sent()
        # In this process a run can say how its rounds go, as `benchfill run` does: a unit can take minutes
        # (a large benchmark's anchor rollouts), and the sweep's own line moves only when one ends.
        opts = replace(plan.opts, progress=tracker.enabled, progress_label=plan.label)
        try:
            run_dir = netguard.run(execute(opts))
        except BenchfillError as exc:
            tracker.failure(n)
            failed.append((plan.label, str(exc)))
            continue
        tracker.finished(_report_spend(run_dir), n, sent=_sent(before))
    return failed


def _sent(since: dict[str, int] | None = None) -> dict[str, int]:
    """The search's calls this process has sent (not served from the cache), or sent ``since``."""
    from benchfill.engine.backend import SENT

    return {k: v - (since or {}).get(k, 0) for k, v in SENT.items()}


def _report_spend(run_dir: Path) -> dict[str, int]:
    import json

    try:
        return json.loads((run_dir / "report.json").read_text())["spend"]
    except (OSError, ValueError, KeyError):
        return {}


# -- one unit, wherever it runs ----------------------------------------------------------------------
def run_unit(opts_fields: dict[str, Any], gap: int | None, sim_url: str | None) -> dict[str, Any]:
    """Prepare a run (``gap`` None: its fit) or search one of its gaps, through the run's own
    ``execute``; the gap's spend, JSON-ready. Runs in a Ray worker: every call is written as it
    completes, so a retry elsewhere repeats none."""
    from benchfill import cache, netguard
    from benchfill.run import RunOptions, execute

    if netguard.enabled():  # a Ray worker is no CLI process: it holds itself to loopback here, as the CLI does
        netguard.install()
    cache.write_through(True)
    opts = RunOptions(**opts_fields)
    before = _sent()
    run_dir = netguard.run(execute(opts, sim_url=sim_url, gaps_only=[] if gap is None else [gap]))
    out: dict[str, Any] = {"spend": {} if gap is None else _gap_spend(opts, run_dir, gap), "sent": _sent(before)}
    try:
        import ray

        if ray.is_initialized():
            out["node"] = ray.get_runtime_context().get_node_id()
    except ImportError:
        pass
    return out


def _gap_spend(opts, run_dir: Path, gap: int) -> dict[str, int]:
    """What the gap's search spent, as the run recorded it with the gap (``GapState``)."""
    import json

    from benchfill.schema import GapState
    from benchfill.store import open_run_store

    store = open_run_store(run_dir, opts.store)
    try:
        with store.session() as s:
            state = store.get(s, GapState, gap)
            return json.loads(state.state_json).get("spend", {}) if state is not None else {}
    finally:
        store.close()


# -- Ray ---------------------------------------------------------------------------------------------
def run_ray(sweep, tracker, address: str | None) -> list[tuple[str, str]]:
    """Every unit as a Ray task on the cluster at ``address`` (or ``RAY_ADDRESS``); runs finish here."""
    try:
        import ray
    except ImportError:
        raise ConfigError(INSTALL_RAY) from None
    _require_shared_store(sweep)
    address = address or os.environ.get("RAY_ADDRESS")
    if not address:
        raise ConfigError("--executor ray: name the cluster with --ray-address HOST:PORT or RAY_ADDRESS")
    from benchfill.store import Store

    Store(sweep.store).close()  # the schema, created once here rather than raced by the first units
    started_here = not ray.is_initialized()
    if started_here:
        try:
            # A cluster on loopback: this driver joins it as 127.0.0.1 too (Ray would otherwise name it
            # by the address it routes to the internet from, which a loopback-only head cannot reach).
            local = address.rsplit(":", 1)[0] in ("127.0.0.1", "localhost")
            ray.init(address=address, logging_level="warning", log_to_driver=False, configure_logging=False,
                     **({"_node_ip_address": "127.0.0.1"} if local else {}))
        except Exception as exc:  # unreachable head, version mismatch
            raise ConfigError(f"--ray-address {address}: cannot join the Ray cluster: "
                              f"{exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
    # A unit is retried on another node when its node dies (Ray's own retry of system failures);
    # an exception it raises is final (a bad benchmark fails the same everywhere).
    remote = ray.remote(num_cpus=1, max_retries=4, retry_exceptions=False)(run_unit)
    driver = _Driver(sweep, tracker, remote)
    sweep.info["driver"] = driver  # its counts, for whoever watches the sweep (the acceptance test)
    try:
        return driver.run(ray)
    finally:
        driver.stop_servers()
        if started_here:
            ray.shutdown()


def _require_shared_store(sweep) -> None:
    """A PostgreSQL URL without a password (the check every run makes of its --store, made here before the
    URL goes to every task of the cluster)."""
    from benchfill.store import check_store_url

    url = sweep.store or ""
    where = sweep.store_given if url and sweep.store_given else f"{sweep.source}: field store"
    if not url.startswith("postgresql"):
        what = f"got {url.split(':', 1)[0]}" if url else "none given, so each run would keep its own SQLite file"
        raise ConfigError(f"{where}: --executor ray needs a PostgreSQL URL every node "
                          f"can reach (store = \"postgresql+psycopg://user@host/db\" or --store; {what})")
    check_store_url(url, where)


class _Driver:
    """Submits each run's prepare unit, then its gap units, then finishes it here."""

    def __init__(self, sweep, tracker, remote):
        self.sweep, self.tracker, self.remote = sweep, tracker, remote
        self.servers: dict[str, Any] = {}  # run label -> the simulated world's server, while units need it
        self.failed: list[tuple[str, str]] = []
        self.requests_stopped = 0  # chat requests the simulated worlds of finished runs answered
        self.units: list[dict[str, Any]] = []  # what each unit reported (its spend, traffic, node)

    def served(self) -> int:
        """Chat requests answered by the runs' simulated worlds so far (every call the sweep made)."""
        return self.requests_stopped + sum(_requests(s) for s in list(self.servers.values()))

    def run(self, ray) -> list[tuple[str, str]]:
        from dataclasses import asdict

        inflight: dict[Any, tuple[Any, int | None]] = {}  # ref -> (plan, gap or None for prepare)
        left: dict[str, int] = {}  # run label -> gap units still running
        for plan in self.sweep.to_run:
            url = self._serve(plan)
            fields = asdict(plan.opts)
            inflight[self.remote.remote(fields, None, url)] = (plan, None)
            self.tracker.started(max(len(plan.units), 1))
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=2.0)
            if not ready:
                self.tracker.show()
                continue
            ref = ready[0]
            plan, gap = inflight.pop(ref)
            try:
                out = ray.get(ref)
            except Exception as exc:  # the unit's own error, or retries exhausted
                self._fail(plan, gap, exc, left)
                continue
            if gap is None:
                self.units.append({"run": plan.label, "gap": None, **out})
                if not plan.units:  # the oracle: nothing to search
                    self._finish(plan, 1, out)
                    continue
                left[plan.label] = len(plan.units)
                fields = asdict(plan.opts)
                url = self._url(plan)
                for g in plan.units:
                    inflight[self.remote.remote(fields, g, url)] = (plan, g)
                continue
            self.units.append({"run": plan.label, "gap": gap, **out})
            self.tracker.finished(out.get("spend"), sent=out.get("sent"))
            left[plan.label] -= 1
            if left[plan.label] == 0:
                self._finish(plan, 0, out)
        return self.failed

    def _fail(self, plan, gap, exc, left) -> None:
        msg = _one_line(exc)
        what = plan.label + ("" if gap is None else f"/gap{gap}")
        self.failed.append((what, msg))
        if gap is None:  # its gap units will never start
            self.tracker.failure(max(len(plan.units), 1))
        else:
            self.tracker.failure()
            left[plan.label] = -len(plan.units)  # never finishes: the run stays without a report
        self._stop(plan)

    def _finish(self, plan, units: int, out) -> None:
        """Write the run directory here; every call of the run is in the store by now."""
        from benchfill import netguard
        from benchfill.run import execute

        try:
            # The run's world as its units saw it: the children they made are registered there.
            netguard.run(execute(plan.opts, sim_url=self._url(plan)))
        except BenchfillError as exc:
            self.failed.append((plan.label, str(exc)))
            if units:
                self.tracker.failure(units)
            return
        finally:
            self._stop(plan)
        if units:
            self.tracker.finished(_report_spend(plan.run_dir), units)

    def _serve(self, plan) -> str | None:
        if plan.opts.resolved_backend() != "sim":
            return None
        from benchfill.engine.backend import sim_port, start_sim
        from benchfill.run import load_benchmark

        plan.run_dir.mkdir(parents=True, exist_ok=True)
        _world, server, _config = start_sim(plan.opts, load_benchmark(plan.opts), plan.run_dir)
        self.servers[plan.label] = server
        if server.port != sim_port(plan.run_dir):
            raise ConfigError(f"{plan.run_dir}: the port of its simulated world ({sim_port(plan.run_dir)}) is "
                              "busy (another run of this directory?); stop it and rerun")
        return server.base_url

    def _url(self, plan) -> str | None:
        server = self.servers.get(plan.label)
        return None if server is None else server.base_url

    def _stop(self, plan) -> None:
        server = self.servers.pop(plan.label, None)
        if server is not None:
            self.requests_stopped += _requests(server)
            server.stop()

    def stop_servers(self) -> None:
        for label in list(self.servers):
            server = self.servers.pop(label)
            self.requests_stopped += _requests(server)
            server.stop()


def _requests(server) -> int:
    return sum(int(c.get("requests", 0)) for c in server.stats["models"].values())


def _one_line(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None)  # a RayTaskError carries the unit's own exception
    e = cause if isinstance(cause, BaseException) else exc
    text = str(e).strip().splitlines()
    return f"{e.__class__.__name__}: {text[0] if text else ''}" if not isinstance(e, BenchfillError) else text[0]

