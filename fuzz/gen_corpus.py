#!/usr/bin/env python3
"""gen_corpus.py — writes the seed corpus of fuzz_api (fuzz/corpus/).

Each seed is a small program in the harness's input language (see run_input() in
fuzz_api.c): an op byte, a slot byte, then the op's parameters. The seeds reach every
function, every tier, the border sizes, invalid alignments, failing sizes and the worker
thread, so that fuzzing starts from inputs that already cover the API."""
import os
import struct
import sys

OP = dict(malloc=0, calloc=3, realloc=4, reallocarray=6, aligned_alloc=7,
          posix_memalign=8, memalign=9, valloc=10, pvalloc=10 | 0x20, free=11,
          free_sized=11 | 0x20, usable=13, trim=14, give=15, from_worker=17, edges=18,
          verify=19, restart=19 + 20 * 11)  # 239: top three bits set
assert OP["restart"] & 0xE0 == 0xE0 and OP["restart"] % 20 == 19


def tiny(n): return bytes([0]) + struct.pack("<H", n)
def mid(n): return bytes([4]) + struct.pack("<H", n)
def large(n): return bytes([6]) + struct.pack("<I", n)
def huge(n): return bytes([7]) + struct.pack("<I", n)
def border(i): return bytes([8, i])
def failing(i): return bytes([0x81, i])  # 0x81 % 10 == 9, top bit set


def op(name, slot, *params):
    return bytes([OP[name], slot]) + b"".join(params)


def seeds():
    s = {}
    # every tier and every freeing function
    s["tiers"] = b"".join([
        op("malloc", 0, tiny(100)), op("malloc", 1, mid(9000)), op("malloc", 2, large(300000)),
        op("malloc", 3, huge(1500000)), op("usable", 1), op("calloc", 4, bytes([5 << 3]), mid(4000)),
        op("free_sized", 0), op("free", 1), op("free_sized", 4), op("verify", 0),
        op("free", 2), op("free", 3), op("trim", 0)])
    # a block grown through every tier by realloc, then shrunk, then reallocarray
    s["realloc_chain"] = b"".join(
        [op("malloc", 5, tiny(17))] +
        [op("realloc", 5, bytes([0]), b) for b in (tiny(1000), mid(2000), mid(60000),
                                                    large(70000), large(900000),
                                                    huge(2000000), tiny(3))] +
        [op("realloc", 5, bytes([192 + m])) for m in range(10)] +
        [op("reallocarray", 5, bytes([2 << 3]), tiny(700)), op("realloc", 5, bytes([0]), tiny(0))])
    # in-place realloc borders of a huge, a large and a tiny block
    s["realloc_in_place"] = b"".join(
        [op("malloc", 1, huge(1200000)), op("malloc", 2, large(100000)),
         op("malloc", 3, tiny(40))] +
        [op("realloc", 1 + i % 3, bytes([192 + i % 10])) for i in range(30)])
    # every alignment with each aligned function
    a = b""
    for i in range(32):
        fn = ("aligned_alloc", "posix_memalign", "memalign")[i % 3]
        a += op(fn, i % 8, bytes([i]), tiny(48 + i))
    a += op("valloc", 9, tiny(10)) + op("pvalloc", 10, tiny(0)) + op("usable", 9)
    s["alignments"] = a
    # remote frees and blocks allocated by the worker, with a worker restart between
    w = b""
    for i in range(12):
        w += op("malloc", i, tiny(16 * i + 1)) + op("give", i)
        w += op("from_worker", i, bytes([i % 3]), mid(1200 * i + 5))
    w += op("restart", 0) + b"".join(op("free", i) for i in range(12))
    s["cross_thread"] = w
    # requests that must fail, border sizes, edge cases
    f = b""
    for i in range(7):
        f += op("malloc", i, failing(i)) + op("realloc", 8, bytes([0]), failing(i))
    f += op("calloc", 1, bytes([7])) + op("reallocarray", 2, bytes([15]))
    for i in range(0, 60, 3):
        f += op("malloc", 20 + i % 40, border(i))
    f += b"".join(op("edges", 0, bytes([i])) for i in range(4))
    s["edges"] = f
    return s


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
    os.makedirs(out, exist_ok=True)
    for name, data in seeds().items():
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)


if __name__ == "__main__":
    main()
