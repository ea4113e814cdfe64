/* outfile.c -- see outfile.h. */
#define _GNU_SOURCE
#include "output/outfile.h"

#include <errno.h>
#include <signal.h>
#include <stdbool.h>
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

	char *cur;

	if (lstat(path, &st) < 0 || !S_ISLNK(st.st_mode))
		return strdup(path);
	if ((real = realpath(path, NULL)))
		return real;
	/* a chain ending at a missing file: follow it link by link */
	cur = strdup(path);
	for (int hops = 0; cur && hops < 40; hops++) {
		if (lstat(cur, &st) < 0 || !S_ISLNK(st.st_mode))
			return cur;
		n = readlink(cur, link, sizeof(link) - 1);
		if (n <= 0)
			return cur;
		link[n] = '\0';
		if (link[0] == '/') {
			joined = strdup(link);
		} else {
			dir = dir_of(cur);
			if (!dir || asprintf(&joined, "%s/%s", dir, link) < 0)
				joined = NULL;
			free(dir);
		}
		free(cur);
		cur = joined;
	}
	return cur;
}

/* The caller's own streams: "/dev/stdout", "/dev/stderr", "/dev/fd/N",
 * "/proc/self/fd/N" are written through the descriptor itself (what they
 * point at may be a regular file the command also writes to, which must be
 * neither truncated nor replaced).  Returns the fd or -1. */
static int own_descriptor(const char *path)
{
	int fd;
	char end;

	if (!strcmp(path, "/dev/stdout"))
		return 1;
	if (!strcmp(path, "/dev/stderr"))
		return 2;
	if (sscanf(path, "/dev/fd/%d%c", &fd, &end) == 1 || sscanf(path, "/proc/self/fd/%d%c", &fd, &end) == 1)
		return fd;
	return -1;
}

/* "<dir>/.<base>.camlheap-XXXXXX", the mkstemp template next to dest. */
static char *temp_template(const char *dest)
{
	char *dir = dir_of(dest), *t = NULL;
	const char *base = strrchr(dest, '/');

	base = base ? base + 1 : dest;
	/* ".<base>.camlheap-XXXXXX" adds 17 bytes: keep within NAME_MAX */
	if (!dir || asprintf(&t, strlen(base) + 17 <= NAME_MAX ? "%s/.%s.camlheap-XXXXXX" : "%s/.camlheap-XXXXXX",
			     dir, base) < 0)
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
	if (own_descriptor(path) >= 0) {
		if (fcntl(own_descriptor(path), F_GETFD) < 0) {
			snprintf(msg, msglen, "cannot write the report to %s: it is not open", path);
			return -EBADF;
		}
		return 0;
	}
	dest = destination(path);
	if (!dest)
		return -ENOMEM;
	if (stat(dest, &st) == 0) {
		if (S_ISDIR(st.st_mode)) {
			snprintf(msg, msglen, "cannot write the report to %s: it is a directory", path);
			ret = -EISDIR;
		} else if (S_ISSOCK(st.st_mode)) {
			snprintf(msg, msglen, "cannot write the report to %s: it is a socket", path);
			ret = -ENXIO;
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
	} else if (strlen(strrchr(dest, '/') ? strrchr(dest, '/') + 1 : dest) > NAME_MAX) {
		ret = -ENAMETOOLONG;
		snprintf(msg, msglen, "cannot write the report to %s: %s", path, strerror(-ret));
	} else {
		/* create (and remove) the very temporary the report will use:
		 * permissions and read-only file systems show */
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
	if (own_descriptor(path) >= 0) {
		fd = dup(own_descriptor(path));
		o->path = strdup(path);
		if (fd < 0 || !o->path || !(o->f = fdopen(fd, "a")))
			goto fail;
		return 0;
	}
	o->path = destination(path);
	if (!o->path)
		return -ENOMEM;
	if (stat(o->path, &st) == 0 && !S_ISREG(st.st_mode)) {
		/* a device or FIFO: write through it, never replace it.  A FIFO
		 * waits for its reader, but a pending SIGINT/SIGTERM/SIGHUP
		 * (blocked for camlheap's signalfd) gives up instead of
		 * blocking for ever. */
		bool said = false;

		while ((fd = open(o->path, O_WRONLY | O_NONBLOCK | O_CLOEXEC)) < 0 && errno == ENXIO) {
			sigset_t pending;

			sigpending(&pending);
			if (sigismember(&pending, SIGINT) || sigismember(&pending, SIGTERM) ||
			    sigismember(&pending, SIGHUP)) {
				errno = EINTR;
				break;
			}
			if (!said)
				fprintf(stderr, "camlheap: waiting for a reader on %s\n", o->path);
			said = true;
			usleep(100000);
		}
		if (fd < 0)
			goto fail;
		fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
		o->f = fdopen(fd, "w");
		if (!o->f) {
			close(fd);
			goto fail;
		}
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

/* Copy file `from` over the contents of `to` (truncating it). */
static int copy_into(const char *from, const char *to)
{
	char buf[65536];
	int in = open(from, O_RDONLY | O_CLOEXEC), out = open(to, O_WRONLY | O_TRUNC | O_CLOEXEC), ret = 0;
	ssize_t n;

	if (in < 0 || out < 0)
		ret = -errno;
	while (!ret && (n = read(in, buf, sizeof(buf))) != 0) {
		if (n < 0 || write(out, buf, (size_t)n) != n)
			ret = -(errno ? errno : EIO);
	}
	if (in >= 0)
		close(in);
	if (out >= 0 && close(out) < 0 && !ret)
		ret = -errno;
	return ret;
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
	if (!ret && o->tmp && rename(o->tmp, o->path) != 0) {
		ret = -errno;
		/* a bind-mounted file cannot be replaced: copy into it instead */
		if (ret == -EBUSY && copy_into(o->tmp, o->path) == 0)
			ret = 0;
	}
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
