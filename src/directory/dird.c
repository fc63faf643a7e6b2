/* slot-dird: the directory. Relays register, send heartbeats and their RTTs
 * to each other; client daemons list the relays and their groups. XML-RPC
 * over HTTP (xmlrpc-c's Abyss) on connection threads (dhttp.c); this thread
 * runs a libev loop for signals, expiry, snapshots and the counters socket,
 * and asks a thread of its own for regroups. See docs/directory.md. */

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ev.h>
#include <sodium.h>

#include "slot/auth.h"
#include "slot/clock.h"
#include "slot/ctlsrv.h"
#include "slot/daemon.h"
#include "slot/grpstab.h"
#include "slot/ident.h"
#include "slot/log.h"
#include "slot/notify.h"
#include "slot/mcl.h"
#include "slot/sock.h"
#include "dhttp.h"
#include "dird.h"
#include "dird_rpc.h"
#include "dland.h"
#include "dsnap.h"
#include "dstats.h"

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

/* Nonces live for twice the clock window; this holds ~1000 calls a second
 * with the default 30 s window. */
#define REPLAY_CAPACITY (1u << 17)
#define TICK_S 0.5
/* Every relay line and the rtt lines' budget fit in what the state file's
 * reader takes (the header and end line are well within the slack). */
_Static_assert(DSNAP_RTT_BUDGET + (size_t)DCONF_MAX_RELAYS * DSNAP_RELAY_LINE_MAX +
    4096 <= DSNAP_MAX_BYTES, "a snapshot could exceed DSNAP_MAX_BYTES");
/* Snapshots are written at most this often while things change. */
#define SNAPSHOT_INTERVAL_US (5ull * 1000000)
/* The clustering's input keeps each relay's nearest REGROUP_KEEP peers
 * (within max_intra_rtt), and MCL keeps REGROUP_MAX_ENTRIES per row: memory
 * and time in n * neighbours (docs/directory.md, Sizing). */
#define REGROUP_KEEP 32
#define REGROUP_MAX_ENTRIES 64

/* Which version of a file was read: a file rewritten within one tick of
 * the clock keeps its mtime, but not its size, or its inode if renamed
 * over, or (mostly) its ctime. */
struct file_id {
	bool known;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
};

static struct file_id
file_id_of(const struct stat *st)
{
	return (struct file_id){ true, st->st_dev, st->st_ino, st->st_size, st->st_mtim,
	    st->st_ctim };
}

static bool
file_id_same(const struct file_id *a, const struct file_id *b)
{
	return a->known && b->known && a->dev == b->dev && a->ino == b->ino &&
	    a->size == b->size && a->mtim.tv_sec == b->mtim.tv_sec &&
	    a->mtim.tv_nsec == b->mtim.tv_nsec && a->ctim.tv_sec == b->ctim.tv_sec &&
	    a->ctim.tv_nsec == b->ctim.tv_nsec;
}

/* Says so when max_relays allows listings larger than clients take:
 * identity mode's relay entries alone (DLAND_RELAY_BYTES each) pass
 * DLAND_ANSWER_MAX, under the clients' cap, beyond about 40,000 relays. */
static void
warn_listing_size(const struct dconf *c)
{
	size_t most = DLAND_ANSWER_MAX / DLAND_RELAY_BYTES;

	if (c->auth_mode == IDENT_MODE_IDENTITY && c->max_relays > most)
		log_warnx("[limits] max_relays %llu: a listing of more than %zu relays is "
		    "larger than clients take (their last listing would stay in use); "
		    "keep the overlay under that", (unsigned long long)c->max_relays, most);
}

struct daemon {
	struct dird d;			/* shared with the RPC threads */
	const char *conf_path;
	struct ev_loop *loop;
	struct dhttp *http;
	xmlrpc_registry *reg;
	struct ctlsrv *ctl;
	struct ctlsrv *metrics;		/* HTTP; NULL: no metrics_listen */
	struct ctl_ident ident;
	int http_fd;
	ev_signal sig[3];		/* SIGHUP, SIGTERM, SIGINT (daemon_signals) */
	ev_timer tick;
	pthread_t regroup_thread;
	pthread_cond_t regroup_cv;	/* with d.mu */
	bool regroup_wake, regroup_stop;	/* under d.mu */
	uint64_t last_regroup, last_snapshot;	/* monotonic us */
	bool snapshot_retry;		/* the last write failed */
	uint64_t leftout_logged;	/* monotonic us: RTTs left out, said then */
	bool snapshot_failing;		/* said so already */
	struct file_id revoked_id;	/* [auth] revoked as last loaded */
	bool revoked_failing;		/* said so already */
};

static uint64_t
fresh_boot(void)
{
	uint64_t b;

	randombytes_buf(&b, sizeof(b));
	return b;
}

static struct dstate_params
state_params(const struct dconf *c)
{
	struct dstate_params p = {
		.expire_after_us = c->expire_after_ms * 1000,
		.max_relays = c->max_relays,
	};
	return p;
}

/* Writes the snapshot. clean: at exit, nothing can change after it. */
static int
snapshot(struct daemon *dm, bool clean)
{
	struct dird *d = &dm->d;
	struct dsnap_stats st;
	char *buf = NULL, err[512];
	size_t len;
	int rc;

	if (d->conf.state_file[0] == '\0')
		return 0;
	pthread_mutex_lock(&d->mu);
	rc = dsnap_format(d->state, clock_mono_us(), clock_real_us(), clean, DSNAP_RTT_BUDGET,
	    &buf, &len, &st);
	if (rc == 0)
		dstate_mark_saved(d->state);
	else
		snprintf(err, sizeof(err), "%s", strerror(errno));
	pthread_mutex_unlock(&d->mu);
	dm->last_snapshot = clock_mono_us();
	/* Said at most every 10 min: at such a scale it holds at every snapshot. */
	if (rc == 0 && st.rtts_left_out > 0 && (dm->leftout_logged == 0 ||
	    dm->last_snapshot - dm->leftout_logged >= 600ull * 1000000)) {
		dm->leftout_logged = dm->last_snapshot;
		log_info("state file: %zu of %zu RTT reports left out, over the %zu MiB for "
		    "them (relays report them again)", st.rtts_left_out,
		    st.rtts + st.rtts_left_out, DSNAP_RTT_BUDGET >> 20);
	}
	if (rc == 0 && dsnap_write_file(d->conf.state_file, buf, len, err, sizeof(err)) == -1)
		rc = -1;
	free(buf);
	pthread_mutex_lock(&d->mu);
	if (rc == 0)
		d->ctr.snapshots_written++;
	else
		d->ctr.snapshot_errors++;
	pthread_mutex_unlock(&d->mu);
	dm->snapshot_retry = rc == -1;
	if (rc == -1 && !dm->snapshot_failing)
		log_warnx("state not saved: %s (retrying every %llu s)", err,
		    SNAPSHOT_INTERVAL_US / 1000000);
	else if (rc == 0 && dm->snapshot_failing)
		log_info("state saved again to %s", d->conf.state_file);
	dm->snapshot_failing = rc == -1;
	return rc;
}

/* Loads the snapshot, or starts empty; never fails the start. */
static struct dstate *
restore(struct daemon *dm)
{
	const struct dconf *c = &dm->d.conf;
	struct dstate_params p = state_params(c);
	struct dstate *s = NULL;
	struct dsnap_info info;
	char *buf = NULL, err[512];
	size_t len;

	if (c->state_file[0] == '\0') {
		log_info("no state_file: the state lives in memory only");
	} else if (dsnap_read_file(c->state_file, &buf, &len, err, sizeof(err)) == -1) {
		if (errno == ENOENT)
			log_info("no state file %s yet: starting empty", c->state_file);
		else
			log_warnx("state file unreadable, starting empty: %s", err);
	} else if ((s = dsnap_parse(buf, len, &p, clock_mono_us(), clock_real_us(), fresh_boot(),
	    &info, err, sizeof(err))) == NULL) {
		log_warnx("state file %s is corrupt, starting empty: %s", c->state_file, err);
	} else {
		log_info("state restored from %s: %zu relays, %zu rtts, %zu dropped as expired%s",
		    c->state_file, info.relays, info.rtts, info.dropped,
		    info.clean ? "" : " (not saved at exit: new version)");
	}
	free(buf);
	if (s == NULL && (s = dstate_new(&p, fresh_boot())) == NULL)
		fatalx("out of memory");
	return s;
}

/*
 * One regroup, on the regroup thread: a sparse snapshot of the RTTs under
 * the lock, then the clustering and the stabilisation without it (calls go
 * on meanwhile), then the result applied under the lock if the relay set is
 * still the one clustered (else the regroup is pending again).
 */
static void
regroup_once(struct daemon *dm)
{
	struct dird *d = &dm->d;
	struct mcl_params mp;
	struct mcl_gparams gp = { .keep = REGROUP_KEEP, .edge_max_ms = INFINITY };
	struct mcl_graph g;
	uint32_t *old = NULL, *fresh = NULL, *group = NULL;
	size_t ngroups = 0, changed = 0;
	uint64_t gen, t0 = clock_mono_us(), took, locked;
	char err[256] = "", v[DSTATE_VERSION_LEN];
	int rc, applied = -1;

	mcl_params_default(&mp);
	mp.max_entries = REGROUP_MAX_ENTRIES;
	pthread_mutex_lock(&d->mu);
	mp.inflation = d->conf.inflation;
	mp.max_intra_rtt_ms = d->conf.max_intra_rtt_ms;
	if (mp.max_intra_rtt_ms > 0.0) {
		/* Wider pairs can share no group: they are no edge, only known. */
		gp.edge_max_ms = mp.max_intra_rtt_ms;
		gp.wide_ms = mp.max_intra_rtt_ms;
	}
	rc = dstate_rtt_graph(d->state, &gp, &g, &old, &gen, err, sizeof(err));
	pthread_mutex_unlock(&d->mu);
	locked = clock_mono_us() - t0;
	if (rc == 0 && g.n == 0)
		return;
	if (rc == 0 && ((fresh = calloc(g.n, sizeof(*fresh))) == NULL ||
	    (group = calloc(g.n, sizeof(*group))) == NULL)) {
		snprintf(err, sizeof(err), "out of memory");
		rc = -1;
	}
	if (rc == 0)
		rc = mcl_groups_graph(&g, &mp, fresh, &ngroups, err, sizeof(err));
	if (rc == 0)
		rc = grpstab_apply(&g, old, fresh, mp.max_intra_rtt_ms, NULL, group, &changed,
		    err, sizeof(err));
	took = clock_mono_us() - t0;
	pthread_mutex_lock(&d->mu);
	if (rc == 0) {
		d->ctr.regroups++;
		applied = dstate_apply_groups(d->state, gen, group, g.n);
		if (applied >= 0) {
			d->ctr.group_changes += changed;
			d->ctr.regroup_last_changes = changed;
		}
		d->ctr.regroup_last_us = took;
		dstate_version(d->state, v);
	} else
		d->ctr.regroup_errors++;
	pthread_mutex_unlock(&d->mu);
	if (rc == -1)
		log_warnx("regroup failed, groups unchanged: %s", err);
	else if (applied == 1)
		log_info("regrouped: %zu relays in %zu groups in %.3f s (%.3f s of it holding "
		    "the lock), %zu changed group, version %s", g.n, ngroups, (double)took / 1e6,
		    (double)locked / 1e6, changed, v);
	else if (applied == 0)
		log_debug("regrouped: %zu relays in %zu groups in %.3f s (%.3f s of it holding "
		    "the lock), unchanged", g.n, ngroups, (double)took / 1e6, (double)locked / 1e6);
	else
		log_debug("regroup: the relays changed meanwhile; again later");
	mcl_graph_free(&g);
	free(old);
	free(fresh);
	free(group);
}

/* The regroup thread: one regroup each time the loop asks, until stopped. */
static void *
regroup_main(void *arg)
{
	struct daemon *dm = arg;
	struct dird *d = &dm->d;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		while (!dm->regroup_wake && !dm->regroup_stop)
			pthread_cond_wait(&dm->regroup_cv, &d->mu);
		if (dm->regroup_stop)
			break;
		dm->regroup_wake = false;
		d->regroup_running = true;
		pthread_mutex_unlock(&d->mu);
		regroup_once(dm);
		pthread_mutex_lock(&d->mu);
		d->regroup_running = false;
	}
	pthread_mutex_unlock(&d->mu);
	return NULL;
}

/* Asks the regroup thread for a regroup; called with d->mu held. */
static void
regroup_request(struct daemon *dm)
{
	dm->last_regroup = clock_mono_us();
	dm->regroup_wake = true;
	pthread_cond_signal(&dm->regroup_cv);
}

static void
expired(void *user, const char *relay, uint64_t age_us)
{
	(void)user;
	log_info("relay %s expired: silent for %.1f s", relay, (double)age_us / 1e6);
}

/* Identity mode: why a relay may not stay listed (d->mu held). */
static bool
drop_relay(void *user, const struct dstate_relay_view *v, const char **why)
{
	struct dird *d = user;
	uint64_t now = clock_real_us() / 1000000;

	if (v->cert == NULL)
		*why = "no certificate (registered in shared mode)";
	else if (ident_revoked_has(&d->revoked, v->cert->serial))
		*why = "its certificate is revoked";
	else if (now >= v->cert->not_after)
		*why = "its certificate expired";
	else
		return false;
	return true;
}

static void
dropped(void *user, const char *relay, const char *why)
{
	(void)user;
	log_info("relay %s removed: %s", relay, why);
}

/* Identity mode: removes the relays that may not stay; d->mu held. */
static void
sweep_relays(struct dird *d)
{
	if (d->mode == IDENT_MODE_IDENTITY)
		d->ctr.relays_revoked += dstate_remove_if(d->state, drop_relay, dropped, d);
}

/* Reads [auth] revoked when forced or when the file is not the one last
 * loaded (file_id); a new list takes effect at once: revoked relays leave
 * the listing, the version moves so that clients fetch the list, and their
 * calls are refused. A file that does not parse keeps the running list,
 * and is read again at every tick until it does: it may have been caught
 * half written, and the rest may land within the same mtime. */
static void
revoked_reload(struct daemon *dm, bool force)
{
	struct dird *d = &dm->d;
	struct ident_revoked rev = { 0 };
	char path[DCONF_PATH_MAX], err[512];
	struct stat st;
	struct file_id id = { 0 };
	bool same;

	if (d->mode != IDENT_MODE_IDENTITY)
		return;
	pthread_mutex_lock(&d->mu);
	memcpy(path, d->conf.revoked, sizeof(path));
	pthread_mutex_unlock(&d->mu);
	if (path[0] != '\0') {
		if (stat(path, &st) == -1) {
			if (!dm->revoked_failing)
				log_warnx("revocation list %s: %s; the running list (%zu "
				    "serials) stays", path, strerror(errno), d->revoked.n);
			dm->revoked_failing = true;
			dm->revoked_id.known = false;
			return;
		}
		/* Taken before the read: a change during it is seen next tick. */
		id = file_id_of(&st);
		if (!force && file_id_same(&id, &dm->revoked_id))
			return;
		if (ident_revoked_load(path, &rev, err, sizeof(err)) == -1) {
			if (!dm->revoked_failing || force)
				log_warnx("revocation list not loaded, the running list (%zu "
				    "serials) stays: %s", d->revoked.n, err);
			dm->revoked_failing = true;
			dm->revoked_id.known = false;
			return;
		}
	}
	dm->revoked_id = id;
	if (dm->revoked_failing && path[0] != '\0')
		log_info("revocation list %s loaded again", path);
	dm->revoked_failing = false;
	pthread_mutex_lock(&d->mu);
	same = ident_revoked_equal(&rev, &d->revoked);
	if (!same) {
		ident_revoked_free(&d->revoked);
		d->revoked = rev;
		memset(&rev, 0, sizeof(rev));
		d->ctr.revoked = d->revoked.n;
		/* Clients must fetch the new list even if no relay leaves. */
		dstate_bump(d->state);
		sweep_relays(d);
	}
	pthread_mutex_unlock(&d->mu);
	ident_revoked_free(&rev);
	if (!same)
		log_info("revocation list %s: %zu serials", path[0] ? path : "(none)",
		    d->revoked.n);
}

static void
tick_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct daemon *dm = w->data;
	struct dird *d = &dm->d;
	uint64_t now = clock_mono_us(), interval;
	bool pending, dirty;
	(void)loop;
	(void)revents;

	revoked_reload(dm, false);
	pthread_mutex_lock(&d->mu);
	d->ctr.relays_expired += dstate_expire(d->state, now, expired, NULL);
	sweep_relays(d);
	/* A regroup asked for or running takes the changes so far; the next
	 * one waits until it is done and the interval has passed. */
	pending = dstate_regroup_pending(d->state) && !d->regroup_running &&
	    !dm->regroup_wake;
	interval = d->conf.regroup_interval_ms * 1000;
	if (pending && now - dm->last_regroup >= interval)
		regroup_request(dm);
	pthread_mutex_unlock(&d->mu);

	pthread_mutex_lock(&d->mu);
	dirty = dstate_dirty(d->state);
	pthread_mutex_unlock(&d->mu);
	if ((dirty || dm->snapshot_retry) &&
	    clock_mono_us() - dm->last_snapshot >= SNAPSHOT_INTERVAL_US)
		snapshot(dm, false);
}

static void
reload(struct daemon *dm)
{
	struct dird *d = &dm->d;
	struct dconf n;
	struct auth_key k;
	struct ident id;
	char err[512];
	bool key_ok;

	if (dconf_load(&n, dm->conf_path, err, sizeof(err)) == -1) {
		log_warnx("reload failed, keeping the running configuration: %s", err);
		return;
	}
	warn_listing_size(&n);
	const struct dconf *c = &d->conf;
	if (!ep_eq(&n.listen, &c->listen) || strcmp(n.state_file, c->state_file) != 0 ||
	    strcmp(n.control_socket, c->control_socket) != 0 ||
	    !ep_eq(&n.metrics_listen, &c->metrics_listen) || n.max_body != c->max_body ||
	    n.max_header != c->max_header || n.max_conns != c->max_conns ||
	    n.max_conns_per_source != c->max_conns_per_source ||
	    n.header_timeout_ms != c->header_timeout_ms ||
	    n.body_timeout_ms != c->body_timeout_ms)
		log_warnx("reload: listen, state_file, control_socket, metrics_listen "
		    "and [limits] max_body, max_header, max_conns, max_conns_per_source, "
		    "header_timeout and body_timeout change only on restart");
	n.listen = c->listen;
	n.metrics_listen = c->metrics_listen;
	memcpy(n.state_file, c->state_file, sizeof(n.state_file));
	memcpy(n.control_socket, c->control_socket, sizeof(n.control_socket));
	n.max_body = c->max_body;
	n.max_header = c->max_header;
	n.max_conns = c->max_conns;
	n.max_conns_per_source = c->max_conns_per_source;
	n.header_timeout_ms = c->header_timeout_ms;
	n.body_timeout_ms = c->body_timeout_ms;
	if (n.auth_mode != d->mode) {
		log_warnx("reload: [auth] mode changes only on restart");
		n.auth_mode = d->mode;
	}
	if (d->mode == IDENT_MODE_SHARED) {
		key_ok = auth_key_load(n.key_file, &k, err, sizeof(err)) == 0;
		if (!key_ok)
			log_warnx("reload: key not reloaded (%s); the running key stays", err);
	} else {
		key_ok = ident_load(n.id_key, n.id_cert, n.id_ca,
		    IDENT_MASK(IDENT_ROLE_DIRECTORY), &id, err, sizeof(err)) == 0;
		if (!key_ok)
			log_warnx("reload: identity not reloaded (%s); the running one stays",
			    err);
	}

	pthread_mutex_lock(&d->mu);
	d->conf = n;
	if (key_ok && d->mode == IDENT_MODE_SHARED)
		d->key = k;
	else if (key_ok)
		d->id = id;
	replay_set_window(d->replay, n.max_clock_skew_ms * 1000);
	struct dstate_params p = state_params(&n);
	dstate_set_params(d->state, &p);
	pthread_mutex_unlock(&d->mu);
	auth_key_wipe(&k);
	ident_wipe(&id);
	log_set_level(n.log_level);
	revoked_reload(dm, true);
	log_info("configuration reloaded from %s", dm->conf_path);
}

/* The service manager (sd_notify): READY, RELOADING, STOPPING, WATCHDOG. */
static struct notify notify;

static void
signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct daemon *dm = w->data;
	(void)revents;

	if (w->signum == SIGHUP) {
		(void)notify_send(&notify, "RELOADING=1");
		reload(dm);
		(void)notify_send(&notify, "READY=1");
		return;
	}
	(void)notify_send(&notify, "STOPPING=1");
	log_info("signal %d: saving the state and exiting", w->signum);
	ev_break(loop, EVBREAK_ALL);
}

static void
ctl_cb(void *user, const char *cmd, struct ctl_out *out)
{
	struct daemon *dm = user;
	struct dhttp_counters hc;

	dhttp_counters(dm->http, &hc);
	dstats_answer(&dm->ident, &dm->d, &hc, cmd, out);
}

int
main(int argc, char **argv)
{
	static struct daemon daemon;
	struct daemon *dm = &daemon;
	struct dird *d = &dm->d;
	const char *path;
	struct daemon_args args;
	int ctl_fd, metrics_fd = -1;
	char err[512], b[EP_STRLEN], v[DSTATE_VERSION_LEN];

	daemon_start("slot-dird", "/etc/slot/dird.conf", "the identity (or key)", argc, argv,
	    &args);
	path = args.conf_path;
	dm->conf_path = path;
	ctl_ident_init(&dm->ident, "slot-dird", "slot_dird", SLOT_VERSION, path);
	dm->http_fd = -1;
	if (dconf_load(&d->conf, path, err, sizeof(err)) == -1)
		fatalx("%s", err);
	daemon_log_level(&args, &d->conf.log_level);
	d->mode = d->conf.auth_mode;
	if (d->mode == IDENT_MODE_SHARED) {
		if (auth_key_load(d->conf.key_file, &d->key, err, sizeof(err)) == -1)
			fatalx("%s", err);
	} else {
		if (ident_load(d->conf.id_key, d->conf.id_cert, d->conf.id_ca,
		    IDENT_MASK(IDENT_ROLE_DIRECTORY), &d->id, err, sizeof(err)) == -1)
			fatalx("identity: %s", err);
		struct stat st;

		/* The file's identity from before the read, as revoked_reload
		 * takes it. */
		if (d->conf.revoked[0] != '\0' && stat(d->conf.revoked, &st) == 0)
			dm->revoked_id = file_id_of(&st);
		if (d->conf.revoked[0] != '\0' && ident_revoked_load(d->conf.revoked,
		    &d->revoked, err, sizeof(err)) == -1)
			fatalx("%s", err);
		d->ctr.revoked = d->revoked.n;
	}
	warn_listing_size(&d->conf);
	if (args.check_only) {
		char serial[17];

		if (d->mode == IDENT_MODE_IDENTITY) {
			ident_serial_hex(d->id.cert.serial, serial);
			printf("%s: configuration ok; identity: directory certificate '%s', "
			    "serial %s; %zu revoked serials\n", path, d->id.cert.name, serial,
			    d->revoked.n);
		} else
			printf("%s: configuration ok\n", path);
		return 0;
	}

	signal(SIGPIPE, SIG_IGN);
	if (dhttp_global_init(err, sizeof(err)) == -1)
		fatalx("%s", err);
	if ((dm->loop = ev_default_loop(EVFLAG_AUTO)) == NULL)
		fatalx("cannot create the event loop");
	pthread_mutex_init(&d->mu, NULL);
	if ((d->replay = replay_new(REPLAY_CAPACITY, d->conf.max_clock_skew_ms * 1000)) == NULL)
		fatalx("out of memory");

	if ((dm->http_fd = sock_listen_tcp(&d->conf.listen, 128)) == -1)
		fatalx("listen %s: %s", ep_fmt(&d->conf.listen, b), strerror(errno));
	if ((ctl_fd = sock_listen_unix_mkdir("control socket", d->conf.control_socket, 0660, err,
	    sizeof(err))) == -1)
		fatalx("%s", err);
	if (d->conf.metrics_listen.addr.family &&
	    (metrics_fd = sock_listen_tcp(&d->conf.metrics_listen, 16)) == -1) {
		int e = errno;
		(void)unlink(d->conf.control_socket);
		fatalx("metrics listener %s: %s", ep_fmt(&d->conf.metrics_listen, b), strerror(e));
	}

	d->state = restore(dm);
	/* A state saved in shared mode, or before a revocation. */
	if (d->mode == IDENT_MODE_IDENTITY)
		sweep_relays(d);
	/* A start that restored the version served last must not let a
	 * crash hand the same version out again for other contents: mark
	 * the file unclean before serving. Failing that, a new boot id. */
	if (d->conf.state_file[0] != '\0' && snapshot(dm, false) == -1)
		dstate_set_boot(d->state, fresh_boot());

	xmlrpc_env env;
	xmlrpc_env_init(&env);
	if ((dm->reg = drpc_registry(&env, d)) == NULL)
		fatalx("xmlrpc-c: %s", env.fault_string);
	xmlrpc_env_clean(&env);
	struct dhttp_params hp = {
		.max_body = d->conf.max_body,
		.max_header = d->conf.max_header,
		.max_conns = (unsigned)d->conf.max_conns,
		.max_conns_per_source = (unsigned)d->conf.max_conns_per_source,
		.header_timeout_ms = d->conf.header_timeout_ms,
		.body_timeout_ms = d->conf.body_timeout_ms,
	};
	if ((dm->http = dhttp_start(dm->http_fd, &hp, dm->reg, err, sizeof(err))) == NULL)
		fatalx("%s", err);
	if ((dm->ctl = ctlsrv_start(dm->loop, ctl_fd, ctl_cb, dm)) == NULL ||
	    (metrics_fd >= 0 &&
	    (dm->metrics = ctlsrv_start_http(dm->loop, metrics_fd, ctl_cb, dm)) == NULL))
		fatalx("out of memory");

	daemon_signals(dm->loop, dm->sig, signal_cb, dm);
	/* The first regroup runs on its thread while the restored groups are
	 * served. */
	pthread_cond_init(&dm->regroup_cv, NULL);
	if ((errno = pthread_create(&dm->regroup_thread, NULL, regroup_main, dm)) != 0)
		fatal("regroup thread");
	pthread_mutex_lock(&d->mu);
	/* Start counts as a regroup for regroup_interval, as when it ran
	 * here: the first registrations wait for the interval too. */
	dm->last_regroup = clock_mono_us();
	if (dstate_regroup_pending(d->state))
		regroup_request(dm);
	pthread_mutex_unlock(&d->mu);
	ev_timer_init(&dm->tick, tick_cb, TICK_S, TICK_S);
	dm->tick.data = dm;
	ev_timer_start(dm->loop, &dm->tick);

	pthread_mutex_lock(&d->mu);
	dstate_version(d->state, v);
	size_t nrelays = dstate_count(d->state);
	pthread_mutex_unlock(&d->mu);
	log_info("slot-dird %s: XML-RPC on http://%s/RPC2, %zu relays, version %s, counters %s",
	    SLOT_VERSION, ep_fmt(&d->conf.listen, b), nrelays, v, d->conf.control_socket);
	if (dm->metrics)
		log_info("metrics on http://%s/metrics", ep_fmt(&d->conf.metrics_listen, b));

	/* The HTTP server and the counters socket serve. */
	if (notify_init(&notify, err, sizeof(err)) == -1)
		log_warnx("%s; not telling the service manager", err);
	if (notify_send(&notify, "READY=1\nSTATUS=serving") == -1)
		log_warn("telling the service manager READY=1");
	notify_watchdog_start(&notify, dm->loop);

	ev_run(dm->loop, 0);

	(void)notify_send(&notify, "STOPPING=1");
	notify_fini(&notify);
	/* No call can change the state once the server has stopped: the last
	 * snapshot is then exact, and says so. */
	dhttp_stop(dm->http);
	close(dm->http_fd);
	pthread_mutex_lock(&d->mu);
	dm->regroup_stop = true;
	pthread_cond_signal(&dm->regroup_cv);
	pthread_mutex_unlock(&d->mu);
	pthread_join(dm->regroup_thread, NULL);
	pthread_cond_destroy(&dm->regroup_cv);
	snapshot(dm, true);
	ctlsrv_stop(dm->ctl);
	ctlsrv_stop(dm->metrics);
	(void)unlink(d->conf.control_socket);
	xmlrpc_registry_free(dm->reg);
	dhttp_global_term();
	pthread_mutex_lock(&d->mu);
	dstate_version(d->state, v);
	log_info("exiting: %zu relays, version %s", dstate_count(d->state), v);
	pthread_mutex_unlock(&d->mu);
	dstate_free(d->state);
	replay_free(d->replay);
	dland_free(&d->land);
	auth_key_wipe(&d->key);
	ident_wipe(&d->id);
	ident_revoked_free(&d->revoked);
	pthread_mutex_destroy(&d->mu);
	ev_loop_destroy(dm->loop);
	return 0;
}
