"""A request cancelled while it waits for its answer does not hand that answer to the next.

Why: the IKE daemon talks to its engine over one connection, one request at a time
(ipsec_hil_twin.jsonl.AsyncJsonlClient). A reset (``Daemon.flush``: the fixtures' "as after a
reboot" between tests) cancels the daemon's pending tasks; a task cancelled after its
``add_sa`` was written but before the answer was read left that answer in the stream, and
every later request read the answer of the one before it: a ``list_sas`` got an
``add_sa``'s ``{"ok": true}`` and printed a child with no counters (0 packets), an
``add_sa`` got a stale answer and the next initiate failed without a known cause -- the
four-worker race of issue 15's stop 28 (``test_driver_counters_across_a_rekey``). A real
unix socket server here answers each request with its own op and a sequence number, the
first one slowly enough to be cancelled mid-wait.
"""
from __future__ import annotations

import asyncio
import json

from ipsec_hil_twin.jsonl import AsyncJsonlClient


async def _serve(path: str, slow_op: str, delay: float, seen: list[str]) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = 0
        while line := await reader.readline():
            req = json.loads(line)
            seen.append(req["op"])
            n += 1
            if req["op"] == slow_op:
                await asyncio.sleep(delay)
            writer.write((json.dumps({"ok": True, "op": req["op"], "n": n}) + "\n").encode())
            await writer.drain()
        writer.close()

    return await asyncio.start_unix_server(handle, path)


def test_the_answer_of_a_cancelled_request_is_not_read_by_the_next(tmp_path):
    sock = str(tmp_path / "engine.sock")
    seen: list[str] = []

    async def run() -> list[dict]:
        server = await _serve(sock, "add_sa", 0.3, seen)
        client = AsyncJsonlClient(sock, timeout=5.0)
        try:
            pending = asyncio.ensure_future(client.request({"op": "add_sa"}))
            while "add_sa" not in seen:  # written and being answered: cancel it mid-wait
                await asyncio.sleep(0.01)
            pending.cancel()
            try:
                await pending
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("the request was not cancelled: the test did not test the race")
            await asyncio.sleep(0.5)  # the slow answer has arrived on the old connection by now
            return [await client.request({"op": "list_sas"}), await client.request({"op": "flush"})]
        finally:
            client.close()
            server.close()
            await server.wait_closed()

    answers = asyncio.run(run())
    assert seen[0] == "add_sa" and "list_sas" in seen, f"the server saw {seen}"
    assert [a["op"] for a in answers] == ["list_sas", "flush"], (
        f"answers read after a cancelled add_sa: {answers} (each must be its own request's)")
