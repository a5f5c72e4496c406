/*
 * ahead.c - reading ahead on a second thread: while the caller works on
 * one buffer, a thread fills the next, so that a build from a pipe waits
 * for neither the producer nor the parse while it encodes (and the
 * producer is not stopped by a full pipe meanwhile).  What is read, and
 * in what pieces, does not change: only when.
 */
#include <pthread.h>
#include <stdio.h>

#include "internal.h"

static void *
ahead_run(void *arg)
{
	struct tq_ahead *a = arg;

	a->rc = a->fill(a->arg, a->buf, a->max, &a->got);
	if (a->rc != TQ_OK)
		snprintf(a->detail, sizeof(a->detail), "%s", tq_errdetail());
	return NULL;
}

void
tq_ahead_start(struct tq_ahead *a, tq_fill_fn fill, void *arg, void *buf,
    size_t max)
{
	a->fill = fill;
	a->arg = arg;
	a->buf = buf;
	a->max = max;
	a->got = 0;
	a->rc = TQ_OK;
	a->detail[0] = '\0';
	/* No thread: the fill runs now, and tq_ahead_wait returns it. */
	a->running = pthread_create(&a->tid, NULL, ahead_run, a) == 0;
	if (!a->running)
		ahead_run(a);
	a->pending = 1;
}

enum tq_status
tq_ahead_wait(struct tq_ahead *a, size_t *got)
{
	if (!a->pending)
		return tq_fail(TQ_ERR_ARG, "nothing read ahead");
	if (a->running)
		pthread_join(a->tid, NULL);
	a->running = a->pending = 0;
	if (got != NULL)
		*got = a->got;
	if (a->rc != TQ_OK)
		return tq_fail(a->rc, "%s", a->detail);
	return TQ_OK;
}

void
tq_ahead_cancel(struct tq_ahead *a)
{
	if (a->running)
		pthread_join(a->tid, NULL);
	a->running = a->pending = 0;
}
