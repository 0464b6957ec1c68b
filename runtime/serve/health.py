"""Readiness: are the downstream servers answering? Asked by GET /health.

With the launcher's endpoints file, a role the launcher is restarting reads "restarting".

Checks run on their own small pool with a short timeout, never on the pool that runs
requests, and one check's answer serves every probe for `CACHE_S`: any number of probes
costs at most one round of checks per second, and cannot delay a request.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

from lookahead_reasoning.errors import LookaheadError
from lookahead_reasoning.runtime.servers.connection import Connection
from lookahead_reasoning.runtime.servers.endpoints import ROLES, load_endpoints

CHECK_TIMEOUT_S = 2.0
CACHE_S = 1.0

log = logging.getLogger(__name__)


class Readiness:
    def __init__(self, connection: Connection, endpoints_file: Path | None = None):
        self.urls = {role: connection.backends[role].base_url for role in ROLES}
        self.endpoints_file = endpoints_file
        self.pool = ThreadPoolExecutor(max_workers=len(set(self.urls.values())), thread_name_prefix="lookahead-health")
        self._status: dict[str, str] = {}
        self._checked_at = float("-inf")
        self._pending: asyncio.Future | None = None

    async def status(self) -> dict[str, str]:
        """role -> "ok" or "unreachable" (the URL only goes to the log)."""
        loop = asyncio.get_running_loop()
        if loop.time() - self._checked_at < CACHE_S:
            return self._status
        if self._pending is None:  # probes that come while a check runs wait for that one
            self._pending = asyncio.ensure_future(self._check())
        return await asyncio.shield(self._pending)

    async def _check(self) -> dict[str, str]:
        loop = asyncio.get_running_loop()
        try:
            urls = sorted(set(self.urls.values()))
            answers = await asyncio.gather(*(loop.run_in_executor(self.pool, self._answers, url) for url in urls))
            ok = dict(zip(urls, answers))
            restarting = self._restarting()
            self._status = {role: "restarting" if role in restarting else "ok" if ok[url] else "unreachable"
                            for role, url in self.urls.items()}
            self._checked_at = loop.time()
            return self._status
        finally:
            self._pending = None

    def close(self) -> None:
        """End the pool's threads with the app; a check in flight ends within CHECK_TIMEOUT_S on its own."""
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _restarting(self) -> list[str]:
        if self.endpoints_file is None:
            return []
        try:
            return load_endpoints(self.endpoints_file).restarting
        except LookaheadError as error:  # the launcher stopped, or rewrote the file: nothing is restarting
            log.warning("cannot read %s: %s", self.endpoints_file, error)
            return []

    def _answers(self, url: str) -> bool:
        try:
            code = requests.get(url + "/health", timeout=CHECK_TIMEOUT_S).status_code
        except requests.RequestException as error:
            log.warning("health check of %s failed: %s", url, error)
            return False
        if code != 200:
            log.warning("health check of %s answered HTTP %s", url, code)
        return code == 200
