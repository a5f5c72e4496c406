#!/usr/bin/python3
"""tqtool.py - test helper for the tq CLI tests.  Python standard library only.

Vector files are written and read here independently of libtq, so the
tests compare the programs against a second implementation:

  gen OUT DIM N SEED [--clusters C] [--spread S] [--nan ROW] [--scale X]
                    [--offset Y]
                          fixture (u32 dim, u32 n, n*dim f32), gaussian or
                          clustered; --nan puts a NaN at row ROW, column 0,
                          --offset adds Y to every value
  rows IN OUT I,J,...     copy rows of a fixture into a new fixture
  head IN OUT N           the first N rows of a fixture
  perturb IN OUT SEED EPS copy of a fixture with small gaussian noise added
  tofvecs IN OUT          fixture -> .fvecs
  tonpy IN OUT [f4|f8] [v1|v2]   fixture -> .npy
  info FILE               "dim n" of a fixture
  truth CORPUS QUERIES K METRIC OUT   exact top-k (double precision) -> .ivecs
  ivecs FILE              prints an .ivecs file: one line of ids per row
  mkivecs OUT 'a b c;d e f'   writes an .ivecs file from rows of ints
  recall RESULTS TRUTH K  mean |results[:K] & truth[:K]| / K over rows
  relerr A B              mean over rows of |a-b|^2 / |a|^2 (two fixtures)
  sections FILE           "TAG offset length" per section of a tq file
  flip FILE OFFSET [XOR]  xor one byte in place (default 0xff)
  flips FILE OUTDIR N     writes OUTDIR/flip-<i> for i in 0..N-1, each a copy
                          of FILE with byte i xor 0xff
  tsvcheck FILE NQ K      checks tq-search TSV shape
  jsoncheck FILE NQ K     checks tq-search JSON Lines shape
  ivecscheck FILE NQ K    checks tq-search ivecs shape
  merge METRIC K OUT IN...  the best K per query of tq-search tsv files by
                          score (lower first for l2), ties by smaller id:
                          a second implementation of tq-merge
"""
import json
import math
import os
import random
import struct
import sys


def die(msg):
    sys.stderr.write("tqtool: %s\n" % msg)
    sys.exit(1)


def write_fixture(path, dim, rows):
    with open(path, "wb") as f:
        f.write(struct.pack("<II", dim, len(rows)))
        for r in rows:
            f.write(struct.pack("<%df" % dim, *r))


def read_fixture(path):
    with open(path, "rb") as f:
        data = f.read()
    dim, n = struct.unpack_from("<II", data, 0)
    if len(data) != 8 + 4 * dim * n:
        die("%s: size %d does not match %dx%d" % (path, len(data), n, dim))
    rows = []
    for i in range(n):
        rows.append(list(struct.unpack_from("<%df" % dim, data, 8 + 4 * dim * i)))
    return dim, rows


def read_ivecs(path):
    with open(path, "rb") as f:
        data = f.read()
    rows, off = [], 0
    while off < len(data):
        (k,) = struct.unpack_from("<i", data, off)
        rows.append(list(struct.unpack_from("<%di" % k, data, off + 4)))
        off += 4 + 4 * k
    return rows


def write_ivecs(path, rows):
    with open(path, "wb") as f:
        for r in rows:
            f.write(struct.pack("<i", len(r)))
            f.write(struct.pack("<%di" % len(r), *r))


def gen(args):
    out, dim, n, seed = args[0], int(args[1]), int(args[2]), int(args[3])
    opts = {"--clusters": "0", "--spread": "0.3", "--nan": "-1", "--scale": "1",
            "--offset": "0"}
    rest = args[4:]
    while rest:
        if rest[0] not in opts or len(rest) < 2:
            die("gen: bad option %r" % rest[0])
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    rng = random.Random(seed)
    nclus, spread = int(opts["--clusters"]), float(opts["--spread"])
    nanrow, scale = int(opts["--nan"]), float(opts["--scale"])
    offset = float(opts["--offset"])
    centres = [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(nclus)]
    rows = []
    for i in range(n):
        if nclus:
            c = centres[rng.randrange(nclus)]
            r = [scale * (c[j] + spread * rng.gauss(0, 1)) for j in range(dim)]
        else:
            r = [scale * rng.gauss(0, 1) for _ in range(dim)]
        r = [v + offset for v in r]
        if i == nanrow:
            r[0] = float("nan")
        rows.append(r)
    write_fixture(out, dim, rows)


def rows_cmd(args):
    """rows IN OUT LIST: LIST is comma-separated, or @FILE of one a line."""
    dim, rows = read_fixture(args[0])
    if args[2].startswith("@"):
        with open(args[2][1:]) as f:
            idx = [int(s) for s in f.read().split()]
    else:
        idx = [int(s) for s in args[2].split(",")]
    write_fixture(args[1], dim, [rows[i] for i in idx])


def head(args):
    dim, rows = read_fixture(args[0])
    write_fixture(args[1], dim, rows[: int(args[2])])


def perturb(args):
    dim, rows = read_fixture(args[0])
    rng = random.Random(int(args[2]))
    eps = float(args[3])
    write_fixture(args[1], dim,
                  [[v + eps * rng.gauss(0, 1) for v in r] for r in rows])


def tofvecs(args):
    dim, rows = read_fixture(args[0])
    with open(args[1], "wb") as f:
        for r in rows:
            f.write(struct.pack("<i", dim))
            f.write(struct.pack("<%df" % dim, *r))


def tonpy(args):
    dim, rows = read_fixture(args[0])
    dt = args[2] if len(args) > 2 else "f4"
    ver = args[3] if len(args) > 3 else "v1"
    hdr = "{'descr': '<%s', 'fortran_order': False, 'shape': (%d, %d), }" % (
        dt, len(rows), dim)
    pre = 10 if ver == "v1" else 12
    pad = 64 - (pre + len(hdr) + 1) % 64
    if pad == 64:
        pad = 0
    hdr = hdr + " " * pad + "\n"
    with open(args[1], "wb") as f:
        if ver == "v1":
            f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)))
        else:
            f.write(b"\x93NUMPY\x02\x00" + struct.pack("<I", len(hdr)))
        f.write(hdr.encode("latin1"))
        code = "f" if dt == "f4" else "d"
        for r in rows:
            f.write(struct.pack("<%d%s" % (dim, code), *r))


def info(args):
    with open(args[0], "rb") as f:
        dim, n = struct.unpack("<II", f.read(8))
    print(dim, n)


def score(metric, q, x):
    if metric == "l2":
        return sum((a - b) * (a - b) for a, b in zip(q, x))
    ip = sum(a * b for a, b in zip(q, x))
    if metric == "ip":
        return -ip
    if metric == "cosine":
        nq = math.sqrt(sum(a * a for a in q))
        nx = math.sqrt(sum(b * b for b in x))
        return -(ip / (nq * nx)) if nq > 0 and nx > 0 else 0.0
    die("unknown metric " + metric)


def exact(corpus, queries, k, metric):
    """Top-k row numbers per query, ties by smaller row, plus the margin:
    the smallest relative gap between consecutive scores up to rank k+1."""
    res, margin = [], float("inf")
    for q in queries:
        s = sorted((score(metric, q, x), i) for i, x in enumerate(corpus))
        res.append([i for _, i in s[:k]])
        for a, b in zip(s[: k + 1], s[1 : k + 1]):
            gap = abs(b[0] - a[0]) / max(1e-30, abs(a[0]) + abs(b[0]))
            margin = min(margin, gap)
    return res, margin


def truth(args):
    _, corpus = read_fixture(args[0])
    _, queries = read_fixture(args[1])
    k, metric, out = int(args[2]), args[3], args[4]
    res, margin = exact(corpus, queries, k, metric)
    if margin < 1e-5:
        die("truth: near-tie (relative gap %g); choose another seed" % margin)
    write_ivecs(out, res)


def ivecs(args):
    for r in read_ivecs(args[0]):
        print(" ".join(str(v) for v in r))


def mkivecs(args):
    rows = [[int(v) for v in r.split()] for r in args[1].split(";")]
    write_ivecs(args[0], rows)


def recall(args):
    res, tru, k = read_ivecs(args[0]), read_ivecs(args[1]), int(args[2])
    if len(res) != len(tru):
        die("recall: %d result rows, %d truth rows" % (len(res), len(tru)))
    hit = sum(len(set(r[:k]) & set(t[:k])) for r, t in zip(res, tru))
    print("%.4f" % (hit / (k * len(res))))


def relerr(args):
    da, a = read_fixture(args[0])
    db, b = read_fixture(args[1])
    if da != db or len(a) != len(b):
        die("relerr: shapes differ: %dx%d vs %dx%d" % (len(a), da, len(b), db))
    tot = 0.0
    for x, y in zip(a, b):
        tot += sum((u - v) ** 2 for u, v in zip(x, y)) / sum(u * u for u in x)
    print("%.6f" % (tot / len(a)))


def sections(args):
    with open(args[0], "rb") as f:
        data = f.read()
    if struct.unpack_from("<I", data, 8)[0] >= 2:
        # Version 2: the commit in the slot with the larger number.
        best = None
        for sl in (1024, 2048):
            seq, toff, ns = struct.unpack_from("<QQI", data, sl)
            if seq and (best is None or seq > best[0]):
                best = (seq, toff, ns)
        _, toff, ns = best
    else:
        (ns,) = struct.unpack_from("<I", data, 16)
        (toff,) = struct.unpack_from("<Q", data, 32)
    for i in range(ns):
        tag, _, off, ln, _ = struct.unpack_from("<4sIQQQ", data, toff + 32 * i)
        print(tag.decode("latin1"), off, ln)


def flip(args):
    off = int(args[1])
    x = int(args[2], 0) if len(args) > 2 else 0xFF
    with open(args[0], "r+b") as f:
        f.seek(off)
        b = f.read(1)
        if len(b) != 1:
            die("flip: offset %d past end" % off)
        f.seek(off)
        f.write(bytes([b[0] ^ x]))


def flips(args):
    with open(args[0], "rb") as f:
        data = bytearray(f.read())
    os.makedirs(args[1], exist_ok=True)
    for i in range(int(args[2])):
        d = bytearray(data)
        d[i] ^= 0xFF
        with open(os.path.join(args[1], "flip-%d" % i), "wb") as f:
            f.write(d)


def tsvcheck(args):
    nq, k = int(args[1]), int(args[2])
    lines = open(args[0]).read().split("\n")
    if lines[-1] != "":
        die("tsv: no final newline")
    lines = lines[:-1]
    if len(lines) != nq * k:
        die("tsv: %d lines, expected %d" % (len(lines), nq * k))
    for i, line in enumerate(lines):
        f = line.split("\t")
        if len(f) != 4:
            die("tsv line %d: %d fields: %r" % (i + 1, len(f), line))
        if int(f[0]) != i // k or int(f[1]) != i % k + 1:
            die("tsv line %d: query/rank %s/%s" % (i + 1, f[0], f[1]))
        int(f[2])
        if not math.isfinite(float(f[3])):
            die("tsv line %d: score %r" % (i + 1, f[3]))


def jsoncheck(args):
    nq, k = int(args[1]), int(args[2])
    lines = open(args[0]).read().split("\n")
    if lines[-1] != "":
        die("json: no final newline")
    lines = lines[:-1]
    if len(lines) != nq:
        die("json: %d lines, expected %d" % (len(lines), nq))
    for i, line in enumerate(lines):
        o = json.loads(line)
        if o.get("query") != i:
            die("json line %d: query %r" % (i + 1, o.get("query")))
        if len(o["ids"]) != k or len(o["scores"]) != k:
            die("json line %d: %d ids, %d scores" % (i + 1, len(o["ids"]),
                                                     len(o["scores"])))
        if not all(isinstance(v, int) for v in o["ids"]):
            die("json line %d: ids not integers" % (i + 1))


def ivecscheck(args):
    nq, k = int(args[1]), int(args[2])
    size = os.path.getsize(args[0])
    if size != nq * (4 + 4 * k):
        die("ivecs: %d bytes, expected %d" % (size, nq * (4 + 4 * k)))
    rows = read_ivecs(args[0])
    if len(rows) != nq or any(len(r) != k for r in rows):
        die("ivecs: bad row widths")


def merge(args):
    metric, k, out = args[0], int(args[1]), args[2]
    per = {}
    for path in args[3:]:
        for line in open(path).read().splitlines():
            q, _, i, sc = line.split("\t")
            per.setdefault(int(q), []).append((float(sc), int(i), sc))
    sign = 1 if metric == "l2" else -1
    with open(out, "w") as f:
        for q in sorted(per):
            best = sorted(per[q], key=lambda h: (sign * h[0], h[1]))[:k]
            for r, h in enumerate(best):
                f.write("%d\t%d\t%d\t%s\n" % (q, r + 1, h[1], h[2]))


CMDS = {
    "gen": gen, "rows": rows_cmd, "head": head, "perturb": perturb,
    "tofvecs": tofvecs, "tonpy": tonpy, "info": info, "truth": truth,
    "ivecs": ivecs, "mkivecs": mkivecs, "recall": recall, "relerr": relerr,
    "sections": sections, "flip": flip, "flips": flips,
    "tsvcheck": tsvcheck, "jsoncheck": jsoncheck, "ivecscheck": ivecscheck,
    "merge": merge,
}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in CMDS:
        die("usage: tqtool.py %s ..." % "|".join(sorted(CMDS)))
    CMDS[sys.argv[1]](sys.argv[2:])
