/*
 * The snapshot's text format and its atomic file (see dsnap.h). A file that
 * fails any check is refused whole: a half-restored directory would serve a
 * listing nobody built.
 */

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "slot/ctlout.h"
#include "slot/dirproto.h"
#include "slot/errbuf.h"
#include "dsnap.h"

#define DSNAP_MAGIC "slot-dird-state 1"

/* The text goes into a ctl_out buffer, not through fprintf per line: the
 * format runs under the daemon's lock. With it and dstate_rtt_row, a full
 * mesh of 2,600 relays holds the lock 0.2 s, where it held it 2 s. */

static size_t
dec_len(uint64_t v)
{
	size_t n = 1;

	while (v >= 10) {
		v /= 10;
		n++;
	}
	return n;
}

static void
put_dec(struct ctl_out *b, uint64_t v)
{
	char t[20];
	size_t n = dec_len(v);

	for (size_t i = n; i > 0; i--) {
		t[i - 1] = (char)('0' + v % 10);
		v /= 10;
	}
	ctl_append(b, t, n);
}

/* "rtt <from> <to> <rtt_us>\n" */
#define RTT_LINE_LEN(from, to, digits) (4 + (from) + 1 + (to) + 1 + (digits) + 1)
/* The longest "end <relays> <rtts>\n". */
#define END_LINE_MAX (4 + 20 + 1 + 20 + 1)

/* How many reports each relay keeps so that its rtt lines fit in budget:
 * the largest k for which every relay's min(nrtt, k) lines, each at its
 * longest (the longest peer name, 10 digits), fit. */
static size_t
rtt_keep(const size_t *nrtt, const size_t *nlen, size_t n, size_t maxlen, size_t budget)
{
	size_t lo = 0, hi = 0;

	for (size_t i = 0; i < n; i++)
		if (nrtt[i] > hi)
			hi = nrtt[i];
	while (lo < hi) {
		size_t k = lo + (hi - lo + 1) / 2;
		uint64_t bytes = 0;

		for (size_t i = 0; i < n && bytes <= budget; i++)
			bytes += (uint64_t)(nrtt[i] < k ? nrtt[i] : k) *
			    RTT_LINE_LEN(nlen[i], maxlen, 10);
		if (bytes <= budget)
			lo = k;
		else
			hi = k - 1;
	}
	return lo;
}

/* Of m RTTs (m > k), the k-th lowest (*t), and how many of those equal to
 * it are among the k lowest (*eq): the least t with at least k RTTs <= t,
 * found by bisecting the value range (at most 32 passes, whatever the
 * input). */
static void
rtt_cut(const uint32_t *rtt, size_t m, size_t k, uint32_t *t, size_t *eq)
{
	uint32_t lo = 0, hi = 0;
	size_t below = 0;

	for (size_t j = 0; j < m; j++)
		if (rtt[j] > hi)
			hi = rtt[j];
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		size_t c = 0;

		for (size_t j = 0; j < m; j++)
			c += rtt[j] <= mid;
		if (c >= k)
			hi = mid;
		else
			lo = mid + 1;
	}
	for (size_t j = 0; j < m; j++)
		below += rtt[j] < lo;
	*t = lo;
	*eq = k - below;
}

int
dsnap_format(const struct dstate *s, uint64_t now_mono, uint64_t now_wall, bool clean,
    size_t rtt_budget, char **buf, size_t *len, struct dsnap_stats *st)
{
	size_t n = dstate_count(s), nrtt_all = 0, nrtt = 0, maxlen = 0, maxnrtt = 0;
	size_t keep = SIZE_MAX, *nlen = NULL, *cnt = NULL, *peer = NULL;
	uint32_t *rtt = NULL;
	uint64_t full = 0;
	struct ctl_out b = { 0 };
	char head[160], cert[2 * IDENT_CERT_LEN + 2];
	int hlen, e = ENOMEM;

	*buf = NULL;
	*len = 0;
	if ((nlen = malloc((n ? n : 1) * sizeof(*nlen))) == NULL ||
	    (cnt = malloc((n ? n : 1) * sizeof(*cnt))) == NULL)
		goto fail;
	hlen = snprintf(head, sizeof(head), DSNAP_MAGIC "\nboot %016" PRIx64 "\ncounter %"
	    PRIu64 "\nclean %d\nsaved %" PRIu64 "\n", dstate_boot(s), dstate_counter(s),
	    clean ? 1 : 0, now_wall);
	ctl_append(&b, head, (size_t)hlen);
	for (size_t i = 0; i < n; i++) {
		struct dstate_relay_view v;
		dstate_relay_at(s, i, &v);
		uint64_t age = now_mono > v.last_seen ? now_mono - v.last_seen : 0;
		uint64_t seen = now_wall > age ? now_wall - age : 0;

		nlen[i] = strlen(v.relay);
		cnt[i] = v.nrtt;
		maxlen = nlen[i] > maxlen ? nlen[i] : maxlen;
		maxnrtt = v.nrtt > maxnrtt ? v.nrtt : maxnrtt;
		nrtt_all += v.nrtt;
		ctl_append(&b, "relay ", 6);
		ctl_append(&b, v.relay, nlen[i]);
		ctl_append(&b, " ", 1);
		put_dec(&b, v.data_port);
		ctl_append(&b, " ", 1);
		put_dec(&b, v.group);
		ctl_append(&b, " ", 1);
		put_dec(&b, seen);
		if (v.cert != NULL) {
			cert[0] = ' ';
			for (size_t k = 0; k < IDENT_CERT_LEN; k++)
				snprintf(cert + 1 + 2 * k, 3, "%02x", v.cert->raw[k]);
			ctl_append(&b, cert, 1 + 2 * IDENT_CERT_LEN);
		}
		ctl_append(&b, "\n", 1);
	}
	if (b.oom || (peer = malloc((maxnrtt ? maxnrtt : 1) * sizeof(*peer))) == NULL ||
	    (rtt = malloc((maxnrtt ? maxnrtt : 1) * sizeof(*rtt))) == NULL)
		goto fail;
	/* What the reader takes bounds the rtt lines too, whatever the
	 * caller's budget. */
	if (b.len + END_LINE_MAX > DSNAP_MAX_BYTES) {
		e = EFBIG;
		goto fail;
	}
	if (rtt_budget > DSNAP_MAX_BYTES - b.len - END_LINE_MAX)
		rtt_budget = DSNAP_MAX_BYTES - b.len - END_LINE_MAX;
	for (size_t i = 0; i < n && full <= rtt_budget; i++) {
		dstate_rtt_row(s, i, peer, rtt);
		for (size_t j = 0; j < cnt[i]; j++)
			full += RTT_LINE_LEN(nlen[i], nlen[peer[j]], dec_len(rtt[j]));
	}
	if (full > rtt_budget)
		keep = rtt_keep(cnt, nlen, n, maxlen, rtt_budget);
	for (size_t i = 0; i < n && !b.oom; i++) {
		struct dstate_relay_view v, pv;
		uint32_t t = UINT32_MAX;
		size_t eq = SIZE_MAX;

		dstate_relay_at(s, i, &v);
		dstate_rtt_row(s, i, peer, rtt);
		if (v.nrtt > keep)
			rtt_cut(rtt, v.nrtt, keep, &t, &eq);
		for (size_t j = 0; j < v.nrtt; j++) {
			if (rtt[j] > t || (rtt[j] == t && eq == 0))
				continue;
			if (rtt[j] == t)
				eq--;
			dstate_relay_at(s, peer[j], &pv);
			ctl_append(&b, "rtt ", 4);
			ctl_append(&b, v.relay, nlen[i]);
			ctl_append(&b, " ", 1);
			ctl_append(&b, pv.relay, nlen[peer[j]]);
			ctl_append(&b, " ", 1);
			put_dec(&b, rtt[j]);
			ctl_append(&b, "\n", 1);
			nrtt++;
		}
	}
	hlen = snprintf(head, sizeof(head), "end %zu %zu\n", n, nrtt);
	ctl_append(&b, head, (size_t)hlen);
	if (b.oom)
		goto fail;
	free(nlen);
	free(cnt);
	free(peer);
	free(rtt);
	*buf = b.buf;
	*len = b.len;
	if (st != NULL)
		*st = (struct dsnap_stats){ n, nrtt, nrtt_all - nrtt };
	return 0;
fail:
	free(nlen);
	free(cnt);
	free(peer);
	free(rtt);
	free(b.buf);
	errno = e;
	return -1;
}

/* Splits line (modified) at single spaces into at most max fields. Returns
 * the count, or -1 on empty fields or too many. */
static int
split(char *line, char **f, int max)
{
	int n = 0;

	for (char *p = line;;) {
		char *sp = strchr(p, ' ');
		if (n == max || *p == '\0' || p == sp)
			return -1;
		f[n++] = p;
		if (sp == NULL)
			return n;
		*sp = '\0';
		p = sp + 1;
	}
}

struct loader {
	struct dstate *s;
	const struct dstate_params *p;
	uint64_t now_mono, now_wall;
	struct endpoint *dropped;	/* relays too old to restore */
	size_t ndropped, capdropped;
	struct endpoint from;		/* the batch of rtt lines being gathered */
	bool from_dropped;
	struct dstate_rtt_in *batch;
	size_t nbatch, capbatch;
	size_t rtt_lines;
};

static bool
was_dropped(const struct loader *l, const struct endpoint *ep)
{
	for (size_t i = 0; i < l->ndropped; i++)
		if (ep_eq(&l->dropped[i], ep))
			return true;
	return false;
}

static int
flush_batch(struct loader *l, char *err, size_t errlen)
{
	size_t acc;

	if (l->nbatch == 0)
		return 0;
	if (!l->from_dropped) {
		enum dstate_rc rc = dstate_report(l->s, &l->from, l->batch, l->nbatch, &acc);
		if (rc != DSTATE_OK) {
			errbuf_set(err, errlen, "%s", rc == DSTATE_NOMEM ?
			    "out of memory" : "rtt line before its relay line");
			return -1;
		}
	}
	l->nbatch = 0;
	return 0;
}

static int
relay_line(struct loader *l, char **f, int nf, char *err, size_t errlen)
{
	struct endpoint ep;
	uint64_t port, group, seen;
	uint8_t cert[IDENT_CERT_LEN];

	if (nf == 6 && dirp_unhex(f[5], cert, sizeof(cert)) == -1) {
		errbuf_set(err, errlen, "bad certificate in relay line");
		return -1;
	}
	if ((nf != 5 && nf != 6) || ep_parse(f[1], 0, &ep) == -1 || dirp_dec64(f[2], 65535, &port) == -1 ||
	    port == 0 || dirp_dec64(f[3], UINT32_MAX, &group) == -1 ||
	    dirp_dec64(f[4], UINT64_MAX, &seen) == -1) {
		errbuf_set(err, errlen, "bad relay line");
		return -1;
	}
	if (dstate_has(l->s, &ep) || was_dropped(l, &ep)) {
		errbuf_set(err, errlen, "relay %s listed twice", f[1]);
		return -1;
	}
	uint64_t age = l->now_wall > seen ? l->now_wall - seen : 0;
	if (age > l->p->expire_after_us) {
		if (l->ndropped == l->capdropped) {
			size_t cap = l->capdropped ? 2 * l->capdropped : 16;
			struct endpoint *d = realloc(l->dropped, cap * sizeof(*d));
			if (d == NULL)
				goto oom;
			l->dropped = d;
			l->capdropped = cap;
		}
		l->dropped[l->ndropped++] = ep;
		return 0;
	}
	/* On a host up for less than age, the monotonic clock cannot go back
	 * that far; such a relay just lives a little longer. */
	uint64_t last = l->now_mono > age ? l->now_mono - age : 0;
	enum dstate_rc rc = dstate_restore_relay(l->s, &ep, (uint16_t)port, (uint32_t)group, last);
	if (rc == DSTATE_OK && nf == 6 && dstate_set_cert(l->s, &ep, cert) != DSTATE_OK) {
		errbuf_set(err, errlen, "relay %s: not a certificate", f[1]);
		return -1;
	}
	if (rc == DSTATE_OK)
		return 0;
oom:
	errbuf_set(err, errlen, "out of memory");
	return -1;
}

static int
rtt_line(struct loader *l, char **f, int nf, char *err, size_t errlen)
{
	struct endpoint from, to;
	uint64_t rtt;

	if (nf != 4 || ep_parse(f[1], 0, &from) == -1 || ep_parse(f[2], 0, &to) == -1 ||
	    dirp_dec64(f[3], INT32_MAX, &rtt) == -1) {
		errbuf_set(err, errlen, "bad rtt line");
		return -1;
	}
	bool from_dropped = was_dropped(l, &from), to_dropped = was_dropped(l, &to);
	if ((!from_dropped && !dstate_has(l->s, &from)) ||
	    (!to_dropped && !dstate_has(l->s, &to))) {
		errbuf_set(err, errlen, "rtt line names a relay not listed");
		return -1;
	}
	l->rtt_lines++;
	if (l->nbatch > 0 && !ep_eq(&l->from, &from) && flush_batch(l, err, errlen) == -1)
		return -1;
	l->from = from;
	l->from_dropped = from_dropped;
	if (to_dropped)
		return 0;
	if (l->nbatch == l->capbatch) {
		size_t cap = l->capbatch ? 2 * l->capbatch : 64;
		struct dstate_rtt_in *b = realloc(l->batch, cap * sizeof(*b));
		if (b == NULL) {
			errbuf_set(err, errlen, "out of memory");
			return -1;
		}
		l->batch = b;
		l->capbatch = cap;
	}
	l->batch[l->nbatch].peer = to;
	l->batch[l->nbatch].rtt_us = (uint32_t)rtt;
	l->nbatch++;
	return 0;
}

struct dstate *
dsnap_parse(const char *text, size_t len, const struct dstate_params *p, uint64_t now_mono,
    uint64_t now_wall, uint64_t fresh_boot, struct dsnap_info *info, char *err, size_t errlen)
{
	static const char *const head[] = { "boot", "counter", "clean", "saved" };
	struct loader l = { .p = p, .now_mono = now_mono, .now_wall = now_wall };
	uint64_t boot = 0, counter = 0, clean = 0, saved = 0, nrel = 0, nrtt = 0;
	size_t lineno = 0, relay_lines = 0, pos = 0;
	bool ended = false;
	char *copy = NULL, sub[160] = "";

	memset(info, 0, sizeof(*info));
	if (memchr(text, '\0', len) != NULL) {
		errbuf_set(err, errlen, "NUL byte in the file");
		return NULL;
	}
	if ((copy = malloc(len + 1)) == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return NULL;
	}
	memcpy(copy, text, len);
	copy[len] = '\0';

	while (pos < len) {
		char *line = copy + pos, *nl = strchr(line, '\n'), *f[7];
		int nf;

		lineno++;
		if (nl == NULL) {
			snprintf(sub, sizeof(sub), "last line cut short");
			goto bad;
		}
		*nl = '\0';
		pos = (size_t)(nl - copy) + 1;
		if (ended) {
			snprintf(sub, sizeof(sub), "text after the end line");
			goto bad;
		}
		if (lineno == 1) {
			if (strcmp(line, DSNAP_MAGIC) != 0) {
				snprintf(sub, sizeof(sub), "not a slot-dird state file "
				    "(expected \"" DSNAP_MAGIC "\")");
				goto bad;
			}
			continue;
		}
		if ((nf = split(line, f, 7)) < 0) {
			snprintf(sub, sizeof(sub), "malformed line");
			goto bad;
		}
		if (lineno <= 5) {
			/* The header, in its fixed order. */
			if (nf != 2 || strcmp(f[0], head[lineno - 2]) != 0) {
				snprintf(sub, sizeof(sub), "expected \"%s\"", head[lineno - 2]);
				goto bad;
			}
			int rc = lineno == 2 ? dirp_hex64(f[1], &boot) :
			    lineno == 3 ? dirp_dec64(f[1], UINT64_MAX, &counter) :
			    lineno == 4 ? dirp_dec64(f[1], 1, &clean) :
			    dirp_dec64(f[1], UINT64_MAX, &saved);
			if (rc == -1) {
				snprintf(sub, sizeof(sub), "bad %s value", f[0]);
				goto bad;
			}
			if (lineno == 5) {
				struct dstate_params q = *p;
				/* Restoring never refuses relays the file holds. */
				q.max_relays = SIZE_MAX;
				if ((l.s = dstate_new(&q, clean ? boot : fresh_boot)) == NULL) {
					snprintf(sub, sizeof(sub), "out of memory");
					goto bad;
				}
			}
			continue;
		}
		if (strcmp(f[0], "relay") == 0) {
			if (l.rtt_lines > 0) {
				snprintf(sub, sizeof(sub), "relay line after rtt lines");
				goto bad;
			}
			if (relay_line(&l, f, nf, sub, sizeof(sub)) == -1)
				goto bad;
			relay_lines++;
		} else if (strcmp(f[0], "rtt") == 0) {
			if (rtt_line(&l, f, nf, sub, sizeof(sub)) == -1)
				goto bad;
		} else if (strcmp(f[0], "end") == 0) {
			if (nf != 3 || dirp_dec64(f[1], UINT64_MAX, &nrel) == -1 ||
			    dirp_dec64(f[2], UINT64_MAX, &nrtt) == -1) {
				snprintf(sub, sizeof(sub), "bad end line");
				goto bad;
			}
			if (nrel != relay_lines || nrtt != l.rtt_lines) {
				snprintf(sub, sizeof(sub), "end line counts %" PRIu64 " relays and "
				    "%" PRIu64 " rtts, the file holds %zu and %zu", nrel, nrtt,
				    relay_lines, l.rtt_lines);
				goto bad;
			}
			if (flush_batch(&l, sub, sizeof(sub)) == -1)
				goto bad;
			ended = true;
		} else {
			snprintf(sub, sizeof(sub), "unknown record \"%s\"", f[0]);
			goto bad;
		}
	}
	if (!ended) {
		lineno++;
		snprintf(sub, sizeof(sub), "no end line (file cut short)");
		goto bad;
	}
	free(copy);
	free(l.dropped);
	free(l.batch);
	dstate_set_params(l.s, p);
	dstate_restore_counter(l.s, counter);
	if (l.ndropped > 0)
		dstate_bump(l.s);
	info->relays = dstate_count(l.s);
	info->dropped = l.ndropped;
	/* Counted in the state: a pair given twice (an edited file) is one
	 * entry, the later, not two. */
	for (size_t i = 0; i < info->relays; i++) {
		struct dstate_relay_view v;
		dstate_relay_at(l.s, i, &v);
		info->rtts += v.nrtt;
	}
	info->clean = clean != 0;
	return l.s;
bad:
	errbuf_set(err, errlen, "line %zu: %s", lineno, sub);
	free(copy);
	free(l.dropped);
	free(l.batch);
	dstate_free(l.s);
	return NULL;
}

int
dsnap_write_file(const char *path, const char *buf, size_t len, char *err, size_t errlen)
{
	char tmp[512], dir[512];
	int fd = -1, dfd;
	size_t off = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		errbuf_set(err, errlen, "%s: path too long", path);
		return -1;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) == -1) {
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
		return -1;
	}
	while (off < len) {
		ssize_t w = write(fd, buf + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			errbuf_set(err, errlen, "%s: %s", tmp, w < 0 ? strerror(errno) : "short write");
			goto fail;
		}
		off += (size_t)w;
	}
	/* The data must be on disk before the name points at it. */
	if (fsync(fd) == -1) {
		errbuf_set(err, errlen, "%s: fsync: %s", tmp, strerror(errno));
		goto fail;
	}
	if (close(fd) == -1) {
		fd = -1;
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
		goto fail;
	}
	fd = -1;
	if (rename(tmp, path) == -1) {
		errbuf_set(err, errlen, "rename %s: %s", tmp, strerror(errno));
		goto fail;
	}
	/* And the rename itself survives a crash once the directory is synced. */
	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash == NULL)
		snprintf(dir, sizeof(dir), ".");
	else if (slash == dir)
		dir[1] = '\0';
	else
		*slash = '\0';
	if ((dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		(void)fsync(dfd);
		close(dfd);
	}
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	(void)unlink(tmp);
	return -1;
}

int
dsnap_read_file(const char *path, char **buf, size_t *len, char *err, size_t errlen)
{
	struct stat st;
	char *b = NULL;
	size_t off = 0;
	int fd, e;

	*buf = NULL;
	*len = 0;
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1) {
		e = errno;
		errbuf_set(err, errlen, "%s: %s", path, strerror(e));
		errno = e;
		return -1;
	}
	if (fstat(fd, &st) == -1) {
		e = errno;
		errbuf_set(err, errlen, "%s: %s", path, strerror(e));
		close(fd);
		errno = e;
		return -1;
	}
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > DSNAP_MAX_BYTES) {
		errbuf_set(err, errlen, "%s: %s", path, !S_ISREG(st.st_mode) ?
		    "not a regular file" : "larger than 256 MiB");
		close(fd);
		errno = EINVAL;
		return -1;
	}
	if ((b = malloc((size_t)st.st_size + 1)) == NULL) {
		errbuf_set(err, errlen, "%s: out of memory", path);
		close(fd);
		errno = ENOMEM;
		return -1;
	}
	while (off < (size_t)st.st_size) {
		ssize_t r = read(fd, b + off, (size_t)st.st_size - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			e = errno;
			errbuf_set(err, errlen, "%s: %s", path, strerror(e));
			free(b);
			close(fd);
			errno = e;
			return -1;
		}
		if (r == 0)
			break;	/* shrank meanwhile: what we have */
		off += (size_t)r;
	}
	close(fd);
	b[off] = '\0';
	*buf = b;
	*len = off;
	return 0;
}
