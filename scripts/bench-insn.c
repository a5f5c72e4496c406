/*
 * bench-insn.c - how many of each AVX-512 instruction the scan kernels
 * use one core retires a cycle.
 *
 * A micro-benchmark, not a test: it prints figures and asserts nothing.
 * Build and run from the top of the tree on a CPU with AVX-512 VBMI and
 * VNNI (pin it, as the figures are per core):
 *
 *   cc -O2 -mavx512f -mavx512bw -mavx512vbmi -mavx512vnni \
 *       scripts/bench-insn.c -o /tmp/bench-insn
 *   taskset -c 1 /tmp/bench-insn
 *
 * Each row runs twelve independent chains of one instruction on 512-bit
 * registers, so its latency is hidden and only its throughput counts, and
 * prints nanoseconds per instruction; divide by the cycle time (1 / the
 * clock: about 0.27 ns on a 3.7 GHz Zen 4) for cycles.  The empty asm at
 * the end of each round tells the compiler that every register may have
 * changed, so it cannot fold a chain into fewer instructions or keep it in
 * memory.  The last two rows run a lookup and what consumes it in pairs:
 * tq's (vpermb into vpdpbusd) and FAISS's (vpshufb into u16 adds).
 * README ("On the Zen 4 EPYC again") reads the figures.
 */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define ROUNDS 50000000L

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define CHAINS(OP) do {							\
	a0 = OP(a0); a1 = OP(a1); a2 = OP(a2); a3 = OP(a3);		\
	a4 = OP(a4); a5 = OP(a5); a6 = OP(a6); a7 = OP(a7);		\
	a8 = OP(a8); a9 = OP(a9); a10 = OP(a10); a11 = OP(a11);		\
	__asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3),	\
	    "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9),	\
	    "+v"(a10), "+v"(a11));					\
} while (0)

#define BENCH(name, OP) do {						\
	__m512i a0 = t_u8x64, a1 = o_u8x64, a2 = t_u8x64, a3 = o_u8x64;	\
	__m512i a4 = t_u8x64, a5 = o_u8x64, a6 = t_u8x64, a7 = o_u8x64;	\
	__m512i a8 = t_u8x64, a9 = o_u8x64, a10 = t_u8x64;		\
	__m512i a11 = o_u8x64;						\
	double t0 = now();						\
									\
	for (long r = 0; r < ROUNDS; r++)				\
		CHAINS(OP);						\
	printf("%-26s %.3f ns\n", name,					\
	    (now() - t0) / ((double)ROUNDS * 12.0) * 1e9);		\
} while (0)

#define PERMB(x) _mm512_permutexvar_epi8((x), t_u8x64)
#define SHUFB(x) _mm512_shuffle_epi8(t_u8x64, (x))
#define DPBUSD(x) _mm512_dpbusd_epi32((x), t_u8x64, o_u8x64)
#define ADDW(x) _mm512_add_epi16((x), t_u8x64)
#define SRLW(x) _mm512_srli_epi16((x), 1)
#define TERNLOG(x) _mm512_ternarylogic_epi32((x), t_u8x64, o_u8x64, 0xea)
#define PERMB_DPBUSD(x) DPBUSD(PERMB(x))
#define SHUFB_ADDW(x) _mm512_add_epi16(SHUFB(x), o_u8x64)

int
main(void)
{
	__m512i t_u8x64 = _mm512_set1_epi8(3), o_u8x64 = _mm512_set1_epi8(1);

	/* Opaque to the compiler: no constant folding through them. */
	__asm__ volatile("" : "+v"(t_u8x64), "+v"(o_u8x64));
	printf("instruction                time each (12 chains)\n");
	BENCH("vpermb", PERMB);
	BENCH("vpshufb", SHUFB);
	BENCH("vpdpbusd", DPBUSD);
	BENCH("vpaddw", ADDW);
	BENCH("vpsrlw", SRLW);
	BENCH("vpternlogd", TERNLOG);
	BENCH("vpermb -> vpdpbusd (pair)", PERMB_DPBUSD);
	BENCH("vpshufb -> vpaddw (pair)", SHUFB_ADDW);
	return 0;
}
