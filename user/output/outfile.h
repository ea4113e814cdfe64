/* outfile.h -- how camlheap writes an output file without ever losing one.
 *
 * A regular file (new or existing) is written to a fresh temporary file in
 * the same directory (mkstemp: O_EXCL, so nothing planted there is followed)
 * and renamed over the destination only when complete: a failed or killed
 * run never leaves a truncated report nor destroys the previous one.  The
 * replacement keeps the old file's mode (and owner, when camlheap may set
 * it).  A symbolic link is followed: its target is replaced, not the link.
 * Anything that is not a regular file (a device such as /dev/null or
 * /dev/stdout, a FIFO, a socket) is written in place, never replaced.
 */
#ifndef CH_OUTFILE_H
#define CH_OUTFILE_H

#include <stddef.h>
#include <stdio.h>

struct outfile {
	FILE *f;
	char *path;  /* the destination (a symlink resolved), NULL for stdout */
	char *tmp;   /* the temporary, NULL when writing in place */
};

/* Check, before any work, that `path` can be written as above: not empty,
 * not a directory, its directory exists and is writable (or, for a
 * non-regular file, the file itself is writable).  NULL or "-" means
 * stdout.  Returns 0, or a negative errno with a message (naming the path,
 * the cause) in msg. */
int outfile_check(const char *path, char *msg, size_t msglen);

/* Start writing `path` (NULL or "-": stdout).  Returns 0 with o->f ready,
 * or a negative errno. */
int outfile_open(struct outfile *o, const char *path);

/* Flush, fsync and close; rename the temporary over the destination.
 * Returns 0, or a negative errno (-ENOSPC for a full disk) after removing
 * the temporary: the destination is then untouched. */
int outfile_commit(struct outfile *o);

/* Close and remove the temporary; the destination is untouched. */
void outfile_abort(struct outfile *o);

#endif
