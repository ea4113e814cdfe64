/* ondemand.c -- libmicrohttpd, libcurl and libgvc loaded by the commands
 * that use them (ondemand.h). */
#define _GNU_SOURCE
#include "cmd/ondemand.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* `n` function pointers named in `names` from library `soname` into
 * `fns`; 0, or -1 with err set. */
static int load(const char *soname, const char *package, const char *const *names, void **fns, size_t n, char *err,
		size_t errlen)
{
	void *h = dlopen(soname, RTLD_NOW | RTLD_LOCAL);

	if (!h) {
		snprintf(err, errlen, "cannot load %s (%s): install Debian's %s", soname, dlerror(), package);
		return -1;
	}
	for (size_t i = 0; i < n; i++)
		if (!(fns[i] = dlsym(h, names[i]))) {
			snprintf(err, errlen, "%s has no %s: camlheap was built against another version (%s)", soname,
				 names[i], package);
			dlclose(h);
			return -1;
		}
	return 0; /* kept loaded: the pointers live as long as the process */
}

#define ONDEMAND_NAME(f) #f,

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

const struct ondemand_mhd *ondemand_mhd(char *err, size_t errlen)
{
	static struct ondemand_mhd api;
	static int state; /* 0 not tried, 1 loaded, -1 failed */
	static char why[256];
	static const char *const names[] = { ONDEMAND_MHD(ONDEMAND_NAME) };

	pthread_mutex_lock(&lock);
	if (!state)
		state = load("libmicrohttpd.so.12", "libmicrohttpd12", names, (void **)&api,
			     sizeof(api) / sizeof(void *), why, sizeof(why)) < 0 ? -1 : 1;
	pthread_mutex_unlock(&lock);
	if (state < 0)
		snprintf(err, errlen, "%s", why);
	return state > 0 ? &api : NULL;
}

const struct ondemand_curl *ondemand_curl(char *err, size_t errlen)
{
	static struct ondemand_curl api;
	static int state;
	static char why[256];
	static const char *const names[] = { ONDEMAND_CURL(ONDEMAND_NAME) };

	pthread_mutex_lock(&lock);
	if (!state)
		state = load("libcurl.so.4", "libcurl4", names, (void **)&api, sizeof(api) / sizeof(void *), why,
			     sizeof(why)) < 0 ? -1 : 1;
	pthread_mutex_unlock(&lock);
	if (state < 0)
		snprintf(err, errlen, "%s", why);
	return state > 0 ? &api : NULL;
}

const struct ondemand_gvc *ondemand_gvc(char *err, size_t errlen)
{
	static struct ondemand_gvc api;
	static int state;
	static char why[256];
	static const char *const names[] = { ONDEMAND_GVC(ONDEMAND_NAME) };

	pthread_mutex_lock(&lock);
	if (!state)
		state = load("libgvc.so.6", "libgvc6", names, (void **)&api, sizeof(api) / sizeof(void *), why,
			     sizeof(why)) < 0 ? -1 : 1;
	pthread_mutex_unlock(&lock);
	if (state < 0)
		snprintf(err, errlen, "%s", why);
	return state > 0 ? &api : NULL;
}

int ondemand_dot_to_svg(const char *dot, FILE *f, char *err, size_t errlen)
{
	const struct ondemand_gvc *gv = ondemand_gvc(err, errlen);
	GVC_t *gvc;
	Agraph_t *g;
	char *svg = NULL;
	unsigned int len = 0;
	int ret = -1;

	if (!gv)
		return -1;
	gvc = gv->gvContext();
	g = gvc ? gv->agmemread(dot) : NULL;
	if (!g) {
		snprintf(err, errlen, "Graphviz refused the graph");
	} else if (gv->gvLayout(gvc, g, "dot") != 0) {
		snprintf(err, errlen, "Graphviz's dot layout failed (is libgvc6's plugin configuration in place?)");
	} else {
		if (gv->gvRenderData(gvc, g, "svg", &svg, &len) != 0 || !svg)
			snprintf(err, errlen, "Graphviz could not render SVG");
		else if (fwrite(svg, 1, len, f) != len)
			snprintf(err, errlen, "write failed");
		else
			ret = 0;
		if (svg)
			gv->gvFreeRenderData(svg);
		gv->gvFreeLayout(gvc, g);
	}
	if (g)
		gv->agclose(g);
	if (gvc)
		gv->gvFreeContext(gvc);
	return ret;
}
