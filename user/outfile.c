/* outfile.c -- see outfile.h. */
#define _GNU_SOURCE
#include "outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_stdout(const char *path)
{
	return !path || !strcmp(path, "-");
}

static char *dir_of(const char *path)
{
	char *copy = strdup(path), *d;

	if (!copy)
		return NULL;
	d = strdup(dirname(copy));
	free(copy);
	return d;
}

/* The file a write to `path` really lands in: a symlink's target (also a
 * dangling one, which the write creates), else `path` itself.  Returns a
 * malloc'd string. */
static char *destination(const char *path)
{
	char link[PATH_MAX], *real, *dir, *joined;
	struct stat st;
	ssize_t n;

	if (lstat(path, &st) < 0 || !S_ISLNK(st.st_mode))
		return strdup(path);
	if ((real = realpath(path, NULL)))
		return real;
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return strdup(path);
	link[n] = '\0';
	if (link[0] == '/')
		return strdup(link);
	dir = dir_of(path);
	if (!dir || asprintf(&joined, "%s/%s", dir, link) < 0)
		joined = NULL;
	free(dir);
	return joined;
}

/* "<dir>/.<base>.camlheap-XXXXXX", the mkstemp template next to dest. */
static char *temp_template(const char *dest)
{
	char *dir = dir_of(dest), *t = NULL;
	const char *base = strrchr(dest, '/');

	base = base ? base + 1 : dest;
	if (!dir || asprintf(&t, "%s/.%s.camlheap-XXXXXX", dir, base) < 0)
		t = NULL;
	free(dir);
	return t;
}

int outfile_check(const char *path, char *msg, size_t msglen)
{
	struct stat st;
	char *dest, *dir;
	int ret = 0;

	if (is_stdout(path))
		return 0;
	if (!*path) {
		snprintf(msg, msglen, "the output file name is empty");
		return -EINVAL;
	}
	dest = destination(path);
	if (!dest)
		return -ENOMEM;
	if (stat(dest, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			snprintf(msg, msglen, "cannot write the report to %s: it is a directory", path);
			ret = -EISDIR;
		} else if (!S_ISREG(st.st_mode) && access(dest, W_OK) < 0) {
			ret = -errno;
			snprintf(msg, msglen, "cannot write the report to %s: %s", path, strerror(errno));
		}
		if (ret || !S_ISREG(st.st_mode))
			goto out;
	} else if (errno != ENOENT || path[strlen(path) - 1] == '/') {
		ret = errno == ENOENT ? -EISDIR : -errno;
		snprintf(msg, msglen, "cannot write the report to %s: %s", path,
			 ret == -EISDIR ? "a file name is needed, not a directory" : strerror(-ret));
		goto out;
	}
	dir = dir_of(dest);
	if (!dir) {
		ret = -ENOMEM;
		goto out;
	}
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		ret = -ENOENT;
		snprintf(msg, msglen, "cannot write the report to %s: directory %s does not exist", path, dir);
	} else {
		/* create (and remove) the very temporary the report will use:
		 * permissions, read-only file systems and name lengths all show */
		char *tmp = temp_template(dest);
		int fd = tmp ? mkstemp(tmp) : -1;

		if (fd < 0) {
			ret = tmp ? -errno : -ENOMEM;
			snprintf(msg, msglen, "cannot write the report to %s: %s", path, strerror(-ret));
		} else {
			close(fd);
			unlink(tmp);
		}
		free(tmp);
	}
	free(dir);
out:
	free(dest);
	return ret;
}

int outfile_open(struct outfile *o, const char *path)
{
	struct stat st;
	int fd, e;

	memset(o, 0, sizeof(*o));
	if (is_stdout(path)) {
		o->f = stdout;
		return 0;
	}
	o->path = destination(path);
	if (!o->path)
		return -ENOMEM;
	if (stat(o->path, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* a device, FIFO or socket: write through it, never replace it */
		o->f = fopen(o->path, "w");
		if (!o->f)
			goto fail;
		return 0;
	}
	o->tmp = temp_template(o->path);
	if (!o->tmp) {
		errno = ENOMEM;
		goto fail;
	}
	fd = mkstemp(o->tmp);
	if (fd < 0) {
		free(o->tmp);
		o->tmp = NULL;
		goto fail;
	}
	if (stat(o->path, &st) == 0) {
		/* replacing a file: keep its mode and, where allowed, owner */
		if (fchown(fd, st.st_uid, st.st_gid) < 0) {
			/* not root: the new file is ours, as any rewrite would be */
		}
		fchmod(fd, st.st_mode & 07777);
	} else {
		mode_t um = umask(0);

		umask(um);
		fchmod(fd, 0666 & ~um);
	}
	o->f = fdopen(fd, "w");
	if (!o->f) {
		close(fd);
		unlink(o->tmp);
		goto fail;
	}
	return 0;
fail:
	e = errno;
	free(o->tmp);
	free(o->path);
	memset(o, 0, sizeof(*o));
	return -e;
}

int outfile_commit(struct outfile *o)
{
	int ret = 0;

	if (!o->path) {
		fflush(o->f);
		return ferror(o->f) ? -EIO : 0;
	}
	if (fflush(o->f) != 0 || ferror(o->f))
		ret = -(errno ? errno : EIO);
	if (!ret && o->tmp && fsync(fileno(o->f)) != 0)
		ret = -errno;
	if (fclose(o->f) != 0 && !ret)
		ret = -errno;
	if (!ret && o->tmp && rename(o->tmp, o->path) != 0)
		ret = -errno;
	if (ret && o->tmp)
		unlink(o->tmp);
	free(o->tmp);
	free(o->path);
	memset(o, 0, sizeof(*o));
	return ret;
}

void outfile_abort(struct outfile *o)
{
	if (o->path) {
		fclose(o->f);
		if (o->tmp)
			unlink(o->tmp);
	}
	free(o->tmp);
	free(o->path);
	memset(o, 0, sizeof(*o));
}
