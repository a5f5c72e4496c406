/*
 * unit.h - a tiny header-only harness for the C unit tests.
 *
 *	#include "unit.h"
 *
 *	static void test_thing(void) { CHECK(1 + 1 == 2); CHECK_OK(f()); }
 *
 *	int main(void) { RUN(test_thing); return unit_done(); }
 *
 * A failed check prints file:line and the expression (and, for the
 * status checks, the status and tq_errdetail()) and counts; unit_done()
 * prints "N passed, N failed" and returns the exit status (1 on failure).
 * unit_tmpdir() makes a scratch directory under $TMPDIR (or /tmp) that
 * unit_done() removes, and unit_path() names a file in it.
 */
#ifndef TQ_UNIT_H
#define TQ_UNIT_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tq.h"

static int unit_passed __attribute__((unused));
static int unit_failed __attribute__((unused));
static char unit_dir[4096] __attribute__((unused));

#define CHECK(cond) do { \
	if (cond) { \
		unit_passed++; \
	} else { \
		unit_failed++; \
		fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, \
		    __LINE__, #cond); \
	} \
} while (0)

/* Checks that expr returns status `want`. */
#define CHECK_ST(expr, want) do { \
	enum tq_status unit_st_ = (expr); \
	if (unit_st_ == (want)) { \
		unit_passed++; \
	} else { \
		unit_failed++; \
		fprintf(stderr, "%s:%d: %s: got %d (%s: %s), expected %d " \
		    "(%s)\n", __FILE__, __LINE__, #expr, (int)unit_st_, \
		    tq_strerror(unit_st_), tq_errdetail(), (int)(want), \
		    tq_strerror(want)); \
	} \
} while (0)

#define CHECK_OK(expr) CHECK_ST(expr, TQ_OK)

/* Checks that tq_errdetail() contains the string s. */
#define CHECK_DETAIL(s) do { \
	if (strstr(tq_errdetail(), (s)) != NULL) { \
		unit_passed++; \
	} else { \
		unit_failed++; \
		fprintf(stderr, "%s:%d: detail \"%s\" lacks \"%s\"\n", \
		    __FILE__, __LINE__, tq_errdetail(), (s)); \
	} \
} while (0)

/*
 * Runs a test function, naming it when it fails (and printing its wall
 * time on stderr when TQ_TEST_TIMES is set, to see what a suite spends).
 */
#define RUN(fn) do { \
	int unit_before_ = unit_failed; \
	struct timespec unit_t0_, unit_t1_; \
	clock_gettime(CLOCK_MONOTONIC, &unit_t0_); \
	fn(); \
	clock_gettime(CLOCK_MONOTONIC, &unit_t1_); \
	if (unit_failed != unit_before_) \
		fprintf(stderr, "FAIL %s\n", #fn); \
	if (getenv("TQ_TEST_TIMES") != NULL) \
		fprintf(stderr, "time %s %.3f s\n", #fn, \
		    (double)(unit_t1_.tv_sec - unit_t0_.tv_sec) + \
		    (double)(unit_t1_.tv_nsec - unit_t0_.tv_nsec) * 1e-9); \
} while (0)

static __attribute__((unused)) const char *
unit_tmpdir(void)
{
	const char *t = getenv("TMPDIR");

	if (unit_dir[0] != '\0')
		return unit_dir;
	snprintf(unit_dir, sizeof(unit_dir), "%s/tq-unit.XXXXXX",
	    t != NULL && *t != '\0' ? t : "/tmp");
	if (mkdtemp(unit_dir) == NULL) {
		perror("mkdtemp");
		exit(1);
	}
	return unit_dir;
}

/* Names `name` in the scratch directory; returns a static buffer. */
static __attribute__((unused)) const char *
unit_path(const char *name)
{
	static char buf[4][4096];
	static unsigned next;
	char *p = buf[next++ % 4];

	if (snprintf(p, sizeof(buf[0]), "%s/%s", unit_tmpdir(), name) >=
	    (int)sizeof(buf[0]))
		p[0] = '\0';	/* too long: an empty name fails loudly */
	return p;
}

static __attribute__((unused)) int
unit_rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static __attribute__((unused)) int
unit_done(void)
{
	if (unit_dir[0] != '\0')
		nftw(unit_dir, unit_rm, 16, FTW_DEPTH | FTW_PHYS);
	printf("%d passed, %d failed\n", unit_passed, unit_failed);
	return unit_failed ? 1 : 0;
}

#endif /* TQ_UNIT_H */
