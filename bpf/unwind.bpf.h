/* unwind.bpf.h -- the OCaml 4.x native stack walk, in the kernel.
 *
 * It is the runtime's own walk, caml_next_frame_descriptor (4.13.1
 * runtime/backtrace_nat.c:34): start at Caml_state->last_return_address /
 * bottom_of_stack (set by caml_c_call and caml_call_gc, so valid at every
 * runtime function reached from OCaml code); for each return address look
 * up its frame descriptor, then
 *   regular frame:  sp += frame_size & ~3;  pc = *(sp - 8)
 *   0xFFFF frame:   the C->OCaml callback boundary; struct caml_context at
 *                   sp + 16 gives the next chunk's {bottom_of_stack, last_retaddr};
 *                   a NULL bottom_of_stack ends the walk (clean).
 * No frame pointers and no DWARF CFI are needed.  Frame sizes come from the
 * `frametable` map that user space fills from the executable's
 * caml_frametable, keyed by link-time return address (pc - load_bias), so one
 * table serves every process of the binary; Dynlink plugins' descriptors are
 * in `frametable_rt`, keyed by runtime address.
 *
 * The walk never guesses: an address without a descriptor ends it
 * (CH_TERM_UNKNOWN_PC) and is not recorded.
 */
#ifndef CH_UNWIND_BPF_H
#define CH_UNWIND_BPF_H

#include "camlheap.h"

/* Walk depth, at most CH_MAX_FRAMES; set by user space before load. */
const volatile __u32 max_frames = CH_DEFAULT_FRAMES;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1); /* resized to the descriptor count before load */
	__type(key, struct ch_frame_key);
	__type(value, struct ch_frame_val);
} frametable SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1 << 20);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ch_frame_key);
	__type(value, struct ch_frame_val);
} frametable_rt SEC(".maps");

struct ocaml_walk {
	struct ch_sample_event *ev;
	__u64 sp;
	__u64 pc;
	__u64 bias;
	__u64 hash;
	__u32 nframes;
	__u32 term;
	__u64 stack;      /* OCaml 5: the stack_info (fiber) being walked */
	__u64 ff;         /* OCaml 5: First_frame(sp) - sp */
	__u32 lead;       /* frames already in ev->frames before the walk (a --malloc pseudo frame) */
};

/* FNV-1a style mixing of 64-bit words; the id only has to separate distinct
 * stacks (a collision merges two stacks' counts, at odds of ~n^2/2^64). */
static __always_inline __u64 unwind_mix(__u64 h, __u64 v)
{
	h ^= v;
	h *= 0x100000001b3ULL;
	h ^= h >> 29;
	return h;
}

/* Frame i of a walk, both versions: the descriptor of u->pc (the
 * executable's table by link-time address, then plugins' by runtime
 * address), the pc recorded and hashed.  NULL ends the walk (unknown pc). */
static __always_inline struct ch_frame_val *unwind_record(struct ocaml_walk *u, __u32 i)
{
	struct ch_frame_key key = { .retaddr = u->pc - u->bias };
	struct ch_frame_val *d;
	__u32 idx = i + u->lead;

	/* Keep the compiler from indexing with a copy of i that the verifier
	 * has no bound for. */
	asm volatile("" : "+r"(idx));
	if (i + u->lead >= CH_MAX_FRAMES)
		return NULL;
	idx &= CH_MAX_FRAMES - 1;
	d = bpf_map_lookup_elem(&frametable, &key);
	if (!d) {
		key.retaddr = u->pc;
		d = bpf_map_lookup_elem(&frametable_rt, &key);
	}
	if (!d) {
		u->term = CH_TERM_UNKNOWN_PC;
		return NULL;
	}
	u->ev->frames[idx] = u->pc;
	u->nframes = i + 1 + u->lead;
	u->hash = unwind_mix(u->hash, u->pc);
	return d;
}

static long unwind_step(__u32 i, void *data)
{
	struct ocaml_walk *u = data;
	struct ch_frame_val *d = unwind_record(u, i);

	if (!d)
		return 1;

	if (d->frame_size != CH_FRAME_RETURN_TO_C) {
		u->sp += d->frame_size & 0xFFFC;
		if (bpf_probe_read_user(&u->pc, sizeof(u->pc), (void *)(u->sp - 8))) {
			u->term = CH_TERM_READ_ERROR;
			return 1;
		}
		return 0;
	}
	/* Callback boundary: continue in the OCaml chunk that called into C. */
	__u64 link[2];
	if (bpf_probe_read_user(link, sizeof(link), (void *)(u->sp + CH_OCAML4_CALLBACK_LINK))) {
		u->term = CH_TERM_READ_ERROR;
		return 1;
	}
	u->sp = link[0];
	u->pc = link[1];
	if (u->sp == 0) {
		u->term = CH_TERM_CLEAN;
		return 1;
	}
	return 0;
}

/* Walk the current OCaml stack of the thread that hit the probe into
 * ev->frames (runtime addresses, leaf first).  Sets ev->nframes, ev->term
 * and ev->stack_id.  `caml_state` is the runtime address of the
 * caml_domain_state. */
/* A walk's first frame, before any OCaml one: `lead` (a --malloc pseudo
 * return address naming the libc function) if nonzero. */
static __always_inline void unwind_lead(struct ocaml_walk *u, __u64 lead)
{
	if (lead) {
		u->ev->frames[0] = lead;
		u->lead = 1;
		u->nframes = 1;
		u->hash = unwind_mix(u->hash, lead);
	}
}

/* The stack id of a walk that ended after u->nframes frames. */
static __always_inline void unwind_finish(struct ocaml_walk *u)
{
	u->ev->nframes = u->nframes;
	u->ev->term = u->term;
	u->ev->stack_id = unwind_mix(unwind_mix(u->hash, u->nframes), u->term);
}

static __always_inline void unwind_ocaml4(struct ch_sample_event *ev, __u64 caml_state, __u64 bias, __u64 lead)
{
	struct ocaml_walk u = {
		.ev = ev,
		.bias = bias,
		.hash = 0xcbf29ce484222325ULL,
		.term = CH_TERM_DEPTH,
	};
	__u64 regs[2]; /* bottom_of_stack, last_return_address: adjacent fields */
	__u32 depth = max_frames;

	unwind_lead(&u, lead);
	if (bpf_probe_read_user(regs, sizeof(regs), (void *)(caml_state + CH_OCAML4_BOTTOM_OF_STACK))) {
		u.term = CH_TERM_READ_ERROR;
	} else {
		u.sp = regs[0];
		u.pc = regs[1];
		/* domain.c:60 (4.13): bottom_of_stack is NULL until
		 * caml_start_program runs and again after it returns: the
		 * allocation comes from the runtime's own C start-up or exit
		 * code, with no OCaml frame on the stack.  An empty, clean walk. */
		if (u.sp == 0) {
			u.term = CH_TERM_CLEAN;
			depth = 0;
		}
		if (depth > CH_MAX_FRAMES)
			depth = CH_MAX_FRAMES;
		if (depth)
			bpf_loop(depth, unwind_step, &u, 0);
	}
	unwind_finish(&u);
}

/* OCaml 5: enter the stack (fiber) `stack` at its saved sp, or, if it is
 * empty (sp == Stack_high, fresh or returned), go on to its parent, the
 * fiber that ran its handler (stack->handler->parent; NULL: the main
 * stack, the walk is over).  5.3 runtime/fiber.c caml_get_stack_sp_pc,
 * backtrace_nat.c get_callstack.  Returns 1 when the walk ends. */
static __always_inline int unwind5_enter(struct ocaml_walk *u, __u64 stack)
{
	__u64 hdr[3]; /* sp, exception_ptr, handler */

	for (int hop = 0; hop < 4; hop++) {
		if (!stack) {
			u->term = CH_TERM_CLEAN;
			return 1;
		}
		if (bpf_probe_read_user(hdr, sizeof(hdr), (void *)stack)) {
			u->term = CH_TERM_READ_ERROR;
			return 1;
		}
		u->stack = stack;
		if (hdr[0] && hdr[0] != hdr[2]) {
			u->sp = hdr[0] + u->ff;
			if (bpf_probe_read_user(&u->pc, sizeof(u->pc), (void *)(u->sp - 8))) {
				u->term = CH_TERM_READ_ERROR;
				return 1;
			}
			return 0;
		}
		if (!hdr[2] || bpf_probe_read_user(&stack, sizeof(stack), (void *)(hdr[2] + CH_OCAML5_HANDLER_PARENT))) {
			u->term = CH_TERM_READ_ERROR;
			return 1;
		}
	}
	u->term = CH_TERM_DEPTH; /* more than 4 empty fibers in a row: give up */
	return 1;
}

/* One frame of the OCaml 5 walk: 5.3 runtime/backtrace_nat.c
 * caml_next_frame_descriptor.  A regular frame: sp += frame_size, pc =
 * *(sp - 8).  A 0xFFFF frame (caml_start_program's or caml_runstack's):
 * skip its 32-byte header; at Stack_high (stack->handler) this fiber is
 * done and the walk goes on in its parent, else a C->OCaml callback
 * continues on the same stack at First_frame(sp). */
static long unwind5_step(__u32 i, void *data)
{
	struct ocaml_walk *u = data;
	struct ch_frame_val *d = unwind_record(u, i);
	__u64 handler = 0, parent = 0;

	if (!d)
		return 1;

	if (d->frame_size != CH_FRAME_RETURN_TO_C) {
		u->sp += d->frame_size & 0xFFFC;
	} else {
		u->sp += CH_OCAML5_STACK_HEADER;
		if (bpf_probe_read_user(&handler, sizeof(handler), (void *)(u->stack + CH_OCAML5_STACK_HANDLER))) {
			u->term = CH_TERM_READ_ERROR;
			return 1;
		}
		if (u->sp == handler) {
			/* the top of this fiber: on to the one that resumed it */
			if (bpf_probe_read_user(&parent, sizeof(parent), (void *)(handler + CH_OCAML5_HANDLER_PARENT))) {
				u->term = CH_TERM_READ_ERROR;
				return 1;
			}
			return unwind5_enter(u, parent);
		}
		u->sp += u->ff;
	}
	if (bpf_probe_read_user(&u->pc, sizeof(u->pc), (void *)(u->sp - 8))) {
		u->term = CH_TERM_READ_ERROR;
		return 1;
	}
	return 0;
}

/* Walk the OCaml 5 stacks of the domain whose state is at `dom` (runtime
 * address): its current fiber from the sp that caml_c_call / caml_call_gc
 * saved in current_stack->sp, then each parent fiber up to the main stack.
 * Same output as unwind_ocaml4. */
static __always_inline void unwind_ocaml5(struct ch_sample_event *ev, __u64 dom, __u64 bias, __u64 ff, __u64 lead)
{
	struct ocaml_walk u = {
		.ev = ev,
		.bias = bias,
		.hash = 0xcbf29ce484222325ULL,
		.term = CH_TERM_DEPTH,
		.ff = ff,
	};
	__u64 stack = 0;
	__u32 depth = max_frames;

	unwind_lead(&u, lead);
	if (bpf_probe_read_user(&stack, sizeof(stack), (void *)(dom + CH_OCAML5_CURRENT_STACK)) || !stack) {
		u.term = CH_TERM_READ_ERROR;
	} else if (!unwind5_enter(&u, stack)) {
		if (depth > CH_MAX_FRAMES)
			depth = CH_MAX_FRAMES;
		if (depth)
			bpf_loop(depth, unwind5_step, &u, 0);
	}
	unwind_finish(&u);
}

#endif
