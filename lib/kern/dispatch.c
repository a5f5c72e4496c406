/*
 * dispatch.c - choose the scan kernel once per process.
 *
 * The CPU is asked once (pthread_once) what it supports: cpuid for the
 * instruction sets, and xgetbv for whether the operating system saves the
 * YMM / ZMM registers on a context switch (a CPU with AVX-512 under an OS
 * that does not enable it must not run AVX-512 code).  The environment
 * variable TQ_ISA=scalar|avx2|avx512|amx caps the choice, for tests and
 * comparisons; any other value is ignored.  A kernel that was not compiled
 * in or that the machine cannot run falls back along the chain
 * amx -> avx512 -> avx2 -> scalar.
 *
 * AMX needs more than cpuid and xgetbv: Linux allocates a thread's 8 KiB
 * of tile data only for a process that asked for it (arch_prctl
 * ARCH_REQ_XCOMP_PERM), and a tile instruction without that permission
 * dies of SIGILL.  The request is made once, here; a kernel that refuses
 * it leaves AMX out.  The permission covers the whole process and its
 * later threads.
 *
 * Adding a kernel is one entry in `kernels` below, guarded by the macro
 * the build defines when its source file is compiled in (TQ_HAVE_AVX2,
 * TQ_HAVE_AVX512, TQ_HAVE_AMX).  Every kernel must produce the same sums
 * as tq_scan_scalar and tq_scand_scalar, and the same bits as the fixed-
 * order products of dot_scalar.c.
 *
 * One kernel is apart from the table: the IVF list filter's bf16
 * products (near_bf16.c, TQ_HAVE_BF16), offered by tq_bf16_kernel to a
 * CPU with AVX512_BF16 when the chosen level is AVX-512 or AMX.  Its sums
 * are not the fixed order's; they only filter, within a bound (ivf.c).
 * At the AMX level a CPU with AMX-BF16 gets its many-row products on
 * tiles (near_amx.c, TQ_HAVE_AMXBF16), under the same bound.
 * For one row at a time a CPU without it has near_fma.c's (TQ_HAVE_FMA,
 * tq_bf16_single_kernel) from the AVX2 level up.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define TQ_X86 1
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#define TQ_LINUX_X86_64 1
#endif

#include "internal.h"

/* Features, as bits of `cpu_have`. */
enum {
	F_SSE42 = 1u << 0,
	F_AVX = 1u << 1,
	F_AVX2 = 1u << 2,
	F_FMA = 1u << 3,
	F_BMI2 = 1u << 4,
	F_AVX512F = 1u << 5,
	F_AVX512BW = 1u << 6,
	F_AVX512VL = 1u << 7,
	F_AVX512VBMI = 1u << 8,
	F_AVX512VNNI = 1u << 9,
	F_F16C = 1u << 10,
	F_AMX = 1u << 11,	/* AMX-TILE, AMX-INT8, OS state and permission */
	/* Not needed by tq's kernels; OpenBLAS's SkylakeX ones use them. */
	F_AVX512DQ = 1u << 12,
	F_AVX512CD = 1u << 13,
	/* The IVF list filter's bf16 products (near_bf16.c). */
	F_AVX512BF16 = 1u << 14,
	/* Its many-row products on tiles (near_amx.c). */
	F_AMXBF16 = 1u << 15	/* AMX-BF16, with F_AMX's state and permission */
};

static const struct {
	unsigned bit;
	const char *name;
} feature_names[] = {
	{ F_SSE42, "sse4.2" },
	{ F_AVX, "avx" },
	{ F_AVX2, "avx2" },
	{ F_FMA, "fma" },
	{ F_F16C, "f16c" },
	{ F_BMI2, "bmi2" },
	{ F_AVX512F, "avx512f" },
	{ F_AVX512DQ, "avx512dq" },
	{ F_AVX512CD, "avx512cd" },
	{ F_AVX512BW, "avx512bw" },
	{ F_AVX512VL, "avx512vl" },
	{ F_AVX512VBMI, "avx512vbmi" },
	{ F_AVX512VNNI, "avx512vnni" },
	{ F_AVX512BF16, "avx512bf16" },
	{ F_AMX, "amx-int8" },
	{ F_AMXBF16, "amx-bf16" },
};

/*
 * Kernels from best to worst; the fallback chain walks down from the
 * requested entry.  `need` lists the features the kernel's compiler flags
 * assume (see the Makefile).  A NULL kernel was not compiled in.
 */
static const struct {
	struct tq_kernels k;
	unsigned need;
} kernels[] = {
	/* AVX-512's kernels, and AMX for tiles of queries. */
	{ { "amx",
#if defined(TQ_HAVE_AVX512) && defined(TQ_HAVE_AMX)
	    tq_scan_avx512, tq_dot_avx512, tq_f16_avx512, tq_scan4x_avx512,
	    tq_keys_avx512, tq_keysh_avx512, tq_scand_avx512, tq_scand_amx, tq_rowa_avx512,
	    tq_keyf16_avx512, tq_dotq4_avx512, tq_rowa_rows_avx512,
	    tq_fachdec_avx512, tq_keysd_avx512, 1 },
#else
	    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	    NULL, NULL, NULL, 0 },
#endif
	    F_AVX512F | F_AVX512BW | F_AVX512VL | F_AVX512VBMI | F_AVX512VNNI |
	    F_BMI2 | F_AMX },
	{ { "avx512",
#ifdef TQ_HAVE_AVX512
	    tq_scan_avx512, tq_dot_avx512, tq_f16_avx512, tq_scan4x_avx512,
	    tq_keys_avx512, tq_keysh_avx512, tq_scand_avx512, NULL, tq_rowa_avx512,
	    tq_keyf16_avx512, tq_dotq4_avx512, tq_rowa_rows_avx512,
	    tq_fachdec_avx512, tq_keysd_avx512, 1 },
#else
	    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	    NULL, NULL, NULL, 0 },
#endif
	    F_AVX512F | F_AVX512BW | F_AVX512VL | F_AVX512VBMI | F_AVX512VNNI |
	    F_BMI2 },
	{ { "avx2",
#ifdef TQ_HAVE_AVX2
	    tq_scan_avx2, tq_dot_avx2, tq_f16_avx2, tq_scan4x_avx2,
	    tq_keys_avx2, tq_keysh_avx2, tq_scand_avx2, NULL, tq_rowa_avx2,
	    tq_keyf16_avx2, tq_dotq4_avx2, tq_rowa_rows_avx2,
	    tq_fachdec_avx2, tq_keysd_avx2, 0 },
#else
	    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	    NULL, NULL, NULL, 0 },
#endif
	    F_AVX2 | F_FMA | F_BMI2 | F_F16C },
	/* The baseline: x86-64 always has SSE2. */
	{ { "scalar", tq_scan_scalar,
#if defined(__SSE2__)
	    tq_dot_sse2,
#else
	    tq_dot_portable,
#endif
	    tq_f16_portable, NULL, tq_keys_scalar, tq_keysh_scalar, tq_scand_scalar, NULL,
#if defined(__SSE2__)
	    tq_rowa_sse2,
#else
	    tq_rowa_portable,
#endif
	    NULL, tq_dotq4_portable, NULL, tq_fachdec_scalar,
	    tq_keysd_scalar, 0 },
	    0 },
};
#define NKERNELS (sizeof(kernels) / sizeof(kernels[0]))

static pthread_once_t once = PTHREAD_ONCE_INIT;
/*
 * TQ_LIST_FILTER=sgemm turns the bf16 filter off (for comparisons, and
 * for CPUs where it would be slower; it never changes a result); =fma
 * keeps only near_fma.c's one-row products (for comparisons).
 */
static int bf16_off, fma_only;
static unsigned cpu_have;
static char cpu_names[128];
static size_t chosen = NKERNELS - 1;

#ifdef TQ_X86
static uint64_t
xgetbv0(void)
{
	uint32_t lo, hi;

	/* xgetbv by opcode bytes: no target attribute needed. */
	__asm__ volatile (".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) :
	    "c"(0));
	return (uint64_t)hi << 32 | lo;
}

/*
 * Asks Linux for this process's tile data (see the opening comment);
 * nonzero if granted.
 */
static int
amx_permit(void)
{
#if defined(TQ_LINUX_X86_64) && defined(TQ_HAVE_AMX)
	const long req_xcomp_perm = 0x1023, xtiledata = 18;

	return syscall(SYS_arch_prctl, req_xcomp_perm, xtiledata) == 0;
#else
	return 0;
#endif
}

static unsigned
detect(void)
{
	unsigned a, b, c, d, have = 0, max;
	int ymm = 0, zmm = 0, amx_state = 0;

	if (!__get_cpuid(0, &max, &b, &c, &d) || max < 1)
		return 0;
	__get_cpuid_count(1, 0, &a, &b, &c, &d);
	if (c & (1u << 20))
		have |= F_SSE42;
	/* OSXSAVE: xgetbv is usable and tells which state the OS saves. */
	if (c & (1u << 27)) {
		uint64_t xcr0 = xgetbv0();

		ymm = (xcr0 & 0x6) == 0x6;		/* XMM, YMM */
		zmm = ymm && (xcr0 & 0xe0) == 0xe0;	/* opmask, ZMM */
		/* XTILECFG, XTILEDATA */
		amx_state = (xcr0 & 0x60000) == 0x60000;
	}
	if (ymm && (c & (1u << 28)))
		have |= F_AVX;
	if (ymm && (c & (1u << 12)))
		have |= F_FMA;
	if (ymm && (c & (1u << 29)))
		have |= F_F16C;
	if (max >= 7) {
		unsigned d7;

		__get_cpuid_count(7, 0, &a, &b, &c, &d);
		d7 = d;	/* AMX's bits, before sub-leaf 1 overwrites d */
		if (b & (1u << 8))
			have |= F_BMI2;
		if (ymm && (b & (1u << 5)))
			have |= F_AVX2;
		if (zmm && (b & (1u << 16))) {
			have |= F_AVX512F;
			if (b & (1u << 17))
				have |= F_AVX512DQ;
			if (b & (1u << 28))
				have |= F_AVX512CD;
			if (b & (1u << 30))
				have |= F_AVX512BW;
			if (b & (1u << 31))
				have |= F_AVX512VL;
			if (c & (1u << 1))
				have |= F_AVX512VBMI;
			if (c & (1u << 11))
				have |= F_AVX512VNNI;
		}
		if ((have & F_AVX512F) && __get_cpuid_count(7, 1, &a, &b, &c,
		    &d) && (a & (1u << 5)))
			have |= F_AVX512BF16;
		if (amx_state && (d7 & (3u << 24)) == (3u << 24) &&
		    amx_permit()) {
			have |= F_AMX;
			if (d7 & (1u << 22))
				have |= F_AMXBF16;
		}
	}
	return have;
}
#else
static unsigned
detect(void)
{
	return 0;
}
#endif

static void
init(void)
{
	const char *isa = getenv("TQ_ISA");
	size_t i, start = 0, len = 0;

	cpu_have = detect();
	for (i = 0; i < sizeof(feature_names) / sizeof(feature_names[0]); i++) {
		size_t nl = strlen(feature_names[i].name);

		if (!(cpu_have & feature_names[i].bit) ||
		    len + nl + 2 > sizeof(cpu_names))
			continue;
		if (len > 0)
			cpu_names[len++] = ' ';
		memcpy(cpu_names + len, feature_names[i].name, nl);
		len += nl;
	}
	cpu_names[len] = '\0';

	if (isa != NULL)
		for (i = 0; i < NKERNELS; i++)
			if (strcmp(isa, kernels[i].k.name) == 0)
				start = i;
	for (i = start; i < NKERNELS; i++)
		if (kernels[i].k.scan != NULL &&
		    (cpu_have & kernels[i].need) == kernels[i].need)
			break;
	chosen = i < NKERNELS ? i : NKERNELS - 1;
	isa = getenv("TQ_LIST_FILTER");
	bf16_off = isa != NULL && strcmp(isa, "sgemm") == 0;
	fma_only = isa != NULL && strcmp(isa, "fma") == 0;
}

const struct tq_kernels *
tq_kernels(void)
{
	pthread_once(&once, init);
	return &kernels[chosen].k;
}

tq_scan_fn
tq_scan_kernel(void)
{
	return tq_kernels()->scan;
}

tq_dot_fn
tq_dot_kernel(void)
{
	return tq_kernels()->dot;
}

const char *
tq_kernel_name(void)
{
	return tq_kernels()->name;
}

const struct tq_bf16_kernel *
tq_bf16_kernel(void)
{
	const char *name = tq_kernels()->name;
#ifdef TQ_HAVE_BF16
	static const struct tq_bf16_kernel avx512 = { tq_bf16_row_avx512,
	    tq_bf16_gemm_avx512, tq_bf16_gemv_avx512,
	    tq_bf16_gemv_rows_avx512, "bf16" };

	/* Under a cap below AVX-512 (TQ_ISA), none. */
	if (!(cpu_have & F_AVX512BF16) || bf16_off || fma_only)
		return NULL;
#ifdef TQ_HAVE_AMXBF16
	{
		/* Many rows on tiles where the AMX level runs. */
		static const struct tq_bf16_kernel amx = {
		    tq_bf16_row_avx512, tq_bf16_gemm_amx,
		    tq_bf16_gemv_avx512, tq_bf16_gemv_rows_avx512,
		    "bf16-amx" };

		if ((cpu_have & F_AMXBF16) && strcmp(name, "amx") == 0)
			return &amx;
	}
#endif
	if (strcmp(name, "avx512") == 0 || strcmp(name, "amx") == 0)
		return &avx512;
#endif
	(void)name;
	return NULL;
}

const struct tq_bf16_kernel *
tq_bf16_fma_kernel(void)
{
	pthread_once(&once, init);
#ifdef TQ_HAVE_FMA
	static const struct tq_bf16_kernel fma = { tq_bf16_row_avx2, NULL,
	    tq_bf16_gemv_avx2, tq_bf16_gemv_rows_avx2, "bf16-fma" };

	if ((cpu_have & (F_AVX2 | F_FMA)) == (F_AVX2 | F_FMA))
		return &fma;
#endif
	return NULL;
}

const struct tq_bf16_kernel *
tq_bf16_single_kernel(void)
{
	const struct tq_bf16_kernel *b = tq_bf16_kernel();

	if (b != NULL)
		return b;
	if (bf16_off || strcmp(tq_kernels()->name, "scalar") == 0)
		return NULL;
	return tq_bf16_fma_kernel();
}

int
tq_amx_usable(void)
{
	pthread_once(&once, init);
	return (cpu_have & F_AMX) != 0;
}

const char *
tq_cpu_features(void)
{
	pthread_once(&once, init);
	return cpu_names;
}
