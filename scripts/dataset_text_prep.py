#!/usr/bin/python3
"""dataset_text_prep.py: the text corpus and the texts of scripts/dataset-text.

Not run by hand: scripts/dataset-text calls it.

    dataset_text_prep.py corpus WORK     writes WORK/corpus.txt (training
                                          text for fastText, one paragraph
                                          a line, tokenised) and
                                          WORK/texts.tsv (the texts to embed)
    dataset_text_prep.py write WORK OUT DIM SEED NQ K
                                          reads WORK/texts.vec (fastText's
                                          sentence vectors), writes the set
    dataset_text_prep.py words WORK OUT DIM SEED NQ
                                          reads WORK/model.vec (fastText's
                                          word vectors), writes the words set

Everything read comes from Debian packages at fixed versions (the script
checks them): dict-gcide (GCIDE, Webster's 1913 plus WordNet, free
dictionary text), wordnet-base (WordNet 3.0 glosses) and fortunes /
fortunes-min (fortune cookie text).  No randomness but the seeded ones.
"""

import os
import re
import sys

TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def tokens(s):
    return TOKEN.findall(s.lower())


def gcide_paragraphs(path):
    """The entries of the GCIDE dictd file as paragraphs of plain text."""
    import gzip
    with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
        text = f.read()
    # Pronunciations \Co*ag"u*late\ carry no words; source tags such as
    # [1913 Webster] or [WordNet 1.5] neither.
    text = re.sub(r"\\[^\\\n]*\\", " ", text)
    text = re.sub(r"\[(?:1913 Webster|Webster 1913 Suppl\.|WordNet [0-9.]+|"
                  r"PJC|RN|JC|MW|AS|DC|NRZ|CJB|Century Dict\.)[^\]]*\]",
                  " ", text)
    for para in re.split(r"\n\s*\n", text):
        t = tokens(para)
        if len(t) >= 3:
            yield t


def wordnet_glosses(root):
    """(headword, gloss) for every synset of WordNet 3.0, file order."""
    for pos in ("noun", "verb", "adj", "adv"):
        with open(os.path.join(root, "data." + pos), encoding="utf-8") as f:
            for line in f:
                if line.startswith("  "):      # the licence header
                    continue
                head, _, gloss = line.partition(" | ")
                fields = head.split()
                word = fields[4].replace("_", " ")
                yield word, pos, gloss.strip()


def fortunes(root):
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if "." in name or not os.path.isfile(p):
            continue
        with open(p, encoding="utf-8", errors="replace") as f:
            for cookie in f.read().split("\n%\n"):
                t = tokens(cookie)
                if len(t) >= 3:
                    yield t


def corpus(work):
    n_par = n_tok = 0
    seen = set()
    texts = []
    with open(os.path.join(work, "corpus.txt"), "w") as out:
        for t in gcide_paragraphs("/usr/share/dictd/gcide.dict.dz"):
            out.write(" ".join(t) + "\n")
            n_par += 1
            n_tok += len(t)
        for word, pos, gloss in wordnet_glosses("/usr/share/wordnet"):
            t = tokens(gloss)
            if not t:
                continue
            out.write(" ".join(t) + "\n")
            n_par += 1
            n_tok += len(t)
            key = " ".join(t)
            # Texts whose tokens are equal embed to the same vector: keep
            # the first, so that no two rows are identical.
            if key in seen:
                continue
            seen.add(key)
            texts.append((word, pos, gloss.replace("\t", " "), key))
        for t in fortunes("/usr/share/games/fortunes"):
            out.write(" ".join(t) + "\n")
            n_par += 1
            n_tok += len(t)
    with open(os.path.join(work, "texts.tsv"), "w") as out:
        for word, pos, gloss, key in texts:
            out.write("%s\t%s\t%s\t%s\n" % (word, pos, gloss, key))
    print("corpus: %d paragraphs, %d tokens; texts: %d distinct glosses"
          % (n_par, n_tok, len(texts)))


def distinct_nonzero(x):
    """The rows of x to keep: not zero (a text none of whose words has a
    vector), and the first of rows equal as float32 (different words, the
    same vector)."""
    import numpy as np
    keep = np.linalg.norm(x.astype(np.float64), axis=1) > 1e-6
    _, first = np.unique(x, axis=0, return_index=True)
    uniq = np.zeros(len(x), dtype=bool)
    uniq[first] = True
    return keep & uniq


def write_fvecs(path, x):
    import numpy as np
    n, d = x.shape
    rec = np.empty((n, d + 1), dtype="<f4")
    rec.view("<i4")[:, 0] = d
    rec[:, 1:] = x
    rec.tofile(path)


def exact_cosine_topk(xb, xq, k):
    """The k most similar rows of xb to each row of xq by cosine.

    BLAS (float64) picks 2k candidates; their cosines are then computed
    again exactly rounded (math.fsum of products of float32 values, which
    float64 holds exactly), so that the order (ties by the lower row) and
    the distances do not depend on the BLAS, its threads or the CPU."""
    import math
    import numpy as np
    b = xb.astype(np.float64)
    q = xq.astype(np.float64)
    bnorm = np.array([math.sqrt(math.fsum(r * r)) for r in b])
    qnorm = np.array([math.sqrt(math.fsum(r * r)) for r in q])
    bn = b / bnorm[:, None]
    qn = q / qnorm[:, None]
    nq = len(q)
    nbr = np.empty((nq, k), dtype=np.int32)
    dist = np.empty((nq, k), dtype=np.float32)
    m = min(2 * k, len(b) - 1)
    for s in range(0, nq, 100):
        sim = qn[s:s + 100] @ bn.T
        for j in range(sim.shape[0]):
            i = s + j
            cand = np.sort(np.argpartition(-sim[j], m)[:m])
            cos = np.array([math.fsum(q[i] * b[c]) / (qnorm[i] * bnorm[c])
                            for c in cand])
            order = np.lexsort((cand, -cos))[:k]
            nbr[i] = cand[order]
            dist[i] = 1.0 - cos[order]
    return nbr, dist


def write(work, out, dim, seed, nq, k):
    import numpy as np
    rows = []
    with open(os.path.join(work, "texts.tsv"), encoding="utf-8") as f:
        for line in f:
            rows.append(line.rstrip("\n").split("\t"))
    with open(os.path.join(work, "texts.vec")) as f:
        vec = np.fromstring(f.read(), dtype=np.float64, sep=" ")
    if vec.size != len(rows) * dim:
        sys.exit("dataset-text: %d texts but %d values" % (len(rows), vec.size))
    vec = vec.reshape(len(rows), dim)
    x = vec.astype(np.float32)
    keep = distinct_nonzero(x)
    x = x[keep]
    rows = [r for r, kp in zip(rows, keep) if kp]
    print("vectors: %d kept (%d zero or duplicate dropped)"
          % (len(x), int((~keep).sum())))
    perm = np.random.RandomState(seed).permutation(len(x))
    test_i, train_i = perm[:nq], perm[nq:]
    base = os.path.join(out, "text-%d" % dim)
    xb, xq = x[train_i], x[test_i]
    write_fvecs(base + "-train.fvecs", xb)
    write_fvecs(base + "-test.fvecs", xq)
    for part, idx in (("train", train_i), ("test", test_i)):
        with open("%s-%s.txt" % (base, part), "w", encoding="utf-8") as f:
            for i in idx:
                f.write(rows[i][2] + "\n")
        with open("%s-%s.words" % (base, part), "w", encoding="utf-8") as f:
            for i in idx:
                f.write("%s\t%s\n" % (rows[i][0], rows[i][1]))
    nbr, dist = exact_cosine_topk(xb, xq, k)
    with open(base + "-neighbors.ivecs", "wb") as f:
        rec = np.empty((nq, k + 1), dtype="<i4")
        rec[:, 0] = k
        rec[:, 1:] = nbr
        rec.tofile(f)
    try:
        import h5py
    except ImportError:
        print("h5py missing: no HDF5 file")
        return
    with h5py.File(base + "-angular.hdf5", "w") as h:
        h.attrs["type"] = "dense"
        h.attrs["distance"] = "angular"
        h.attrs["dimension"] = dim
        h.attrs["point_type"] = "float"
        h.create_dataset("train", data=xb, track_times=False)
        h.create_dataset("test", data=xq, track_times=False)
        h.create_dataset("neighbors", data=nbr, track_times=False)
        h.create_dataset("distances", data=dist, track_times=False)


def words(work, out, dim, seed, nq):
    """fastText's own word vectors (model.vec) as a second set: a word-
    embedding set of this dimension beside the sentence one, split as the
    texts are.  The end-of-line token </s> and zero or duplicate vectors
    are dropped."""
    import numpy as np
    names = []
    with open(os.path.join(work, "model.vec"), encoding="utf-8") as f:
        n, d = (int(v) for v in f.readline().split())
        if d != dim:
            sys.exit("dataset-text: model.vec has %d dimensions, not %d"
                     % (d, dim))
        x = np.empty((n, dim), dtype=np.float32)
        for line in f:
            parts = line.rstrip("\n").rstrip(" ").split(" ")
            if len(parts) != dim + 1 or len(names) == n:
                sys.exit("dataset-text: model.vec: a line of %d fields, "
                         "or more lines than its header says" % len(parts))
            if parts[0] == "</s>":
                continue
            # Parsed as double, then rounded once to float.
            x[len(names)] = np.array(parts[1:], dtype=np.float64)
            names.append(parts[0])
    x = x[:len(names)]
    keep = distinct_nonzero(x)
    x = x[keep]
    names = [w for w, kp in zip(names, keep) if kp]
    print("words: %d of %d kept" % (len(x), n))
    perm = np.random.RandomState(seed).permutation(len(x))
    test_i, train_i = perm[:nq], perm[nq:]
    base = os.path.join(out, "words-%d" % dim)
    write_fvecs(base + "-train.fvecs", x[train_i])
    write_fvecs(base + "-test.fvecs", x[test_i])
    for part, idx in (("train", train_i), ("test", test_i)):
        with open("%s-%s.words" % (base, part), "w", encoding="utf-8") as f:
            for i in idx:
                f.write(names[i] + "\n")


def read_fvecs(path):
    import numpy as np
    raw = np.fromfile(path, dtype="<i4")
    d = int(raw[0])
    return raw.reshape(-1, d + 1)[:, 1:].view("<f4").copy()


def stats(name, xb, xq, metric, seed=7):
    """What the set looks like: norms, anisotropy, difficulty."""
    import numpy as np
    x = xb.astype(np.float64)
    norm = np.linalg.norm(x, axis=1)
    u = x / norm[:, None] if metric == "cosine" else x
    c = u.mean(0)
    rng = np.random.RandomState(seed)
    i, j = rng.randint(0, len(u), 20000), rng.randint(0, len(u), 20000)
    cu = c / np.linalg.norm(c)
    un = u / np.linalg.norm(u, axis=1, keepdims=True)
    # Local intrinsic dimensionality (MLE over the 20 nearest, the
    # estimator of Levina and Bickel as ann-benchmarks reports it) of the
    # queries, and the relative contrast: mean distance / 1-NN distance.
    q = xq.astype(np.float64)
    if metric == "cosine":
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    uu = (u * u).sum(1)
    ds, dmean = [], []
    for s in range(0, len(q), 100):
        qs = q[s:s + 100]
        d = np.sqrt(np.maximum((qs * qs).sum(1)[:, None] - 2 * qs @ u.T
                               + uu[None, :], 0))
        ds.append(np.partition(d, 20, axis=1)[:, :21])
        dmean.append(d.mean(1))
    ds = np.sort(np.concatenate(ds), axis=1)
    dmean = np.concatenate(dmean)
    ds = ds[:, 1:] if (ds[:, 0] == 0).all() else ds[:, :20]
    ds = np.maximum(ds, 1e-12)
    lid = -1.0 / np.mean(np.log(ds[:, :-1] / ds[:, -1:]), axis=1)
    rc = dmean / np.maximum(ds[:, 0], 1e-12)
    sv = np.linalg.svd(un[rng.permutation(len(un))[:20000]] -
                       un.mean(0), compute_uv=False) ** 2
    ev = np.cumsum(sv) / sv.sum()
    out = {
        "set": name, "rows": len(xb), "queries": len(xq), "dim": xb.shape[1],
        "norm_min": norm.min(), "norm_p1": np.percentile(norm, 1),
        "norm_median": np.median(norm), "norm_p99": np.percentile(norm, 99),
        "norm_max": norm.max(),
        "mean_cos_to_centroid": float((un @ cu).mean()),
        "mean_cos_random_pairs": float((un[i] * un[j]).sum(1).mean()),
        "lid_mle20_median": float(np.median(lid)),
        "relative_contrast_median": float(np.median(rc)),
        "dims_for_90pct_variance": int(np.searchsorted(ev, 0.9) + 1),
    }
    for key, v in out.items():
        print("%-26s %s" % (key, ("%.4f" % v) if isinstance(v, float) else v))
    return out


def check(out, dim):
    """Three example queries with their nearest glosses, and stats()."""
    import numpy as np
    base = os.path.join(out, "text-%d" % dim)
    xb, xq = read_fvecs(base + "-train.fvecs"), read_fvecs(base + "-test.fvecs")
    tb = open(base + "-train.txt", encoding="utf-8").read().splitlines()
    tq_ = open(base + "-test.txt", encoding="utf-8").read().splitlines()
    raw = np.fromfile(base + "-neighbors.ivecs", dtype="<i4")
    nbr = raw.reshape(len(xq), -1)[:, 1:]
    for qi in (0, 1, 2):
        print("query: %s" % tq_[qi])
        for r in range(3):
            print("   %d. %s" % (r + 1, tb[nbr[qi, r]]))
    stats("text-%d" % dim, xb, xq, "cosine")


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "check":
        check(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) == 5 and sys.argv[1] == "stats":
        stats(os.path.basename(sys.argv[2]), read_fvecs(sys.argv[2]),
              read_fvecs(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) == 7 and sys.argv[1] == "words":
        words(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
              int(sys.argv[6]))
    elif len(sys.argv) == 3 and sys.argv[1] == "corpus":
        corpus(sys.argv[2])
    elif len(sys.argv) == 8 and sys.argv[1] == "write":
        write(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]),
              int(sys.argv[6]), int(sys.argv[7]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
