// bench_hnsw.cpp - hnswlib peer for scripts/bench (bench only, not a test).
//
// Debian's libhnswlib-dev headers, built by scripts/bench as
//   g++ -O3 -march=native -std=c++17 -pthread -I/usr/include \
//       scripts/bench_hnsw.cpp -o $TQ_BENCH_DIR/bin/bench_hnsw
//
//   bench_hnsw build CORPUS GRAPH [M] [EFC] [THREADS]
//       builds an L2 HNSW graph (M=16, efConstruction=200 by default) from a
//       fixture file (u32 dim, u32 n, f32 rows LE), saves it to GRAPH and
//       prints {"build_s":..,"maxrss_kb":..}
//   bench_hnsw search GRAPH QUERIES K THREADS NBATCH NSINGLE IDS_PREFIX EF...
//       for each ef: one batch of NBATCH queries spread over THREADS threads
//       (batch_qps) and NSINGLE single queries one after another on one
//       thread (p50/p95/p99 wall, p50 of process CPU time); writes the batch ids (u64 LE) to
//       IDS_PREFIX-ef<EF>.u64; prints one JSON object per ef.
#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <sys/resource.h>
#include <thread>
#include <time.h>
#include <vector>

static double now() {
    using namespace std::chrono;
    return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// CPU time of the whole process (user + system), as tq_bench takes it: a
// shared machine inflates it less than wall time.
static double cpu() {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static std::vector<float> load(const char *path, uint32_t &dim, uint32_t &n) {
    FILE *f = fopen(path, "rb");
    if (!f || fread(&dim, 4, 1, f) != 1 || fread(&n, 4, 1, f) != 1) {
        perror(path);
        exit(1);
    }
    std::vector<float> v((size_t)dim * n);
    if (fread(v.data(), 4, v.size(), f) != v.size()) {
        fprintf(stderr, "%s: short read\n", path);
        exit(1);
    }
    fclose(f);
    return v;
}

static long maxrss() {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

template <class F> static void parallel(size_t n, unsigned threads, F fn) {
    std::vector<std::thread> th;
    for (unsigned t = 0; t < threads; t++)
        th.emplace_back([&, t] {
            for (size_t i = t; i < n; i += threads) fn(i);
        });
    for (auto &x : th) x.join();
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: bench_hnsw build|search ...\n");
        return 2;
    }
    std::string mode = argv[1];
    if (mode == "build") {
        uint32_t dim, n;
        size_t M = argc > 4 ? atoi(argv[4]) : 16;
        size_t efc = argc > 5 ? atoi(argv[5]) : 200;
        unsigned threads = argc > 6 ? atoi(argv[6]) : 2;
        std::vector<float> x = load(argv[2], dim, n);
        hnswlib::L2Space space(dim);
        double t0 = now();
        hnswlib::HierarchicalNSW<float> g(&space, n, M, efc, 100);
        g.addPoint(x.data(), 0);
        parallel(n - 1, threads, [&](size_t i) {
            g.addPoint(x.data() + (i + 1) * (size_t)dim, i + 1);
        });
        double t = now() - t0;
        g.saveIndex(argv[3]);
        printf("{\"build_s\":%.3f,\"maxrss_kb\":%ld,\"M\":%zu,\"efc\":%zu,"
               "\"threads\":%u}\n", t, maxrss(), M, efc, threads);
        return 0;
    }
    if (argc < 10) {
        fprintf(stderr, "usage: bench_hnsw search GRAPH QUERIES K THREADS "
                "NBATCH NSINGLE IDS_PREFIX EF...\n");
        return 2;
    }
    uint32_t dim, nq;
    std::vector<float> q = load(argv[3], dim, nq);
    size_t k = atoi(argv[4]);
    unsigned threads = atoi(argv[5]);
    size_t nbatch = std::min<size_t>(atoi(argv[6]), nq);
    size_t nsingle = atoi(argv[7]);
    std::string prefix = argv[8];
    hnswlib::L2Space space(dim);
    double t0 = now();
    hnswlib::HierarchicalNSW<float> g(&space, std::string(argv[2]));
    double t_load = now() - t0;
    for (int a = 9; a < argc; a++) {
        size_t ef = atoi(argv[a]);
        g.setEf(ef);
        for (size_t i = 0; i < 20; i++)  // warm-up
            g.searchKnn(q.data() + (i % nq) * dim, k);
        std::vector<uint64_t> ids(nbatch * k);
        t0 = now();
        parallel(nbatch, threads, [&](size_t i) {
            auto r = g.searchKnn(q.data() + i * dim, k);
            for (size_t j = r.size(); j-- > 0;) {
                ids[i * k + j] = r.top().second;
                r.pop();
            }
        });
        double t_batch = now() - t0;
        std::vector<double> lat(nsingle), clat(nsingle);
        for (size_t i = 0; i < nsingle; i++) {
            size_t r = (nbatch + i) % nq;
            double c0 = cpu();
            t0 = now();
            g.searchKnn(q.data() + r * dim, k);
            lat[i] = now() - t0;
            clat[i] = cpu() - c0;
        }
        std::sort(lat.begin(), lat.end());
        std::sort(clat.begin(), clat.end());
        auto pct = [&](double p) {
            return nsingle ? lat[(size_t)(p * (nsingle - 1) + 0.5)] : 0.0;
        };
        std::string path = prefix + "-ef" + std::to_string(ef) + ".u64";
        FILE *f = fopen(path.c_str(), "wb");
        fwrite(ids.data(), 8, ids.size(), f);
        fclose(f);
        printf("{\"ef\":%zu,\"threads\":%u,\"load_s\":%.6f,\"nbatch\":%zu,"
               "\"batch_s\":%.9f,\"batch_qps\":%.3f,\"nsingle\":%zu,"
               "\"single_p50_s\":%.9f,\"single_p95_s\":%.9f,"
               "\"single_p99_s\":%.9f,\"single_cpu_p50_s\":%.9f,"
               "\"maxrss_kb\":%ld,\"ids\":\"%s\"}\n",
               ef, threads, t_load, nbatch, t_batch, nbatch / t_batch,
               nsingle, pct(.5), pct(.95), pct(.99),
               nsingle ? clat[(size_t)(.5 * (nsingle - 1) + .5)] : 0.0,
               maxrss(), path.c_str());
        fflush(stdout);
    }
    return 0;
}
