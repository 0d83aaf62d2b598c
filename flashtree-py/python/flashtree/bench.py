"""Put / get / get_many / scan loops from Python on flashtree, the `lmdb`
package and the standard library's `sqlite3`, with the same records.

    python -m flashtree.bench [--records N] [--value-bytes B] [--json]

Each engine loads the same records in batches (flashtree: one atomic,
durable batch per --batch records; lmdb: one write transaction per batch;
sqlite3: all inserts in one transaction, as its documentation advises),
then reads them back in a random order: one key per call (`get`), many per
call (`get_many`: flashtree's Tree.get_many; lmdb has no multi-get, so a
Python loop of txn.get inside one read transaction; sqlite3: SELECT ... IN
(...)), and a full scan in key order. Runs twice: with flashtree's buffer
pool twice the data ("in memory") and a tenth of it ("out of memory").
lmdb and sqlite3 read through the operating system's page cache, which
this benchmark does not limit: their rows are the same in both runs' setup.
"""

import argparse
import json
import os
import random
import shutil
import sqlite3
import tempfile
import time

import flashtree

try:
    import lmdb
except ImportError:  # pragma: no cover - reported in the table
    lmdb = None


def records(n, value_bytes, seed=1):
    rng = random.Random(seed)
    keys = [b"%016d" % i for i in range(n)]
    rng.shuffle(keys)
    values = [rng.randbytes(value_bytes) for _ in range(n)]
    return keys, values


def timed(fn):
    t0 = time.perf_counter()
    count = fn()
    return count / (time.perf_counter() - t0)


def bench_flashtree(path, keys, values, batch, pool_bytes, lookups):
    out = {}
    with flashtree.open(path, pool_bytes=pool_bytes, durability="sync") as db:
        t = db.tree("bench")

        def put():
            for i in range(0, len(keys), batch):
                with db.batch() as b:
                    for k, v in zip(keys[i : i + batch], values[i : i + batch]):
                        b.put(t, k, v)
            return len(keys)

        out["put"] = timed(put)

        def get():
            for k in lookups:
                t[k]
            return len(lookups)

        out["get"] = timed(get)

        def get_many():
            for i in range(0, len(lookups), 1000):
                t.get_many(lookups[i : i + 1000])
            return len(lookups)

        out["get_many"] = timed(get_many)

        def scan():
            return sum(1 for _ in t.items())

        out["scan"] = timed(scan)
    return out


def bench_lmdb(path, keys, values, batch, lookups):
    out = {}
    size = len(keys) * (len(keys[0]) + len(values[0]) + 64) * 4 + (64 << 20)
    env = lmdb.open(path, map_size=size, sync=True, metasync=True, readahead=False)
    try:

        def put():
            for i in range(0, len(keys), batch):
                with env.begin(write=True) as txn:
                    for k, v in zip(keys[i : i + batch], values[i : i + batch]):
                        txn.put(k, v)
            return len(keys)

        out["put"] = timed(put)

        def get():
            with env.begin() as txn:
                for k in lookups:
                    txn.get(k)
            return len(lookups)

        out["get"] = timed(get)
        # No multi-get in lmdb: the same plain loop of txn.get.
        out["get_many"] = timed(get)

        def scan():
            with env.begin() as txn:
                return sum(1 for _ in txn.cursor())

        out["scan"] = timed(scan)
    finally:
        env.close()
    return out


def bench_sqlite(path, keys, values, lookups):
    out = {}
    con = sqlite3.connect(os.path.join(path, "bench.db"), isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
        con.execute("CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

        def put():
            con.execute("BEGIN")
            con.executemany("INSERT INTO kv VALUES (?, ?)", zip(keys, values))
            con.execute("COMMIT")
            return len(keys)

        out["put"] = timed(put)

        def get():
            q = "SELECT v FROM kv WHERE k = ?"
            for k in lookups:
                con.execute(q, (k,)).fetchone()
            return len(lookups)

        out["get"] = timed(get)

        def get_many():
            n = 500
            q = "SELECT k, v FROM kv WHERE k IN (%s)" % ",".join("?" * n)
            for i in range(0, len(lookups) - n + 1, n):
                con.execute(q, lookups[i : i + n]).fetchall()
            return len(lookups) // n * n

        out["get_many"] = timed(get_many)

        def scan():
            return sum(1 for _ in con.execute("SELECT k, v FROM kv ORDER BY k"))

        out["scan"] = timed(scan)
    finally:
        con.close()
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m flashtree.bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--records", type=int, default=200_000, help="records (default 200000)")
    parser.add_argument("--value-bytes", type=int, default=100, help="value size (default 100)")
    parser.add_argument(
        "--batch", type=int, default=250,
        help="records per batch (default 250: a flashtree batch of random keys may change up to 3 pages per record, and at most about 1,000 pages)",
    )
    parser.add_argument("--dir", default=None, help="where the stores go (default: a temporary directory)")
    parser.add_argument("--json", action="store_true", help="one JSON object per result")
    args = parser.parse_args(argv)
    keys, values = records(args.records, args.value_bytes)
    lookups = list(keys)
    random.Random(2).shuffle(lookups)
    data_bytes = args.records * (16 + args.value_bytes)
    base = args.dir or tempfile.mkdtemp(prefix="flashtree-bench-")
    rows = []
    try:
        for label, pool in [("in memory", max(2 * data_bytes, 16 << 20)), ("out of memory", max(data_bytes // 10, 4 << 20))]:
            where = os.path.join(base, "flashtree-" + label.replace(" ", "-"))
            shutil.rmtree(where, ignore_errors=True)
            # A batch holds at most a quarter of the pool's pages.
            batch = min(args.batch, pool // 4096 // 4)
            rows.append(("flashtree", label, pool, bench_flashtree(where, keys, values, batch, pool, lookups)))
            shutil.rmtree(where, ignore_errors=True)
        if lmdb is not None:
            where = os.path.join(base, "lmdb")
            shutil.rmtree(where, ignore_errors=True)
            os.makedirs(where)
            rows.append(("lmdb", "page cache", None, bench_lmdb(where, keys, values, args.batch, lookups)))
            shutil.rmtree(where, ignore_errors=True)
        where = os.path.join(base, "sqlite3")
        shutil.rmtree(where, ignore_errors=True)
        os.makedirs(where)
        rows.append(("sqlite3", "page cache", None, bench_sqlite(where, keys, values, lookups)))
        shutil.rmtree(where, ignore_errors=True)
    finally:
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        for engine, label, pool, r in rows:
            print(json.dumps({"engine": engine, "memory": label, "pool_bytes": pool, "records": args.records,
                              "value_bytes": args.value_bytes, **{k + "_per_sec": v for k, v in r.items()}}))
        return
    print(f"{args.records} records, {args.value_bytes}-byte values, batches of {args.batch}; operations per second")
    print(f"{'engine':<10} {'memory':<14} {'put':>10} {'get':>10} {'get_many':>10} {'scan':>11}")
    for engine, label, pool, r in rows:
        print(f"{engine:<10} {label:<14} {r['put']:>10.0f} {r['get']:>10.0f} {r['get_many']:>10.0f} {r['scan']:>11.0f}")
    if lmdb is None:
        print("lmdb: not installed (pip install lmdb)")
    ft = rows[0][3]
    by = {e: r for e, _, _, r in rows}
    if "lmdb" in by:
        print(f"flashtree get_many (in memory) / lmdb loop of txn.get: {ft['get_many'] / by['lmdb']['get']:.2f}x")
    print(f"flashtree batched puts (in memory) / sqlite3 inserts in one transaction: {ft['put'] / by['sqlite3']['put']:.2f}x")


if __name__ == "__main__":
    main()
