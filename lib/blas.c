/*
 * blas.c - which BLAS library runs, with which kernels, and which kernels
 * this CPU could run instead.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) chooses its kernels in its
 * library constructor, before main(), from a table of CPU models.  A CPU
 * newer than that table gets the oldest family, the SSE3 "Prescott"
 * kernels, whatever its vector units: OpenBLAS 0.3.21 on a Sapphire
 * Rapids ran sgemm five times slower than with its own "SkylakeX" ones.
 * Once the constructor has run nothing changes the choice but the
 * environment variable OPENBLAS_CORETYPE read by a fresh process; so the
 * library only tells (tq_blas_info) and the programs re-execute
 * themselves with the variable set (cmd/common.c).
 *
 * The kernel families are ranked by the widest instructions they use.
 * OpenBLAS does not check a forced family against the CPU (SkylakeX on a
 * CPU without AVX-512 dies of SIGILL), so a family is proposed only when
 * every feature its kernels need is present and saved by the OS, as
 * tq_cpu_features() reports.
 *
 * The OpenBLAS entry points are weak references: linked with another BLAS
 * they are NULL and the library reports "unknown" and proposes nothing.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

extern char *openblas_get_corename(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));
extern int openblas_get_num_threads(void) __attribute__((weak));
extern void openblas_set_num_threads(int) __attribute__((weak));
/*
 * Stops OpenBLAS's worker threads (its fork handler's call, exported);
 * a later call on more than one thread starts them again.
 */
extern int blas_thread_shutdown_(void) __attribute__((weak));

/*
 * OpenBLAS 0.3.21's x86-64 kernel families by the widest vector unit their
 * kernels use: 1 SSE2/SSE3, 2 SSE4, 3 AVX, 4 AVX2 and FMA, 5 AVX-512.
 * Zen and Excavator run the Haswell kernels; Cooperlake the SkylakeX ones
 * plus bf16.  A name not in the table is never replaced.
 */
static const struct {
	const char *name;
	int rank;
} families[] = {
	{ "Katmai", 1 }, { "Coppermine", 1 }, { "Northwood", 1 },
	{ "Prescott", 1 }, { "Banias", 1 }, { "Core2", 1 }, { "Penryn", 1 },
	{ "Dunnington", 1 }, { "Atom", 1 }, { "Athlon", 1 },
	{ "Opteron", 1 }, { "Opteron_SSE3", 1 }, { "Barcelona", 1 },
	{ "Bobcat", 1 }, { "Nano", 1 },
	{ "Nehalem", 2 },
	{ "Sandybridge", 3 }, { "Bulldozer", 3 }, { "Piledriver", 3 },
	{ "Steamroller", 3 },
	{ "Haswell", 4 }, { "Zen", 4 }, { "Excavator", 4 },
	{ "SkylakeX", 5 }, { "Cooperlake", 5 }, { "SapphireRapids", 5 },
};

/* The family to force for each rank, and what its kernels need. */
static const struct {
	int rank;
	const char *name;
	const char *need[6];
} widest[] = {
	{ 5, "SkylakeX", { "avx512f", "avx512bw", "avx512vl", "avx512dq",
	    "avx512cd", NULL } },
	{ 4, "Haswell", { "avx2", "fma", NULL } },
	{ 3, "Sandybridge", { "avx", NULL } },
	{ 2, "Nehalem", { "sse4.2", NULL } },
};

static int
family_rank(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		if (strcasecmp(name, families[i].name) == 0)
			return families[i].rank;
	return 0;
}

/* Whether the space-separated list `features` holds the word `f`. */
static int
has_word(const char *features, const char *f)
{
	size_t n = strlen(f);
	const char *p = features;

	while ((p = strstr(p, f)) != NULL) {
		if ((p == features || p[-1] == ' ') &&
		    (p[n] == ' ' || p[n] == '\0'))
			return 1;
		p += n;
	}
	return 0;
}

const char *
tq_blas_core_for(const char *features)
{
	size_t i, j;

	if (features == NULL)
		return NULL;
	for (i = 0; i < sizeof(widest) / sizeof(widest[0]); i++) {
		for (j = 0; widest[i].need[j] != NULL; j++)
			if (!has_word(features, widest[i].need[j]))
				break;
		if (widest[i].need[j] == NULL)
			return widest[i].name;
	}
	return NULL;
}

const char *
tq_blas_core_wider(const char *features, const char *current)
{
	const char *best = tq_blas_core_for(features);
	int have;

	if (best == NULL || current == NULL)
		return NULL;
	if ((have = family_rank(current)) == 0)
		return NULL;
	return family_rank(best) > have ? best : NULL;
}

void
tq_blas_info(struct tq_blas_info *out)
{
	memset(out, 0, sizeof(*out));
	out->library = "unknown";
	if (openblas_get_config != NULL)
		out->library = openblas_get_config();
	if (openblas_get_corename != NULL)
		out->core = openblas_get_corename();
	if (openblas_get_num_threads != NULL)
		out->threads = openblas_get_num_threads();
	out->wider = tq_blas_core_wider(tq_cpu_features(), out->core);
}

int
tq_blas_set_threads(int n)
{
	if (openblas_set_num_threads == NULL || n < 1)
		return 0;
	openblas_set_num_threads(n);
	/*
	 * The threads OpenBLAS started when it loaded spin on sched_yield
	 * until a timeout: about 0.1 s of a second core at every start of
	 * a tq program (measured on a tq-search waiting for its queries),
	 * on the core a pipeline's other program or the search's own
	 * second thread needs.  One thread needs none of them.
	 */
	if (n == 1 && blas_thread_shutdown_ != NULL)
		blas_thread_shutdown_();
	return 1;
}

int
tq_blas_threads(void)
{
	return openblas_get_num_threads != NULL ? openblas_get_num_threads() :
	    0;
}
