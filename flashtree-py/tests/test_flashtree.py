"""The flashtree Python package: dict-like trees, ranges, atomic batches,
errors as exceptions, threads, and durability across reopen and kill."""

import os
import signal
import subprocess
import sys
import threading

import pytest

import flashtree

POOL = 8 << 20  # a small pool: pages are evicted and read back
WAL = 4 << 20  # a small preallocated log per worker, so the tests take little disk


@pytest.fixture
def db(tmp_path):
    with flashtree.open(tmp_path / "store", pool_bytes=POOL, wal_bytes_per_worker=WAL) as db:
        yield db


@pytest.fixture
def tree(db):
    return db.tree("t")


def fill(tree, n, prefix=b"k"):
    for i in range(n):
        tree[prefix + b"%06d" % i] = b"v%d" % i


# --- dict-like access ---------------------------------------------------


def test_set_and_get(tree):
    tree[b"a"] = b"1"
    assert tree[b"a"] == b"1"


def test_overwrite(tree):
    tree[b"a"] = b"1"
    tree[b"a"] = b"2"
    assert tree[b"a"] == b"2"


def test_missing_key_raises_key_error(tree):
    with pytest.raises(KeyError) as e:
        tree[b"absent"]
    assert e.value.args[0] == b"absent"


def test_get_with_default(tree):
    tree[b"a"] = b"1"
    assert tree.get(b"a") == b"1"
    assert tree.get(b"b") is None
    assert tree.get(b"b", b"dflt") == b"dflt"
    assert tree.get(b"b", 7) == 7


def test_contains(tree):
    tree[b"a"] = b"1"
    assert b"a" in tree
    assert b"b" not in tree


def test_delete(tree):
    tree[b"a"] = b"1"
    del tree[b"a"]
    assert b"a" not in tree
    with pytest.raises(KeyError):
        del tree[b"a"]
    assert tree.delete(b"a") is False
    tree[b"a"] = b"1"
    assert tree.delete(b"a") is True


def test_put_method(tree):
    tree.put(b"x", b"y")
    assert tree[b"x"] == b"y"


def test_empty_value_and_binary_bytes(tree):
    tree[b"\x00\xff"] = b""
    assert tree[b"\x00\xff"] == b""
    tree[b"bin"] = bytes(range(256))
    assert tree[b"bin"] == bytes(range(256))


def test_str_keys_are_refused(tree):
    with pytest.raises(TypeError):
        tree["text"] = b"v"
    with pytest.raises(TypeError):
        tree[b"k"] = "text"


def test_limits_are_invalid_argument(tree):
    with pytest.raises(flashtree.InvalidArgumentError):
        tree[b""] = b"v"
    with pytest.raises(flashtree.InvalidArgumentError):
        tree[b"k" * 300] = b"v"
    with pytest.raises(flashtree.InvalidArgumentError, match="1024"):
        tree[b"k"] = b"v" * 2000
    assert isinstance(flashtree.InvalidArgumentError("x"), flashtree.Error)


def test_many_records_with_a_tiny_pool(tree):
    fill(tree, 5000)
    for i in range(0, 5000, 97):
        assert tree[b"k%06d" % i] == b"v%d" % i


def test_compact_moves_leaves_and_keeps_every_record(tree):
    keys = [b"k%06d" % ((i * 7919) % 4000) for i in range(4000)]
    for k in keys:
        tree[k] = k * 40
    assert tree.compact() > 0
    assert tree.compact() == 0
    assert [k for k, _ in tree.items()] == sorted(keys)
    assert all(tree[k] == k * 40 for k in keys[::53])


# --- trees ----------------------------------------------------------------


def test_trees_are_separate(db):
    a, b = db.tree("a"), db.tree("b")
    a[b"k"] = b"in a"
    assert b"k" not in b
    assert sorted(db.tree_names()) == ["a", "b"]
    assert a.name == "a"
    assert repr(a) == '<flashtree.Tree "a">'


def test_bad_tree_name(db):
    with pytest.raises(flashtree.InvalidArgumentError):
        db.tree("")


# --- ranges ---------------------------------------------------------------


def test_items_in_key_order(tree):
    for k in [b"c", b"a", b"b"]:
        tree[k] = k.upper()
    assert list(tree.items()) == [(b"a", b"A"), (b"b", b"B"), (b"c", b"C")]


def test_keys_values_and_iter(tree):
    for k in [b"b", b"a"]:
        tree[k] = k + k
    assert list(tree.keys()) == [b"a", b"b"]
    assert list(tree.values()) == [b"aa", b"bb"]
    assert list(tree) == [b"a", b"b"]


def test_range_bounds(tree):
    fill(tree, 3000)
    got = list(tree.keys(start=b"k000100", end=b"k002500"))
    assert got == [b"k%06d" % i for i in range(100, 2500)]


def test_range_reverse(tree):
    fill(tree, 3000)
    got = list(tree.keys(start=b"k000100", end=b"k002500", reverse=True))
    assert got == [b"k%06d" % i for i in reversed(range(100, 2500))]
    assert next(iter(tree.keys(reverse=True))) == b"k002999"


def test_range_bounds_between_keys(tree):
    fill(tree, 10)
    assert list(tree.keys(start=b"k000003x", end=b"k000006x")) == [
        b"k000004",
        b"k000005",
        b"k000006",
    ]
    assert list(tree.keys(start=b"k000003x", end=b"k000006x", reverse=True)) == [
        b"k000006",
        b"k000005",
        b"k000004",
    ]


def test_empty_range(tree):
    fill(tree, 10)
    assert list(tree.items(start=b"z")) == []
    assert list(tree.items(end=b"a")) == []
    assert list(tree.items(start=b"k000005", end=b"k000005")) == []


def test_iterator_is_lazy_and_sees_later_parts(tree):
    fill(tree, 2000)
    it = tree.keys()
    assert next(it) == b"k000000"
    tree[b"zzz"] = b"late"
    assert list(it)[-1] == b"zzz"


# --- get_many ---------------------------------------------------------------


def test_get_many(tree):
    fill(tree, 1000)
    keys = [b"k%06d" % i for i in range(0, 1000, 3)] + [b"absent"]
    values = tree.get_many(keys)
    assert values[:-1] == [b"v%d" % i for i in range(0, 1000, 3)]
    assert values[-1] is None


def test_get_many_empty(tree):
    assert tree.get_many([]) == []


# --- batches --------------------------------------------------------------


def test_batch_commits_at_the_end_of_the_block(db):
    a, b = db.tree("a"), db.tree("b")
    a[b"gone"] = b"x"
    with db.batch() as batch:
        batch.put(a, b"k", b"1")
        batch.put(b, b"k", b"2")
        batch.delete(a, b"gone")
        assert len(batch) == 3
        assert b"k" not in a  # not applied yet
    assert a[b"k"] == b"1" and b[b"k"] == b"2" and b"gone" not in a


def test_batch_is_discarded_on_an_exception(db):
    t = db.tree("t")
    with pytest.raises(RuntimeError):
        with db.batch() as batch:
            batch.put(t, b"k", b"1")
            raise RuntimeError("boom")
    assert b"k" not in t


def test_batch_explicit_commit_and_reuse(db):
    t = db.tree("t")
    batch = db.batch()
    batch.put(t, b"k", b"1")
    batch.commit()
    assert t[b"k"] == b"1"
    with pytest.raises(flashtree.Error, match="already committed"):
        batch.put(t, b"k", b"2")
    with pytest.raises(flashtree.Error):
        batch.commit()


def test_batch_later_entry_wins(db):
    t = db.tree("t")
    with db.batch() as batch:
        batch.put(t, b"k", b"1")
        batch.put(t, b"k", b"2")
    assert t[b"k"] == b"2"


def test_batch_too_large_is_refused(db):
    t = db.tree("t")
    batch = db.batch()
    for i in range(4096):
        batch.put(t, b"%05d" % i, b"v")
    with pytest.raises(flashtree.InvalidArgumentError):
        batch.put(t, b"x", b"v")


def test_batch_with_a_tree_of_another_store(db, tmp_path):
    with flashtree.open(tmp_path / "other", pool_bytes=POOL, wal_bytes_per_worker=WAL) as other:
        foreign = other.tree("t")
        with pytest.raises(flashtree.InvalidArgumentError, match="another store"):
            db.batch().put(foreign, b"k", b"v")


# --- open, close, errors --------------------------------------------------


def test_reopen_keeps_the_data(tmp_path):
    path = tmp_path / "store"
    with flashtree.open(path, pool_bytes=POOL, wal_bytes_per_worker=WAL) as db:
        fill(db.tree("t"), 500)
    with flashtree.open(str(path), pool_bytes=POOL, wal_bytes_per_worker=WAL, create=False) as db:
        assert db.tree("t")[b"k000499"] == b"v499"
        assert db.check() == 500


def test_missing_store_without_create(tmp_path):
    with pytest.raises(flashtree.InvalidArgumentError, match="no store"):
        flashtree.open(tmp_path / "missing", create=False)


def test_store_in_use(tmp_path):
    path = tmp_path / "store"
    with flashtree.open(path, pool_bytes=POOL, wal_bytes_per_worker=WAL):
        with pytest.raises(flashtree.StoreInUseError):
            flashtree.open(path, pool_bytes=POOL, wal_bytes_per_worker=WAL)


def test_not_a_store_is_corrupt(tmp_path):
    path = tmp_path / "store"
    path.mkdir()
    (path / "data.ft").write_bytes(b"x" * 4096 * 4)
    with pytest.raises(flashtree.Error):
        flashtree.open(path, pool_bytes=POOL, wal_bytes_per_worker=WAL)


def test_bad_durability(tmp_path):
    with pytest.raises(flashtree.InvalidArgumentError, match="durability"):
        flashtree.open(tmp_path / "s", durability="often")


def test_wal_bytes_per_worker(tmp_path):
    with pytest.raises(flashtree.InvalidArgumentError, match="wal_bytes_per_worker"):
        flashtree.open(tmp_path / "bad", wal_bytes_per_worker=4096)
    with flashtree.open(tmp_path / "s", pool_bytes=POOL, wal_bytes_per_worker=2 << 20) as db:
        db.tree("t")[b"k"] = b"v"
    logs = [p for p in (tmp_path / "s").iterdir() if ".wal" in p.name]
    assert logs and all(p.stat().st_size == 2 << 20 for p in logs)


def test_closed_store_raises(tmp_path):
    db = flashtree.open(tmp_path / "store", pool_bytes=POOL, wal_bytes_per_worker=WAL)
    t = db.tree("t")
    db.close()
    assert db.closed
    db.close()  # twice is fine
    with pytest.raises(flashtree.ClosedError):
        t[b"k"]
    with pytest.raises(flashtree.ClosedError):
        db.tree("u")


def test_buffered_and_sync_calls(tmp_path):
    with flashtree.open(tmp_path / "s", pool_bytes=POOL, wal_bytes_per_worker=WAL, durability="buffered") as db:
        t = db.tree("t")
        t[b"k"] = b"v"
        db.sync()
        assert t[b"k"] == b"v"


def test_durability_none(tmp_path):
    with flashtree.open(tmp_path / "s", pool_bytes=POOL, wal_bytes_per_worker=WAL, durability="none") as db:
        t = db.tree("t")
        fill(t, 100)
    with flashtree.open(tmp_path / "s", pool_bytes=POOL, wal_bytes_per_worker=WAL, durability="none") as db:
        assert db.tree("t")[b"k000099"] == b"v99"


# --- threads and crashes -------------------------------------------------------


def test_threads_share_one_store(db):
    t = db.tree("t")
    errors = []

    def work(n):
        try:
            for i in range(300):
                t[b"%d-%d" % (n, i)] = b"%d" % i
            for i in range(300):
                assert t[b"%d-%d" % (n, i)] == b"%d" % i
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert len(list(t.keys())) == 1200


CHILD = """
import sys, flashtree
db = flashtree.open(sys.argv[1], pool_bytes=8 << 20, wal_bytes_per_worker=4 << 20)
t = db.tree("t")
i = 0
while True:
    with db.batch() as b:
        b.put(t, b"k%08d" % i, b"v")
        b.put(t, b"last", b"%d" % i)
    print(i, flush=True)
    i += 1
"""


def test_acknowledged_batches_survive_kill_9(tmp_path):
    path = str(tmp_path / "store")
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, path], stdout=subprocess.PIPE, text=True
    )
    acked = -1
    for line in child.stdout:
        acked = int(line)
        if acked >= 300:
            break
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    with flashtree.open(path, pool_bytes=POOL, wal_bytes_per_worker=WAL, create=False) as db:
        t = db.tree("t")
        last = int(t[b"last"])
        assert last >= acked
        # Each batch is all there: its key exists for every number up to last.
        assert t.get_many([b"k%08d" % i for i in range(last + 1)]).count(None) == 0
        assert b"k%08d" % (last + 1) not in t
