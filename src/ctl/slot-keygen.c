/*
 * slot-keygen: the deployment's CA, per-host keys and certificates, and the
 * lab's shared key (docs/keys.md).
 */

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "slot/auth.h"
#include "slot/ident.h"

#ifndef SLOT_VERSION
#define SLOT_VERSION "0.1.0"
#endif

#define DAY_S 86400ull
#define DEFAULT_DAYS 365u
#define MAX_DAYS (100u * 366u)

static const char *prog = "slot-keygen";

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: %s ca [-f] PREFIX\n"
	    "         a new CA: PREFIX.key (secret, keep it off the hosts) and PREFIX.pub\n"
	    "       %s issue -c CA.key -r ROLE -n NAME [-d DAYS] [-k HOST.key] [-f] PREFIX\n"
	    "         a host's PREFIX.key (new, or the -k key again for a renewal) and\n"
	    "         PREFIX.cert; ROLE is client, relay or directory; DAYS default %u\n"
	    "       %s show FILE...\n"
	    "         what a certificate, CA or key file holds (never a secret)\n"
	    "       %s shared [-f] FILE\n"
	    "         a shared deployment key, for a lab's [auth] mode = shared\n"
	    "       %s -h | --help | -V | --version\n",
	    prog, prog, DEFAULT_DAYS, prog, prog, prog);
}

/* Writes text to path with mode, refusing to replace a file unless force. */
static int
write_file(const char *path, const char *text, mode_t mode, int force)
{
	int fd, flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW;
	size_t len = strlen(text), off = 0;
	ssize_t n;

	flags |= force ? O_TRUNC : O_EXCL;
	if ((fd = open(path, flags, mode)) == -1) {
		fprintf(stderr, "%s: %s: %s%s\n", prog, path, strerror(errno),
		    errno == EEXIST ? " (use -f to replace it)" : "");
		return -1;
	}
	/* An existing file keeps its mode under O_TRUNC: set it. */
	if (fchmod(fd, mode) == -1) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		close(fd);
		return -1;
	}
	while (off < len) {
		if ((n = write(fd, text + off, len - off)) == -1) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
			close(fd);
			return -1;
		}
		off += (size_t)n;
	}
	if (close(fd) == -1) {
		fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
		return -1;
	}
	return 0;
}

static char *
path_of(const char *prefix, const char *ext)
{
	size_t n = strlen(prefix) + strlen(ext) + 1;
	char *p = malloc(n);

	if (p == NULL) {
		fprintf(stderr, "%s: out of memory\n", prog);
		exit(1);
	}
	snprintf(p, n, "%s%s", prefix, ext);
	return p;
}

static void
hex(char *out, size_t cap, const uint8_t *b, size_t n)
{
	sodium_bin2hex(out, cap, b, n);
}

static int
write_key(const char *path, const char *what, const uint8_t seed[IDENT_SEED_LEN],
    const uint8_t pk[IDENT_PK_LEN], int force)
{
	char text[512], sh[2 * IDENT_SEED_LEN + 1], ph[2 * IDENT_PK_LEN + 1];
	int ret;

	hex(sh, sizeof(sh), seed, IDENT_SEED_LEN);
	hex(ph, sizeof(ph), pk, IDENT_PK_LEN);
	snprintf(text, sizeof(text), "# slot %s secret key; public key %s\n"
	    "slot-key-1 %s\n", what, ph, sh);
	ret = write_file(path, text, 0600, force);
	sodium_memzero(text, sizeof(text));
	sodium_memzero(sh, sizeof(sh));
	return ret;
}

static void
fmt_time(uint64_t t, char *out, size_t cap)
{
	time_t tt = (time_t)t;
	struct tm tm;

	if (t > (uint64_t)INT32_MAX * 64 || gmtime_r(&tt, &tm) == NULL)
		snprintf(out, cap, "%llu", (unsigned long long)t);
	else
		strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static int
cmd_ca(int argc, char **argv)
{
	uint8_t seed[IDENT_SEED_LEN], pk[IDENT_PK_LEN];
	char text[256], ph[2 * IDENT_PK_LEN + 1], *kp, *pp;
	int c, force = 0, ret = 1;

	optind = 1;
	while ((c = getopt(argc, argv, "fh")) != -1) {
		switch (c) {
		case 'f': force = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	kp = path_of(argv[optind], ".key");
	pp = path_of(argv[optind], ".pub");
	ident_keygen(seed, pk);
	hex(ph, sizeof(ph), pk, IDENT_PK_LEN);
	snprintf(text, sizeof(text), "# slot deployment CA public key: give it to "
	    "every host ([auth] ca_file)\nslot-ca-1 %s\n", ph);
	if (write_key(kp, "CA", seed, pk, force) == 0 &&
	    write_file(pp, text, 0644, force) == 0) {
		printf("CA key %s (keep it secret, off the hosts), public key %s\n",
		    kp, pp);
		ret = 0;
	}
	sodium_memzero(seed, sizeof(seed));
	free(kp);
	free(pp);
	return ret;
}

static int
cmd_issue(int argc, char **argv)
{
	uint8_t ca_seed[IDENT_SEED_LEN], seed[IDENT_SEED_LEN], pk[IDENT_PK_LEN];
	uint8_t raw[IDENT_CERT_LEN], serial_b[8];
	char err[256], text[1024], ch[2 * IDENT_CERT_LEN + 1], sh[17];
	char nb_s[32], na_s[32];
	const char *ca_path = NULL, *name = NULL, *key_in = NULL;
	char *kp = NULL, *cp = NULL, *end;
	unsigned long days = DEFAULT_DAYS;
	uint64_t serial, now = (uint64_t)time(NULL);
	uint8_t role = 0;
	int c, force = 0, ret = 1;
	struct ident id;

	optind = 1;
	while ((c = getopt(argc, argv, "c:r:n:d:k:fh")) != -1) {
		switch (c) {
		case 'c': ca_path = optarg; break;
		case 'r':
			if ((role = ident_role_parse(optarg)) == 0) {
				fprintf(stderr, "%s: role '%s': expected client, "
				    "relay or directory\n", prog, optarg);
				return 2;
			}
			break;
		case 'n': name = optarg; break;
		case 'd':
			errno = 0;
			days = strtoul(optarg, &end, 10);
			if (errno || *end || end == optarg || days < 1 ||
			    days > MAX_DAYS) {
				fprintf(stderr, "%s: days '%s': expected 1 to %u\n",
				    prog, optarg, MAX_DAYS);
				return 2;
			}
			break;
		case 'k': key_in = optarg; break;
		case 'f': force = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1 || ca_path == NULL || role == 0 || name == NULL) {
		fprintf(stderr, "%s issue: -c CA.key, -r ROLE, -n NAME and a PREFIX "
		    "are required\n", prog);
		usage(stderr);
		return 2;
	}
	if (!ident_name_ok(name)) {
		fprintf(stderr, "%s: name '%s': expected 1 to %d of A-Z a-z 0-9 . _ -\n",
		    prog, name, IDENT_NAME_MAX);
		return 2;
	}
	if (ident_seed_load(ca_path, ca_seed, err, sizeof(err)) == -1) {
		fprintf(stderr, "%s: %s\n", prog, err);
		return 1;
	}
	if (key_in != NULL) {
		if (ident_seed_load(key_in, seed, err, sizeof(err)) == -1) {
			fprintf(stderr, "%s: %s\n", prog, err);
			goto done;
		}
		ident_seed_pk(seed, pk);
	} else
		ident_keygen(seed, pk);
	randombytes_buf(serial_b, sizeof(serial_b));
	serial = 0;
	for (size_t i = 0; i < 8; i++)
		serial = serial << 8 | serial_b[i];
	/* An hour back: hosts whose clocks lag a little accept it at once. */
	if (ident_cert_issue(ca_seed, role, name, serial, now - 3600,
	    now + days * DAY_S, pk, raw, err, sizeof(err)) == -1) {
		fprintf(stderr, "%s: %s\n", prog, err);
		goto done;
	}
	hex(ch, sizeof(ch), raw, IDENT_CERT_LEN);
	ident_serial_hex(serial, sh);
	fmt_time(now - 3600, nb_s, sizeof(nb_s));
	fmt_time(now + days * DAY_S, na_s, sizeof(na_s));
	snprintf(text, sizeof(text), "# slot certificate: %s '%s', serial %s, "
	    "valid %s to %s\nslot-cert-1 %s\n", ident_role_str(role), name, sh,
	    nb_s, na_s, ch);
	kp = path_of(argv[optind], ".key");
	cp = path_of(argv[optind], ".cert");
	/* Check the result as a daemon will before writing anything. */
	{
		uint8_t ca_pk[IDENT_PK_LEN];

		ident_seed_pk(ca_seed, ca_pk);
		if (ident_from_parts(seed, raw, ca_pk, IDENT_MASK(role), now, &id,
		    err, sizeof(err)) == -1) {
			fprintf(stderr, "%s: %s\n", prog, err);
			goto done;
		}
		ident_wipe(&id);
	}
	if (key_in == NULL || strcmp(key_in, kp) != 0) {
		if (write_key(kp, ident_role_str(role), seed, pk, force) == -1)
			goto done;
	}
	if (write_file(cp, text, 0644, force) == -1)
		goto done;
	printf("%s '%s': key %s, certificate %s, serial %s, valid until %s\n",
	    ident_role_str(role), name, kp, cp, sh, na_s);
	ret = 0;
done:
	sodium_memzero(ca_seed, sizeof(ca_seed));
	sodium_memzero(seed, sizeof(seed));
	free(kp);
	free(cp);
	return ret;
}

static int
show_one(const char *path)
{
	uint8_t raw[IDENT_CERT_LEN], pk[IDENT_PK_LEN], seed[IDENT_SEED_LEN];
	char err[256], ph[2 * IDENT_PK_LEN + 1], sh[17], nb[32], na[32];
	struct ident_cert c;

	if (ident_cert_load(path, raw, err, sizeof(err)) == 0) {
		if (ident_cert_decode(raw, &c, err, sizeof(err)) == -1) {
			fprintf(stderr, "%s: %s: %s\n", prog, path, err);
			return 1;
		}
		hex(ph, sizeof(ph), c.pk, IDENT_PK_LEN);
		ident_serial_hex(c.serial, sh);
		fmt_time(c.not_before, nb, sizeof(nb));
		fmt_time(c.not_after, na, sizeof(na));
		printf("%s: certificate\n  role %s\n  name %s\n  serial %s\n"
		    "  valid %s to %s%s\n  public key %s\n", path,
		    ident_role_str(c.role), c.name, sh, nb, na,
		    (uint64_t)time(NULL) >= c.not_after ? " (expired)" : "", ph);
		return 0;
	}
	if (ident_ca_load(path, pk, err, sizeof(err)) == 0) {
		hex(ph, sizeof(ph), pk, IDENT_PK_LEN);
		printf("%s: CA public key %s\n", path, ph);
		return 0;
	}
	if (ident_seed_load(path, seed, err, sizeof(err)) == 0) {
		ident_seed_pk(seed, pk);
		sodium_memzero(seed, sizeof(seed));
		hex(ph, sizeof(ph), pk, IDENT_PK_LEN);
		printf("%s: secret key; its public key %s\n", path, ph);
		return 0;
	}
	fprintf(stderr, "%s: %s: not a slot certificate, CA or key file (or "
	    "unreadable: %s)\n", prog, path, err);
	return 1;
}

static int
cmd_show(int argc, char **argv)
{
	int i, ret = 0;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	for (i = 1; i < argc; i++)
		if (show_one(argv[i]) != 0)
			ret = 1;
	return ret;
}

static int
cmd_shared(int argc, char **argv)
{
	char hexkey[2 * AUTH_KEY_LEN + 1], text[2 * AUTH_KEY_LEN + 2];
	int c, force = 0, ret;

	optind = 1;
	while ((c = getopt(argc, argv, "fh")) != -1) {
		switch (c) {
		case 'f': force = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (argc - optind != 1) {
		usage(stderr);
		return 2;
	}
	auth_key_generate_hex(hexkey);
	snprintf(text, sizeof(text), "%s\n", hexkey);
	ret = write_file(argv[optind], text, 0600, force) == 0 ? 0 : 1;
	sodium_memzero(hexkey, sizeof(hexkey));
	sodium_memzero(text, sizeof(text));
	if (ret == 0)
		printf("shared key %s\n", argv[optind]);
	return ret;
}

int
main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "-V") == 0) {
		printf("slot-keygen %s\n", SLOT_VERSION);
		return 0;
	}
	if (auth_init() == -1) {
		fprintf(stderr, "%s: libsodium failed to initialise\n", prog);
		return 1;
	}
	if (strcmp(argv[1], "ca") == 0)
		return cmd_ca(argc - 1, argv + 1);
	if (strcmp(argv[1], "issue") == 0)
		return cmd_issue(argc - 1, argv + 1);
	if (strcmp(argv[1], "show") == 0)
		return cmd_show(argc - 1, argv + 1);
	if (strcmp(argv[1], "shared") == 0)
		return cmd_shared(argc - 1, argv + 1);
	fprintf(stderr, "%s: unknown command '%s'\n", prog, argv[1]);
	usage(stderr);
	return 2;
}
