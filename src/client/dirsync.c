#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "slot/dirproto.h"
#include "slot/errbuf.h"
#include "slot/log.h"
#include "dirsync.h"
#include "rank.h"
#include "relays.h"

static void slotd_revoked(struct slotd *d, const struct ident_revoked *rev);

#define CACHE_MAGIC "slot-relays"
#define CACHE_FORMAT 1
#define CACHE_MAX_RELAYS 100000	/* as many as a listing may hold */
#define CACHE_LINE_MAX 128

struct dirsync {
	/* Set before the worker starts; read-only afterwards. */
	struct conf_urls urls;
	uint64_t refresh_ms, retry_ms;
	char cache_file[CCONF_PATH_MAX];
	struct dirclient *dc;		/* the worker's */
	char start_version[DIRC_VERSION_MAX];
	bool ident_mode;		/* answers must be signed (identity mode) */
	struct ev_loop *loop;
	ev_async wake;
	pthread_t thread;
	bool started;

	pthread_mutex_t mu;
	pthread_cond_t cond;		/* CLOCK_MONOTONIC */
	/* Under mu. */
	bool stop;
	bool forget;			/* the last listing failed to apply: fetch it whole */
	bool key_changed;
	struct auth_key key;
	bool ident_changed;
	struct ident id;
	struct ident_revoked pending_rev;	/* a new revocation list for the loop */
	bool has_pending_rev;
	struct dirc_relay *pending;	/* a new listing for the loop */
	size_t npending;
	struct dirc_landmarks pending_land;
	bool has_pending;
	char pending_version[DIRC_VERSION_MAX];
	unsigned long long fetches_ok, fetches_unchanged, fetches_failed, fetches_refused;
	char url[CONF_URL_LEN];

	/* The loop's. */
	struct dirc_relay *cur;		/* the listing in force */
	size_t ncur;
	struct dirc_landmarks cur_land;	/* its landmarks (nland 0: none) */
	char cur_version[DIRC_VERSION_MAX];
	struct ident_revoked rev;	/* the directory's revocation list in force */
	size_t in_set;
	size_t warned_dropped;
	bool cache_loaded;
};

/* ---------------------------------------------------------------- merge */

struct cand {
	const struct endpoint *ep;
	size_t order;
};

static int
cand_cmp(const void *x, const void *y)
{
	const struct cand *a = x, *b = y;
	int c = ep_cmp(a->ep, b->ep);

	if (c != 0)
		return c;
	return a->order < b->order ? -1 : a->order > b->order;
}

int
dirsync_merge(const struct cconf_relay *st, size_t nst, const struct dirc_relay *dr,
    size_t ndr, size_t max, struct cconf_relay **out, size_t *n, size_t *dropped)
{
	size_t total = nst + ndr, k = 0;
	struct cand *c = calloc(total ? total : 1, sizeof(*c));
	bool *dup = calloc(total ? total : 1, sizeof(*dup));
	struct cconf_relay *m = calloc(max ? max : 1, sizeof(*m));

	*out = NULL;
	*n = *dropped = 0;
	if (c == NULL || dup == NULL || m == NULL) {
		free(c);
		free(dup);
		free(m);
		return -1;
	}
	/* Sorted by endpoint, then by position: the first of equal endpoints
	 * wins, so a static relay hides the directory's. */
	for (size_t i = 0; i < total; i++) {
		c[i].ep = i < nst ? &st[i].control : &dr[i - nst].relay;
		c[i].order = i;
	}
	qsort(c, total, sizeof(*c), cand_cmp);
	for (size_t i = 1; i < total; i++)
		if (ep_cmp(c[i].ep, c[i - 1].ep) == 0)
			dup[c[i].order] = true;
	for (size_t i = 0; i < total; i++) {
		if (dup[i])
			continue;
		if (k == max) {
			(*dropped)++;
			continue;
		}
		if (i < nst) {
			m[k++] = st[i];
		} else {
			const struct dirc_relay *x = &dr[i - nst];
			m[k++] = (struct cconf_relay){ .control = x->relay, .data_port = x->data_port,
			    .group = CCONF_DIR_GROUP | (x->group & CCONF_GROUP_MAX) };
		}
	}
	free(c);
	free(dup);
	if (k == 0) {
		free(m);
		m = NULL;
	}
	*out = m;
	*n = k;
	return 0;
}

/* ---------------------------------------------------------------- cache file */

/* The directory's version is opaque: we store it if it is one word. */
static bool
version_ok(const char *v)
{
	size_t len = strlen(v);

	if (len == 0 || len >= DIRC_VERSION_MAX)
		return false;
	for (; *v; v++)
		if (*v <= ' ' || *v >= 0x7f)
			return false;
	return true;
}

/* Makes the directories above path (0755) where missing. */
static int
make_parents(const char *path, char *err, size_t errlen)
{
	char dir[CCONF_PATH_MAX];
	size_t len = strlen(path);

	if (len >= sizeof(dir)) {
		errbuf_set(err, errlen, "%s: path too long", path);
		return -1;
	}
	memcpy(dir, path, len + 1);
	for (char *p = strchr(dir + 1, '/'); p != NULL; p = strchr(p + 1, '/')) {
		*p = '\0';
		if (mkdir(dir, 0755) == -1 && errno != EEXIST) {
			errbuf_set(err, errlen, "creating %s: %s", dir, strerror(errno));
			return -1;
		}
		*p = '/';
	}
	return 0;
}

static int
write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, buf, len);
		if (w == -1 && errno == EINTR)
			continue;
		if (w == -1)
			return -1;
		buf += w;
		len -= (size_t)w;
	}
	return 0;
}

/* A new file where whatever was at tmp is removed first: the directory is
 * group-writable, and a FIFO planted there would block the open (and the
 * worker, and the stop that joins it) for good; a symlink would fail it at
 * every listing. */
static int
open_tmp(const char *tmp, char *err, size_t errlen)
{
	int fd;

	if (unlink(tmp) == -1 && errno != ENOENT) {
		errbuf_set(err, errlen, "removing %s: %s", tmp, strerror(errno));
		return -1;
	}
	if ((fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644)) == -1)
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
	return fd;
}

int
dirsync_cache_write(const char *path, const char *version, const struct dirc_relay *r,
    size_t n, char *err, size_t errlen)
{
	char tmp[CCONF_PATH_MAX + 8], ep[EP_STRLEN];
	size_t cap = 64 + DIRC_VERSION_MAX + n * (EP_STRLEN + 24), len;
	char *buf;
	int fd;

	if (!version_ok(version)) {
		errbuf_set(err, errlen, "%s: version \"%.63s\" is not one word", path, version);
		return -1;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		errbuf_set(err, errlen, "%s: path too long", path);
		return -1;
	}
	if ((buf = malloc(cap)) == NULL) {
		errbuf_set(err, errlen, "%s: out of memory", path);
		return -1;
	}
	len = (size_t)snprintf(buf, cap, "%s %d %s\n", CACHE_MAGIC, CACHE_FORMAT, version);
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(buf + len, cap - len, "%s %u %u\n",
		    ep_fmt(&r[i].relay, ep), r[i].data_port, r[i].group);
	if (make_parents(path, err, errlen) == -1) {
		free(buf);
		return -1;
	}
	if ((fd = open_tmp(tmp, err, errlen)) == -1) {
		free(buf);
		return -1;
	}
	/* Readable by anyone whatever the umask: it holds only public facts. */
	if (fchmod(fd, 0644) == -1 || write_all(fd, buf, len) == -1 || fsync(fd) == -1) {
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
		close(fd);
		(void)unlink(tmp);
		free(buf);
		return -1;
	}
	free(buf);
	if (close(fd) == -1 || rename(tmp, path) == -1) {
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
		(void)unlink(tmp);
		return -1;
	}
	/* The rename itself survives a crash once the directory is synced. */
	char dir[CCONF_PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (slash != NULL && (size_t)(slash - path) < sizeof(dir)) {
		size_t dl = slash == path ? 1 : (size_t)(slash - path);
		memcpy(dir, path, dl);
		dir[dl] = '\0';
		int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dfd != -1) {
			(void)fsync(dfd);
			close(dfd);
		}
	}
	return 0;
}

/* Identity mode: the cache keeps what the directory signed, so that it is
 * checked again at start: "slot-relays 2", "cert <hex>", "sig <hex>",
 * "text <length>", then the canonical text (dirp_list_text). Written as
 * dirsync_cache_write does. */
static int
dirsync_cache_write_signed(const char *path, const struct dirc_listing *l, char *err,
    size_t errlen)
{
	char tmp[CCONF_PATH_MAX + 8], cert[DIRP_CERT_HEX + 1], sig[DIRP_SIG_HEX + 1];
	char head[64 + DIRP_CERT_HEX + DIRP_SIG_HEX];
	int fd, hl;

	if (!l->is_signed || l->text == NULL) {
		errbuf_set(err, errlen, "%s: the listing is not signed", path);
		return -1;
	}
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp)) {
		errbuf_set(err, errlen, "%s: path too long", path);
		return -1;
	}
	sodium_bin2hex(cert, sizeof(cert), l->dir.raw, IDENT_CERT_LEN);
	sodium_bin2hex(sig, sizeof(sig), l->sig, IDENT_SIG_LEN);
	hl = snprintf(head, sizeof(head), "%s 2\ncert %s\nsig %s\ntext %zu\n", CACHE_MAGIC,
	    cert, sig, l->text_len);
	if (make_parents(path, err, errlen) == -1)
		return -1;
	if ((fd = open_tmp(tmp, err, errlen)) == -1)
		return -1;
	if (fchmod(fd, 0644) == -1 || write_all(fd, head, (size_t)hl) == -1 ||
	    write_all(fd, l->text, l->text_len) == -1 || fsync(fd) == -1) {
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
		close(fd);
		(void)unlink(tmp);
		return -1;
	}
	if (close(fd) == -1 || rename(tmp, path) == -1) {
		errbuf_set(err, errlen, "%s: %s", tmp, strerror(errno));
		(void)unlink(tmp);
		return -1;
	}
	return 0;
}

/* The largest cache file of either form we read. A signed one is the text
 * of one directory answer (sent base64, so shorter than the DIRC_MAX_ANSWER
 * the answer may take) behind a header of a few hundred bytes; the unsigned
 * form is at most CACHE_MAX_RELAYS lines of CACHE_LINE_MAX (12.8 MB). */
#define CACHE_FILE_MAX ((size_t)DIRC_MAX_ANSWER + 4096)

static const char *
file_kind(mode_t m)
{
	return S_ISDIR(m) ? "a directory" : S_ISFIFO(m) ? "a FIFO" : S_ISCHR(m) ?
	    "a character device" : S_ISBLK(m) ? "a block device" : S_ISSOCK(m) ? "a socket" :
	    "not a regular file";
}

int
dirsync_cache_load(const char *path, char **out, size_t *outlen, char *err, size_t errlen)
{
	const char *why = NULL;
	struct stat st;
	size_t size, len = 0;
	char *buf, extra;
	int fd;

	*out = NULL;
	*outlen = 0;
	/* slotd reads it as root, from a directory group slot may write: no
	 * symlink (to /dev/zero, or to a file slot may not read), and
	 * O_NONBLOCK so that a FIFO is refused below instead of blocking the
	 * start for good. */
	if ((fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC)) == -1) {
		if (errno == ENOENT)
			return 1;
		if (errno == ELOOP && lstat(path, &st) == 0 && S_ISLNK(st.st_mode))
			errbuf_set(err, errlen, "%s: a symbolic link, not followed (the cache "
			    "file must be a regular file)", path);
		else
			errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) == -1) {
		errbuf_set(err, errlen, "%s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		errbuf_set(err, errlen, "%s: %s, not read (the cache file must be a regular "
		    "file)", path, file_kind(st.st_mode));
		close(fd);
		return -1;
	}
	if ((uint64_t)st.st_size > CACHE_FILE_MAX) {
		errbuf_set(err, errlen, "%s: too large (%llu bytes, at most %zu)", path,
		    (unsigned long long)st.st_size, CACHE_FILE_MAX);
		close(fd);
		return -1;
	}
	size = (size_t)st.st_size;
	if ((buf = malloc(size + 1)) == NULL) {
		errbuf_set(err, errlen, "%s: out of memory", path);
		close(fd);
		return -1;
	}
	/* Never more than fstat said: one byte past it means the file is still
	 * growing, refused rather than followed. */
	for (;;) {
		ssize_t r = len < size ? read(fd, buf + len, size - len) : read(fd, &extra, 1);

		if (r == -1 && errno == EINTR)
			continue;
		if (r == -1) {
			why = strerror(errno);
			break;
		}
		if (r == 0)
			break;
		if (len == size) {
			why = "changed while being read";
			break;
		}
		len += (size_t)r;
	}
	close(fd);
	if (why != NULL) {
		errbuf_set(err, errlen, "%s: %s", path, why);
		free(buf);
		return -1;
	}
	buf[len] = '\0';
	*out = buf;
	*outlen = len;
	return 0;
}

/* Reads and checks a signed cache (dirc_listing_from_text: the directory's certificate
 * against ca_pk now, the signature, each relay's certificate). Returns 0
 * with *out, 1 if there is no file, -1 with the reason in err (a file of
 * format 1, unsigned, is refused). */
int
dirsync_cache_read_signed(const char *path, const uint8_t ca_pk[IDENT_PK_LEN], uint64_t now,
    struct dirc_listing *out, char *err, size_t errlen)
{
	uint8_t cert[IDENT_CERT_LEN], sig[IDENT_SIG_LEN];
	char *buf, *p, *end, *line[4], e[512];
	const char *why = NULL;
	size_t len, tlen = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	if ((rc = dirsync_cache_load(path, &buf, &len, err, errlen)) != 0)
		return rc;
	p = buf;
	end = buf + len;
	for (int i = 0; i < 4; i++) {
		char *nl = memchr(p, '\n', (size_t)(end - p));
		if (nl == NULL) {
			why = "truncated header";
			goto bad;
		}
		*nl = '\0';
		line[i] = p;
		p = nl + 1;
		if (i == 0 && strcmp(line[0], CACHE_MAGIC " 2") != 0) {
			why = strncmp(line[0], CACHE_MAGIC " 1 ", strlen(CACHE_MAGIC) + 3) == 0 ?
			    "not signed (written in shared mode)" :
			    "expected \"" CACHE_MAGIC " 2\"";
			goto bad;
		}
	}
	if (strncmp(line[1], "cert ", 5) != 0 || dirp_unhex(line[1] + 5, cert, sizeof(cert)) == -1 ||
	    strncmp(line[2], "sig ", 4) != 0 || dirp_unhex(line[2] + 4, sig, sizeof(sig)) == -1 ||
	    sscanf(line[3], "text %zu", &tlen) != 1 || tlen != (size_t)(end - p)) {
		why = "bad cert, sig or text line";
		goto bad;
	}
	if (dirc_listing_from_text(p, tlen, cert, sig, ca_pk, now, NULL, out, e, sizeof(e)) == -1) {
		errbuf_set(err, errlen, "%s: refused: %s", path, e);
		free(buf);
		return -1;
	}
	free(buf);
	return 0;
bad:
	errbuf_set(err, errlen, "%s: %s", path, why);
	free(buf);
	return -1;
}

/* A decimal number of digits only (ten at most), at most max. */
static int
parse_dec(const char *s, uint64_t max, uint64_t *out)
{
	return strlen(s) > 10 ? -1 : dirp_dec64(s, max, out);
}

/* One relay line, newline removed: "<relay> <data_port> <group>". */
static const char *
parse_line(char *line, struct dirc_relay *r)
{
	char *f[3], *save = NULL;
	uint64_t v;
	size_t nf = 0;

	/* Exactly one space between fields: what we write. */
	if (line[0] == ' ' || strstr(line, "  ") != NULL)
		return "fields must be separated by one space";
	for (char *w = strtok_r(line, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
		if (nf == 3)
			return "expected <relay> <data_port> <group>";
		f[nf++] = w;
	}
	if (nf != 3)
		return "expected <relay> <data_port> <group>";
	if (ep_parse(f[0], 0, &r->relay) == -1 || r->relay.port == 0)
		return "bad relay endpoint";
	if (parse_dec(f[1], 65535, &v) == -1 || v == 0)
		return "bad data port";
	r->data_port = (uint16_t)v;
	if (parse_dec(f[2], CCONF_GROUP_MAX, &v) == -1)
		return "bad group";
	r->group = (uint32_t)v;
	return NULL;
}

/* The first line, newline removed: "slot-relays 1 <version>". */
static const char *
parse_header(char *line, char version[DIRC_VERSION_MAX])
{
	size_t ml = strlen(CACHE_MAGIC);
	char *fmt, *ver;

	if (strncmp(line, CACHE_MAGIC, ml) != 0 || (line[ml] != ' ' && line[ml] != '\0'))
		return "not a " CACHE_MAGIC " file";
	fmt = line[ml] ? line + ml + 1 : line + ml;
	if ((ver = strchr(fmt, ' ')) != NULL)
		*ver++ = '\0';
	if (*fmt != '\0' && strcmp(fmt, "1") != 0)
		return "unknown format version";
	if (*fmt == '\0' || ver == NULL || !version_ok(ver))
		return "expected \"" CACHE_MAGIC " 1 <version>\"";
	snprintf(version, DIRC_VERSION_MAX, "%s", ver);
	return NULL;
}

int
dirsync_cache_read(const char *path, char version[DIRC_VERSION_MAX],
    struct dirc_relay **out, size_t *n, char *err, size_t errlen)
{
	char *buf, *p, *end;
	size_t len, cnt = 0, cap = 0, lineno = 0;
	struct dirc_relay *v = NULL;
	const char *why = NULL;
	int rc;

	*out = NULL;
	*n = 0;
	if ((rc = dirsync_cache_load(path, &buf, &len, err, errlen)) != 0)
		return rc;
	for (p = buf, end = buf + len; why == NULL && p < end; ) {
		char *line = p, *nl = memchr(p, '\n', (size_t)(end - p));
		size_t ll = nl != NULL ? (size_t)(nl - p) + 1 : (size_t)(end - p);

		p += ll;
		lineno++;
		if (ll > CACHE_LINE_MAX) {
			why = "line too long";
			break;
		}
		if (memchr(line, '\0', ll) != NULL) {
			why = "NUL byte";
			break;
		}
		if (nl == NULL) {
			why = "truncated (no newline at the end)";
			break;
		}
		*nl = '\0';
		if (lineno == 1) {
			why = parse_header(line, version);
			continue;
		}
		if (cnt == CACHE_MAX_RELAYS) {
			why = "too many relays";
			break;
		}
		if (cnt == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct dirc_relay *nv = reallocarray(v, nc, sizeof(*nv));
			if (nv == NULL) {
				why = "out of memory";
				break;
			}
			v = nv;
			cap = nc;
		}
		if ((why = parse_line(line, &v[cnt])) != NULL)
			break;
		cnt++;
	}
	free(buf);
	if (why == NULL && lineno == 0) {
		errbuf_set(err, errlen, "%s: empty file", path);
		why = "";
	} else if (why != NULL) {
		errbuf_set(err, errlen, "%s:%zu: %s", path, lineno, why);
	}
	if (why != NULL) {
		free(v);
		return -1;
	}
	if (cnt == 0) {
		free(v);
		v = NULL;
	}
	*out = v;
	*n = cnt;
	return 0;
}

/* ---------------------------------------------------------------- the loop's side */

static size_t
max_relays(const struct cconf *conf)
{
	uint32_t m = conf->relay_mask;
	size_t room = m ? m >> __builtin_ctz(m) : 0;

	return room < CCONF_MAX_RELAYS ? room : CCONF_MAX_RELAYS;
}

/* Whether the set would stay exactly as it is. */
static bool
same_set(const struct slotd *d, const struct cconf_relay *m, size_t n)
{
	if (n != d->nrelays)
		return false;
	for (size_t i = 0; i < n; i++) {
		const struct cconf_relay *a = &d->relays[i]->conf;
		if (!ep_eq(&a->control, &m[i].control) || a->data_port != m[i].data_port ||
		    a->group != m[i].group)
			return false;
	}
	return true;
}

/* conf's static relays plus list into force. skip_same: nothing to do if the
 * set does not change (conf is the running one). */
static int
apply_list(struct slotd *d, const struct cconf *conf, const struct dirc_relay *list, size_t n,
    bool skip_same, char *err, size_t errlen)
{
	struct dirsync *s = d->dir;
	struct cconf_relay *m;
	struct dirc_relay *kept = NULL;
	size_t nm, dropped, fromdir = 0, nk = 0;

	/* Relays the directory's latest revocation list names are left out,
	 * as a listing without them would. */
	if (s->rev.n > 0 && n > 0) {
		if ((kept = calloc(n, sizeof(*kept))) == NULL) {
			errbuf_set(err, errlen, "out of memory");
			return -1;
		}
		for (size_t i = 0; i < n; i++)
			if (!list[i].has_cert || !ident_revoked_has(&s->rev, list[i].cert.serial))
				kept[nk++] = list[i];
		list = kept;
		n = nk;
	}
	int mrc = dirsync_merge(conf->relays, conf->nrelays, list, n, max_relays(conf), &m, &nm,
	    &dropped);
	free(kept);
	if (mrc == -1) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < nm; i++)
		fromdir += cconf_relay_from_dir(&m[i]);
	if (dropped != s->warned_dropped) {
		if (dropped > 0)
			log_warnx("directory: %zu relays left out: the set holds at most %zu",
			    dropped, max_relays(conf));
		s->warned_dropped = dropped;
	}
	if (skip_same && same_set(d, m, nm)) {
		free(m);
		s->in_set = fromdir;
		return 0;
	}
	struct cconf c = *conf;
	c.relays = m;
	c.nrelays = nm;
	int rc = relays_apply(d, &c, err, errlen);
	free(m);
	if (rc == 0)
		s->in_set = fromdir;
	return rc;
}

int
dirsync_apply(struct slotd *d, const struct cconf *conf, char *err, size_t errlen)
{
	struct dirsync *s = d->dir;

	if (s == NULL)
		return relays_apply(d, conf, err, errlen);
	if (apply_list(d, conf, s->cur, s->ncur, false, err, errlen) == 0)
		return 0;
	if (s->started || s->ncur == 0)
		return -1;
	/* At start, the cached relays must not keep the static ones out. */
	log_warnx("directory: the relays of %s do not apply (%s); starting without them",
	    s->cache_file, err);
	free(s->cur);
	s->cur = NULL;
	s->ncur = 0;
	s->cur_version[0] = s->start_version[0] = '\0';
	s->cache_loaded = false;
	return apply_list(d, conf, NULL, 0, false, err, errlen);
}

static void
wake_cb(struct ev_loop *loop, ev_async *w, int revents)
{
	struct slotd *d = w->data;
	struct dirsync *s = d->dir;
	struct dirc_relay *list;
	struct dirc_landmarks land;
	size_t n;
	char version[DIRC_VERSION_MAX], err[512];
	(void)loop;
	(void)revents;

	pthread_mutex_lock(&s->mu);
	if (s->has_pending_rev) {
		ident_revoked_free(&s->rev);
		s->rev = s->pending_rev;
		memset(&s->pending_rev, 0, sizeof(s->pending_rev));
		s->has_pending_rev = false;
		pthread_mutex_unlock(&s->mu);
		log_info("directory: revocation list of %zu serials", s->rev.n);
		slotd_revoked(d, &s->rev);
		pthread_mutex_lock(&s->mu);
	}
	if (!s->has_pending) {
		pthread_mutex_unlock(&s->mu);
		return;
	}
	list = s->pending;
	n = s->npending;
	land = s->pending_land;
	memcpy(version, s->pending_version, sizeof(version));
	s->pending = NULL;
	s->npending = 0;
	memset(&s->pending_land, 0, sizeof(s->pending_land));
	s->has_pending = false;
	pthread_mutex_unlock(&s->mu);

	if (apply_list(d, &d->conf, list, n, true, err, sizeof(err)) == -1) {
		log_warnx("directory: listing %s (%zu relays) not applied: %s; keeping the "
		    "running set until the next refresh", version, n, err);
		free(list);
		dirc_landmarks_free(&land);
		pthread_mutex_lock(&s->mu);
		s->forget = true;
		pthread_mutex_unlock(&s->mu);
		return;
	}
	free(s->cur);
	s->cur = list;
	s->ncur = n;
	dirc_landmarks_free(&s->cur_land);
	s->cur_land = land;
	memcpy(s->cur_version, version, sizeof(s->cur_version));
	log_info("directory: listing %s with %zu relays and %zu landmarks; the set has %zu "
	    "(%zu from the directory)", version, n, land.nland, d->nrelays, s->in_set);
	rank_update(d);
}

/* ---------------------------------------------------------------- the worker */

static bool
stopping(struct dirsync *s)
{
	pthread_mutex_lock(&s->mu);
	bool stop = s->stop;
	pthread_mutex_unlock(&s->mu);
	return stop;
}

/* Asks the URLs in order; the first answer that passes wins (in identity
 * mode, one signed by a directory of our CA: see dirc_fetch). Returns the
 * URL's index, or -1 with every URL's failure in err; *refused counts the
 * answers refused. */
static int
fetch(struct dirsync *s, const char *version, const struct ident_revoked *held,
    struct dirc_listing *l, unsigned *refused, char *err, size_t errlen)
{
	size_t used = 0;

	err[0] = '\0';
	*refused = 0;
	for (size_t i = 0; i < s->urls.n; i++) {
		char e[512];
		int fault = 0;

		if (stopping(s))
			break;
		if (dirc_fetch(s->dc, s->urls.url[i], version, true, held, l, &fault, e,
		    sizeof(e)) == 0)
			return (int)i;
		if (fault == DIRC_REFUSED) {
			(*refused)++;
			log_warnx("directory: listing refused: %s; keeping the relays we have", e);
		} else
			log_debug("directory: %s", e);
		if (used < errlen)
			used += (size_t)snprintf(err + used, errlen - used, "%s%s", used ? "; " : "",
			    e);
	}
	return -1;
}

static void
deadline_after(struct timespec *ts, uint64_t ms)
{
	clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_sec += (time_t)(ms / 1000);
	ts->tv_nsec += (long)(ms % 1000) * 1000000L;
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

static void *
worker(void *arg)
{
	struct dirsync *s = arg;
	char version[DIRC_VERSION_MAX], err[2048], werr[512];
	uint64_t delay = s->retry_ms;
	struct timespec dl = { 0, 0 };
	struct ident_revoked held = { 0 };	/* the list of the last signed answer */

	/* The cache file has no landmarks: ask for the whole listing once,
	 * even when the cached one is current. */
	version[0] = '\0';
	pthread_mutex_lock(&s->mu);
	/* The loop's list is the cache's until we hand it a new one. */
	(void)ident_revoked_copy(&s->rev, &held);
	while (!s->stop) {
		if (s->forget) {
			version[0] = '\0';
			s->forget = false;
		}
		if (s->key_changed) {
			dirc_set_key(s->dc, &s->key);
			auth_key_wipe(&s->key);
			s->key_changed = false;
		}
		if (s->ident_changed) {
			dirc_set_ident(s->dc, &s->id);
			ident_wipe(&s->id);
			s->ident_changed = false;
		}
		pthread_mutex_unlock(&s->mu);

		struct dirc_listing l;
		struct ident_revoked nrev = { 0 };
		unsigned refused = 0;
		bool rev_new = false;
		int u = fetch(s, version, &held, &l, &refused, err, sizeof(err));
		if (u >= 0 && l.changed && s->cache_file[0] != '\0' &&
		    (s->ident_mode ? dirsync_cache_write_signed(s->cache_file, &l, werr,
		    sizeof(werr)) : dirsync_cache_write(s->cache_file, l.version, l.relay, l.n,
		    werr, sizeof(werr))) == -1)
			log_warnx("directory: listing not saved: %s", werr);
		if (u >= 0 && l.dropped > 0)
			log_warnx("directory: listing %s: %zu relays left out, their certificates "
			    "refused", l.version, l.dropped);
		if (u >= 0 && l.is_signed && !ident_revoked_equal(&l.revoked, &held) &&
		    ident_revoked_copy(&l.revoked, &nrev) == 0) {
			ident_revoked_free(&held);
			(void)ident_revoked_copy(&nrev, &held);
			rev_new = true;
		}

		pthread_mutex_lock(&s->mu);
		s->fetches_refused += refused;
		if (rev_new) {
			ident_revoked_free(&s->pending_rev);
			s->pending_rev = nrev;
			s->has_pending_rev = true;
		}
		if (u >= 0) {
			snprintf(s->url, sizeof(s->url), "%s", s->urls.url[u]);
			if (l.changed) {
				s->fetches_ok++;
				free(s->pending);
				dirc_landmarks_free(&s->pending_land);
				s->pending = l.relay;
				s->npending = l.n;
				s->pending_land = l.land;
				l.relay = NULL;
				memset(&l.land, 0, sizeof(l.land));
				s->has_pending = true;
				memcpy(s->pending_version, l.version, sizeof(s->pending_version));
				memcpy(version, l.version, sizeof(version));
			} else {
				s->fetches_unchanged++;
			}
			if (l.changed || rev_new)
				ev_async_send(s->loop, &s->wake);
			dirc_listing_free(&l);
			delay = s->retry_ms;
			deadline_after(&dl, s->refresh_ms);
		} else if (!s->stop) {
			s->fetches_failed++;
			log_warnx("directory: no answer (%s); next try in %llu ms", err,
			    (unsigned long long)delay);
			deadline_after(&dl, delay);
			delay = delay * 2 < s->refresh_ms ? delay * 2 : s->refresh_ms;
		}
		while (!s->stop && pthread_cond_timedwait(&s->cond, &s->mu, &dl) != ETIMEDOUT)
			;
	}
	pthread_mutex_unlock(&s->mu);
	ident_revoked_free(&held);
	return NULL;
}

/* ---------------------------------------------------------------- life cycle */

int
dirsync_init(struct slotd *d, char *err, size_t errlen)
{
	const struct cconf *c = &d->conf;
	struct dirsync *s;
	pthread_condattr_t ca;
	char e[512];

	d->dir = NULL;
	if (c->dir_urls.n == 0)
		return 0;
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		errbuf_set(err, errlen, "out of memory");
		return -1;
	}
	s->urls = c->dir_urls;
	s->refresh_ms = c->dir_refresh_ms;
	s->retry_ms = c->dir_retry_ms;
	memcpy(s->cache_file, c->dir_cache_file, sizeof(s->cache_file));
	s->loop = d->loop;
	if (pthread_condattr_init(&ca) != 0 ||
	    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC) != 0 ||
	    pthread_cond_init(&s->cond, &ca) != 0) {
		errbuf_set(err, errlen, "directory: cannot make a condition variable");
		free(s);
		return -1;
	}
	pthread_condattr_destroy(&ca);
	pthread_mutex_init(&s->mu, NULL);
	/* xmlrpc-c's (and libcurl's) global set-up, before any thread. */
	if (dirc_global_init(e, sizeof(e)) == -1) {
		errbuf_set(err, errlen, "directory: %s", e);
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return -1;
	}
	if ((s->dc = dirc_new(&d->key, (unsigned)c->dir_timeout_ms, e, sizeof(e))) == NULL) {
		errbuf_set(err, errlen, "directory: %s", e);
		dirc_global_fini();
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->mu);
		free(s);
		return -1;
	}
	s->ident_mode = d->auth_mode == IDENT_MODE_IDENTITY;
	if (s->ident_mode)
		dirc_set_ident(s->dc, &d->id);
	ev_async_init(&s->wake, wake_cb);
	s->wake.data = d;
	d->dir = s;

	if (s->cache_file[0] == '\0')
		return 0;
	int rc;
	if (s->ident_mode) {
		struct dirc_listing l;

		rc = dirsync_cache_read_signed(s->cache_file, d->id.ca_pk, (uint64_t)time(NULL),
		    &l, e, sizeof(e));
		if (rc == 0) {
			memcpy(s->start_version, l.version, sizeof(s->start_version));
			s->cur = l.relay;
			s->ncur = l.n;
			s->rev = l.revoked;
			l.relay = NULL;
			memset(&l.revoked, 0, sizeof(l.revoked));
			if (l.dropped > 0)
				log_warnx("directory: %s: %zu relays left out, their certificates "
				    "refused", s->cache_file, l.dropped);
			dirc_listing_free(&l);
		}
	} else
		rc = dirsync_cache_read(s->cache_file, s->start_version, &s->cur, &s->ncur, e,
		    sizeof(e));
	if (rc == 1) {
		log_info("directory: no cache file %s yet", s->cache_file);
	} else if (rc == -1) {
		log_warnx("directory: ignoring the cache file: %s", e);
		s->start_version[0] = '\0';
	} else {
		s->cache_loaded = true;
		memcpy(s->cur_version, s->start_version, sizeof(s->cur_version));
		log_info("directory: %zu relays from %s (listing %s)", s->ncur, s->cache_file,
		    s->start_version);
	}
	return 0;
}

int
dirsync_start(struct slotd *d, char *err, size_t errlen)
{
	struct dirsync *s = d->dir;
	sigset_t all, old;
	int rc;

	if (s == NULL)
		return 0;
	ev_async_start(d->loop, &s->wake);
	/* Signals are the loop's business. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->thread, NULL, worker, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc != 0) {
		ev_async_stop(d->loop, &s->wake);
		errbuf_set(err, errlen, "directory: cannot start a thread: %s", strerror(rc));
		return -1;
	}
	s->started = true;
	log_info("directory: %zu URL%s, refresh every %llu s", s->urls.n, s->urls.n == 1 ? "" : "s",
	    (unsigned long long)(s->refresh_ms / 1000));
	return 0;
}

void
dirsync_reload_conf(const struct slotd *d, struct cconf *nc)
{
	const struct cconf *c = &d->conf;
	bool urls_same = nc->dir_urls.n == c->dir_urls.n;

	for (size_t i = 0; urls_same && i < c->dir_urls.n; i++)
		urls_same = strcmp(nc->dir_urls.url[i], c->dir_urls.url[i]) == 0;
	if (!urls_same || nc->dir_refresh_ms != c->dir_refresh_ms ||
	    nc->dir_retry_ms != c->dir_retry_ms || nc->dir_timeout_ms != c->dir_timeout_ms ||
	    strcmp(nc->dir_cache_file, c->dir_cache_file) != 0)
		log_warnx("reload: [directory] changes need a restart; keeping the running values");
	nc->dir_urls = c->dir_urls;
	nc->dir_refresh_ms = c->dir_refresh_ms;
	nc->dir_retry_ms = c->dir_retry_ms;
	nc->dir_timeout_ms = c->dir_timeout_ms;
	memcpy(nc->dir_cache_file, c->dir_cache_file, sizeof(nc->dir_cache_file));
}

void
dirsync_set_key(struct slotd *d, const struct auth_key *key)
{
	struct dirsync *s = d->dir;

	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	s->key = *key;
	s->key_changed = true;
	pthread_mutex_unlock(&s->mu);
}

void
dirsync_set_ident(struct slotd *d, const struct ident *id)
{
	struct dirsync *s = d->dir;

	if (s == NULL || !s->ident_mode)
		return;
	pthread_mutex_lock(&s->mu);
	s->id = *id;
	s->ident_changed = true;
	pthread_mutex_unlock(&s->mu);
}

/* The revocation hook: revoked relays are refused and their control links
 * dropped (rlinks_revoke), and the relay set goes on without them. */
static void
slotd_revoked(struct slotd *d, const struct ident_revoked *rev)
{
	struct dirsync *s = d->dir;
	size_t before = d->nrelays;
	char err[512];
	int dropped;

	if ((dropped = rlinks_revoke(d, rev)) < 0)
		log_warnx("directory: revocation list not applied to the links: out of memory");
	else if (dropped > 0)
		log_info("directory: %d control links of revoked relays dropped", dropped);
	if (s == NULL)
		return;
	if (apply_list(d, &d->conf, s->cur, s->ncur, true, err, sizeof(err)) == -1) {
		log_warnx("directory: revoked relays not removed: %s", err);
		return;
	}
	if (d->nrelays != before) {
		log_info("directory: %zu revoked relays left the set; it has %zu",
		    before - d->nrelays, d->nrelays);
		rank_update(d);
	}
}

void
dirsync_stop(struct slotd *d)
{
	struct dirsync *s = d->dir;

	if (s == NULL)
		return;
	if (s->started) {
		pthread_mutex_lock(&s->mu);
		s->stop = true;
		pthread_cond_signal(&s->cond);
		pthread_mutex_unlock(&s->mu);
		pthread_join(s->thread, NULL);
		ev_async_stop(d->loop, &s->wake);
	}
	dirc_free(s->dc);
	dirc_global_fini();
	auth_key_wipe(&s->key);
	ident_wipe(&s->id);
	ident_revoked_free(&s->rev);
	ident_revoked_free(&s->pending_rev);
	free(s->pending);
	free(s->cur);
	dirc_landmarks_free(&s->pending_land);
	dirc_landmarks_free(&s->cur_land);
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->mu);
	free(s);
	d->dir = NULL;
}

const struct dirc_relay *
dirsync_listing(const struct slotd *d, size_t *n, const struct dirc_landmarks **land)
{
	const struct dirsync *s = d->dir;

	*n = s ? s->ncur : 0;
	*land = s ? &s->cur_land : NULL;
	return s ? s->cur : NULL;
}

void
dirsync_stats(struct slotd *d, struct dirsync_stats *st)
{
	struct dirsync *s = d->dir;

	memset(st, 0, sizeof(*st));
	if (s == NULL)
		return;
	pthread_mutex_lock(&s->mu);
	st->fetches_ok = s->fetches_ok;
	st->fetches_unchanged = s->fetches_unchanged;
	st->fetches_failed = s->fetches_failed;
	st->fetches_refused = s->fetches_refused;
	memcpy(st->url, s->url, sizeof(st->url));
	pthread_mutex_unlock(&s->mu);
	st->relays = s->in_set;
	st->revoked = s->rev.n;
	st->cache_loaded = s->cache_loaded;
	memcpy(st->version, s->cur_version, sizeof(st->version));
}
