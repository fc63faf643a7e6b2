#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <linux/tcp.h>	/* the whole tcp_info; glibc's stops early */
#include <sys/socket.h>

#include "slot/log.h"
#include "initcwnd.h"
#include "iwbpf.h"

struct initcwnd {
	struct relay *r;
	struct iwbpf *bpf;
	struct iwlearn *learn;
	ev_timer sweep;
	bool paused;		/* turned off by a reload: the program stays,
				 * its map empty, so that on again needs no
				 * privileges */
	unsigned long long map_errors;
};

static void
sink_set(void *arg, const struct iwl_entry *e)
{
	struct initcwnd *w = arg;
	char b[ADDR_STRLEN];

	if (iwbpf_set(w->bpf, &e->prefix, e->plen, e->iw) == -1) {
		w->map_errors++;
		log_warn("initial window of %s/%u", addr_fmt(&e->prefix, b), e->plen);
	}
}

static void
sink_del(void *arg, const struct iwl_entry *e)
{
	struct initcwnd *w = arg;
	char b[ADDR_STRLEN];

	if (iwbpf_del(w->bpf, &e->prefix, e->plen) == -1) {
		w->map_errors++;
		log_warn("forgetting the initial window of %s/%u", addr_fmt(&e->prefix, b),
		    e->plen);
	}
}

static void
conf_of(const struct relay *r, const struct iwbpf *b, struct iwl_conf *c)
{
	c->cap = (uint32_t)r->conf.initcwnd_max;
	c->prefix4 = (unsigned)r->conf.initcwnd_prefix4;
	c->prefix6 = (unsigned)r->conf.initcwnd_prefix6;
	c->expiry_ms = r->conf.initcwnd_expiry_ms;
	/* The map was sized at start. */
	c->max_prefixes = r->conf.initcwnd_max_prefixes < iwbpf_capacity(b) ?
	    r->conf.initcwnd_max_prefixes : iwbpf_capacity(b);
}

static uint64_t
now_ms(const struct relay *r)
{
	return (uint64_t)(ev_now(r->loop) * 1000.0);
}

static void
sweep_cb(struct ev_loop *loop, ev_timer *t, int revents)
{
	struct initcwnd *w = t->data;
	size_t n;
	(void)loop;
	(void)revents;

	if ((n = iwl_expire(w->learn, now_ms(w->r))) > 0)
		log_debug("initial windows: %zu prefixes expired", n);
}

/* Often enough that a prefix outlives its expiry by a quarter at most. */
static void
sweep_arm(struct initcwnd *w)
{
	double s = (double)w->r->conf.initcwnd_expiry_ms / 4000.0;

	if (s > 60)
		s = 60;
	ev_timer_stop(w->r->loop, &w->sweep);
	ev_timer_set(&w->sweep, s, s);
	ev_timer_start(w->r->loop, &w->sweep);
}

void
initcwnd_open(struct relay *r)
{
	struct initcwnd *w;
	struct iwl_conf c;
	struct iwl_sink sink;
	char err[512];

	r->iw = NULL;
	if (!r->conf.learn_initcwnd)
		return;
	if ((w = calloc(1, sizeof(*w))) == NULL) {
		log_warnx("learned initial windows off: out of memory");
		return;
	}
	w->r = r;
	if ((w->bpf = iwbpf_open(r->conf.data_listen.port,
	    (size_t)r->conf.initcwnd_max_prefixes, err, sizeof(err))) == NULL) {
		log_warnx("[pipe] learn_initcwnd: off: %s", err);
		free(w);
		return;
	}
	conf_of(r, w->bpf, &c);
	sink = (struct iwl_sink){ .set = sink_set, .del = sink_del, .arg = w };
	if ((w->learn = iwl_new(&c, &sink)) == NULL) {
		log_warnx("learned initial windows off: out of memory");
		iwbpf_close(w->bpf);
		free(w);
		return;
	}
	ev_timer_init(&w->sweep, sweep_cb, 1., 1.);
	w->sweep.data = w;
	r->iw = w;
}

void
initcwnd_ready(struct relay *r)
{
	struct initcwnd *w = r->iw;
	char err[512];

	if (w == NULL)
		return;
	if (iwbpf_check(w->bpf, err, sizeof(err)) == -1) {
		log_warnx("[pipe] learn_initcwnd: off: %s", err);
		initcwnd_close(r);
		return;
	}
	sweep_arm(w);
	log_info("learning initial windows per /%u (IPv4) and /%u (IPv6) prefix, at most %u "
	    "segments, forgotten after %llu s", (unsigned)r->conf.initcwnd_prefix4,
	    (unsigned)r->conf.initcwnd_prefix6, (unsigned)r->conf.initcwnd_max,
	    (unsigned long long)(r->conf.initcwnd_expiry_ms / 1000));
}

void
initcwnd_close(struct relay *r)
{
	struct initcwnd *w = r->iw;

	if (w == NULL)
		return;
	ev_timer_stop(r->loop, &w->sweep);
	/* The link closes last: no connection meets a half-emptied map. */
	iwl_free(w->learn);
	iwbpf_close(w->bpf);
	free(w);
	r->iw = NULL;
}

void
initcwnd_reload(struct relay *r)
{
	struct initcwnd *w = r->iw;
	struct iwl_conf c;

	if (w == NULL) {
		if (r->conf.learn_initcwnd)
			log_warnx("reload: [pipe] learn_initcwnd turns on only at restart (loading "
			    "its BPF program needs privileges the relay no longer has)");
		return;
	}
	if (!r->conf.learn_initcwnd) {
		if (!w->paused)
			log_info("reload: learned initial windows off (forgotten)");
		w->paused = true;
		iwl_flush(w->learn);
		ev_timer_stop(r->loop, &w->sweep);
		return;
	}
	if (w->paused)
		log_info("reload: learned initial windows on again");
	w->paused = false;
	if (r->conf.initcwnd_max_prefixes > iwbpf_capacity(w->bpf))
		log_warnx("reload: [pipe] initcwnd_max_prefixes grows only on restart; %zu kept",
		    iwbpf_capacity(w->bpf));
	conf_of(r, w->bpf, &c);
	iwl_set_conf(w->learn, &c);
	sweep_arm(w);
}

/* The peer of a TCP socket, even closed: a leg whose peer closed too is in
 * state CLOSE by the pipe's end, where getpeername() fails; SO_PEERNAME
 * asks the kernel for the address all the same. */
static int
peer_of(int fd, struct endpoint *peer)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	/* SO_PEERNAME wants no more room than the family's address takes. */
	if (getsockname(fd, (struct sockaddr *)&ss, &len) == -1)
		return -1;
	len = ss.ss_family == AF_INET ? sizeof(struct sockaddr_in) :
	    sizeof(struct sockaddr_in6);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERNAME, &ss, &len) == -1)
		return -1;
	return ep_from_sockaddr((struct sockaddr *)&ss, len, peer);
}

void
initcwnd_pipe_done(struct relay *r, int fd, unsigned long long bytes_sent)
{
	struct initcwnd *w = r->iw;
	struct tcp_info ti;
	socklen_t len = sizeof(ti);
	struct endpoint peer;
	struct iwl_sample s;
	enum iwl_result res;
	char b[EP_STRLEN];

	if (w == NULL || w->paused || fd < 0 || bytes_sent == 0)
		return;
	memset(&ti, 0, sizeof(ti));
	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == -1 || peer_of(fd, &peer) == -1)
		return;
	memset(&s, 0, sizeof(s));
	s.dst = peer.addr;
	s.snd_cwnd = ti.tcpi_snd_cwnd;
	s.snd_mss = ti.tcpi_snd_mss;
	s.bytes_acked = ti.tcpi_bytes_acked;
	s.total_retrans = ti.tcpi_total_retrans;
	s.min_rtt_us = ti.tcpi_min_rtt;
	s.delivery_rate = ti.tcpi_delivery_rate;
	res = iwl_learn(w->learn, &s, now_ms(r));
	log_debug("initial window for %s: %s (cwnd %u, %llu bytes acked, %u retransmitted): "
	    "%u", ep_fmt(&peer, b), res == IWL_LEARNED ? "learned" : res == IWL_SHRUNK ?
	    "shrunk" : res == IWL_FORGOTTEN ? "forgotten" : "nothing to learn", s.snd_cwnd,
	    (unsigned long long)s.bytes_acked, s.total_retrans, iwl_lookup(w->learn, &s.dst));
}

void
initcwnd_get_stats(const struct relay *r, struct initcwnd_stats *s)
{
	const struct initcwnd *w = r->iw;

	memset(s, 0, sizeof(*s));
	if (w == NULL)
		return;
	s->on = !w->paused;
	s->prefixes = iwl_count(w->learn);
	s->applied = iwbpf_applied(w->bpf);
	s->map_errors = w->map_errors;
	s->learn = *iwl_counters(w->learn);
}

void
initcwnd_foreach(const struct relay *r, void (*fn)(void *arg, const struct iwl_entry *e),
    void *arg)
{
	if (r->iw)
		iwl_foreach(r->iw->learn, fn, arg);
}
