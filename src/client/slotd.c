/* slotd: the client daemon. Hijacks the selected outgoing SYNs through
 * NFQUEUE, probes the direct path and a sample of relays, and steers each
 * connection to the relay with the shortest path (or lets it go direct).
 * See DESIGN.md, "One hijacked connection, step by step", and docs/slotd.md. */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <unistd.h>
#include <linux/capability.h>

#include "slot/auth.h"
#include "slot/clock.h"
#include "slot/ctlsrv.h"
#include "slot/daemon.h"
#include "slot/errbuf.h"
#include "slot/log.h"
#include "slot/notify.h"
#include "slot/sock.h"
#include "slot/synprobe.h"
#include "slot/caps.h"
#include "cstats.h"
#include "conntrack.h"
#include "dirsync.h"
#include "hold.h"
#include "libsrv.h"
#include "rank.h"
#include "relays.h"
#include "rules.h"
#include "rulesync.h"

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

#define REPLAY_CAPACITY (1u << 16)

/* The lab's shared key: the wire's and the directory's calls in shared mode
 * (in identity mode both go with this host's own key). */
static bool
need_shared_key(const struct cconf *c)
{
	return c->auth_mode == IDENT_MODE_SHARED;
}

/* Identity mode: this host's key, its client certificate and the CA. */
static int
load_identity(const struct cconf *c, struct ident *id, char *err, size_t errlen)
{
	return ident_load(c->id_key, c->id_cert, c->id_ca, IDENT_MASK(IDENT_ROLE_CLIENT), id,
	    err, errlen);
}

static void
set_env(struct slotd *d)
{
	d->env.loop = d->loop;
	d->env.key = &d->key;
	d->env.id = d->auth_mode == IDENT_MODE_IDENTITY ? &d->id : NULL;
	d->env.revoked = &d->revoked;
	d->env.replay = d->replay;
	d->env.bypass_mark = d->conf.bypass_mark;
	d->env.keepalive_interval_ms = d->conf.keepalive_interval_ms;
	d->env.keepalive_timeout_ms = d->conf.keepalive_timeout_ms;
	d->env.reconnect_min_ms = d->conf.reconnect_min_ms;
	d->env.reconnect_max_ms = d->conf.reconnect_max_ms;
}

static unsigned
wait_s(const struct cconf *c)
{
	return (unsigned)((c->rules_timeout_ms + 999) / 1000);
}

static struct rules_exec
exec_of(const struct cconf *c, enum rules_backend backend)
{
	return (struct rules_exec){ c->iptables, wait_s(c), backend, c->nft };
}

/* [hijack] backend: the one configured, if its tool runs, or auto's choice
 * (rules.h, rules_backend_auto). Says which and why in the log. */
static enum rules_backend
choose_backend(const struct cconf *c, char *err, size_t errlen)
{
	struct rules_exec x = exec_of(c, RULES_IPTABLES);
	struct rules_host h;
	char why[160];

	rules_host_probe(&x, &h);
	if (c->backend == RULES_NFT && !h.nft_works) {
		errbuf_set(err, errlen, "[hijack] backend = nft: '%s list tables' does not run "
		    "(install nftables, or set [slotd] nft to its path)", c->nft);
		return (enum rules_backend)-1;
	}
	if (c->backend == RULES_NFT && !h.nft_queue) {
		errbuf_set(err, errlen, "[hijack] backend = nft: this kernel takes no nft "
		    "\"queue\" rule (it lacks CONFIG_NFT_QUEUE); set backend = iptables (or "
		    "auto), which reaches NFQUEUE through xtables");
		return (enum rules_backend)-1;
	}
	if (c->backend == RULES_IPTABLES && h.iptables == -1) {
		errbuf_set(err, errlen, "[hijack] backend = iptables: '%s -V' does not run "
		    "(install iptables, or set [slotd] iptables to its path)", c->iptables);
		return (enum rules_backend)-1;
	}
	if (c->backend != CCONF_BACKEND_AUTO) {
		log_info("rules: %s backend, as configured", c->backend == RULES_NFT ? "nft" :
		    "iptables");
		return (enum rules_backend)c->backend;
	}
	enum rules_backend b = rules_backend_auto(&h, why, sizeof(why));
	if (b == RULES_IPTABLES && h.iptables == -1) {
		errbuf_set(err, errlen, "[hijack] backend = auto: neither '%s list tables' nor "
		    "'%s -V' runs (install nftables or iptables)", c->nft, c->iptables);
		return (enum rules_backend)-1;
	}
	log_info("rules: %s backend (auto: %s)", b == RULES_NFT ? "nft" : "iptables", why);
	return b;
}

/* Gateway mode relays what the host forwards: say so if it does not. */
static void
check_forwarding(const struct cconf *c)
{
	char v = '1';
	FILE *f;

	if ((c->mode & RULES_GATEWAY) == 0 ||
	    (f = fopen("/proc/sys/net/ipv4/ip_forward", "re")) == NULL)
		return;
	if (fread(&v, 1, 1, f) == 1 && v == '0')
		log_warnx("[hijack] mode %s: net.ipv4.ip_forward is 0, so the LAN's "
		    "connections are not forwarded at all", c->mode & RULES_LOCAL ? "both" :
		    "gateway");
	fclose(f);
}

static void
queue_cb(struct ev_loop *loop, ev_io *w, int revents)
{
	struct slotd *d = w->data;
	(void)loop;
	(void)revents;

	if (synq_read(d->q) == -1)
		log_warn("reading NFQUEUE %u", d->conf.queue);
}

static void
reload(struct slotd *d)
{
	struct cconf nc;
	struct auth_key nk = d->key;
	struct ident nid;
	bool id_changed = false;
	char err[512];

	if (cconf_load(&nc, d->conf_path, err, sizeof(err)) == -1) {
		d->ctr.reload_failures++;
		log_warnx("reload: %s; keeping the running configuration", err);
		return;
	}
	if (nc.auth_mode != d->auth_mode) {
		log_warnx("reload: [auth] mode changes only on restart; keeping %s",
		    ident_mode_str(d->auth_mode));
		nc.auth_mode = d->auth_mode;
	}
	if (need_shared_key(&nc) && auth_key_load(nc.key_file, &nk, err, sizeof(err)) == -1) {
		d->ctr.reload_failures++;
		log_warnx("reload: %s; keeping the running configuration", err);
		cconf_free(&nc);
		return;
	}
	if (d->auth_mode == IDENT_MODE_IDENTITY) {
		if (load_identity(&nc, &nid, err, sizeof(err)) == -1) {
			d->ctr.reload_failures++;
			log_warnx("reload: identity: %s; keeping the running configuration",
			    err);
			cconf_free(&nc);
			auth_key_wipe(&nk);
			return;
		}
		id_changed = memcmp(nid.cert.pk, d->id.cert.pk, IDENT_PK_LEN) != 0 ||
		    memcmp(nid.ca_pk, d->id.ca_pk, IDENT_PK_LEN) != 0;
	}
	/* The queue is bound and the socket made once, with privileges we no
	 * longer hold. */
	if (nc.queue != d->conf.queue) {
		log_warnx("reload: queue %u -> %u needs a restart; keeping %u", d->conf.queue,
		    nc.queue, d->conf.queue);
		nc.queue = d->conf.queue;
	}
	if (strcmp(nc.control_socket, d->conf.control_socket) != 0) {
		log_warnx("reload: control_socket needs a restart; keeping %s",
		    d->conf.control_socket);
		memcpy(nc.control_socket, d->conf.control_socket, sizeof(nc.control_socket));
	}
	if (!ep_eq(&nc.metrics_listen, &d->conf.metrics_listen)) {
		log_warnx("reload: metrics_listen needs a restart; keeping the running one");
		nc.metrics_listen = d->conf.metrics_listen;
	}
	if (nc.bypass_mark != d->conf.bypass_mark) {
		log_warnx("reload: bypass_mark needs a restart; keeping 0x%x",
		    d->conf.bypass_mark);
		nc.bypass_mark = d->conf.bypass_mark;
	}
	if (nc.backend != d->conf.backend || nc.mode != d->conf.mode) {
		log_warnx("reload: [hijack] backend and mode change only on restart; keeping "
		    "the running ones");
		nc.backend = d->conf.backend;
		nc.mode = d->conf.mode;
		if ((nc.mode & RULES_GATEWAY) && nc.nlan == 0) {
			memcpy(nc.lan, d->conf.lan, sizeof(nc.lan));
			nc.nlan = d->conf.nlan;
		}
	}
	if (strcmp(nc.user, d->conf.user) != 0) {
		log_warnx("reload: user needs a restart; keeping %s", d->conf.user);
		memcpy(nc.user, d->conf.user, sizeof(nc.user));
	}
	/* Made or opened with root's privileges; sockets already marked. */
	if (strcmp(nc.lib_socket, d->conf.lib_socket) != 0 ||
	    nc.lib_socket_mode != d->conf.lib_socket_mode || nc.lib_mark != d->conf.lib_mark ||
	    strcmp(nc.run_cgroup, d->conf.run_cgroup) != 0) {
		log_warnx("reload: [lib] changes only on restart; keeping the running one");
		memcpy(nc.lib_socket, d->conf.lib_socket, sizeof(nc.lib_socket));
		memcpy(nc.run_cgroup, d->conf.run_cgroup, sizeof(nc.run_cgroup));
		nc.lib_socket_mode = d->conf.lib_socket_mode;
		nc.lib_mark = d->conf.lib_mark;
	}
	dirsync_reload_conf(d, &nc);
	(void)rsync_set_exec(d->rsync, &(struct rules_exec){ nc.iptables, wait_s(&nc),
	    d->rules_exec.backend, nc.nft });
	/* The directory's relays stay in the set; their rules follow off the
	 * loop (rulesync.h). */
	if (dirsync_apply(d, &nc, err, sizeof(err)) == -1) {
		d->ctr.reload_failures++;
		log_warnx("reload: rules: %s; keeping the running configuration", err);
		cconf_free(&nc);
		auth_key_wipe(&nk);
		if (d->auth_mode == IDENT_MODE_IDENTITY)
			ident_wipe(&nid);
		return;
	}
	if (nc.cache_size != d->conf.cache_size || nc.cache_ttl_ms != d->conf.cache_ttl_ms) {
		struct selcache *c = selc_new(nc.cache_size);
		if (c) {
			selc_free(d->cache);
			d->cache = c;
		}
	}
	cconf_free(&d->conf);
	d->conf = nc;
	d->rules_exec = exec_of(&d->conf, d->rules_exec.backend);
	auth_key_wipe(&d->key);
	d->key = nk;
	if (d->auth_mode == IDENT_MODE_IDENTITY) {
		ident_wipe(&d->id);
		d->id = nid;
		/* Pair keys were made with the old key: introduce ourselves
		 * to every relay again. */
		if (id_changed)
			for (size_t i = 0; i < d->nrelays; i++)
				if (d->relays[i]->link)
					rlink_drop(d->relays[i]->link, "our identity changed");
	}
	dirsync_set_key(d, &d->key);
	if (d->auth_mode == IDENT_MODE_IDENTITY)
		dirsync_set_ident(d, &d->id);
	replay_set_window(d->replay, d->conf.max_clock_skew_ms * 1000);
	set_env(d);
	log_set_level(d->conf.log_level);
	d->ctr.reloads++;
	log_info("reloaded %s: %zu relays", d->conf_path, d->nrelays);
}

/* The service manager (sd_notify): READY, RELOADING, STOPPING, WATCHDOG. */
static struct notify notify;

static void
signal_cb(struct ev_loop *loop, ev_signal *w, int revents)
{
	struct slotd *d = w->data;
	(void)revents;

	if (w->signum == SIGHUP) {
		(void)notify_send(&notify, "RELOADING=1");
		reload(d);
		(void)notify_send(&notify, "READY=1");
		return;
	}
	(void)notify_send(&notify, "STOPPING=1");
	log_info("signal %d: removing the rules and stopping", w->signum);
	d->stopping = true;
	ev_break(loop, EVBREAK_ALL);
}

/* What the user needs before the switch: for iptables-legacy, a lock file
 * it may open (flock needs read access only; group, not others, so that no
 * other user can hold the lock). The control socket stays root's: the user
 * may unlink it where the directory lets it (/run/slot is root:slot). */
static void
hand_over(struct slotd *d, uid_t uid, gid_t gid, int legacy)
{
	const char *lock = getenv("XTABLES_LOCKFILE");
	struct stat st;
	int fd;

	if (!legacy || uid == 0)
		return;
	if (lock == NULL || lock[0] == '\0')
		lock = RULES_XTABLES_LOCK;
	if ((fd = open(lock, O_RDONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640)) == -1 ||
	    fstat(fd, &st) == -1) {
		log_warn("iptables-legacy as %s needs %s readable", d->conf.user, lock);
	} else if ((st.st_mode & S_IRGRP) == 0 || st.st_gid != gid) {
		if (fchown(fd, (uid_t)-1, gid) == -1 || fchmod(fd, (st.st_mode & 07777) | S_IRGRP) == -1)
			log_warn("iptables-legacy as %s needs %s readable by group %u", d->conf.user,
			    lock, (unsigned)gid);
		else
			log_info("%s: made readable by group %u for iptables-legacy", lock,
			    (unsigned)gid);
	}
	if (fd >= 0)
		close(fd);
}

/* From here slotd parses the network (probe replies, the directory's
 * answers) as [slotd] user with CAP_NET_ADMIN alone: NFQUEUE verdicts,
 * SO_MARK, and the rules through iptables-restore, which gets it ambient.
 * iptables-legacy gets CAP_NET_RAW too (ambient and permitted only: slotd
 * itself never uses it). The raw socket of the direct probes was opened
 * before. */
static int
drop_privileges(struct slotd *d, uid_t uid, gid_t gid, int legacy, char *err, size_t errlen)
{
	hand_over(d, uid, gid, legacy);
	if (caps_drop(uid, gid, 1ull << CAP_NET_ADMIN, legacy ? 1ull << CAP_NET_RAW : 0, err,
	    errlen) == -1)
		return -1;
	if (uid == 0)
		log_warnx("running as root (with CAP_NET_ADMIN alone): set [slotd] user to an "
		    "unprivileged account");
	else
		log_info("running as %s (uid %u) with CAP_NET_ADMIN%s", d->conf.user, (unsigned)uid,
		    legacy ? " (and CAP_NET_RAW for iptables-legacy)" : "");
	return 0;
}

int
main(int argc, char **argv)
{
	static struct slotd slotd;
	struct slotd *d = &slotd;
	const char *path;
	struct daemon_args args;
	int ctl_fd, metrics_fd = -1, legacy;
	enum rules_backend backend;
	char err[512], err2[512], mb[EP_STRLEN];
	uid_t uid;
	gid_t gid;

	daemon_start("slotd", "/etc/slot/slotd.conf", "the keys", argc, argv, &args);
	path = args.conf_path;
	d->conf_path = path;
	ctl_ident_init(&d->ident, "slotd", "slot_slotd", SLOT_VERSION, path);
	d->probe_fd[0] = d->probe_fd[1] = -1;
	if (cconf_load(&d->conf, path, err, sizeof(err)) == -1)
		fatalx("%s", err);
	d->rules_exec = exec_of(&d->conf, RULES_IPTABLES);
	daemon_log_level(&args, &d->conf.log_level);
	d->auth_mode = d->conf.auth_mode;
	if (need_shared_key(&d->conf) &&
	    auth_key_load(d->conf.key_file, &d->key, err, sizeof(err)) == -1)
		fatalx("%s", err);
	if (d->auth_mode == IDENT_MODE_IDENTITY &&
	    load_identity(&d->conf, &d->id, err, sizeof(err)) == -1)
		fatalx("identity: %s", err);
	if (args.check_only) {
		if (d->auth_mode == IDENT_MODE_IDENTITY)
			printf("%s: configuration ok; identity '%s' (client), [auth] mode "
			    "identity\n", path, d->id.cert.name);
		else
			printf("%s: configuration ok; [auth] mode shared\n", path);
		ident_wipe(&d->id);
		cconf_free(&d->conf);
		return 0;
	}
	if (geteuid() != 0)
		fatalx("slotd needs root to start (NFQUEUE, iptables, SO_MARK); it runs as "
		    "[slotd] user with CAP_NET_ADMIN alone once set up");
	if (caps_lookup(d->conf.user, &uid, &gid, err, sizeof(err)) == -1)
		fatalx("%s", err);
	if ((backend = choose_backend(&d->conf, err, sizeof(err))) == (enum rules_backend)-1)
		fatalx("%s", err);
	d->rules_exec = exec_of(&d->conf, backend);
	check_forwarding(&d->conf);
	/* iptables-legacy opens a raw socket (CAP_NET_RAW) and the xtables
	 * lock file; iptables-nft and nft need CAP_NET_ADMIN alone. */
	if (backend == RULES_NFT)
		legacy = 0;
	else if ((legacy = rules_is_legacy(&d->rules_exec, err, sizeof(err))) == -1)
		fatalx("[slotd] iptables = %s: %s", d->conf.iptables, err);

	signal(SIGPIPE, SIG_IGN);
	/* A held SYN costs a descriptor for its direct probe. */
	sock_raise_nofile();
	if ((d->loop = ev_default_loop(EVFLAG_AUTO)) == NULL)
		fatalx("cannot create the event loop");
	addr_hash_key(d->hkey);
	rng_seed(&d->rng, d->conf.seed ? d->conf.seed :
	    ((uint64_t)arc4random() << 32 | arc4random()));
	if ((d->replay = replay_new(REPLAY_CAPACITY, d->conf.max_clock_skew_ms * 1000)) == NULL ||
	    (d->cache = selc_new(d->conf.cache_size)) == NULL)
		fatalx("out of memory");
	set_env(d);

	/* The queue first: it is exclusive, so a second slotd stops here,
	 * before touching the first one's rules or socket. */
	if ((d->q = synq_open(d->conf.queue, d->conf.queue_maxlen, hold_packet, d, err,
	    sizeof(err))) == NULL)
		fatalx("%s", err);
	if (!synq_ct(d->q))
		log_info("NFQUEUE %u: the kernel attaches no conntrack entry to queued packets "
		    "(no CONFIG_NETFILTER_NETLINK_GLUE_CT): a relay's SYN-ACK read after its "
		    "pipe failed holds DNAT as the rules queue only those (synack_hold)",
		    d->conf.queue);
	/* Leftovers of a run that crashed stay until dirsync_apply replaces
	 * them in one iptables-restore: removing them first would leave the
	 * namespace a moment without a rule that needs conntrack, the kernel
	 * would unhook it, and the pipes still running through the old DNAT
	 * rules would be reset. If that fails they stay, harmless behind
	 * --queue-bypass, for the next start. */
	ev_io_init(&d->q_io, queue_cb, synq_fd(d->q), EV_READ);
	d->q_io.data = d;
	ev_io_start(d->loop, &d->q_io);
	if ((ctl_fd = sock_listen_unix_mkdir("control socket", d->conf.control_socket, 0660, err,
	    sizeof(err))) == -1)
		fatalx("%s", err);
	if ((d->ctl = ctlsrv_start(d->loop, ctl_fd, cstats_handle, d)) == NULL)
		fatalx("out of memory");
	if (d->conf.metrics_listen.addr.family) {
		if ((metrics_fd = sock_listen_tcp(&d->conf.metrics_listen, 16)) == -1) {
			int e = errno;
			(void)unlink(d->conf.control_socket);
			fatalx("metrics listener %s: %s", ep_fmt(&d->conf.metrics_listen, mb),
			    strerror(e));
		}
		if ((d->metrics = ctlsrv_start_http(d->loop, metrics_fd, cstats_handle, d)) == NULL)
			fatalx("out of memory");
	}
	if (hold_init(d, err, sizeof(err)) == -1)
		fatalx("%s", err);
	/* libslot and slotctl run: the socket, and the cgroup the rules name. */
	if (d->conf.lib_socket[0]) {
		int lib_fd = sock_listen_unix_mkdir("lib socket", d->conf.lib_socket,
		    d->conf.lib_socket_mode, err, sizeof(err));
		if (lib_fd == -1) {
			(void)unlink(d->conf.control_socket);
			fatalx("%s", err);
		}
		libsrv_cgroup_open(d);
		if (libsrv_start(d, lib_fd) == -1)
			fatalx("out of memory");
	}
	/* Before the rules: they queue the relays' SYN-ACKs only with it.
	 * Opened whatever synack_hold says, so that a reload may turn it on. */
	if ((d->ct = conntrack_open(err, sizeof(err))) == NULL)
		log_warnx("synack_hold unavailable, connections wait for PIPE_OK at their "
		    "SYN: %s", err);
	/* The raw socket needs CAP_NET_RAW, which slotd does not keep. */
	if ((d->synp = synp_open(d->loop, d->conf.bypass_mark, err, sizeof(err))) == NULL)
		log_warnx("direct probes by TCP connect, reset before their last ACK (a "
		    "lost SYN-ACK may let a server's application see one): %s (needs "
		    "CAP_NET_RAW)", err);
	/* Static relays and the directory's last listing (the cache file):
	 * the directory itself is asked later, off the loop. */
	if (dirsync_init(d, err, sizeof(err)) == -1) {
		(void)unlink(d->conf.control_socket);
		fatalx("%s", err);
	}
	if (dirsync_apply(d, &d->conf, err, sizeof(err)) == -1) {
		(void)unlink(d->conf.control_socket);
		fatalx("installing the rules: %s", err);
	}
	/* From here rule sets go off the loop. */
	if ((d->rsync = rsync_new(d->loop, relays_rules_done, d)) == NULL ||
	    rsync_set_exec(d->rsync, &d->rules_exec) == -1)
		fatalx("out of memory");
	rsync_mark_installed(d->rsync, d->rules_gen);
	/* Connected before the drop: the manager's socket may be root's. */
	if (notify_init(&notify, err, sizeof(err)) == -1)
		log_warnx("%s; not telling the service manager", err);
	if (drop_privileges(d, uid, gid, legacy, err, sizeof(err)) == -1) {
		(void)rules_remove(AF_UNSPEC, &d->rules_exec, err2, sizeof(err2));
		(void)unlink(d->conf.control_socket);
		fatalx("%s", err);
	}
	/* After the capabilities are dropped: the thread inherits the rest. */
	if (dirsync_start(d, err, sizeof(err)) == -1) {
		(void)rules_remove(AF_UNSPEC, &d->rules_exec, err, sizeof(err));
		(void)unlink(d->conf.control_socket);
		fatalx("%s", err);
	}

	rank_start(d);
	daemon_signals(d->loop, d->sig, signal_cb, d);

	if (d->auth_mode == IDENT_MODE_IDENTITY)
		log_info("identity '%s', certificate serial %016llx, [auth] mode identity",
		    d->id.cert.name, (unsigned long long)d->id.cert.serial);
	else
		log_warnx("[auth] mode shared: any holder of the shared key can speak as "
		    "any host (a lab setting)");
	log_info("slotd %s: NFQUEUE %u, %zu relays, strategy %s k=%u, counters %s",
	    SLOT_VERSION, d->conf.queue, d->nrelays, sel_strategy_name(d->conf.sel.strategy),
	    d->conf.sel.k, d->conf.control_socket);
	if (d->metrics)
		log_info("metrics on http://%s/metrics", ep_fmt(&d->conf.metrics_listen, mb));

	/* The rules are in, the queue bound, the control socket listening. */
	if (notify_send(&notify, "READY=1\nSTATUS=hijacking") == -1)
		log_warn("telling the service manager READY=1");
	notify_watchdog_start(&notify, d->loop);

	ev_run(d->loop, 0);

	(void)notify_send(&notify, "STOPPING=1");

	/* Rules first: from here new SYNs go direct, without us. A restore
	 * still running is stopped: the removal supersedes it. */
	rsync_free(d->rsync);
	d->rsync = NULL;
	if (rules_remove(AF_UNSPEC, &d->rules_exec, err, sizeof(err)) == -1)
		log_warnx("removing the rules: %s", err);
	rank_stop(d);
	dirsync_stop(d);
	hold_fini(d);
	conntrack_close(d->ct);
	d->ct = NULL;
	synp_close(d->synp);
	d->synp = NULL;
	synq_close(d->q);
	d->q = NULL;
	relays_free(d);
	ctlsrv_stop(d->ctl);
	ctlsrv_stop(d->metrics);
	libsrv_stop(d);
	(void)unlink(d->conf.control_socket);
	if (d->conf.lib_socket[0])
		(void)unlink(d->conf.lib_socket);
	log_info("exiting: %llu SYNs, %llu via relays, %llu direct",
	    d->ctr.syn_received, d->ctr.decisions_relay, d->ctr.decisions_direct);
	selc_free(d->cache);
	replay_free(d->replay);
	auth_key_wipe(&d->key);
	ident_wipe(&d->id);
	ident_revoked_free(&d->revoked);
	cconf_free(&d->conf);
	notify_fini(&notify);
	ev_loop_destroy(d->loop);
	return 0;
}
