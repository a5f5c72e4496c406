#!/usr/bin/env python3
"""nearest.py - search a tq index from Python through libtq.so (ctypes).

usage: nearest.py [-k K] [--oversample F|auto] [--probes P] [--threads T]
                  [--lib PATH] INDEX QUERIES

Reads the queries with the library's own reader (any vector file the tq
programs read), searches INDEX and prints query<TAB>rank<TAB>id<TAB>score
lines, the same bytes as `tq-search -k K [...] -i QUERIES INDEX`.  The
standard library only: the class Index below takes queries from anything
that exposes float32 memory (array.array('f'), a NumPy float32 array made
C-contiguous, bytes), so it is the whole binding a program of its own
needs.  libtq.so is found by --lib, then $TQ_LIB, then lib/libtq.so of
this tree, then the linker's search path (libtq.so.0).

Exit status as the tq programs: 0 done, 1 failure, 2 usage error.
"""
import array
import ctypes
import ctypes.util
import math
import os
import signal
import sys

TQ_OVERSAMPLE_AUTO = -1.0
PROG = "nearest.py"


class SearchParams(ctypes.Structure):
    """struct tq_search_params of tq.h, field for field."""
    _fields_ = [
        ("k", ctypes.c_uint32),
        ("oversample", ctypes.c_float),
        ("threads", ctypes.c_uint),
        ("allow", ctypes.c_void_p),
        ("probes", ctypes.c_uint32),
        ("stats", ctypes.c_void_p),
        ("auto_z", ctypes.c_float),
    ]


class TqError(Exception):
    pass


def load(path=None):
    """libtq.so as a ctypes library, its functions typed."""
    here = os.path.dirname(os.path.abspath(__file__))
    if path is not None:
        names = [path]
    else:
        names = [os.environ.get("TQ_LIB"),
                 os.path.join(here, "..", "lib", "libtq.so"), "libtq.so.0"]
    lib = None
    for name in names:
        if not name or (name != path and os.sep in name and
                        not os.path.exists(name)):
            continue
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as e:
            if name == path or name == os.environ.get("TQ_LIB"):
                raise TqError(f"{name}: cannot load: {e}")
    if lib is None:
        raise TqError("libtq.so not found (give --lib or set TQ_LIB)")
    P = ctypes.POINTER
    lib.tq_errdetail.restype = ctypes.c_char_p
    lib.tq_errdetail.argtypes = []
    lib.tq_index_open.restype = ctypes.c_int
    lib.tq_index_open.argtypes = [ctypes.c_char_p, P(ctypes.c_void_p)]
    lib.tq_index_close.restype = None
    lib.tq_index_close.argtypes = [ctypes.c_void_p]
    lib.tq_index_quantizer.restype = ctypes.c_void_p
    lib.tq_index_quantizer.argtypes = [ctypes.c_void_p]
    lib.tq_quantizer_dim.restype = ctypes.c_uint32
    lib.tq_quantizer_dim.argtypes = [ctypes.c_void_p]
    lib.tq_index_live.restype = ctypes.c_uint64
    lib.tq_index_live.argtypes = [ctypes.c_void_p]
    lib.tq_read_all.restype = ctypes.c_int
    lib.tq_read_all.argtypes = [ctypes.c_char_p, ctypes.c_char_p,
                                P(P(ctypes.c_float)), P(ctypes.c_uint32),
                                P(ctypes.c_size_t)]
    lib.tq_search_params_default.restype = None
    lib.tq_search_params_default.argtypes = [ctypes.c_void_p]
    lib.tq_search.restype = ctypes.c_int
    lib.tq_search.argtypes = [ctypes.c_void_p, P(ctypes.c_float),
                              ctypes.c_size_t, ctypes.c_void_p,
                              P(ctypes.c_uint64), P(ctypes.c_float)]
    return lib


def fail(lib, what):
    return TqError(f"{what}: {lib.tq_errdetail().decode(errors='replace')}")


class Index:
    """An open tq index; search() may be called from many threads."""

    def __init__(self, lib, path):
        self.lib, self.path = lib, path
        h = ctypes.c_void_p()
        if lib.tq_index_open(os.fsencode(path), ctypes.byref(h)) != 0:
            raise fail(lib, path)
        self.h = h
        self.dim = lib.tq_quantizer_dim(lib.tq_index_quantizer(h))

    def close(self):
        if self.h:
            self.lib.tq_index_close(self.h)
            self.h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def search(self, queries, k=10, oversample=1.0, probes=0, threads=0):
        """Top k of each query: a list of (ids, scores) per query.

        queries: n * dim float32 values in one C-contiguous buffer.
        Fewer than k results (a small index) leave the list short.
        """
        mv = memoryview(queries)
        if mv.format not in ("f", "<f", "=f", "B", "b", "c"):
            raise TqError(f"queries: items of format {mv.format!r}, not "
                          "float32")
        if not mv.c_contiguous:
            raise TqError("queries: not one C-contiguous buffer")
        mv = mv.cast("B")
        if mv.nbytes % (4 * self.dim):
            raise TqError(f"queries: {mv.nbytes} bytes are not rows of "
                          f"{self.dim} float32 values")
        nq = mv.nbytes // (4 * self.dim)
        qbuf = (ctypes.c_float * (nq * self.dim)).from_buffer_copy(mv)
        # Room past the struct: a newer libtq may have added fields.
        raw = (ctypes.c_char * 256)()
        self.lib.tq_search_params_default(raw)
        p = SearchParams.from_buffer(raw)
        p.k, p.oversample, p.probes, p.threads = k, oversample, probes, \
            threads
        ids = (ctypes.c_uint64 * (nq * k))()
        scores = (ctypes.c_float * (nq * k))()
        if self.lib.tq_search(self.h, qbuf, nq, raw, ids, scores) != 0:
            raise fail(self.lib, self.path)
        out = []
        for i in range(nq):
            row = [(ids[i * k + j], scores[i * k + j]) for j in range(k)
                   if ids[i * k + j] != 2**64 - 1]
            out.append(([a for a, _ in row], [b for _, b in row]))
        return out


def read_vectors(lib, path):
    """(array('f') of n * dim values, dim) of a vector file."""
    rows = ctypes.POINTER(ctypes.c_float)()
    dim, n = ctypes.c_uint32(), ctypes.c_size_t()
    if lib.tq_read_all(os.fsencode(path), b"test", ctypes.byref(rows),
                       ctypes.byref(dim), ctypes.byref(n)) != 0:
        raise fail(lib, path)
    try:
        data = array.array("f", ctypes.string_at(rows, 4 * n.value *
                                                 dim.value))
    finally:
        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        libc.free.argtypes = [ctypes.c_void_p]
        libc.free(rows)
    return data, dim.value


def usage(msg=None):
    if msg:
        print(f"{PROG}: {msg}", file=sys.stderr)
    print("usage: nearest.py [-k K] [--oversample F|auto] [--probes P] "
          "[--threads T] [--lib PATH] INDEX QUERIES", file=sys.stderr)
    return 2


def main(argv):
    opts = {"-k": "10", "--oversample": "1", "--probes": "0",
            "--threads": "0", "--lib": None}
    pos = []
    it = iter(argv)
    for a in it:
        if a in ("-h", "--help"):
            print(__doc__.split("\n\n")[1])
            return 0
        if a in opts:
            opts[a] = next(it, None)
            if opts[a] is None:
                return usage(f"{a} needs a value")
        elif a.startswith("-") and a != "-":
            return usage(f"unknown option {a}")
        else:
            pos.append(a)
    if len(pos) != 2:
        return usage()
    try:
        k = int(opts["-k"])
        probes = int(opts["--probes"])
        threads = int(opts["--threads"])
        over = (TQ_OVERSAMPLE_AUTO if opts["--oversample"] == "auto"
                else float(opts["--oversample"]))
    except ValueError as e:
        return usage(str(e))
    if not 1 <= k <= 100000 or probes < 0 or threads < 0 or \
            not math.isfinite(over):
        return usage("k must be 1 to 100000; probes, threads >= 0")
    try:
        lib = load(opts["--lib"])
        with Index(lib, pos[0]) as ix:
            q, dim = read_vectors(lib, pos[1])
            if dim != ix.dim:
                raise TqError(f"{pos[1]}: {dim}-d queries for a "
                              f"{ix.dim}-d index")
            res = ix.search(q, k=k, oversample=over, probes=probes,
                            threads=threads)
    except TqError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 1
    w = sys.stdout.write
    for i, (ids, scores) in enumerate(res):
        for j, (a, s) in enumerate(zip(ids, scores)):
            w("%d\t%d\t%d\t%.9g\n" % (i, j + 1, a, s))
    return 0


if __name__ == "__main__":
    # A closed pipe ends it as it ends the tq programs, not in a traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main(sys.argv[1:]))
