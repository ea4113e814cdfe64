/* ptexec.c -- see ptexec.h.  The protocol was measured before this file
 * was written: 0 wrong writes in millions of stops. */
#define _GNU_SOURCE
#include "collect/ptexec.h"
#include "collect/ptexec5.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "camlheap.h"
#include "target/proc.h"

/* Wakes the executor thread out of waitpid (a handler without SA_RESTART). */
#define PTEXEC_WAKE_SIGNAL (SIGRTMIN + 3)

enum phase { PH_SETUP, PH_READY, PH_RUN, PH_STOP, PH_DONE };

struct ptexec {
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	enum phase phase;
	volatile int stop_req;
	bool stopped;           /* ptexec_stop has run (a second call does nothing) */
	int result;
	char err[1024];

	/* set up */
	pid_t pid;
	bool launched;
	char *const *argv;
	const sigset_t *child_mask;

	/* owned by the executor thread while it runs */
	int req_fd;
	int mem_fd;
	pid_t *tids;
	size_t ntids, cap;
	bool exited, execed;
	int status;
	pthread_t *spinners;
	size_t nspinners;
	volatile int spin_stop;
	uint64_t stamp_ns; /* the stamp of the request serve_write served last */
	struct ptexec_stats st;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A stop served and its thread resumed: its length as the target paid it,
 * from the probe's stamp (bpf_ktime_get_ns, the same clock) to now. */
static void stop_ended(struct ptexec *x)
{
	double stamp = (double)x->stamp_ns * 1e-9, now = now_s();

	if (x->stamp_ns && now > stamp)
		x->st.stopped_s += now - stamp;
}

static bool tid_known(const struct ptexec *x, pid_t t)
{
	for (size_t i = 0; i < x->ntids; i++)
		if (x->tids[i] == t)
			return true;
	return false;
}

static int tid_add(struct ptexec *x, pid_t t)
{
	if (tid_known(x, t))
		return 0;
	if (x->ntids == x->cap) {
		size_t cap = x->cap ? x->cap * 2 : 16;
		pid_t *n = realloc(x->tids, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		x->tids = n;
		x->cap = cap;
	}
	x->tids[x->ntids++] = t;
	x->st.threads++;
	return 0;
}

static void tid_remove(struct ptexec *x, pid_t t)
{
	for (size_t i = 0; i < x->ntids; i++)
		if (x->tids[i] == t) {
			x->tids[i] = x->tids[--x->ntids];
			return;
		}
}

static pid_t tracer_of(pid_t tid, char *comm, size_t len)
{
	char path[64];
	long tracer = 0;
	FILE *f;

	if (proc_status_field(tid, "TracerPid", &tracer) < 0)
		tracer = 0;
	comm[0] = '\0';
	if (tracer > 0) {
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)tracer);
		f = fopen(path, "r");
		if (f) {
			if (fgets(comm, (int)len, f))
				comm[strcspn(comm, "\n")] = '\0';
			fclose(f);
		}
	}
	return (pid_t)tracer;
}

/* Seize every thread of x->pid, until a pass over /proc/PID/task finds no
 * new one (threads created meanwhile are also followed through
 * PTRACE_O_TRACECLONE of the thread that made them). */
static int seize_all(struct ptexec *x)
{
	char dir[64];
	bool found_new = true;

	snprintf(dir, sizeof(dir), "/proc/%d/task", (int)x->pid);
	while (found_new) {
		DIR *d = opendir(dir);
		struct dirent *e;

		if (!d) {
			snprintf(x->err, sizeof(x->err), "PID %d exited while camlheap was attaching", (int)x->pid);
			return -ESRCH;
		}
		found_new = false;
		while ((e = readdir(d))) {
			pid_t t = (pid_t)atoi(e->d_name);

			if (t <= 0 || tid_known(x, t))
				continue;
			if (ptrace(PTRACE_SEIZE, t, 0, (void *)(long)(PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC)) < 0) {
				int err = errno;
				char comm[64];
				pid_t tracer;

				if (err == ESRCH && t != x->pid)
					continue; /* that thread just exited */
				closedir(d);
				if (err == EPERM && (tracer = tracer_of(t, comm, sizeof(comm))) > 0)
					snprintf(x->err, sizeof(x->err),
						 "PID %d is already traced by PID %d (%s): the ptrace executor must be "
						 "its only tracer; stop that tracer first, or run with "
						 "--executor observe (no minor-heap sampling)",
						 (int)x->pid, (int)tracer, comm);
				else if (err == ESRCH)
					snprintf(x->err, sizeof(x->err), "PID %d exited while camlheap was attaching",
						 (int)x->pid);
				else
					snprintf(x->err, sizeof(x->err),
						 "cannot trace PID %d (thread %d): %s; the ptrace executor needs "
						 "CAP_SYS_PTRACE and a Yama ptrace_scope below 3",
						 (int)x->pid, (int)t, strerror(err));
				return -err;
			}
			if (tid_add(x, t) < 0) {
				closedir(d);
				return -ENOMEM;
			}
			found_new = true;
		}
		closedir(d);
	}
	return 0;
}

/* The write queued for thread `t`, in its SIGURG stop.  False if nothing
 * was queued (a SIGURG of the program's own, to pass on). */
/* State letter of thread `tid` from /proc/PID/task/TID/stat (the field
 * after the parenthesised comm), or 0 if it is gone. */
static char thread_state(pid_t pid, pid_t tid)
{
	char path[64], buf[512];
	const char *p;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", pid, tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

/* OCaml 5 (bpf/minor5.bpf.h): stop every traced thread but `t` (already
 * stopped), so that none can store into young_limit between the check and
 * the write.  PTRACE_INTERRUPT each; each is in a ptrace stop once its state
 * reads 't' (or 'T', a group-stop; gone counts as stopped).  The
 * interrupt stops they report later are resumed by serve() as any other.
 * Returns false if one did not stop within 200 ms (then nothing is
 * written). */
static bool freeze_others(struct ptexec *x, pid_t t)
{
	double deadline = now_s() + 0.2;

	for (size_t i = 0; i < x->ntids; i++)
		if (x->tids[i] != t)
			ptrace(PTRACE_INTERRUPT, x->tids[i], 0, 0);
	for (size_t i = 0; i < x->ntids; i++) {
		char s;

		if (x->tids[i] == t)
			continue;
		while ((s = thread_state(x->pid, x->tids[i])) != 0 && s != 't' && s != 'T' && s != 'Z' && s != 'X') {
			if (now_s() > deadline)
				return false;
			sched_yield();
		}
	}
	x->st.freezes++;
	return true;
}

/* OCaml 5 with the interrupt flags known: ptexec5_write, no other thread
 * stopped. */
static void serve_recheck(struct ptexec *x, const struct ch_write_req *req)
{
	switch (ptexec5_write(x->pid, x->mem_fd, req)) {
	case PTEXEC5_REINTERRUPT:
		x->st.reinterrupts++;
		/* fall through */
	case PTEXEC5_WRITTEN:
		x->st.writes++;
		x->st.rechecks++;
		break;
	case PTEXEC5_STALE:
		x->st.stale++;
		break;
	case PTEXEC5_IN_FLIGHT:
		x->st.in_flight++;
		break;
	case PTEXEC5_ERROR:
		x->st.write_errors++;
		break;
	}
}

static bool serve_write(struct ptexec *x, pid_t t)
{
	struct ch_write_req req;
	__u32 key = (__u32)t;
	uint64_t limit = 0;
	int32_t pending = 0;
	double t0 = now_s();

	if (bpf_map_lookup_and_delete_elem(x->req_fd, &key, &req) < 0)
		return false;
	x->st.stops++;
	x->stamp_ns = req.stamp_ns;
	if (req.recheck)
		serve_recheck(x, &req);
	else if (req.freeze && !freeze_others(x, t))
		x->st.freeze_timeouts++;
	else if (pread(x->mem_fd, &limit, sizeof(limit), (off_t)req.addr) != sizeof(limit) ||
	    (req.pending_addr &&
	     pread(x->mem_fd, &pending, sizeof(pending), (off_t)req.pending_addr) != sizeof(pending)))
		x->st.write_errors++;
	else if (limit != req.expect)
		x->st.stale++;
	else if (pending)
		x->st.pending++;
	else if (pwrite(x->mem_fd, &req.value, sizeof(req.value), (off_t)req.addr) != sizeof(req.value))
		x->st.write_errors++;
	else if (req.restore_addr && pwrite(x->mem_fd, &req.restore_value, sizeof(req.restore_value),
					    (off_t)req.restore_addr) != sizeof(req.restore_value))
		x->st.write_errors++;
	else
		x->st.writes++;
	x->st.service_s += now_s() - t0;
	return true;
}

/* The next report of a traced thread, as a waitpid status.  A
 * signal-delivery-stop is only peeked at (WNOWAIT): the kernel zeroes a
 * stopped thread's signal when its tracer collects the stop, so if camlheap
 * died between collecting it and resuming the thread (PTRACE_CONT with the
 * signal), the target would lose that signal of its own.  Left uncollected,
 * the signal survives the detach the kernel performs for a dead tracer.
 * Exits and ptrace events are collected (they carry no signal to lose).
 * Returns the tid, or -1 with errno. */
static pid_t next_report(int *status)
{
	siginfo_t si;

	for (;;) {
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WSTOPPED | __WALL | WNOWAIT) < 0)
			return -1;
		if (si.si_pid == 0)
			continue;
		switch (si.si_code) {
		case CLD_TRAPPED:
			if ((si.si_status & 0xff) == SIGTRAP && (si.si_status >> 8)) /* a ptrace event */
				break;
			if ((si.si_status >> 8) == PTRACE_EVENT_STOP)
				break;
			*status = (si.si_status << 8) | 0x7f; /* signal-delivery-stop: not collected */
			return si.si_pid;
		case CLD_EXITED:
		case CLD_KILLED:
		case CLD_DUMPED:
		case CLD_STOPPED:
			break;
		default:
			continue;
		}
		/* collect it (exits reap the thread; events carry no signal) */
		if (waitpid(si.si_pid, status, __WALL | WNOHANG) == si.si_pid)
			return si.si_pid;
	}
}

static bool is_group_stop_signal(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

static void on_exit_status(struct ptexec *x, pid_t t, int status)
{
	tid_remove(x, t);
	if (t == x->pid) {
		x->exited = true;
		x->status = status;
	}
}

static void serve(struct ptexec *x)
{
	while (!x->stop_req && x->ntids) {
		int status;
		pid_t t = next_report(&status);
		int sig, ev;

		if (t < 0) {
			if (errno == EINTR)
				continue;
			break; /* ECHILD: nothing traced any more */
		}
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			on_exit_status(x, t, status);
			continue;
		}
		if (!WIFSTOPPED(status))
			continue;
		tid_add(x, t); /* a new thread may report before its parent's clone event */
		sig = WSTOPSIG(status);
		ev = status >> 16;
		switch (ev) {
		case 0: /* signal-delivery-stop */
			if (sig == SIGURG && serve_write(x, t)) {
				ptrace(PTRACE_CONT, t, 0, 0);
				stop_ended(x);
			} else {
				x->st.passed_signals++;
				ptrace(PTRACE_CONT, t, 0, (void *)(long)sig);
			}
			break;
		case PTRACE_EVENT_STOP:
			if (is_group_stop_signal(sig)) {
				x->st.group_stops++;
				ptrace(PTRACE_LISTEN, t, 0, 0); /* stays stopped, as untraced, until SIGCONT */
			} else {
				ptrace(PTRACE_CONT, t, 0, 0);
			}
			break;
		case PTRACE_EVENT_CLONE: {
			unsigned long child = 0;

			if (ptrace(PTRACE_GETEVENTMSG, t, 0, &child) == 0)
				tid_add(x, (pid_t)child);
			ptrace(PTRACE_CONT, t, 0, 0);
			break;
		}
		case PTRACE_EVENT_EXEC:
			/* the other threads are gone; the thread that execed is now
			 * the leader.  The kernel side has dropped the process
			 * (tp_btf/sched_process_exec), so nothing is queued any more. */
			x->execed = true;
			x->ntids = 0;
			tid_add(x, x->pid);
			ptrace(PTRACE_CONT, t, 0, 0);
			break;
		default:
			ptrace(PTRACE_CONT, t, 0, 0);
		}
	}
}

/* Detach everything: interrupt each thread, finish a write still queued
 * for it (its SIGURG is queued behind the interrupt trap, so let it run
 * into it once more), then detach with the thread's own signal. */
/* Does thread `tid` block SIGURG?  (/proc/PID/task/TID/status SigBlk) */
static bool sigurg_blocked(pid_t pid, pid_t tid)
{
	char path[64], line[256];
	unsigned long long mask = 0;
	bool found = false;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "SigBlk: %llx", &mask) == 1) {
			found = true;
			break;
		}
	fclose(f);
	return found && (mask & (1ULL << (SIGURG - 1)));
}

static void drain(struct ptexec *x)
{
	for (size_t i = 0; i < x->ntids; i++)
		ptrace(PTRACE_INTERRUPT, x->tids[i], 0, 0);
	while (x->ntids) {
		int status, sig, ev;
		pid_t t = next_report(&status);
		struct ch_write_req req;
		__u32 key;

		if (t < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			on_exit_status(x, t, status);
			continue;
		}
		if (!WIFSTOPPED(status))
			continue;
		sig = WSTOPSIG(status);
		ev = status >> 16;
		key = (__u32)t;
		if (ev == 0) {
			bool served = sig == SIGURG && serve_write(x, t);

			if (served)
				sig = 0;
			ptrace(PTRACE_DETACH, t, 0, (void *)(long)sig);
			if (served)
				stop_ended(x);
			tid_remove(x, t);
		} else if (ev == PTRACE_EVENT_STOP) {
			if (x->req_fd >= 0 && bpf_map_lookup_elem(x->req_fd, &key, &req) == 0 &&
			    !sigurg_blocked(x->pid, t)) {
				ptrace(PTRACE_CONT, t, 0, 0);
			} else {
				/* (a thread that blocks SIGURG would never stop for
				 * it: the probes do not queue for such threads, but
				 * never wait for one) */
				if (x->req_fd >= 0)
					bpf_map_delete_elem(x->req_fd, &key);
				ptrace(PTRACE_DETACH, t, 0, 0); /* a group-stop survives the detach */
				tid_remove(x, t);
			}
		} else if (ev == PTRACE_EVENT_CLONE) {
			unsigned long child = 0;

			if (ptrace(PTRACE_GETEVENTMSG, t, 0, &child) == 0 && tid_add(x, (pid_t)child) == 0)
				ptrace(PTRACE_INTERRUPT, (pid_t)child, 0, 0);
			ptrace(PTRACE_CONT, t, 0, 0);
		} else {
			ptrace(PTRACE_DETACH, t, 0, 0);
			tid_remove(x, t);
		}
	}
}

/* --keep-cpus-awake: one SCHED_IDLE thread per CPU that spins while the
 * executor serves.  In a VM an idle vCPU halts, and waking it costs
 * ~75 us: a stop wakes the executor, the executor's PTRACE_CONT wakes the
 * target, each across vCPUs unless both share one (measured here: 9.4 k
 * stops took 1.1 s unpinned, 0.16 s with the spinners).  SCHED_IDLE runs
 * only when nothing else wants the CPU, so it takes no time from the target
 * or other programs, but camlheap then shows every idle CPU as busy. */
static void *spinner_main(void *arg)
{
	struct ptexec *x = arg;
	struct sched_param sp = { 0 };

	sched_setscheduler(0, SCHED_IDLE, &sp);
	while (!x->spin_stop)
		__builtin_ia32_pause();
	return NULL;
}

static void spinners_start(struct ptexec *x)
{
	cpu_set_t allowed;
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);

	if (sched_getaffinity(0, sizeof(allowed), &allowed) < 0 || ncpu <= 0)
		return;
	x->spinners = calloc((size_t)ncpu, sizeof(*x->spinners));
	for (long c = 0; x->spinners && c < ncpu && c < CPU_SETSIZE; c++) {
		pthread_attr_t attr;
		cpu_set_t one;

		if (!CPU_ISSET(c, &allowed))
			continue;
		CPU_ZERO(&one);
		CPU_SET(c, &one);
		pthread_attr_init(&attr);
		pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
		if (pthread_create(&x->spinners[x->nspinners], &attr, spinner_main, x) == 0)
			x->nspinners++;
		pthread_attr_destroy(&attr);
	}
}

static void spinners_stop(struct ptexec *x)
{
	x->spin_stop = 1;
	for (size_t i = 0; i < x->nspinners; i++)
		pthread_join(x->spinners[i], NULL);
	x->nspinners = 0;
	free(x->spinners);
	x->spinners = NULL;
}

static void wake_handler(int sig)
{
	(void)sig;
}

static void set_phase(struct ptexec *x, enum phase ph)
{
	pthread_mutex_lock(&x->mu);
	x->phase = ph;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

static enum phase wait_phase_change(struct ptexec *x, enum phase from)
{
	enum phase ph;

	pthread_mutex_lock(&x->mu);
	while (x->phase == from)
		pthread_cond_wait(&x->cv, &x->mu);
	ph = x->phase;
	pthread_mutex_unlock(&x->mu);
	return ph;
}

static void *executor_main(void *arg)
{
	struct ptexec *x = arg;
	sigset_t wake;
	char path[64];

	sigemptyset(&wake);
	sigaddset(&wake, PTEXEC_WAKE_SIGNAL);
	pthread_sigmask(SIG_UNBLOCK, &wake, NULL);

	if (x->launched) {
		x->result = proc_launch(x->argv, x->child_mask, &x->pid, x->err, sizeof(x->err));
		if (x->result == 0)
			x->result = tid_add(x, x->pid);
	} else {
		x->result = seize_all(x);
	}
	if (x->result == 0) {
		snprintf(path, sizeof(path), "/proc/%d/mem", (int)x->pid);
		x->mem_fd = open(path, O_RDWR | O_CLOEXEC);
		if (x->mem_fd < 0) {
			x->result = -errno;
			snprintf(x->err, sizeof(x->err), "cannot open %s: %s", path, strerror(errno));
		}
	}
	if (x->result == 0) {
		/* The target waits in its stop until this thread has written:
		 * at a lower priority than the target's (camlheap niced), it
		 * would pass camlheap's niceness on to the target; at a higher
		 * one (the attach's, PROC_ATTACH_NICE, which a thread created
		 * during the attach inherits) it would take CPU from it.  This
		 * thread takes the target's priority (a nice value per thread,
		 * setpriority(2) NOTES; raising it needs CAP_SYS_NICE) before it
		 * says it is ready: once the attach ends, no thread of camlheap
		 * waits for the scheduler to leave the attach's priority. */
		errno = 0;
		int target_nice = getpriority(PRIO_PROCESS, (id_t)x->pid);

		if (errno == 0 && getpriority(PRIO_PROCESS, 0) != target_nice)
			setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), target_nice);
	}
	set_phase(x, PH_READY);
	if (wait_phase_change(x, PH_READY) == PH_RUN && x->result == 0) {
		if (x->launched) {
			/* leave the exec stop, now following clones */
			ptrace(PTRACE_SETOPTIONS, x->pid, 0, (void *)(long)(PTRACE_O_TRACECLONE | PTRACE_O_TRACEEXEC));
			ptrace(PTRACE_CONT, x->pid, 0, 0);
		}
		serve(x);
		drain(x);
	} else if (x->launched && x->pid > 0) {
		/* still in its exec stop: detaching lets it run (or die, if
		 * the caller killed it) */
		ptrace(PTRACE_DETACH, x->pid, 0, 0);
	} else if (x->result == 0) {
		drain(x);
	}
	set_phase(x, PH_DONE);
	return NULL;
}

static int start(struct ptexec *x, char *err, size_t errlen)
{
	struct sigaction sa = { .sa_handler = wake_handler }; /* no SA_RESTART: waitpid returns EINTR */
	sigset_t all, old;
	int ret;

	sigaction(PTEXEC_WAKE_SIGNAL, &sa, NULL);
	pthread_mutex_init(&x->mu, NULL);
	pthread_cond_init(&x->cv, NULL);
	x->req_fd = -1;
	x->mem_fd = -1;
	/* the thread starts with every signal blocked but its wake-up one */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	ret = pthread_create(&x->thr, NULL, executor_main, x);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (ret) {
		snprintf(err, errlen, "cannot start the ptrace executor thread: %s", strerror(ret));
		free(x);
		return -ret;
	}
	wait_phase_change(x, PH_SETUP);
	if (x->result < 0) {
		snprintf(err, errlen, "%s", x->err);
		ret = x->result;
		if (x->launched && x->pid > 0) {
			/* not run one instruction of its own: kill it */
			kill(x->pid, SIGKILL);
		}
		ptexec_free(x);
		return ret;
	}
	return 0;
}

int ptexec_launch(char *const argv[], const sigset_t *child_mask, pid_t *pid, struct ptexec **out, char *err,
		  size_t errlen)
{
	struct ptexec *x = calloc(1, sizeof(*x));
	int ret;

	if (!x)
		return -ENOMEM;
	x->launched = true;
	x->argv = argv;
	x->child_mask = child_mask;
	ret = start(x, err, errlen);
	if (ret < 0)
		return ret;
	*pid = x->pid;
	*out = x;
	return 0;
}

int ptexec_attach(pid_t pid, struct ptexec **out, char *err, size_t errlen)
{
	struct ptexec *x = calloc(1, sizeof(*x));
	int ret;

	if (!x)
		return -ENOMEM;
	x->pid = pid;
	ret = start(x, err, errlen);
	if (ret < 0)
		return ret;
	*out = x;
	return 0;
}

int ptexec_run(struct ptexec *x, int write_req_fd, bool keep_cpus_awake)
{
	x->req_fd = write_req_fd;
	if (keep_cpus_awake)
		spinners_start(x);
	set_phase(x, PH_RUN);
	return 0;
}

void ptexec_stop(struct ptexec *x)
{
	if (!x || x->stopped)
		return;
	x->stopped = true;
	pthread_mutex_lock(&x->mu);
	if (x->phase == PH_READY) {
		x->phase = PH_STOP;
		pthread_cond_broadcast(&x->cv);
	}
	pthread_mutex_unlock(&x->mu);
	x->stop_req = 1;
	for (;;) {
		struct timespec ts;
		int done;

		pthread_kill(x->thr, PTEXEC_WAKE_SIGNAL);
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 20 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_mutex_lock(&x->mu);
		if (x->phase != PH_DONE)
			pthread_cond_timedwait(&x->cv, &x->mu, &ts);
		done = x->phase == PH_DONE;
		pthread_mutex_unlock(&x->mu);
		if (done)
			break;
	}
	if (x->thr) {
		pthread_join(x->thr, NULL);
		x->thr = 0;
	}
	spinners_stop(x);
}

bool ptexec_exited(const struct ptexec *x, int *status)
{
	if (x && x->exited && status)
		*status = x->status;
	return x && x->exited;
}

bool ptexec_execed(const struct ptexec *x)
{
	return x && x->execed;
}

void ptexec_stats(const struct ptexec *x, struct ptexec_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (x)
		*out = x->st;
}

void ptexec_free(struct ptexec *x)
{
	if (!x)
		return;
	if (x->thr)
		ptexec_stop(x);
	if (x->mem_fd >= 0)
		close(x->mem_fd);
	free(x->tids);
	pthread_mutex_destroy(&x->mu);
	pthread_cond_destroy(&x->cv);
	free(x);
}
