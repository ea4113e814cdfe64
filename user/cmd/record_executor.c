/* record_executor.c -- which executor raises young_limit for a recording
 * (README *Minor heap*): the choice before the target is known, and the
 * register executor's fallback once its runtime is read. */
#include <errno.h>
#include <stdio.h>

#include "cmd/record_internal.h"
#include "collect/ptexec.h"
#include "collect/regexec.h"
#include "collect/sampler.h"
#include "target/ocaml_runtime.h"

static const char *const executor_names[] = {
	[CH_EXEC_OBSERVE] = "observe",
	[CH_EXEC_PTRACE] = "ptrace",
	[CH_EXEC_KERNEL] = "kernel",
	[CH_EXEC_REGISTER] = "register",
};

const char *record_executor_name(enum ch_executor ex)
{
	return executor_names[ex];
}

int record_choose_executor(enum record_executor want, enum ch_executor *ex, char *msg, size_t len)
{
	char why[256];
	int allowed;

	switch (want) {
	case RECORD_EXEC_PTRACE:
		*ex = CH_EXEC_PTRACE;
		return 0;
	case RECORD_EXEC_OBSERVE:
		*ex = CH_EXEC_OBSERVE;
		return 0;
	case RECORD_EXEC_REGISTER:
		allowed = regexec_supported(why, sizeof(why));
		if (allowed == 1) {
			*ex = CH_EXEC_REGISTER;
			return 0;
		}
		snprintf(msg, len, "--executor register: %s; use --executor auto",
			 allowed == -EPERM ? "camlheap lacks the privileges to load BPF" : why);
		return -EPERM;
	case RECORD_EXEC_KERNEL:
	case RECORD_EXEC_AUTO:
		if (want == RECORD_EXEC_AUTO && regexec_supported(NULL, 0) == 1) {
			*ex = CH_EXEC_REGISTER;
			return 0;
		}
		allowed = sampler_kernel_write_allowed();
		if (allowed == 1) {
			*ex = CH_EXEC_KERNEL;
			return 0;
		}
		if (want == RECORD_EXEC_AUTO) {
			*ex = CH_EXEC_PTRACE;
			return 0;
		}
		snprintf(msg, len,
			 "--executor kernel: this kernel refuses BPF programs that call bpf_probe_write_user "
			 "(kernel lockdown, the default under Secure Boot)%s; use --executor ptrace (or auto)",
			 allowed == -EPERM ? ", or camlheap lacks the privileges to load BPF" : "");
		return -EPERM;
	}
	return -EINVAL;
}

int record_register_fallback(const struct record_opts *o, struct target *t, enum ch_executor *ex, struct ptexec **px,
			     struct report_meta *meta, char *msg, size_t len)
{
	/* a runtime compiled otherwise than the releases' tested builds */
	static const char no_site[] = "its runtime's young_limit recomputation does not load young_trigger in a form "
				      "the register executor performs (ocaml_runtime.h ocaml_runtime_find_field_load)";
	int ret;

	if (o->executor == RECORD_EXEC_REGISTER) {
		snprintf(msg, len, "--executor register cannot sample PID %d: %s; use --executor auto", t->pid, no_site);
		return -ENOTSUP;
	}
	if (sampler_kernel_write_allowed() == 1) {
		*ex = CH_EXEC_KERNEL;
	} else if (t->launched) {
		/* the command is already held by this thread, not the executor's */
		*ex = CH_EXEC_OBSERVE;
		meta->minor_off_why = "the register executor cannot sample this program (its runtime's young_trigger "
				      "load is of a form it does not know), and in launch mode the ptrace executor "
				      "cannot take over: attach with -p PID --executor ptrace";
	} else {
		*ex = CH_EXEC_PTRACE;
		ret = ptexec_attach(t->pid, px, msg, len);
		if (ret < 0)
			return ret;
	}
	record_say("camlheap: PID %d: %s: the %s executor runs instead\n", t->pid, no_site, executor_names[*ex]);
	return 0;
}

void record_say_register_sites(const struct ocaml_runtime *rt)
{
	for (int k = OCAML_PROBE_REG_TRIGGER; k <= OCAML_PROBE_REG_TRIGGER_PENDING; k++) {
		const struct ocaml_reg_load *l = &rt->reg_trigger[k - OCAML_PROBE_REG_TRIGGER];

		if (rt->probes[k].present)
			fprintf(stderr, "camlheap: register site %s+%#x: load %d(r%u) -> r%u, %u bytes\n",
				rt->probes[k].symbol, l->at, l->disp, l->base, l->dst, l->len);
	}
	if (rt->probes[OCAML_PROBE_REG_END].present)
		fprintf(stderr, "camlheap: register end site %s+%#x: load %d(r%u) -> r%u, %u bytes, store %u bytes, ret\n",
			rt->probes[OCAML_PROBE_REG_END].symbol, rt->reg_trigger[2].at, rt->reg_trigger[2].disp,
			rt->reg_trigger[2].base, rt->reg_trigger[2].dst, rt->reg_trigger[2].len,
			rt->reg_end_store_len);
}
