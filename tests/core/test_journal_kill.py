"""A journal writer SIGKILLed at random points: the next load sees every step the killed attempt
acknowledged and every record it left in the store (a step whose loose record exists must never
run again), reads no corrupt copy, and needs no listing (the pack and the tail are at known keys).

The writer is a real process appending from four threads at once (parallel steps share tail
writes; background packs run meanwhile); it prints a step's name only after ``append`` returned.
The parent kills it after a seeded number of those lines, while later appends, tail writes and
pack writes are in flight, then loads the journal as the next attempt would. Local store and a
real S3 server (moto on loopback).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.s3 import new_bucket, s3_server, set_aws_env
from tether.journal import PACK_EVERY, Journal, Record
from tether.stores import LocalStore, open_store

WRITER = textwrap.dedent(
    """
    import sys, threading
    from tether.journal import Journal, Record
    from tether.stores import open_store

    journal = Journal(open_store(sys.argv[1]), sys.argv[2]).load()
    lock = threading.Lock()

    def write(thread):
        for i in range(1000):
            name = f"t{thread}-{i}"
            journal.append(Record("tool", name, 1, "ok", {"i": i}, body=b'"' + b"x" * 1500 + b'"'))
            with lock:
                print(name, flush=True)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    """
)


def kill_after(store_url: str, scope: str, acked: int) -> set[str]:
    """Run the writer, SIGKILL it once it acknowledged ``acked`` steps; the steps it acknowledged."""
    proc = subprocess.Popen([sys.executable, "-c", WRITER, store_url, scope], stdout=subprocess.PIPE, text=True, env=os.environ.copy())
    assert proc.stdout is not None
    seen: set[str] = set()
    try:
        while len(seen) < acked:
            line = proc.stdout.readline()
            assert line, f"the writer ended early: rc={proc.poll()}"
            seen.add(line.strip())
        os.kill(proc.pid, signal.SIGKILL)
        seen.update(line.strip() for line in proc.stdout.read().splitlines())  # printed before the kill landed
    finally:
        proc.kill()
        proc.wait(10)
    return seen


def check_load(store: Any, scope: str, acked: set[str], lists: list[int]) -> None:
    lists.clear()
    journal = Journal(store, scope).load()
    assert lists == [], "the load after a kill listed the journal"
    loaded = {fp for (_, fp, _) in journal.records}
    assert acked <= loaded, f"acknowledged steps lost: {sorted(acked - loaded)[:5]}"
    left = {key.rsplit("/", 1)[1].rsplit("-", 1)[0] for key in store.list(f"journal/{scope}/tool/")}
    assert left <= loaded, f"records in the store the load did not see: {sorted(left - loaded)[:5]}"
    assert journal.counters.corrupt == 0
    assert journal.attempt == 2
    for record in journal.records.values():
        assert record.body == b'"' + b"x" * 1500 + b'"'
    # Its end packs every step (compare-and-swap over the killed writer's pack) and removes the
    # loose copies: each step stored once, none lost.
    journal.close()
    assert not [key for key in store.list(f"journal/{scope}/") if key.endswith(".rec")], "a step is stored twice"
    assert acked <= {fp for (_, fp, _) in Journal(store, scope).load().records}


def test_local_writer_killed_at_random_points(tmp_path):
    class CountingStore(LocalStore):
        def list(self, prefix: str) -> list[str]:
            lists.append(1)
            return super().list(prefix)

    lists: list[int] = []
    rng = random.Random(14)
    for trial in range(6):
        acked = kill_after(str(tmp_path / "store"), f"k{trial}", rng.randint(1, 5 * PACK_EVERY))
        check_load(CountingStore(tmp_path / "store"), f"k{trial}", acked, lists)


@pytest.fixture(scope="module")
def s3_endpoint():
    set_aws_env()
    with s3_server() as endpoint:
        yield endpoint


def test_s3_writer_killed_at_random_points(s3_endpoint):
    url = f"s3://{new_bucket(s3_endpoint)}/kills?endpoint_url={s3_endpoint}"
    store = open_store(url)
    lists: list[int] = []

    def count(**_: Any) -> None:
        lists.append(1)

    store.client.meta.events.register("before-call.s3.ListObjectsV2", count)  # type: ignore[attr-defined]
    try:
        rng = random.Random(5)
        for trial in range(4):
            acked = kill_after(url, f"k{trial}", rng.randint(1, 4 * PACK_EVERY))
            check_load(store, f"k{trial}", acked, lists)
    finally:
        store.client.meta.events.unregister("before-call.s3.ListObjectsV2", count)  # type: ignore[attr-defined]


@pytest.mark.parametrize("appends", [True, False], ids=["growing-tail", "rewritten-tail"])
def test_a_tail_newer_than_the_pack_read_is_not_trusted(tmp_path, appends):
    """A reader that got the pack just before a newer one landed and the tail just after: the tail
    continues a pack it does not have, so it lists and reads the pack again rather than miss the
    records in between (their loose copies went once the newer pack was durable). A tail rewritten
    every step (a store that does not append, as S3) continues the newer pack at the next step;
    a growing one once it is rewritten (``TAIL_APPENDS``)."""
    from tether.journal import TAIL_APPENDS

    class Store(LocalStore):
        pass

    Store.appends = appends
    store = Store(tmp_path)
    writer = Journal(store, "r").load()
    for i in range(PACK_EVERY):
        writer.append(Record("tool", f"a{i}", 1, "ok", {}, body=b"1"))
    deadline = time.monotonic() + 10
    while writer._packer is not None and time.monotonic() < deadline:  # the background pack lands
        time.sleep(0.01)
    old_pack = store.get(writer.pack_key)
    assert old_pack is not None
    old_id = json.loads(old_pack.split(b"\n")[0][len(b"tether-pack 2 ") :])["id"]
    for i in range(PACK_EVERY + 1):
        writer.append(Record("tool", f"b{i}", 1, "ok", {}, body=b"1"))
    while writer._packer is not None and time.monotonic() < deadline:
        time.sleep(0.01)

    def base() -> Any:
        return json.loads((store.get(writer.tail_key) or b"").split(b"\n")[0][len(b"tether-tail 1 ") :])["base"]

    for i in range(2 * TAIL_APPENDS):  # until a tail continues the newer pack
        writer.append(Record("tool", f"last{i}", 1, "ok", {}, body=b"1"))
        if base() != old_id:
            break
    assert base() != old_id
    assert not list((tmp_path / "journal/r/tool").glob("a*.rec")), "a packed step kept its loose record"
    listed: list[str] = []
    first_pack = [old_pack]

    class Watching(LocalStore):
        def get(self, key: str) -> bytes | None:
            if key.endswith("/pack") and first_pack:
                return first_pack.pop()  # what the racing reader saw first
            return super().get(key)

        def list(self, prefix: str) -> list[str]:
            listed.append(prefix)
            return super().list(prefix)

    Watching.appends = appends
    reader = Journal(Watching(tmp_path), "r").load()
    assert len(reader.records) == len(writer.records) and listed == ["journal/r/"]


def test_a_new_journal_loads_without_a_listing(tmp_path):
    listed: list[str] = []

    class Watching(LocalStore):
        def list(self, prefix: str) -> list[str]:
            listed.append(prefix)
            return super().list(prefix)

    journal = Journal(Watching(tmp_path), "fresh").load()
    assert journal.attempt == 1 and journal.records == {} and listed == []
    assert Path(tmp_path, "journal/fresh/attempts/00001").exists()


def test_steps_are_added_at_the_end_of_the_tail_and_a_torn_append_costs_only_its_step(tmp_path):
    """Where the store appends (``LocalStore``), a step is added at the end of the tail, not the tail
    rewritten each step, until it holds ``TAIL_APPENDS`` entries (then it is rewritten holding only
    what the pack lacks). A writer killed in the middle of an append leaves a last entry cut short:
    the next attempt does not trust that tail (it lists, as for any torn copy) and loads every
    acknowledged step, not the one cut short, then writes on a tail it took over whole. An entry
    that fails its own checksum is not trusted either."""
    from tether.journal import GROWING_TAIL_MAGIC, TAIL_APPENDS

    class Counting(LocalStore):
        def write_if(self, key: str, data: bytes, version: str | None) -> str | None:
            writes.append(key.rsplit("/", 1)[1])
            return super().write_if(key, data, version)

        def append_if(self, key: str, data: bytes, version: str) -> str | None:
            writes.append("append")
            return super().append_if(key, data, version)

        def list(self, prefix: str) -> list[str]:
            lists.append(1)
            return super().list(prefix)

    writes: list[str] = []
    lists: list[int] = []
    store = Counting(tmp_path, fsync=False)
    first = Journal(store, "g")
    first.single_copy = True  # as run_agent's runs: the tail is a step's one copy until a pack holds it
    first.load()
    steps = TAIL_APPENDS + 5
    for i in range(steps):
        first.append(Record("tool", f"s{i}", 1, "ok", {"i": i}, body=b'"ok"'))
        if first._packer is not None:  # each background pack lands before the next step (else a late one
            first._packer.join()  # leaves the rewritten tail more to hold, and the next rewrite comes sooner)
    # The takeover, then one rewrite once TAIL_APPENDS entries were added (holding only the step the pack lacks).
    assert (writes.count("tail"), writes.count("append")) == (2, steps - 1), writes
    tail = tmp_path / "journal" / "g" / "tail"
    assert tail.read_bytes().startswith(GROWING_TAIL_MAGIC)
    lists.clear()
    assert len(Journal(store, "g").load().records) == steps and lists == []  # killed (no close): all there, no listing

    cut = Record("tool", "cut", 1, "ok", {}, body=b'"never acknowledged"').encode()
    frame = len(cut).to_bytes(8, "big") + cut
    with open(tail, "ab") as f:  # the writer killed half way through its append
        f.write(frame[: len(frame) // 2])
    lists.clear()
    second = Journal(store, "g")
    second.single_copy = True
    second.load()
    assert lists, "a tail cut short was trusted"
    assert {fp for _, fp, _ in second.records} == {f"s{i}" for i in range(steps)}
    assert second.counters.corrupt == 0 and second.attempt == 3
    second.append(Record("tool", "after", 1, "ok", {}, body=b'"ok"'))
    lists.clear()
    third = Journal(store, "g").load()
    assert {fp for _, fp, _ in third.records} == {f"s{i}" for i in range(steps)} | {"after"} and lists == []

    data = bytearray(tail.read_bytes())
    data[-20] ^= 0xFF  # inside the last entry's checksum
    tail.write_bytes(bytes(data))
    lists.clear()
    Journal(store, "g").load()
    assert lists, "a corrupt entry in a growing tail was trusted"
