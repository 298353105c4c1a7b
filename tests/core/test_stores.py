"""Stores: atomic writes, conditional create, compare-and-swap, listing; both backends for real."""

from __future__ import annotations

import os

import pytest

from tether.errors import StoreUnavailable
from tether.stores import LocalStore, open_store
from tether.stores.s3 import S3Store


def test_put_get_list_delete(store_url):
    store = open_store(store_url)
    assert store.get("a/b.json") is None
    store.put("a/b.json", b"one")
    store.put("a/c.json", b"two")
    store.put("z.json", b"three")
    assert store.get("a/b.json") == b"one"
    assert store.list("a/") == ["a/b.json", "a/c.json"]
    assert store.get_many(["a/b.json", "a/c.json", "a/missing"]) == {"a/b.json": b"one", "a/c.json": b"two"}
    store.delete("a/b.json")
    assert store.list("a/") == ["a/c.json"]


def test_create_is_exclusive(store_url):
    store = open_store(store_url)
    assert store.create("k", b"first") is True
    assert store.create("k", b"second") is False
    assert store.get("k") == b"first"


def test_replace_is_compare_and_swap(store_url):
    store = open_store(store_url)
    store.put("head", b"v1")
    _, version = store.get_versioned("head")
    assert store.replace("head", b"v2", version) is True
    assert store.replace("head", b"v3", version) is False  # stale version loses, nothing written
    assert store.get("head") == b"v2"


def test_write_if_is_compare_and_swap_that_returns_the_new_version(store_url):
    """What fences an attempt (tether.journal): absent-only with no version, then each write on
    the version the previous one returned; a writer holding an older version is refused."""
    store = open_store(store_url)
    first = store.write_if("tail", b"attempt 1", None)
    assert first is not None and store.write_if("tail", b"again", None) is None  # exists: refused
    newer = store.write_if("tail", b"attempt 2", first)
    assert newer is not None and newer == store.get_versioned("tail")[1]
    assert store.write_if("tail", b"attempt 1, late", first) is None  # the older writer loses, nothing written
    assert store.get("tail") == b"attempt 2"
    assert store.write_if("tail", b"attempt 2, step", newer) is not None


def test_local_append_if_adds_at_the_end_on_the_version_it_was_given(tmp_path, fsynced):
    """The journal's growing tail (``Store.append_if``): added at the end on the version the last
    write returned, synced, the new version returned; on an older version (a newer attempt took the
    tail over) or to an object that is gone, nothing is added."""
    store = LocalStore(tmp_path / "s")
    assert store.appends
    first = store.write_if("journal/r/tail", b"head\n", None)
    assert first is not None
    synced = fsynced
    synced.clear()
    second = store.append_if("journal/r/tail", b"one", first)
    assert second is not None and second == store.get_versioned("journal/r/tail")[1]
    assert store.get("journal/r/tail") == b"head\none" and synced == [f"{store.root}/journal/r/tail"]
    assert store.append_if("journal/r/tail", b"late", first) is None  # an older version: refused
    taken = store.write_if("journal/r/tail", b"attempt 2\n", second)  # a newer attempt's takeover
    assert taken is not None and store.append_if("journal/r/tail", b"older", second) is None
    assert store.get("journal/r/tail") == b"attempt 2\n"
    assert store.append_if("journal/r/gone", b"x", taken) is None and store.get("journal/r/gone") is None
    assert store.list("journal/") == ["journal/r/tail"]  # no temp file, nothing created


def test_local_append_that_fails_adds_nothing(tmp_path):
    """A disk that fills up in the middle of an append (here the file size limit: the write is cut
    short, then refused) leaves the object as it was, and the next append on the same version works."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent(
        """
        import resource, signal, sys
        from tether.errors import StoreUnavailable
        from tether.stores import LocalStore

        store = LocalStore(sys.argv[1])
        version = store.write_if("tail", b"x" * 1000, None)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1500, resource.RLIM_INFINITY))
        try:
            store.append_if("tail", b"y" * 1000, version)
            print("appended")
        except StoreUnavailable:
            print("refused")
        print(store.get("tail") == b"x" * 1000, store.get_versioned("tail")[1] == version)
        resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
        print(store.append_if("tail", b"z", version) is not None, store.get("tail")[-2:])
        """
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert out.stdout.split("\n")[:3] == ["refused", "True True", "True b'xz'"], out.stdout + out.stderr


def test_local_full_disk_leaves_nothing_visible(tmp_path, monkeypatch):
    store = LocalStore(tmp_path)
    store.put("rec", b"old")
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StoreUnavailable):
        store.put("rec", b"new")
    with pytest.raises(StoreUnavailable):
        store.create("other", b"x")
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert store.get("rec") == b"old"
    assert store.list("") == ["rec"]  # no temp file left behind


def test_s3_outage_is_unavailable(s3_endpoint):
    store = S3Store("bucket", "p", endpoint_url="http://127.0.0.1:9", max_attempts=2)  # nothing listens on port 9
    with pytest.raises(StoreUnavailable):
        store.put("k", b"v")
    with pytest.raises(StoreUnavailable):
        store.get("k")


def test_local_folder_removed_between_writes(tmp_path):
    """The store remembers which folders exist (one mkdir per folder); one removed behind its
    back is made again, not a failed write."""
    import shutil

    store = LocalStore(tmp_path / "store")
    store.put("journal/run-a/tail", b"one")
    shutil.rmtree(tmp_path / "store" / "journal")
    store.put("journal/run-a/tail", b"two")
    assert store.create("journal/run-a/model/x-1.rec", b"rec") is True
    assert store.get("journal/run-a/tail") == b"two"


@pytest.mark.parametrize("key", ["../outside", "a/../../outside", "/etc/passwd", "a/../..", ""])
def test_local_key_never_escapes_the_store(tmp_path, key):
    from tether.errors import ConfigError

    store = LocalStore(tmp_path / "store")
    with pytest.raises(ConfigError):
        store.put(key, b"x")
    assert not (tmp_path / "outside").exists()


def test_a_writer_killed_mid_write_leaves_no_temp_file_behind(tmp_path):
    """A process killed between creating its temp file and renaming it leaves a `.tmp-*` (0 bytes
    if the kill came before the write): the next attempt of the run removes it, in the journal's
    folder and in `attempts/`, once its writer is gone and it is stale; a live writer's is kept."""
    import subprocess
    import sys
    import time

    from tether.journal import Record
    from tether.run import Run

    store = tmp_path / "store"
    Run("killed", str(store))  # attempt 1 made the folders
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
    old = time.time() - 3600
    left = []
    for folder in (store / "journal" / "killed", store / "journal" / "killed" / "attempts"):
        for name in (f".tmp-{dead}-0123456789abcdef", ".tmp-00112233445566778899aabbccddeeff"):  # this format and the older one
            (folder / name).write_bytes(b"")
            os.utime(folder / name, (old, old))
            left.append(folder / name)
        fresh = folder / f".tmp-{os.getppid()}-fedcba9876543210"  # a writer still alive
        fresh.write_bytes(b"")
        os.utime(fresh, (old, old))
    retry = Run("killed", str(store))  # claims attempt 2 (a write into attempts/) ...
    assert retry.attempt == 2
    _, key = retry.journal.claim("tool", "f" * 64)
    retry.journal.append(Record("tool", key[1], key[2], "ok", {"tool": "t"}, body=b"1"))  # ... and records a step
    assert [p for p in left if p.exists()] == [], "a dead writer's temp file was left behind"
    assert (store / "journal" / "killed" / "attempts" / f".tmp-{os.getppid()}-fedcba9876543210").exists()


def test_a_durable_local_write_syncs_the_file_then_its_name(tmp_path, fsynced):
    """A node crash must not undo a write that returned: the file's data is synced before it is
    renamed (or linked) into place, and the folder holding its new name after. Without the second
    sync ext4 commits the rename only with its next journal commit, seconds later, and a step
    already handed on could revert to the tail before it. New folders' names are synced too."""
    synced = fsynced
    store = LocalStore(tmp_path / "s")
    root = str(store.root)
    store.put("runs/r/journal/tail", b"one")
    assert [os.path.basename(p).startswith(".tmp-") for p in synced[-2:]] == [True, False]
    assert synced[-1] == f"{root}/runs/r/journal"
    assert {f"{root}/runs", f"{root}/runs/r"} <= set(synced)  # the folders made for it
    synced.clear()
    assert store.create("runs/r/journal/once", b"x") and store.write_if("runs/r/journal/tail", b"two", None) is None
    assert synced[-1] == f"{root}/runs/r/journal"
    synced.clear()
    LocalStore(tmp_path / "s", fsync=False).put("runs/r/journal/beat", b"1")
    assert synced == []  # unsynced (the fence's announcements): nothing
