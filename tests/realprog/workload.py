"""A Python workload for the real-program test: json, an in-memory sqlite3 database and
threads, with deterministic output (run with and without LD_PRELOAD and compared)."""
import hashlib
import json
import random
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor

rng = random.Random(12345)

# json: nested structures of every size, round-tripped.
docs = []
for i in range(3000):
    doc = {
        "id": i,
        "name": "item-%d" % i * (1 + i % 7),
        "tags": [rng.choice("abcdefgh") * rng.randint(1, 40) for _ in range(rng.randint(0, 12))],
        "values": [rng.random() for _ in range(rng.randint(0, 200))],
        "nested": {"k%d" % j: list(range(j)) for j in range(i % 20)},
    }
    docs.append(doc)
blob = json.dumps(docs, sort_keys=True)
back = json.loads(blob)
assert back == docs
print("json bytes", len(blob), "sha256", hashlib.sha256(blob.encode()).hexdigest())

# sqlite3: an in-memory database with an index, joins and aggregates.
db = sqlite3.connect(":memory:")
db.execute("create table t (id integer primary key, grp integer, name text, payload blob)")
db.execute("create table g (grp integer primary key, label text)")
db.executemany("insert into g values (?, ?)", [(g, "group-%03d" % g) for g in range(100)])
rows = [(i, rng.randint(0, 99), "row%06d" % i, bytes(rng.randint(0, 255) for _ in range(rng.randint(0, 300))))
        for i in range(20000)]
db.executemany("insert into t values (?, ?, ?, ?)", rows)
db.execute("create index t_grp on t(grp)")
for row in db.execute("select g.label, count(*), sum(length(t.payload)), min(t.name), max(t.name) "
                      "from t join g on t.grp = g.grp group by g.label order by g.label limit 12"):
    print("sql", row)
db.execute("delete from t where id % 3 = 0")
db.execute("update t set payload = zeroblob(1000) where id % 5 = 0")
print("sql rows", db.execute("select count(*), sum(length(payload)) from t").fetchone())
db.commit()
db.execute("vacuum")
print("sql after vacuum", db.execute("select count(*) from t").fetchone())
db.close()

# threads: each builds and sorts its own data; results combined in a fixed order.
def work(seed):
    r = random.Random(seed)
    data = [r.getrandbits(64) for _ in range(50000)]
    strings = sorted(str(x) * (x % 5 + 1) for x in data[:5000])
    d = {}
    for x in data:
        d.setdefault(x % 1000, []).append(x)
    return sum(sorted(data)[::1000]) % (1 << 61), len(strings), hashlib.md5("".join(strings).encode()).hexdigest(), len(d)

with ThreadPoolExecutor(max_workers=6) as ex:
    for res in ex.map(work, range(12)):
        print("thread", res)

# Many threads sharing one dict under a lock.
shared = {}
lock = threading.Lock()
def writer(k):
    for i in range(3000):
        with lock:
            shared[(k, i)] = "v" * (i % 100)
        if i % 3 == 0:
            with lock:
                shared.pop((k, i - 3), None)
threads = [threading.Thread(target=writer, args=(k,)) for k in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print("shared", len(shared), sum(len(v) for v in shared.values()))
