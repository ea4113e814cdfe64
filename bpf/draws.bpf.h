/* draws.bpf.h -- the random draws of sampling, in the kernel: geometric
 * intervals from the pool user space fills (alloc.bpf.c `geom_pool`), the
 * binomial count of samples in a block as the runtime draws it (memprof.c
 * rand_binom), and the budget's thinning.  Included by alloc.bpf.c after
 * count(). */
#ifndef CH_DRAWS_BPF_H
#define CH_DRAWS_BPF_H

/* Overhead budget (`camlheap serve`): samples drawn at lambda are kept
 * with probability 2^-rate_shift, each kept one standing for 2^rate_shift.
 * Every word is still sampled with probability lambda, then kept
 * independently of its past with probability 2^-k for the k in force at
 * that moment, so the weighted count stays an unbiased estimate of
 * samples at lambda whatever changes of k user space makes (thinning a
 * Bernoulli process; the weight is the inverse of the keep probability,
 * Horvitz & Thompson 1952).  A block keeps each sample alone (binomial
 * thinning, so a block of w words is kept with probability
 * 1-(1-lambda 2^-k)^w); a block of more than 64 samples (w > 64/lambda)
 * keeps n/2^k rounded at random, whose mean is the same. */
volatile __u32 rate_shift;

struct thin_state {
	__u32 n, mask, kept;
};

/* The state in a per-CPU map value, not on the stack: the verifier knows
 * the contents of neither, so it verifies thin_step once; with `kept` on
 * the stack it tracked it exactly (0, 1, ... 64) and verified the step 64
 * times over, in every program that samples (on_dispatch_ret, 9351
 * instructions and 31 ms of verification on 6.18 with it; every attach pays
 * it). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thin_state);
} thin_scratch SEC(".maps");

static long thin_step(__u32 i, void *data)
{
	__u32 zero = 0;
	struct thin_state *t = bpf_map_lookup_elem(&thin_scratch, &zero);

	if (!t || i >= t->n)
		return 1;
	t->kept += !(bpf_get_prandom_u32() & t->mask);
	return 0;
}

/* n samples drawn at lambda -> those kept under shift *k (read once, here). */
static __always_inline __u32 thin_samples(__u32 n, __u32 *k)
{
	__u32 s = rate_shift, zero = 0;
	struct thin_state *t;

	if (s > CH_MAX_RATE_SHIFT)
		s = CH_MAX_RATE_SHIFT;
	*k = s;
	if (!s || !n)
		return n;
	if (n > 64)
		return (n >> s) + ((bpf_get_prandom_u32() & ((1u << s) - 1)) < (n & ((1u << s) - 1)));
	t = bpf_map_lookup_elem(&thin_scratch, &zero);
	if (!t)
		return n; /* never: a per-CPU array's one slot */
	t->n = n;
	t->mask = (1u << s) - 1;
	t->kept = 0;
	bpf_loop(64, thin_step, NULL, 0);
	return t->kept;
}

static __always_inline __u64 geom_draw(void)
{
	__u32 i = bpf_get_prandom_u32() & (CH_GEOM_POOL_SIZE - 1);
	__u64 *g = bpf_map_lookup_elem(&geom_pool, &i);

	return g && *g ? *g : 1;
}

struct binom_state {
	__s64 next;
	__s64 len;
};

static long binom_step(__u32 i, void *data)
{
	struct binom_state *b = data;

	if (b->next >= b->len)
		return 1;
	b->next += geom_draw();
	return 0;
}

/* memprof.c rand_binom(len): for (res = 0; next_rand_geom < len; res++)
 * next_rand_geom += rand_geom(); next_rand_geom -= len.  The draw count is
 * bpf_loop's iteration count (the last, breaking, iteration draws nothing),
 * so the verifier tracks no counter.  bpf_loop caps the samples of one
 * block at 2^23 (a 2^23/lambda-word block); the countdown then restarts at
 * the block's end, so nothing after it is biased. */
static __always_inline __u32 sample_words(__s64 *next, __u64 len)
{
	struct binom_state b = { .next = *next, .len = (__s64)len };
	long n = 0;

	if (b.next < b.len) {
		n = bpf_loop(1 << 23, binom_step, &b, 0);
		if (n > 0 && b.next >= b.len) {
			n--;
		} else {
			b.next = b.len;
			count(CH_CNT_CAPPED, 1);
		}
	}
	*next = b.next - b.len;
	return n > 0 ? (__u32)n : 0;
}

#endif
