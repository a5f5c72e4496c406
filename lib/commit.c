/*
 * commit.c - the writer's lock of an index and the order in which a
 * commit reaches the disk (format version 2, tq(5)).
 *
 * Invariant: the bytes a committed table refers to are never written
 * again.  A commit writes its new sections past the current commit's end,
 * then its table, then syncs; only then does it write its slot, the one
 * the current commit does not use, and sync again.  So at every instant
 * the file holds the current commit complete, and a crash at any point
 * leaves either it or the new one current: a torn slot fails its checksum
 * and the reader takes the other.  Bytes past the current commit's end
 * belong to no commit (a crashed writer's) and the next writer truncates
 * them away before it writes.
 *
 * Writers serialise on an exclusive flock(2) of the index file, held for
 * the whole read-modify-write.  A writer that replaces the file (a
 * compaction, a rebuild onto the path) renames a new file over it while
 * holding the lock on the old one; a writer that was waiting on the old
 * one then finds that the path names another file, and locks that one
 * instead.  Readers take no lock: a reader maps the file, copies a slot,
 * and reads only what that commit refers to, which no writer touches.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

enum tq_status
tq_fault_point(const char *where)
{
	const char *env = getenv("TQ_TEST_CRASH");

	if (env != NULL && strcmp(env, where) == 0)
		(void)kill(getpid(), SIGKILL);
	return TQ_OK;
}

enum tq_status
tq_lock_open(const char *path, const struct tq_build_params *p, int *out)
{
	int said = 0;

	*out = -1;
	for (;;) {
		struct stat a, b;
		int fd = open(path, O_RDWR | O_CLOEXEC);

		if (fd == -1)
			return tq_fail(TQ_ERR_IO, "open: %s", strerror(errno));
		if (flock(fd, LOCK_EX | LOCK_NB) == -1) {
			if (errno != EWOULDBLOCK && errno != EINTR) {
				enum tq_status rc = tq_fail(TQ_ERR_IO,
				    "lock: %s", strerror(errno));

				close(fd);
				return rc;
			}
			if (p != NULL && p->no_wait) {
				close(fd);
				return tq_fail(TQ_ERR_BUSY, "another writer "
				    "holds the index's lock");
			}
			if (!said && p != NULL && p->on_wait != NULL)
				p->on_wait(path, p->wait_arg);
			said = 1;
			while (flock(fd, LOCK_EX) == -1)
				if (errno != EINTR) {
					enum tq_status rc = tq_fail(TQ_ERR_IO,
					    "lock: %s", strerror(errno));

					close(fd);
					return rc;
				}
		}
		/* The path may name a new file by now (a compaction). */
		if (fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
		    a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
			*out = fd;
			return TQ_OK;
		}
		close(fd);
	}
}

void
tq_lock_close(int fd)
{
	if (fd >= 0)
		close(fd);	/* releases the lock */
}
