/* slot-relayd: the relay daemon of every overlay node. Answers probes, sets
 * up pipes for client daemons over authenticated control connections and
 * splices each pipe's two sockets. See docs/relay.md. */

#include <errno.h>
#include <stdbool.h>
#include <grp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "slot/auth.h"
#include "slot/caps.h"
#include "slot/clock.h"
#include "slot/daemon.h"
#include "slot/log.h"
#include "slot/notify.h"
#include "slot/sock.h"
#include "slot/synprobe.h"
#include "slot/dirclient.h"
#include "ctrl.h"
#include "chain.h"
#include "dirlink.h"
#include "initcwnd.h"
#include "nexthops.h"
#include "peers.h"
#include "pipe.h"
#include "probe.h"
#include "rauth.h"
#include "stats.h"

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

/* Nonces remembered per message kind (admit.h), and source addresses
 * tracked per kind for rates. */
#define REPLAY_CAPACITY (1u << 18)
#define ADMIT_RL_SLOTS 16384
/* Pooled empty pipes still count against the user's pipe-buffer budget
 * (fs.pipe-user-pages-soft, 64 MiB by default), past which new pipes get two
 * pages; keep the pool to a small share of it. */
#define KPIPE_POOL_BYTES (8u << 20)

/* Called on the loop when the directory's revocation list changes (rev: the
 * new list), after the peers without the revoked relays were handed to the
 * RTT probes: relay_revoke (rauth.h) drops what revoked peers still hold. */
static void
relay_revoked(struct relay *r, const struct ident_revoked *rev)
{
	int n = relay_revoke(r, rev);

	if (n < 0)
		log_warnx("directory: revocation list of %zu serials not applied: out of memory",
		    rev->n);
	else
		log_info("directory: revocation list of %zu serials; %d peers dropped", rev->n,
		    n);
}

static void
peers_cb(void *user, const struct endpoint *self, const struct endpoint *peers,
    const uint16_t *data_ports, size_t n, const struct ident_revoked *rev)
{
	struct relay *r = user;

	/* The peers come without the revoked relays: their probes stop here,
	 * and no chain names them. */
	if (r->peers)
		peers_set(r->peers, self, peers, n);
	if (nexthops_set(r->nexthops, peers, data_ports, n) == -1)
		log_warnx("directory: out of memory for the next relays' listing; chains "
		    "are checked against the previous one");
	if (rev != NULL)
		relay_revoked(r, rev);
}

/* The admission limits of r->conf. */
static void
relay_admit_conf(const struct relay *r, struct admit_conf *ac)
{
	const struct rconf *c = &r->conf;

	ac->max_conns = c->max_control_conns;
	ac->max_per_source = c->max_control_per_source;
	ac->rate[ADMIT_PROBE] = c->requester_rate;
	ac->burst[ADMIT_PROBE] = c->requester_burst;
	ac->rate[ADMIT_CONTROL] = c->control_rate;
	ac->burst[ADMIT_CONTROL] = c->control_burst;
	ac->rate[ADMIT_RELAY] = c->relay_control_rate;
	ac->burst[ADMIT_RELAY] = c->relay_control_burst;
	ac->window_us = c->max_clock_skew_ms * 1000;
}

/* The data listener carries the client legs' options (rconf_leg), which
 * the sockets it accepts inherit: set once here, at start and at each
 * reload, instead of once per pipe. was: the congestion control of the
 * running configuration ("" at start), to reset the listener's to the
 * system's when the new one says "system". */
static int
data_listener_leg(struct relay *r, const char *was, char *err, size_t errlen)
{
	struct sock_leg o;
	char def[SOCK_CC_NAME_MAX];

	rconf_leg(&r->conf, &o);
	o.reset = 1;
	/* A server leg set to the default is left alone (pipe.c, half_attach). */
	if (sock_congestion_default(r->cc_default, sizeof(r->cc_default)) == -1)
		r->cc_default[0] = '\0';
	/* What a leg that retransmits switches to: nothing if it has that
	 * algorithm already. */
	snprintf(r->cc_on_loss, sizeof(r->cc_on_loss), "%s", r->conf.congestion_on_loss);
	if (strcmp(r->cc_on_loss, r->conf.congestion[0] ? r->conf.congestion :
	    r->cc_default) == 0)
		r->cc_on_loss[0] = '\0';
	if (o.congestion[0] == '\0' && was[0] != '\0' && r->cc_default[0] != '\0') {
		memcpy(def, r->cc_default, sizeof(def));
		o.congestion = def;
	}
	if (sock_set_leg(r->data_fd, &o) == -1) {
		snprintf(err, errlen, "data listener: socket options (congestion control %s): %s",
		    o.congestion[0] ? o.congestion : "system", strerror(errno));
		return -1;
	}
	return 0;
}

/* [pipe] congestion and congestion_on_loss, checked as the relay's user
 * will set them. An algorithm the file names and the kernel does not allow
 * is an error; the default on loss gives way with a warning (the legs then
 * keep their algorithm), so that a host without bbr still runs. */
static int
congestion_resolve(struct rconf *c, const char *path, char *err, size_t errlen)
{
	char why[400];

	if (c->congestion[0] != '\0' && sock_congestion_check(c->congestion, why,
	    sizeof(why)) == -1) {
		snprintf(err, errlen, "%s: [pipe] congestion = %s: %s", path ? path : "defaults",
		    c->congestion, why);
		return -1;
	}
	if (c->congestion_on_loss[0] == '\0' || sock_congestion_check(c->congestion_on_loss,
	    why, sizeof(why)) == 0)
		return 0;
	if (c->congestion_on_loss_set) {
		snprintf(err, errlen, "%s: [pipe] congestion_on_loss = %s: %s",
		    path ? path : "defaults", c->congestion_on_loss, why);
		return -1;
	}
	log_warnx("%s; legs that lose packets keep their algorithm (set [pipe] "
	    "congestion_on_loss, e.g. to off, to choose)", why);
	c->congestion_on_loss[0] = '\0';
	return 0;
}

/* The kernel pipes the pipes may reserve: max_kernel_pipes (reservations
 * beyond two per pipe could never be used), and no more than the descriptor
 * limit holds once the other users' caps are set aside, so that an admitted
 * pipe never finds the descriptors short when it makes a kernel pipe. */
static size_t
relay_kpipe_limit(const struct rconf *c, size_t max_free)
{
	struct kpipe_budget b = {
		.max_pipes = c->max_pipes,
		.max_kernel_pipes = c->max_kernel_pipes,
		.max_control = c->max_control_conns,
		/* a measurement holds a port per SYN it sent (or its
		 * connect), and a measurement's connection may be held for
		 * handover besides, each under max_inflight */
		.max_inflight = c->max_inflight * (SYNP_MAX_TX + 1),
		.max_links = c->chain_max_links,
		.max_free = max_free,
	};
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		b.nofile = rl.rlim_cur ? rl.rlim_cur : 1;
	return kpipe_limit(&b);
}

/* Sets the pool from the running configuration (at start and on reload),
 * and says so if the descriptor limit admits fewer pipes than configured. */
static void
relay_kpipe_conf(struct relay *r)
{
	struct kpipe_pool *pp = &r->kpipes;
	const struct rconf *c = &r->conf;
	uint64_t cap = c->max_kernel_pipes ? c->max_kernel_pipes : 2 * c->max_pipes;

	pp->size = c->pipe_size;
	pp->max_free = KPIPE_POOL_BYTES / c->pipe_size;
	pp->limit = relay_kpipe_limit(c, pp->max_free);
	if (pp->limit < cap)
		log_warnx("descriptor limit: %zu pipes at most, not %llu (each may take %d "
		    "descriptors, besides max_control_connections, 5 x max_inflight, [chain] "
		    "max_links and %zu more); new pipes past it get PIPE_FAIL limit: raise "
		    "LimitNOFILE",
		    pp->limit / 2, (unsigned long long)(cap / 2), KPIPE_FDS_PER_PIPE,
		    (size_t)KPIPE_FD_MARGIN + 2 * pp->max_free);
}

void
relay_pipe_gone(struct relay *r)
{
	if (r->draining && r->npipes == 0)
		ev_break(r->loop, EVBREAK_ALL);
}

static void
data_accept_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct relay *r = w->data;
	(void)revents;

	for (int i = 0; i < 64; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		struct endpoint peer;
		int fd = accept4(r->data_fd, (struct sockaddr *)&ss, &len,
		    SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd == -1) {
			if (errno == EMFILE || errno == ENFILE) {
				/* Retrying at once would spin on the pending
				 * connection; wait for descriptors to free up. */
				log_warn("data accept paused");
				ev_io_stop(loop, w);
				ev_timer_start(loop, &r->accept_retry);
			}
			return;
		}
		if (ep_from_sockaddr((struct sockaddr *)&ss, len, &peer) == -1) {
			sock_close_rst(fd);
			continue;
		}
		pipe_accept_data(r, fd, &peer);
	}
}

static void
accept_retry_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct relay *r = w->data;
	(void)revents;

	if (r->data_fd >= 0)
		ev_io_start(loop, &r->data_accept);
	ctrl_resume_accepting(r);
}

/* The lab's shared key: the wire's and the directory's calls in shared mode
 * (in identity mode both go with this relay's own key). */
static bool
need_shared_key(const struct rconf *c)
{
	return c->auth_mode == IDENT_MODE_SHARED;
}

static void
reload(struct relay *r)
{
	struct rconf n;
	struct auth_key k;
	char err[512];

	if (rconf_load(&n, r->conf_path, err, sizeof(err)) == -1) {
		log_warnx("reload failed, keeping the running configuration: %s", err);
		return;
	}
	if (congestion_resolve(&n, r->conf_path, err, sizeof(err)) == -1) {
		log_warnx("reload failed, keeping the running configuration: %s", err);
		rconf_free(&n);
		return;
	}
	if (!ep_eq(&n.probe_listen, &r->conf.probe_listen) ||
	    !ep_eq(&n.control_listen, &r->conf.control_listen) ||
	    !ep_eq(&n.data_listen, &r->conf.data_listen) ||
	    !ep_eq(&n.metrics_listen, &r->conf.metrics_listen) ||
	    strcmp(n.user, r->conf.user) != 0 ||
	    strcmp(n.stats_socket, r->conf.stats_socket) != 0)
		log_warnx("reload: listen addresses, user and stats_socket change only on restart");
	n.probe_listen = r->conf.probe_listen;
	n.control_listen = r->conf.control_listen;
	n.data_listen = r->conf.data_listen;
	n.metrics_listen = r->conf.metrics_listen;
	memcpy(n.user, r->conf.user, sizeof(n.user));
	memcpy(n.stats_socket, r->conf.stats_socket, sizeof(n.stats_socket));
	/* The directory thread holds its own copy of these. */
	if (memcmp(&n.dir_urls, &r->conf.dir_urls, sizeof(n.dir_urls)) != 0 ||
	    !ep_eq(&n.advertise, &r->conf.advertise) ||
	    !ep_eq(&n.advertise2, &r->conf.advertise2) ||
	    n.dir_timeout_ms != r->conf.dir_timeout_ms ||
	    n.list_interval_ms != r->conf.list_interval_ms)
		log_warnx("reload: [directory] urls, advertise, timeout and list_interval "
		    "change only on restart");
	n.dir_urls = r->conf.dir_urls;
	n.advertise = r->conf.advertise;
	n.advertise2 = r->conf.advertise2;
	n.dir_timeout_ms = r->conf.dir_timeout_ms;
	n.list_interval_ms = r->conf.list_interval_ms;
	if (n.auth_mode != r->auth_mode) {
		log_warnx("reload: [auth] mode changes only on restart; keeping %s",
		    ident_mode_str(r->auth_mode));
		n.auth_mode = r->auth_mode;
	}
	if (!need_shared_key(&n))
		;
	else if (auth_key_load(n.key_file, &k, err, sizeof(err)) == 0) {
		r->key = k;
		if (r->dir)
			dirlink_set_key(r->dir, &k);
		auth_key_wipe(&k);
	} else
		log_warnx("reload: key not reloaded (%s); the running key stays", err);
	if (rauth_load(r, &n, err, sizeof(err)) == -1)
		log_warnx("reload: identity not reloaded (%s); the running one stays", err);
	else if (r->dir && r->auth_mode == IDENT_MODE_IDENTITY)
		dirlink_set_ident(r->dir, &r->id);

	/* Our own addresses were read with privileges at start: keep them. */
	free(n.policy.self);
	n.policy.self = r->conf.policy.self;
	n.policy.nself = r->conf.policy.nself;
	r->conf.policy.self = NULL;
	char was[SOCK_CC_NAME_MAX];
	memcpy(was, r->conf.congestion, sizeof(was));
	rconf_free(&r->conf);
	r->conf = n;
	if (data_listener_leg(r, was, err, sizeof(err)) == -1)
		log_warnx("reload: %s", err);

	log_set_level(r->conf.log_level);
	struct admit_conf ac;
	relay_admit_conf(r, &ac);
	admit_set(r->admit, &ac);
	relay_kpipe_conf(r);
	datahold_set_time(&r->hold, (double)r->conf.data_hold_ms / 1000.0);
	if (r->probe)
		probe_reconfigure(r->probe);
	initcwnd_reload(r);
	chains_conf_note(r);
	log_info("configuration reloaded from %s", r->conf_path);
}

static void
drain_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct relay *r = w->data;
	(void)loop;
	(void)revents;

	log_warnx("drain deadline reached: resetting %zu pipes", r->npipes);
	pipe_reset_all(r);
	ev_break(r->loop, EVBREAK_ALL);
}

/* The service manager (sd_notify): READY, RELOADING, STOPPING, WATCHDOG. */
static struct notify notify;

static void
signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct relay *r = w->data;
	(void)revents;

	if (w->signum == SIGHUP) {
		(void)notify_send(&notify, "RELOADING=1");
		reload(r);
		(void)notify_send(&notify, "READY=1");
		return;
	}
	(void)notify_send(&notify, "STOPPING=1");
	if (r->draining) {
		log_warnx("second signal: exiting now");
		pipe_reset_all(r);
		ev_break(loop, EVBREAK_ALL);
		return;
	}
	r->draining = 1;
	/* No pipe will come for them any more. */
	datahold_clear(&r->hold);
	datahold_set_time(&r->hold, 0);
	log_info("draining: %zu pipes, deadline %.1f s", r->npipes,
	    (double)r->conf.drain_timeout_ms / 1000.0);
	probe_stop(r->probe);
	r->probe = NULL;
	peers_stop(r->peers);
	r->peers = NULL;
	ctrl_stop_accepting(r);
	ev_timer_set(&r->drain_timer, (double)r->conf.drain_timeout_ms / 1000.0, 0.);
	ev_timer_start(loop, &r->drain_timer);
	relay_pipe_gone(r);
}

static int
listen_all(struct relay *r, int *probe_fd, int *stats_fd, int *metrics_fd, char *err,
    size_t errlen)
{
	char b[EP_STRLEN];
	const struct rconf *c = &r->conf;

	if ((*probe_fd = sock_bind_udp(&c->probe_listen)) == -1) {
		snprintf(err, errlen, "probe socket %s: %s", ep_fmt(&c->probe_listen, b),
		    strerror(errno));
		return -1;
	}
	if ((r->ctrl_fd = sock_listen_tcp(&c->control_listen, 128)) == -1) {
		snprintf(err, errlen, "control listener %s: %s",
		    ep_fmt(&c->control_listen, b), strerror(errno));
		return -1;
	}
	if ((r->data_fd = sock_listen_tcp(&c->data_listen, 1024)) == -1) {
		snprintf(err, errlen, "data listener %s: %s", ep_fmt(&c->data_listen, b),
		    strerror(errno));
		return -1;
	}
	/* The SYN of each data connection, for its pipe token (clients
	 * behind NAT); without it (Linux < 4.2) the relay does not offer
	 * tokens and matches by endpoint only. */
	int one = 1;
	r->save_syn = setsockopt(r->data_fd, IPPROTO_TCP, TCP_SAVE_SYN, &one,
	    sizeof(one)) == 0;
	if (!r->save_syn)
		log_warn("TCP_SAVE_SYN on the data listener: pipe tokens off");
	if (data_listener_leg(r, "", err, errlen) == -1)
		return -1;
	if (c->metrics_listen.addr.family &&
	    (*metrics_fd = sock_listen_tcp(&c->metrics_listen, 16)) == -1) {
		snprintf(err, errlen, "metrics listener %s: %s", ep_fmt(&c->metrics_listen, b),
		    strerror(errno));
		return -1;
	}
	*stats_fd = sock_listen_unix_mkdir("stats socket", c->stats_socket, 0660, err, errlen);
	return *stats_fd == -1 ? -1 : 0;
}

static int
drop_privileges(const struct rconf *c, char *err, size_t errlen)
{
	uid_t uid;
	gid_t gid;

	if (geteuid() != 0)
		return 0;
	if (c->user[0] == '\0' || strcmp(c->user, "root") == 0) {
		log_warnx("running as root: set [relay] user to an unprivileged account");
		return 0;
	}
	if (caps_lookup(c->user, &uid, &gid, err, errlen) == -1)
		return -1;
	/* Let the operator's group read the counters. */
	if (chown(c->stats_socket, uid, gid) == -1)
		log_warn("chown %s", c->stats_socket);
	/* No capability kept: the raw socket of the probes is open already,
	 * and setuid() clears them. (Not caps_drop: the unit leaves the
	 * relay no CAP_SETPCAP to empty its bounding set with.) */
	if (setgroups(0, NULL) == -1 || setgid(gid) == -1 || setuid(uid) == -1) {
		snprintf(err, errlen, "cannot drop privileges to %s: %s", c->user,
		    strerror(errno));
		return -1;
	}
	if (setuid(0) != -1) {
		snprintf(err, errlen, "privileges could be regained after dropping them");
		return -1;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	static struct relay relay;
	struct relay *r = &relay;
	const char *path;
	struct daemon_args args;
	int probe_fd = -1, stats_fd = -1, metrics_fd = -1;
	struct synp_sock *synp;
	char err[512];

	daemon_start("slot-relayd", "/etc/slot/relayd.conf", "the keys", argc, argv, &args);
	path = args.conf_path;
	r->conf_path = path;
	ctl_ident_init(&r->ident, "slot-relayd", "slot_relayd", SLOT_VERSION, path);
	r->ctrl_fd = r->data_fd = -1;
	if (rconf_load(&r->conf, path, err, sizeof(err)) == -1 ||
	    congestion_resolve(&r->conf, path, err, sizeof(err)) == -1)
		fatalx("%s", err);
	daemon_log_level(&args, &r->conf.log_level);
	if (need_shared_key(&r->conf) &&
	    auth_key_load(r->conf.key_file, &r->key, err, sizeof(err)) == -1)
		fatalx("%s", err);
	if (rauth_load(r, &r->conf, err, sizeof(err)) == -1)
		fatalx("identity: %s", err);
	if (args.check_only) {
		if (rauth_identity(r))
			printf("%s: configuration ok; identity '%s' (relay), [auth] mode "
			    "identity\n", path, r->id.cert.name);
		else
			printf("%s: configuration ok; [auth] mode shared\n", path);
		rauth_free(r);
		rconf_free(&r->conf);
		return 0;
	}

	signal(SIGPIPE, SIG_IGN);
	/* Two sockets and up to two kernel pipes per pipe. */
	sock_raise_nofile();
	if ((r->loop = ev_default_loop(EVFLAG_AUTO)) == NULL)
		fatalx("cannot create the event loop");
	addr_hash_key(r->hkey);
	if (listen_all(r, &probe_fd, &stats_fd, &metrics_fd, err, sizeof(err)) == -1)
		fatalx("%s", err);
	if (policy_load_self(&r->conf.policy) == -1)
		fatal("reading the host's addresses");
	/* Connected before the drop: the manager's socket may be root's. */
	if (notify_init(&notify, err, sizeof(err)) == -1)
		log_warnx("%s; not telling the service manager", err);
	/* The raw socket needs CAP_NET_RAW: opened now, kept after the drop. */
	if ((synp = synp_open(r->loop, 0, err, sizeof(err))) == NULL)
		log_warnx("RTT measurements by TCP connect alone, reset before their last "
		    "ACK (a lost SYN-ACK may let a server's application see one): %s "
		    "(needs CAP_NET_RAW)", err);
	/* Loading BPF needs CAP_BPF and CAP_NET_ADMIN: now or never. */
	initcwnd_open(r);
	if (drop_privileges(&r->conf, err, sizeof(err)) == -1)
		fatalx("%s", err);

	struct admit_conf ac;
	relay_admit_conf(r, &ac);
	if ((r->admit = admit_new(&ac, REPLAY_CAPACITY, ADMIT_RL_SLOTS)) == NULL ||
	    pipes_init(r) == -1 || chains_init(r) == -1)
		fatalx("out of memory");
	kpipe_pool_init(&r->kpipes, r->conf.pipe_size, KPIPE_POOL_BYTES / r->conf.pipe_size);
	relay_kpipe_conf(r);
	ctrl_start(r);
	initcwnd_ready(r);
	ev_io_init(&r->data_accept, data_accept_cb, r->data_fd, EV_READ);
	r->data_accept.data = r;
	ev_io_start(r->loop, &r->data_accept);
	ev_timer_init(&r->accept_retry, accept_retry_cb, 0.1, 0.);
	r->accept_retry.data = r;
	ev_timer_init(&r->drain_timer, drain_timer_cb, 0., 0.);
	r->drain_timer.data = r;
	if ((r->probe = probe_start(r, probe_fd, synp)) == NULL ||
	    (r->stats = ctlsrv_start(r->loop, stats_fd, stats_handle, r)) == NULL ||
	    (metrics_fd >= 0 &&
	    (r->metrics = ctlsrv_start_http(r->loop, metrics_fd, stats_handle, r)) == NULL))
		fatalx("out of memory");

	/* After the privilege drop: the directory thread needs none. */
	if (r->conf.dir_urls.n > 0) {
		if (dirc_global_init(err, sizeof(err)) == -1)
			fatalx("%s", err);
		if ((r->peers = peers_start(r)) == NULL)
			fatalx("out of memory");
		if ((r->dir = dirlink_start(r->loop, &r->conf, &r->key,
		    r->auth_mode == IDENT_MODE_IDENTITY ? &r->id : NULL, peers_cb, r, err,
		    sizeof(err))) == NULL)
			fatalx("%s", err);
	}

	daemon_signals(r->loop, r->sig, signal_cb, r);

	char pb[EP_STRLEN], cb[EP_STRLEN], db[EP_STRLEN];
	if (rauth_identity(r))
		log_info("identity '%s', certificate serial %016llx, [auth] mode identity",
		    r->id.cert.name, (unsigned long long)r->id.cert.serial);
	else
		log_warnx("[auth] mode shared: any holder of the shared key can speak as "
		    "any host (a lab setting)");
	log_info("slot-relayd %s: probes %s/udp, control %s, data %s, counters %s, "
	    "%zu directories", SLOT_VERSION, ep_fmt(&r->conf.probe_listen, pb),
	    ep_fmt(&r->conf.control_listen, cb), ep_fmt(&r->conf.data_listen, db),
	    r->conf.stats_socket, r->conf.dir_urls.n);
	if (r->metrics)
		log_info("metrics on http://%s/metrics", ep_fmt(&r->conf.metrics_listen, pb));
	chains_conf_note(r);

	/* Listening, the counters socket open, the directory thread started. */
	if (notify_send(&notify, "READY=1\nSTATUS=relaying") == -1)
		log_warn("telling the service manager READY=1");
	notify_watchdog_start(&notify, r->loop);

	ev_run(r->loop, 0);

	(void)notify_send(&notify, "STOPPING=1");
	notify_fini(&notify);
	log_info("exiting: %llu pipes served, %llu bytes client->server, %llu server->client",
	    r->ctr.pipes_total, r->ctr.bytes_client_to_server, r->ctr.bytes_server_to_client);
	probe_stop(r->probe);
	if (r->dir) {
		dirlink_stop(r->dir);
		dirc_global_fini();
	}
	peers_stop(r->peers);
	ctrl_close_all(r);
	ctrl_stop_accepting(r);
	pipes_destroy(r);
	chains_destroy(r);
	initcwnd_close(r);
	ev_io_stop(r->loop, &r->data_accept);
	close(r->data_fd);
	ctlsrv_stop(r->stats);
	ctlsrv_stop(r->metrics);
	(void)unlink(r->conf.stats_socket);	/* fails once unprivileged: harmless */
	kpipe_pool_destroy(&r->kpipes);
	admit_free(r->admit);
	auth_key_wipe(&r->key);
	rauth_free(r);
	rconf_free(&r->conf);
	ev_loop_destroy(r->loop);
	return 0;
}
