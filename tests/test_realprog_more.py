"""More real programs under LD_PRELOAD=libhakmem.so, each compared with a run without it:

- Debian's python3 running part of its own regression suite (test_dict, test_list,
  test_set, test_json, test_threading): the same verdict and the same counts of tests run,
  failed and skipped, module by module;
- the sqlite3 shell on a generated database of 100k order lines: the same query output;
- redis-server on 127.0.0.1 (its own instance, no persistence) driven by redis-benchmark,
  then a transcript of commands (values from 0 bytes to 8 MiB, lists, hashes, sets, sorted
  sets) that must be equal with and without hakmem, INFO memory, SHUTDOWN NOSAVE;
- `make -j2` of two real C projects with make, gcc, as, ld and ar all preloaded: bzip2
  1.0.8 with its own Makefile (whose default target also runs its self-test) and Lua 5.4
  (library plus a small driver): every object file and program must be byte for byte the
  one built without hakmem, and the programs must behave the same.

Missing programs are installed with apt-get. The C sources come from the crates.io
packages bzip2-sys and lua-src (which ship the unmodified upstream sources), fetched with
cargo into its cache; a case is skipped only when that is impossible."""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import time
import warnings
import xml.etree.ElementTree as ET

import pytest

from conftest import (LIB_SO, ROOT, SYSTEM_MODE, TEST_BUILD, apt_install, ensure_built, ensure_tool,
                      one_at_a_time, repro, tail)

HERE = os.path.join(ROOT, "tests", "realprog_more")

DET_ENV = {"LC_ALL": "C", "TZ": "UTC", "PYTHONHASHSEED": "0"}


def _env(preload, extra=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_PRELOAD", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "MAKEFLAGS",
                        "MFLAGS", "MAKELEVEL")}
    env.update(DET_ENV)
    env.update(extra or {})
    added = {}
    if preload and not SYSTEM_MODE:
        added["LD_PRELOAD"] = LIB_SO
    env.update(added)
    return env, added


def _default_signals():
    """In the child: SIGINT and SIGQUIT as a terminal would leave them. A test suite started
    as a background job inherits them ignored, and then python's test_threading cannot
    interrupt its main thread (test_interrupt_main_*), with or without hakmem."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def _run(cmd, cwd, preload, timeout, stdin=None, extra=None):
    """Runs cmd; returns (CompletedProcess, reproducer line)."""
    env, added = _env(preload, extra)
    line = repro(cmd, dict(extra or {}, **added)) + f"   # in {cwd}"
    try:
        r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, timeout=timeout, stdin=stdin,
                           preexec_fn=_default_signals)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else ""
        pytest.fail(f"timed out after {timeout}s: {line}\n{tail(err)}", pytrace=False)
    return r, line


def _no_hakmem_errors(text, line):
    bad = [l for l in text.splitlines() if "hakmem" in l.lower()]
    assert not bad, f"hakmem wrote errors:\n{tail(text)}\nreproduce: {line}"


# ---- python3's own regression tests ----------------------------------------------------

SYS_PYTHON = "/usr/bin/python3"
PY_TESTS = ["test_dict", "test_list", "test_set", "test_json", "test_threading"]


def _suite_results(xml_path):
    """{test case name: outcome} from regrtest's JUnit XML (names are test.MODULE.Class.method)."""
    root = ET.parse(xml_path).getroot()
    results = {}
    for case in root.iter("testcase"):
        kinds = [k for k in ("failure", "error", "skipped") if case.find(k) is not None]
        results[case.get("name", "?")] = kinds[0] if kinds else case.get("result", "ok")
    return results


def _module_counts(results):
    counts = {}
    for name, outcome in results.items():
        parts = name.split(".")
        mod = parts[1] if len(parts) > 1 else "?"
        c = counts.setdefault(mod, {})
        c[outcome] = c.get(outcome, 0) + 1
    return counts


def test_python_regrtest(tmp_path):
    if not apt_install("python3", lambda: os.path.exists(SYS_PYTHON)):
        pytest.skip("Debian's /usr/bin/python3 is not installed and could not be")
    v = subprocess.run([SYS_PYTHON, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                       capture_output=True, text=True, env=_env(False)[0], timeout=60)
    assert v.returncode == 0, f"{SYS_PYTHON} does not run:\n{v.stderr}"
    ver = v.stdout.strip()
    probe = [SYS_PYTHON, "-c", "import test.test_dict, test.test_threading, test.libregrtest"]
    if not apt_install(f"libpython{ver}-testsuite",
                       lambda: subprocess.run(probe, capture_output=True,
                                              env=_env(False)[0]).returncode == 0):
        pytest.skip(f"the test package of python {ver} (libpython{ver}-testsuite) is missing")
    ensure_built()
    results = []
    for preload in (False, True):
        work = tmp_path / ("hakmem" if preload else "plain")
        work.mkdir()
        xml = str(work / "junit.xml")
        # -j2: two worker processes (they inherit LD_PRELOAD); --timeout: a hung test is
        # reported as such by regrtest itself; -w: a failed test file runs once more, alone
        # (test_threading's timing tests failed once in a CI run without hakmem).
        cmd = [SYS_PYTHON, "-m", "test", "-j2", "-w", "--timeout", "240", "--junit-xml", xml,
               *PY_TESTS]
        r, line = _run(cmd, str(work), preload, 400)
        out = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
        if preload:
            _no_hakmem_errors(r.stderr.decode(errors="replace"), line)
        results.append((r.returncode, out, _suite_results(xml) if os.path.exists(xml) else {}, line))
    (rc_b, out_b, cnt_b, _), (rc_h, out_h, cnt_h, line) = results
    passed = re.compile(r"Tests result: (FAILURE then )?SUCCESS")
    assert rc_b == 0 and passed.search(out_b), \
        f"python's tests fail even without hakmem:\n{tail(out_b)}"
    assert rc_h == 0 and passed.search(out_h), \
        f"python's own tests fail under hakmem\nreproduce: {line}\n{tail(out_h)}"
    for label, out in (("without hakmem", out_b), ("under hakmem", out_h)):
        if "FAILURE then SUCCESS" in out:     # passed on its second run: say so
            warnings.warn(f"python's tests passed {label} only when re-run:\n{tail(out, 1500)}")
    assert set(PY_TESTS) <= set(_module_counts(cnt_b)), \
        f"unexpected modules in the JUnit report: {_module_counts(cnt_b)}"
    differ = sorted(n for n in set(cnt_b) | set(cnt_h) if cnt_b.get(n) != cnt_h.get(n))
    assert not differ, (f"test outcomes differ under hakmem\nwithout: {_module_counts(cnt_b)}\n"
                        f"with:    {_module_counts(cnt_h)}\n"
                        + "\n".join(f"  {n}: {cnt_b.get(n)} -> {cnt_h.get(n)}" for n in differ[:30])
                        + f"\nreproduce: {line}")


# ---- sqlite3 shell on a generated database ---------------------------------------------

def _sqlite_script(path):
    rng = random.Random(20241122)
    cities = ["Osaka", "Lyon", "Quito", "Perth", "Oslo", "Pune", "Cork", "Turin", "Xian", "Lima"]
    cats = ["tools", "books", "food", "toys", "garden", "music", "sport"]
    with open(path, "w") as f:
        w = f.write
        w("PRAGMA journal_mode=OFF;\nPRAGMA synchronous=OFF;\nPRAGMA cache_size=-32000;\n"
          "PRAGMA temp_store=MEMORY;\n.headers on\n.mode list\n")
        w("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT, joined INTEGER);\n"
          "CREATE TABLE products(id INTEGER PRIMARY KEY, name TEXT, category TEXT, cents INTEGER);\n"
          "CREATE TABLE orders(id INTEGER PRIMARY KEY, customer INTEGER REFERENCES customers, day INTEGER, note TEXT);\n"
          "CREATE TABLE lines(order_id INTEGER REFERENCES orders, product INTEGER REFERENCES products, "
          "qty INTEGER, cents INTEGER);\nBEGIN;\n")
        for i in range(1, 5001):
            name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 14)))
            w(f"INSERT INTO customers VALUES({i},'{name}','{rng.choice(cities)}',{rng.randint(0, 3650)});\n")
        for i in range(1, 1201):
            w(f"INSERT INTO products VALUES({i},'product-{i:04d}-{'x' * rng.randint(0, 40)}',"
              f"'{rng.choice(cats)}',{rng.randint(99, 99999)});\n")
        for i in range(1, 25001):
            note = "'" + ("gift " * rng.randint(0, 6)) + "'" if rng.random() < 0.3 else "NULL"
            w(f"INSERT INTO orders VALUES({i},{rng.randint(1, 5000)},{rng.randint(0, 3650)},{note});\n")
        for _ in range(100000):
            w(f"INSERT INTO lines VALUES({rng.randint(1, 25000)},{rng.randint(1, 1200)},"
              f"{rng.randint(1, 9)},{rng.randint(99, 99999)});\n")
        w("COMMIT;\n")
        w("CREATE INDEX lines_order ON lines(order_id);\nCREATE INDEX orders_customer ON orders(customer);\n"
          "CREATE INDEX lines_product ON lines(product);\nANALYZE;\n")
        w("SELECT count(*) AS n_lines, sum(qty) AS items, sum(qty * cents) AS cents FROM lines;\n")
        # Revenue per city and category: a four-way join with group by and order by.
        w("SELECT c.city, p.category, count(*) AS n, sum(l.qty * l.cents) AS revenue, "
          "printf('%.3f', avg(l.qty)) AS avg_qty FROM lines l JOIN orders o ON o.id = l.order_id "
          "JOIN customers c ON c.id = o.customer JOIN products p ON p.id = l.product "
          "GROUP BY c.city, p.category ORDER BY revenue DESC, c.city, p.category;\n")
        # Top customers, with a window function ranking inside each city.
        w("WITH spend AS (SELECT o.customer AS id, sum(l.qty * l.cents) AS total FROM orders o "
          "JOIN lines l ON l.order_id = o.id GROUP BY o.customer) "
          "SELECT * FROM (SELECT c.city, c.name, s.total, rank() OVER (PARTITION BY c.city "
          "ORDER BY s.total DESC, c.id) AS r FROM spend s JOIN customers c ON c.id = s.id) "
          "WHERE r <= 3 ORDER BY city, r;\n")
        # Big sort with string building and group_concat.
        w("SELECT p.category, group_concat(p.id, ',') AS ids FROM (SELECT * FROM products "
          "ORDER BY cents DESC, id LIMIT 300) p GROUP BY p.category ORDER BY p.category;\n")
        w("SELECT o.id, length(group_concat(p.name, '|')) AS len, count(*) FROM orders o JOIN lines l "
          "ON l.order_id = o.id JOIN products p ON p.id = l.product GROUP BY o.id "
          "HAVING count(*) >= 11 ORDER BY len DESC, o.id LIMIT 40;\n")
        # Recursive CTE, correlated subquery, LIKE, DISTINCT, NULL handling.
        w("WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < 50000) "
          "SELECT count(*), sum(n % 97), max(length(hex(n * n))) FROM seq;\n")
        w("SELECT name, (SELECT count(*) FROM orders o WHERE o.customer = c.id) AS n FROM customers c "
          "WHERE name LIKE '%qz%' OR name LIKE 'zz%' ORDER BY n DESC, name LIMIT 30;\n")
        w("SELECT count(DISTINCT customer), count(note), count(*) - count(note) FROM orders;\n")
        # Updates and deletes, then the shape of the data again.
        w("UPDATE lines SET qty = qty + 1 WHERE product % 7 = 0;\n"
          "DELETE FROM lines WHERE order_id % 5 = 0;\nDELETE FROM orders WHERE id % 5 = 0;\n"
          "SELECT count(*), sum(qty), sum(qty * cents) FROM lines;\n")
        w("CREATE TABLE summary AS SELECT product, sum(qty) AS q FROM lines GROUP BY product;\n"
          "SELECT q, count(*) FROM summary GROUP BY q ORDER BY count(*) DESC, q LIMIT 15;\n")
        w("VACUUM;\nPRAGMA integrity_check;\n")


def test_sqlite3_generated_db(tmp_path):
    sqlite3 = ensure_tool("sqlite3", "sqlite3")
    ensure_built()
    script = str(tmp_path / "workload.sql")
    _sqlite_script(script)
    outs = []
    for preload in (False, True):
        db = str(tmp_path / ("hakmem.db" if preload else "plain.db"))
        with open(script, "rb") as f:
            r, line = _run([sqlite3, "-bail", db], str(tmp_path), preload, 300, stdin=f)
        outs.append((r, line + f" < {script}"))
    (b, _), (h, line) = outs
    err = h.stderr.decode(errors="replace")
    _no_hakmem_errors(err, line)
    assert b.returncode == 0, f"sqlite3 fails even without hakmem:\n{tail(b.stderr.decode(errors='replace'))}"
    assert h.returncode == 0, f"sqlite3 fails under hakmem (exit {h.returncode})\nreproduce: {line}\n{tail(err)}"
    assert h.stdout == b.stdout, (f"sqlite3 output differs under hakmem\nreproduce: {line}\n"
                                  f"with:\n{tail(h.stdout.decode(errors='replace'), 2000)}")
    assert b.stdout.count(b"\n") > 150 and b"\nok\n" in b.stdout


# ---- redis-server ----------------------------------------------------------------------

class Resp:
    """A minimal RESP2 client (binary-safe) for the transcript."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.buf = b""

    def close(self):
        self.s.close()

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n + 2:
            chunk = self.s.recv(max(1 << 20, n + 2 - len(self.buf)))
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2:]
        return data

    def reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind in (b"+", b"-"):
            return (kind + rest).decode()
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n)
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError(f"bad reply {line[:100]!r}")

    def cmd(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += [b"$%d\r\n" % len(a), a, b"\r\n"]
        self.s.sendall(b"".join(out))
        return self.reply()


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _value(size, seed):
    rng = random.Random(seed)
    unit = bytes(rng.randrange(256) for _ in range(4096))
    return (unit * (size // 4096 + 1))[:size]


def _digest(v):
    import hashlib
    return hashlib.sha256(v).hexdigest()[:16] if isinstance(v, bytes) else v


def _redis_session(server, cli, bench, tmp, preload):
    """Starts redis-server, runs the benchmark and the transcript, shuts it down.
    Returns (transcript lines, reproducer of the server)."""
    work = os.path.join(tmp, "hakmem" if preload else "plain")
    os.makedirs(work)
    for attempt in range(5):
        port = _free_port()
        cmd = [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
               "no", "--dir", work, "--daemonize", "no", "--logfile", os.path.join(work, "redis.log"),
               "--protected-mode", "yes", "--databases", "4"]
        env, added = _env(preload)
        line = repro(cmd, added)
        proc = subprocess.Popen(cmd, env=env, cwd=work, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        up = False
        deadline = time.time() + 30
        while time.time() < deadline and proc.poll() is None:
            try:
                c = Resp(port)
                up = c.cmd("PING") == "+PONG"
                c.close()
                if up:
                    break
            except OSError:
                time.sleep(0.1)
        if up:
            break
        proc.kill()
        proc.wait()
        log = open(os.path.join(work, "redis.log"), errors="replace").read()
        if "Address already in use" not in log:
            pytest.fail(f"redis-server did not start\nreproduce: {line}\n{tail(log)}", pytrace=False)
    else:
        pytest.fail("no free port for redis-server", pytrace=False)
    t = []
    try:
        if preload and not SYSTEM_MODE:
            maps = open(f"/proc/{proc.pid}/maps").read()
            assert "libhakmem.so" in maps, f"hakmem is not loaded in redis-server: {line}"
        # The benchmark, bounded in requests and time; the client preloaded too.
        r, bline = _run([bench, "-h", "127.0.0.1", "-p", str(port), "-n", "20000", "-q", "-r", "5000",
                         "-d", "200", "-t", "set,get,lpush,lpop,incr"], work, preload, 180)
        out = r.stdout.decode(errors="replace").replace("\r", "\n")
        assert r.returncode == 0, f"redis-benchmark failed\nreproduce: {bline}\n{tail(out)}"
        for test in ("SET", "GET", "LPUSH", "LPOP", "INCR"):
            assert re.search(rf"^{test}: [\d.]+ requests per second", out, re.M), \
                f"redis-benchmark gave no {test} result\nreproduce: {bline}\n{tail(out)}"
        c = Resp(port)
        t.append(("flush", c.cmd("FLUSHALL")))
        # Strings of many sizes up to 8 MiB, read back whole; overwrite them smaller and larger.
        sizes = [0, 1, 7, 8, 15, 16, 17, 100, 255, 1000, 1024, 4095, 4096, 4097, 12000, 32768,
                 65535, 65536, 100000, 300000, 1 << 20, (1 << 20) + 1, 3 << 20, 8 << 20]
        for i, n in enumerate(sizes):
            v = _value(n, i)
            t.append(("set", n, c.cmd("SET", f"str:{n}", v)))
            got = c.cmd("GET", f"str:{n}")
            t.append(("get", n, got == v, _digest(got)))
        for i, n in enumerate(sizes):
            v = _value(sizes[-1 - i], 1000 + i)
            c.cmd("SET", f"str:{n}", v)
            t.append(("reget", n, c.cmd("GET", f"str:{n}") == v, c.cmd("STRLEN", f"str:{n}")))
        # APPEND growth (the server reallocates its strings) and GETRANGE.
        for k in range(300):
            c.cmd("APPEND", "grow", _value(997 * (k % 13) + 1, k))
        t.append(("append", c.cmd("STRLEN", "grow"), _digest(c.cmd("GET", "grow")),
                  _digest(c.cmd("GETRANGE", "grow", 1000, 99999))))
        # Lists, hashes, sets, sorted sets.
        for k in range(20000):
            c.cmd("RPUSH", "list", f"item-{k}-" + "y" * (k % 50))
        t.append(("list", c.cmd("LLEN", "list"), _digest(b"|".join(c.cmd("LRANGE", "list", 0, -1))),
                  c.cmd("LINDEX", "list", 12345), c.cmd("LPOP", "list"), c.cmd("RPOP", "list")))
        for k in range(5000):
            c.cmd("HSET", "hash", f"field{k}", "v" * (k % 300))
        h = c.cmd("HGETALL", "hash")
        t.append(("hash", c.cmd("HLEN", "hash"), _digest(b"|".join(sorted(h)))))
        for k in range(5000):
            c.cmd("SADD", "set", k * 7919 % 10007)
            c.cmd("ZADD", "zset", (k * 31) % 1000, f"m{k}")
        t.append(("set", c.cmd("SCARD", "set"), _digest(b",".join(sorted(c.cmd("SMEMBERS", "set"))))))
        t.append(("zset", c.cmd("ZCARD", "zset"), _digest(b",".join(c.cmd("ZRANGE", "zset", 0, -1))),
                  c.cmd("ZRANGEBYSCORE", "zset", 10, 11)[:10]))
        t.append(("dbsize", c.cmd("DBSIZE")))
        t.append(("del", c.cmd("DEL", *[f"str:{n}" for n in sizes]), c.cmd("DBSIZE")))
        # INFO memory answers, and what the server counts grows and falls with a 4 MiB value.
        info = c.cmd("INFO", "memory").decode()
        used = int(re.search(r"^used_memory:(\d+)", info, re.M).group(1))
        c.cmd("SET", "big", _value(4 << 20, 99))
        info2 = c.cmd("INFO", "memory").decode()
        used2 = int(re.search(r"^used_memory:(\d+)", info2, re.M).group(1))
        c.cmd("DEL", "big")
        info3 = c.cmd("INFO", "memory").decode()
        used3 = int(re.search(r"^used_memory:(\d+)", info3, re.M).group(1))
        t.append(("info", "used_memory_rss" in info, used2 - used >= 4 << 20, used3 < used2 - (3 << 20)))
        t.append(("memory usage", c.cmd("MEMORY", "USAGE", "list") > 20000))
        c.close()
        # redis-cli too: a value round trip, INFO memory, and the shutdown.
        r, cline = _run([cli, "-h", "127.0.0.1", "-p", str(port), "SET", "clikey", "hello world"],
                        work, preload, 30)
        t.append(("cli set", r.returncode, r.stdout))
        r, cline = _run([cli, "-h", "127.0.0.1", "-p", str(port), "--raw", "GET", "clikey"], work,
                        preload, 30)
        t.append(("cli get", r.returncode, r.stdout))
        r, cline = _run([cli, "-h", "127.0.0.1", "-p", str(port), "INFO", "memory"], work, preload, 30)
        t.append(("cli info", r.returncode, b"used_memory:" in r.stdout))
        r, cline = _run([cli, "-h", "127.0.0.1", "-p", str(port), "SHUTDOWN", "NOSAVE"], work,
                        preload, 30)
        t.append(("cli shutdown", r.returncode))
        try:
            rc = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"redis-server did not exit after SHUTDOWN NOSAVE\nreproduce: {line}",
                        pytrace=False)
        t.append(("server exit", rc))
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
    log = open(os.path.join(work, "redis.log"), errors="replace").read()
    err = proc.stderr.read().decode(errors="replace")
    t.append(("bye", "ready to exit, bye bye" in log))
    if preload:
        _no_hakmem_errors(err + log, line)
    return t, line, log


def test_redis(tmp_path):
    server = ensure_tool("redis-server", "redis-server")
    cli = ensure_tool("redis-cli", "redis-tools")
    bench = ensure_tool("redis-benchmark", "redis-tools")
    ensure_built()
    base, _, _ = _redis_session(server, cli, bench, str(tmp_path), False)
    hak, line, log = _redis_session(server, cli, bench, str(tmp_path), True)
    assert all(x is not False for entry in base for x in entry), f"checks fail without hakmem: {base}"
    # The exit statuses are compared with hakmem's below; they must also be 0.
    rcs = {e[0]: e[1] for e in base if e[0].startswith("cli ") or e[0] == "server exit"}
    assert len(rcs) == 5 and not any(rcs.values()), f"redis-cli or the server failed without hakmem: {rcs}"
    for b, h in zip(base, hak):
        assert h == b, (f"redis differs under hakmem: {h!r} (without hakmem: {b!r})\n"
                        f"server: {line}\n{tail(log, 2000)}")
    assert len(hak) == len(base)


# ---- make -j2 of real C projects, every tool preloaded -----------------------------------

CRATES = {"bzip2-sys": "=0.1.13", "lua-src": "=547.1.0"}


def _cargo():
    c = shutil.which("cargo") or os.path.expanduser("~/.cargo/bin/cargo")
    return c if os.path.exists(c) else None


def _last_line(text):
    """The last non-empty line of a tool's error output (for a one-line skip reason)."""
    lines = [l.strip() for l in text.splitlines() if l.strip()]
    return lines[-1][-300:] if lines else "(no message)"


def _crate_sources():
    """Fetches the crates with cargo (into its cache; nothing if already there) and returns
    {name: directory}."""
    with one_at_a_time():                       # (a fixed folder, and the network)
        return _fetch_crates()


def _fetch_crates():
    cargo = _cargo()
    if not cargo:
        pytest.skip("cargo is not installed: the C sources come from crates.io")
    proj = os.path.join(TEST_BUILD, "realprog_more", "crates")
    os.makedirs(os.path.join(proj, "src"), exist_ok=True)
    with open(os.path.join(proj, "Cargo.toml"), "w") as f:
        f.write('[package]\nname = "hakmem-test-sources"\nversion = "0.0.0"\nedition = "2021"\n'
                "publish = false\n\n[dependencies]\n")
        for name, ver in CRATES.items():
            f.write(f'{name} = "{ver}"\n')
        f.write("\n[workspace]\n")
    with open(os.path.join(proj, "src", "lib.rs"), "w") as f:
        f.write("")
    env = dict(os.environ, CARGO_REGISTRIES_CRATES_IO_PROTOCOL="sparse")
    env.pop("LD_PRELOAD", None)
    manifest = os.path.join(proj, "Cargo.toml")
    r = None
    for args in (["--offline"], []):
        r = subprocess.run([cargo, "metadata", "--format-version", "1", "--manifest-path", manifest, *args],
                           capture_output=True, text=True, env=env, timeout=300)
        if r.returncode == 0:
            break
    if r.returncode != 0:
        pytest.skip("cargo metadata could not resolve the source crates %s: %s"
                    % (", ".join(CRATES), _last_line(r.stderr)))
    meta = json.loads(r.stdout)
    dirs = {}
    for pkg in meta["packages"]:
        if pkg["name"] in CRATES:
            dirs[pkg["name"]] = os.path.dirname(pkg["manifest_path"])
    missing = [n for n in CRATES if n not in dirs or not os.path.isdir(dirs[n])]
    if missing:
        # metadata resolves without downloading: fetch the sources themselves.
        r = subprocess.run([cargo, "fetch", "--manifest-path", manifest], capture_output=True,
                           text=True, env=env, timeout=300)
        if r.returncode != 0:
            pytest.skip("cargo fetch could not download the source crates %s: %s"
                        % (", ".join(CRATES), _last_line(r.stderr)))
    for name in CRATES:
        if not os.path.isdir(dirs.get(name, "")):
            pytest.skip(f"crate {name} has no sources after cargo fetch")
    return dirs


def _tree_digest(d, names):
    import hashlib
    out = {}
    for n in names:
        p = os.path.join(d, n)
        out[n] = hashlib.sha256(open(p, "rb").read()).hexdigest() if os.path.exists(p) else None
    return out


def _build_twice(tmp_path, prepare, make_args, artifacts, after):
    """Builds in the same directory (so that debug information names the same paths) once
    without and once with hakmem; compares every artifact and what `after` returns."""
    make = ensure_tool("make", "make")
    ensure_tool("gcc", "gcc")
    ensure_built()
    work = str(tmp_path / "src")
    res = []
    for preload in (False, True):
        if os.path.exists(work):
            shutil.rmtree(work)
        prepare(work)
        r, line = _run([make, "-j2", *make_args], work, preload, 600)
        log = r.stdout.decode(errors="replace") + r.stderr.decode(errors="replace")
        if preload:
            _no_hakmem_errors(r.stderr.decode(errors="replace"), line)
        assert r.returncode == 0, (f"make -j2 failed {'under hakmem' if preload else 'without hakmem'}"
                                   f"\nreproduce: {line}\n{tail(log)}")
        names = sorted(f for f in os.listdir(work) if f.endswith(".o")) + artifacts
        res.append((_tree_digest(work, names), after(work, preload), line))
    (d_b, a_b, _), (d_h, a_h, line) = res
    assert all(d_b[a] for a in artifacts), f"the build without hakmem lacks some of {artifacts}"
    diff = [n for n in d_b if d_b[n] != d_h.get(n)]
    assert not diff, f"built files differ under hakmem: {diff}\nreproduce: {line}"
    assert len([n for n in d_b if n.endswith(".o")]) >= 8
    assert a_h == a_b, f"the programs built under hakmem behave differently\nreproduce: {line}"


def test_make_bzip2(tmp_path):
    src = os.path.join(_crate_sources()["bzip2-sys"], "bzip2-1.0.8")

    def prepare(work):
        shutil.copytree(src, work)

    def after(work, preload):
        # The Makefile's own test already ran (under hakmem too); its outputs and a round
        # trip through the built programs, without preload, must be the same.
        out = _tree_digest(work, ["sample1.rb2", "sample2.rb2", "sample3.rb2",
                                  "sample1.tst", "sample2.tst", "sample3.tst"])
        data = b"".join(open(os.path.join(work, n), "rb").read() for n in ("words0", "words1", "words2", "words3"))
        blob = (data + bytes(range(256)) * 500) * 20
        p = subprocess.run([os.path.join(work, "bzip2"), "-9", "-c"], input=blob, capture_output=True,
                           timeout=120)
        q = subprocess.run([os.path.join(work, "bzip2"), "-d", "-c"], input=p.stdout,
                           capture_output=True, timeout=120)
        # Compared between the two builds below, but equal failures would compare equal.
        assert p.returncode == 0 and q.returncode == 0 and q.stdout == blob, \
            f"the bzip2 built {'under' if preload else 'without'} hakmem fails a round trip"
        out["roundtrip"] = len(p.stdout)
        return out

    _build_twice(tmp_path, prepare, ["CC=gcc"], ["libbz2.a", "bzip2", "bzip2recover"], after)


def test_make_lua(tmp_path):
    src = os.path.join(_crate_sources()["lua-src"], "lua-5.4.7")
    workload = os.path.join(HERE, "workload.lua")

    def prepare(work):
        shutil.copytree(src, work)
        for f in ("Makefile", "luarun.c"):
            shutil.copy(os.path.join(HERE, "lua", f), work)

    def after(work, preload):
        r, line = _run([os.path.join(work, "luarun"), workload], work, False, 120)
        assert r.returncode == 0 and r.stdout.endswith(b"done\n"), \
            f"{line}\n{tail(r.stderr.decode(errors='replace'))}"
        # The interpreter itself under hakmem, too.
        h, hline = _run([os.path.join(work, "luarun"), workload], work, True, 120)
        assert h.returncode == 0 and h.stdout == r.stdout, \
            f"luarun behaves differently under hakmem\nreproduce: {hline}\n{tail(h.stderr.decode(errors='replace'))}"
        return r.stdout

    _build_twice(tmp_path, prepare, ["CC=gcc"], ["liblua.a", "luarun"], after)
