#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "slot/clock.h"
#include "slot/dirproto.h"
#include "slot/errbuf.h"
#include "slot/log.h"
#include "dirlink.h"

#define REPORT_CHUNK 250		/* entries per slot.report: well within max_body */
#define RETRY_MIN_US 1000000ull		/* first retry of a failed registration */
#define RETRY_MAX_US 60000000ull
#define WAIT_MAX_US 60000000ull
#define LIST_SOON_MIN_US 10000000ull	/* list calls asked for by chains */

struct url_state {
	bool registered;
	bool report_due;
	bool failing;			/* logged once per run of failures */
	unsigned hb_s;
	unsigned fails;
	uint64_t next_us;		/* monotonic: next register or heartbeat */
};

struct dirlink {
	struct ev_loop *loop;
	ev_async wake;
	dirlink_peers_cb cb;
	void *user;
	pthread_t th;
	bool started;

	/* Set at start, read-only afterwards. */
	struct rconf conf;		/* [relay] and [directory] values only */

	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* Under mu. */
	bool stop;
	bool key_new;
	struct auth_key key;
	bool ident_mode;		/* set at start */
	bool ident_new;
	struct ident id;
	bool rev_new;
	struct ident_revoked rev;	/* for the loop */
	bool report_new;
	struct dirc_rtt *report;
	size_t nreport;
	bool peers_new;
	bool list_soon;			/* a chain named a relay we do not list */
	struct endpoint self;
	struct endpoint *peers;
	uint16_t *data_ports;
	size_t npeers;
	struct dirlink_counters ctr;
};

/* Thread-private state of the worker. */
struct worker {
	struct dirlink *dl;
	struct dirclient *c;
	struct url_state u[CONF_URLS_MAX];
	struct endpoint self;
	/* A dual-stack relay's second registration ([directory] advertise
	 * with two endpoints): its own state per URL; family 0: none. */
	struct url_state u2[CONF_URLS_MAX];
	struct endpoint self2;
	bool self_known, self_failing;
	uint64_t next_self_us;
	struct dirc_rtt *report;
	size_t nreport;
	char version[DIRC_VERSION_MAX];
	uint64_t next_list_us;
	uint64_t last_list_us;		/* the last list call's start, 0: none */
	bool list_failing;
	struct dirc_relay *list;	/* the latest listing, to filter again */
	size_t nlist;
	struct ident_revoked held;	/* the latest revocation list */
};

static uint64_t
jitter(uint64_t us)
{
	/* +-10%: relays started together do not call in step. */
	return us - us / 10 + (uint64_t)((double)(us / 5) * ((double)arc4random() / 4294967296.0));
}

static void
count(struct dirlink *dl, unsigned long long *field, unsigned long long n)
{
	pthread_mutex_lock(&dl->mu);
	*field += n;
	pthread_mutex_unlock(&dl->mu);
}

int
dirlink_url_host(const char *url, char *host, size_t hostlen, char *port, size_t portlen)
{
	bool tls = strncmp(url, "https://", 8) == 0;
	const char *h = url + (tls ? 8 : 7), *end = h + strcspn(h, "/?#"), *colon;
	size_t hl;

	if (*h == '[') {
		const char *rb = memchr(h, ']', (size_t)(end - h));
		if (rb == NULL)
			return -1;
		hl = (size_t)(rb - h - 1);
		h++;
		colon = rb + 1 < end && rb[1] == ':' ? rb + 1 : NULL;
	} else {
		colon = memchr(h, ':', (size_t)(end - h));
		hl = (size_t)((colon ? colon : end) - h);
	}
	if (hl == 0 || hl >= hostlen)
		return -1;
	memcpy(host, h, hl);
	host[hl] = '\0';
	if (colon) {
		size_t pl = (size_t)(end - colon - 1);
		if (pl == 0 || pl >= portlen)
			return -1;
		memcpy(port, colon + 1, pl);
		port[pl] = '\0';
	} else
		snprintf(port, portlen, "%s", tls ? "443" : "80");
	return 0;
}

int
dirlink_advertise(const struct rconf *c, const char *url, struct endpoint *out, char *err,
    size_t errlen)
{
	char host[256], port[16];
	struct addrinfo hints = { .ai_socktype = SOCK_DGRAM }, *res = NULL;
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int fd, rc;

	if (c->advertise.addr.family != 0) {
		*out = c->advertise;
		return 0;
	}
	if (!(addr_classify(&c->control_listen.addr) & ADDR_C_UNSPECIFIED)) {
		*out = c->control_listen;
		return 0;
	}
	if (dirlink_url_host(url, host, sizeof(host), port, sizeof(port)) == -1) {
		errbuf_set(err, errlen, "%s: cannot read the host", url);
		return -1;
	}
	if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
		errbuf_set(err, errlen, "%s: %s", host, gai_strerror(rc));
		return -1;
	}
	/* A connected UDP socket sends nothing but learns the source address
	 * the routing table picks. */
	fd = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	rc = fd == -1 ? -1 : connect(fd, res->ai_addr, res->ai_addrlen);
	if (rc == 0)
		rc = getsockname(fd, (struct sockaddr *)&ss, &len);
	if (rc == 0)
		rc = ep_from_sockaddr((struct sockaddr *)&ss, len, out);
	if (rc == -1)
		errbuf_set(err, errlen, "no route towards %s: %s", host, strerror(errno));
	if (fd != -1)
		close(fd);
	freeaddrinfo(res);
	if (rc == -1)
		return -1;
	out->port = c->control_listen.port;
	return 0;
}

static void
url_failed(struct worker *w, struct url_state *u, const char *url, const char *what,
    const char *err)
{
	count(w->dl, &w->dl->ctr.calls_failed, 1);
	if (!u->failing)
		log_warnx("directory %s: %s failed: %s", url, what, err);
	else
		log_debug("directory %s: %s failed: %s", url, what, err);
	u->failing = true;
}

static void
set_registered(struct worker *w, struct url_state *u, bool on)
{
	if (u->registered == on)
		return;
	u->registered = on;
	pthread_mutex_lock(&w->dl->mu);
	if (on)
		w->dl->ctr.registered++;
	else
		w->dl->ctr.registered--;
	pthread_mutex_unlock(&w->dl->mu);
}

static void
send_report(struct worker *w, const struct endpoint *self, struct url_state *u,
    const char *url)
{
	char err[512];
	int fault;

	for (size_t off = 0; off < w->nreport; off += REPORT_CHUNK) {
		size_t n = w->nreport - off < REPORT_CHUNK ? w->nreport - off : REPORT_CHUNK;
		if (dirc_report(w->c, url, self, w->report + off, n, &fault, err,
		    sizeof(err)) == -1) {
			if (fault == DIRP_FAULT_UNKNOWN_RELAY)
				set_registered(w, u, false);
			url_failed(w, u, url, "report", err);
			return;
		}
		pthread_mutex_lock(&w->dl->mu);
		w->dl->ctr.reports++;
		w->dl->ctr.report_entries += n;
		pthread_mutex_unlock(&w->dl->mu);
	}
	u->report_due = false;
}

/* Registers self at url, or sends its heartbeat and reports when due. */
static void
serve_one(struct worker *w, const struct endpoint *self, struct url_state *u, const char *url,
    uint64_t now)
{
	char err[512], b[EP_STRLEN];
	int fault;

	if (now >= u->next_us && !u->registered) {
		unsigned hb = 0;
		if (dirc_register(w->c, url, self, w->dl->conf.data_listen.port, &hb, NULL,
		    &fault, err, sizeof(err)) == -1) {
			url_failed(w, u, url, "register", err);
			uint64_t back = RETRY_MIN_US << (u->fails < 6 ? u->fails : 6);
			u->fails++;
			u->next_us = now + jitter(back < RETRY_MAX_US ? back : RETRY_MAX_US);
			return;
		}
		count(w->dl, &w->dl->ctr.registrations, 1);
		log_info("directory %s: registered as %s", url, ep_fmt(self, b));
		set_registered(w, u, true);
		u->failing = false;
		u->fails = 0;
		u->hb_s = hb;
		u->next_us = now + jitter((uint64_t)hb * 1000000);
		/* A new registration starts without our reports. */
		u->report_due = w->nreport > 0;
	} else if (now >= u->next_us) {
		if (dirc_heartbeat(w->c, url, self, &fault, err, sizeof(err)) == -1) {
			url_failed(w, u, url, "heartbeat", err);
			if (fault == DIRP_FAULT_UNKNOWN_RELAY) {
				/* Expired there, or it lost its state: again. */
				set_registered(w, u, false);
				u->next_us = now;
				return;
			}
			/* Try again well before the directory gives up on us. */
			u->next_us = now + jitter((uint64_t)u->hb_s * 1000000 / 3);
			return;
		}
		count(w->dl, &w->dl->ctr.heartbeats, 1);
		if (u->failing)
			log_info("directory %s: reachable again", url);
		u->failing = false;
		u->next_us = now + jitter((uint64_t)u->hb_s * 1000000);
	}
	if (u->registered && u->report_due)
		send_report(w, self, u, url);
}

static void
serve_url(struct worker *w, size_t i, uint64_t now)
{
	const char *url = w->dl->conf.dir_urls.url[i];

	serve_one(w, &w->self, &w->u[i], url, now);
	if (w->self2.addr.family != 0)
		serve_one(w, &w->self2, &w->u2[i], url, clock_mono_us());
}

/* Hands the loop the peers of w->list (without self and the revoked), and
 * the revocation list if rev_new. */
static void
hand_peers(struct worker *w, bool rev_new)
{
	struct endpoint *peers = calloc(w->nlist ? w->nlist : 1, sizeof(*peers));
	uint16_t *ports = calloc(w->nlist ? w->nlist : 1, sizeof(*ports));
	struct ident_revoked rev = { 0 };
	size_t np = 0;

	if (peers == NULL || ports == NULL ||
	    (rev_new && ident_revoked_copy(&w->held, &rev) == -1)) {
		free(peers);
		free(ports);
		return;
	}
	for (size_t j = 0; j < w->nlist; j++) {
		const struct dirc_relay *x = &w->list[j];

		if (ep_eq(&x->relay, &w->self) || ep_eq(&x->relay, &w->self2) ||
		    (x->has_cert && ident_revoked_has(&w->held, x->cert.serial)))
			continue;
		ports[np] = x->data_port;
		peers[np++] = x->relay;
	}
	pthread_mutex_lock(&w->dl->mu);
	free(w->dl->peers);
	free(w->dl->data_ports);
	w->dl->peers = peers;
	w->dl->data_ports = ports;
	w->dl->npeers = np;
	w->dl->self = w->self;
	w->dl->peers_new = true;
	if (rev_new) {
		ident_revoked_free(&w->dl->rev);
		w->dl->rev = rev;
		w->dl->rev_new = true;
	}
	pthread_mutex_unlock(&w->dl->mu);
	ev_async_send(w->dl->loop, &w->dl->wake);
}

/* The other relays, from the first directory that answers (in identity
 * mode, with an answer signed by a directory of our CA). */
static void
fetch_list(struct worker *w, uint64_t now)
{
	const struct conf_urls *urls = &w->dl->conf.dir_urls;
	char err[512] = "";

	w->last_list_us = now;
	for (size_t i = 0; i < urls->n; i++) {
		struct dirc_listing l;
		bool rev_new = false;
		int fault = 0;

		if (dirc_fetch(w->c, urls->url[i], w->version, false, &w->held, &l, &fault, err,
		    sizeof(err)) == -1) {
			count(w->dl, &w->dl->ctr.calls_failed, 1);
			if (fault == DIRC_REFUSED) {
				count(w->dl, &w->dl->ctr.lists_refused, 1);
				log_warnx("directory %s: listing refused: %s; keeping the peers "
				    "we have", urls->url[i], err);
			} else
				log_debug("directory %s: list failed: %s", urls->url[i], err);
			continue;
		}
		count(w->dl, &w->dl->ctr.lists, 1);
		w->list_failing = false;
		w->next_list_us = now + jitter(w->dl->conf.list_interval_ms * 1000);
		if (l.is_signed && (l.revoked.n != w->held.n || (l.revoked.n > 0 &&
		    memcmp(l.revoked.serial, w->held.serial, l.revoked.n * sizeof(uint64_t)) != 0))) {
			ident_revoked_free(&w->held);
			w->held = l.revoked;
			memset(&l.revoked, 0, sizeof(l.revoked));
			rev_new = true;
		}
		if (l.dropped > 0)
			log_warnx("directory %s: listing %s: %zu relays left out, their "
			    "certificates refused", urls->url[i], l.version, l.dropped);
		if (l.changed) {
			free(w->list);
			w->list = l.relay;
			w->nlist = l.n;
			l.relay = NULL;
			memcpy(w->version, l.version, sizeof(w->version));
		}
		if (l.changed || rev_new)
			hand_peers(w, rev_new);
		dirc_listing_free(&l);
		return;
	}
	if (!w->list_failing)
		log_warnx("directory: no directory answered the list call (last: %s)", err);
	w->list_failing = true;
	uint64_t retry = w->dl->conf.list_interval_ms * 1000;
	w->next_list_us = now + jitter(retry < 10000000 ? retry : 10000000);
}

static void *
run(void *arg)
{
	struct dirlink *dl = arg;
	struct worker w = { .dl = dl, .self2 = dl->conf.advertise2 };
	char err[512];

	pthread_mutex_lock(&dl->mu);
	w.c = dirc_new(&dl->key, (unsigned)dl->conf.dir_timeout_ms, err, sizeof(err));
	dl->key_new = false;
	if (w.c != NULL && dl->ident_mode)
		dirc_set_ident(w.c, &dl->id);
	dl->ident_new = false;
	pthread_mutex_unlock(&dl->mu);
	if (w.c == NULL) {
		log_warnx("directory: %s; not registering", err);
		return NULL;
	}
	pthread_mutex_lock(&dl->mu);
	while (!dl->stop) {
		if (dl->key_new && !dl->ident_mode) {
			dirc_set_key(w.c, &dl->key);
			dl->key_new = false;
		}
		if (dl->ident_new) {
			dirc_set_ident(w.c, &dl->id);
			dl->ident_new = false;
		}
		if (dl->report_new) {
			free(w.report);
			w.report = dl->report;
			w.nreport = dl->nreport;
			dl->report = NULL;
			dl->nreport = 0;
			dl->report_new = false;
			for (size_t i = 0; i < dl->conf.dir_urls.n; i++)
				w.u[i].report_due = w.u2[i].report_due = w.nreport > 0;
		}
		/* A relay that joined since our last listing: list again, at
		 * most every LIST_SOON_MIN_US, rather than refuse chains through
		 * it for up to list_interval. */
		if (dl->list_soon) {
			uint64_t soonest = w.last_list_us ? w.last_list_us + LIST_SOON_MIN_US : 0;

			if (soonest < w.next_list_us)
				w.next_list_us = soonest;
			dl->list_soon = false;
		}
		pthread_mutex_unlock(&dl->mu);

		uint64_t now = clock_mono_us(), wake = now + WAIT_MAX_US;
		if (!w.self_known && now >= w.next_self_us) {
			if (dirlink_advertise(&dl->conf, dl->conf.dir_urls.url[0], &w.self, err,
			    sizeof(err)) == 0)
				w.self_known = true;
			else {
				if (!w.self_failing)
					log_warnx("directory: cannot tell our address (set [directory] "
					    "advertise): %s", err);
				w.self_failing = true;
				w.next_self_us = now + RETRY_MAX_US / 6;
			}
		}
		if (w.self_known) {
			for (size_t i = 0; i < dl->conf.dir_urls.n; i++) {
				serve_url(&w, i, now);
				now = clock_mono_us();
			}
			if (now >= w.next_list_us)
				fetch_list(&w, now);
			for (size_t i = 0; i < dl->conf.dir_urls.n; i++) {
				if (w.u[i].next_us < wake)
					wake = w.u[i].next_us;
				if (w.self2.addr.family != 0 && w.u2[i].next_us < wake)
					wake = w.u2[i].next_us;
			}
			if (w.next_list_us < wake)
				wake = w.next_list_us;
		} else if (w.next_self_us < wake)
			wake = w.next_self_us;

		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		now = clock_mono_us();
		uint64_t d = wake > now ? wake - now : 0;
		ts.tv_sec += (time_t)(d / 1000000);
		ts.tv_nsec += (long)(d % 1000000) * 1000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_mutex_lock(&dl->mu);
		while (!dl->stop && !dl->key_new && !dl->ident_new && !dl->report_new &&
		    !dl->list_soon && d > 0)
			if (pthread_cond_timedwait(&dl->cv, &dl->mu, &ts) == ETIMEDOUT)
				break;
	}
	pthread_mutex_unlock(&dl->mu);
	free(w.report);
	free(w.list);
	ident_revoked_free(&w.held);
	dirc_free(w.c);
	return NULL;
}

static void
wake_cb(struct ev_loop *loop, ev_async *a, int revents)
{
	struct dirlink *dl = a->data;
	struct endpoint self, *peers = NULL;
	uint16_t *ports = NULL;
	struct ident_revoked rev = { 0 };
	size_t n = 0;
	bool fresh, rev_new;
	(void)loop;
	(void)revents;

	pthread_mutex_lock(&dl->mu);
	rev_new = dl->rev_new;
	if (rev_new) {
		rev = dl->rev;
		memset(&dl->rev, 0, sizeof(dl->rev));
		dl->rev_new = false;
	}
	fresh = dl->peers_new;
	if (fresh) {
		peers = dl->peers;
		ports = dl->data_ports;
		n = dl->npeers;
		self = dl->self;
		dl->peers = NULL;
		dl->data_ports = NULL;
		dl->npeers = 0;
		dl->peers_new = false;
	}
	pthread_mutex_unlock(&dl->mu);
	if (fresh && dl->cb)
		dl->cb(dl->user, &self, peers, ports, n, rev_new ? &rev : NULL);
	free(peers);
	free(ports);
	ident_revoked_free(&rev);
}

struct dirlink *
dirlink_start(struct ev_loop *loop, const struct rconf *c, const struct auth_key *key,
    const struct ident *id, dirlink_peers_cb cb, void *user, char *err, size_t errlen)
{
	struct dirlink *dl = calloc(1, sizeof(*dl));
	pthread_condattr_t ca;
	int rc;

	if (dl == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	dl->loop = loop;
	dl->cb = cb;
	dl->user = user;
	/* The policy's lists belong to the caller's copy. */
	dl->conf = *c;
	policy_init(&dl->conf.policy);
	dl->key = *key;
	if (id != NULL) {
		dl->ident_mode = true;
		dl->id = *id;
	}
	pthread_mutex_init(&dl->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&dl->cv, &ca);
	pthread_condattr_destroy(&ca);
	ev_async_init(&dl->wake, wake_cb);
	dl->wake.data = dl;
	ev_async_start(loop, &dl->wake);
	if ((rc = pthread_create(&dl->th, NULL, run, dl)) != 0) {
		errbuf_set(err, errlen, "directory thread: %s", strerror(rc));
		dirlink_stop(dl);
		return NULL;
	}
	dl->started = true;
	return dl;
}

void
dirlink_stop(struct dirlink *dl)
{
	if (dl == NULL)
		return;
	if (dl->started) {
		pthread_mutex_lock(&dl->mu);
		dl->stop = true;
		pthread_cond_signal(&dl->cv);
		pthread_mutex_unlock(&dl->mu);
		pthread_join(dl->th, NULL);
	}
	ev_async_stop(dl->loop, &dl->wake);
	pthread_cond_destroy(&dl->cv);
	pthread_mutex_destroy(&dl->mu);
	auth_key_wipe(&dl->key);
	ident_wipe(&dl->id);
	ident_revoked_free(&dl->rev);
	free(dl->report);
	free(dl->peers);
	free(dl->data_ports);
	free(dl);
}

void
dirlink_set_key(struct dirlink *dl, const struct auth_key *key)
{
	pthread_mutex_lock(&dl->mu);
	dl->key = *key;
	dl->key_new = true;
	pthread_cond_signal(&dl->cv);
	pthread_mutex_unlock(&dl->mu);
}

void
dirlink_set_ident(struct dirlink *dl, const struct ident *id)
{
	if (!dl->ident_mode)
		return;
	pthread_mutex_lock(&dl->mu);
	dl->id = *id;
	dl->ident_new = true;
	pthread_mutex_unlock(&dl->mu);
}

int
dirlink_report(struct dirlink *dl, const struct dirc_rtt *rtts, size_t n)
{
	struct dirc_rtt *copy = malloc((n ? n : 1) * sizeof(*copy));

	if (copy == NULL)
		return -1;
	if (n)
		memcpy(copy, rtts, n * sizeof(*copy));
	pthread_mutex_lock(&dl->mu);
	free(dl->report);
	dl->report = copy;
	dl->nreport = n;
	dl->report_new = true;
	pthread_cond_signal(&dl->cv);
	pthread_mutex_unlock(&dl->mu);
	return 0;
}

void
dirlink_list_soon(struct dirlink *dl)
{
	if (dl == NULL)
		return;
	pthread_mutex_lock(&dl->mu);
	dl->list_soon = true;
	pthread_cond_signal(&dl->cv);
	pthread_mutex_unlock(&dl->mu);
}

void
dirlink_get_counters(struct dirlink *dl, struct dirlink_counters *out)
{
	pthread_mutex_lock(&dl->mu);
	*out = dl->ctr;
	pthread_mutex_unlock(&dl->mu);
}
