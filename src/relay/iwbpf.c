#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <linux/bpf.h>

#include "iwbpf.h"

#ifndef TCP_BPF_IW
#define TCP_BPF_IW 1001
#endif

/* The map's key: an LPM trie key whose data is a family tag and the
 * address, so one map holds both families (a tag's 32 bits always match). */
struct iwkey {
	uint32_t prefixlen;	/* 32 + the address's prefix length */
	uint32_t tag;		/* 4 or 6 */
	uint8_t addr[16];
};

#define TAG_BITS 32

struct iwbpf {
	int map_fd;		/* prefix -> initial window (uint32_t segments) */
	int ctr_fd;		/* [0]: connections given a window (uint64_t) */
	int prog_fd;
	int link_fd;
	size_t capacity;
};

static int
sys_bpf(int cmd, union bpf_attr *a)
{
	return (int)syscall(__NR_bpf, cmd, a, sizeof(*a));
}

static int
map_create(uint32_t type, uint32_t ksize, uint32_t vsize, uint32_t max, uint32_t flags,
    const char *name)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.map_type = type;
	a.key_size = ksize;
	a.value_size = vsize;
	a.max_entries = max;
	a.map_flags = flags;
	snprintf(a.map_name, sizeof(a.map_name), "%s", name);
	return sys_bpf(BPF_MAP_CREATE, &a);
}

/* --- the program, assembled here: no compiler, no ELF loader --- */

#define INSN(c, d, s, o, i) ((struct bpf_insn){ .code = (c), .dst_reg = (d), \
	.src_reg = (s), .off = (o), .imm = (i) })

#define MAXINSN 96
#define NLABELS 5
enum { L_KEY, L_V6, L_V6KEY, L_LOOKUP, L_OUT };

struct prog {
	struct bpf_insn i[MAXINSN];
	int n;
	int label[NLABELS];	/* instruction index, -1 until placed */
	struct { int at, label; } fix[32];
	int nfix;
};

static void
emit(struct prog *p, struct bpf_insn in)
{
	if (p->n < MAXINSN)
		p->i[p->n] = in;
	p->n++;
}

/* A jump (op: BPF_JEQ, BPF_JNE on a register and an immediate; BPF_JA) to
 * a label, its offset filled in once every label is placed. */
static void
jmpc(struct prog *p, int cls, int op, int reg, int32_t imm, int label)
{
	if (p->nfix < 32) {
		p->fix[p->nfix].at = p->n;
		p->fix[p->nfix].label = label;
	}
	p->nfix++;
	emit(p, INSN(cls | op | BPF_K, reg, 0, 0, imm));
}

#define jmp(p, op, reg, imm, label) jmpc(p, BPF_JMP, op, reg, imm, label)
/* BPF_JA ignores the register and the immediate. */
#define jmp_always(p, label) jmpc(p, BPF_JMP, BPF_JA, 0, 0, label)
/* Compares the low 32 bits only: an immediate with its top bit set is
 * sign-extended otherwise. */
#define jmp32(p, op, reg, imm, label) jmpc(p, BPF_JMP32, op, reg, imm, label)

static void
place(struct prog *p, int label)
{
	p->label[label] = p->n;
}

static void
ld_map_fd(struct prog *p, int reg, int fd)
{
	emit(p, INSN(BPF_LD | BPF_DW | BPF_IMM, reg, BPF_PSEUDO_MAP_FD, 0, fd));
	emit(p, INSN(0, 0, 0, 0, 0));
}

#define CTX(f) ((int16_t)offsetof(struct bpf_sock_ops, f))
#define MOVR(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOVI(d, v) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, v)
#define ADDI(d, v) INSN(BPF_ALU64 | BPF_ADD | BPF_K, d, 0, 0, v)
#define LDW(d, s, o) INSN(BPF_LDX | BPF_MEM | BPF_W, d, s, o, 0)
#define STW(d, s, o) INSN(BPF_STX | BPF_MEM | BPF_W, d, s, o, 0)
#define STIW(d, o, v) INSN(BPF_ST | BPF_MEM | BPF_W, d, 0, o, v)
#define STIDW(d, o, v) INSN(BPF_ST | BPF_MEM | BPF_DW, d, 0, o, v)
#define CALL(f) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, f)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)

/* The key lives at fp-24 (struct iwkey), the window at fp-28, the
 * counter's index at fp-32. */
#define FP 10
#define K_OFF (-24)

static int
assemble(struct prog *p, int map_fd, int ctr_fd, uint16_t data_port)
{
	memset(p, 0, sizeof(*p));
	for (int l = 0; l < NLABELS; l++)
		p->label[l] = -1;

	emit(p, MOVR(6, 1));				/* r6 = ctx */
	emit(p, LDW(2, 6, CTX(op)));
	jmp(p, BPF_JEQ, 2, BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB, L_KEY);
	jmp(p, BPF_JNE, 2, BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB, L_OUT);
	/* Accepted connections: only the data listener's. */
	emit(p, LDW(2, 6, CTX(local_port)));
	jmp(p, BPF_JNE, 2, data_port, L_OUT);

	place(p, L_KEY);
	emit(p, STIDW(FP, K_OFF + 8, 0));
	emit(p, STIDW(FP, K_OFF + 16, 0));
	emit(p, LDW(2, 6, CTX(family)));
	jmp(p, BPF_JEQ, 2, AF_INET6, L_V6);
	jmp(p, BPF_JNE, 2, AF_INET, L_OUT);
	emit(p, LDW(3, 6, CTX(remote_ip4)));
	emit(p, STIW(FP, K_OFF, TAG_BITS + 32));
	emit(p, STIW(FP, K_OFF + 4, 4));
	emit(p, STW(FP, 3, K_OFF + 8));
	jmp_always(p, L_LOOKUP);

	place(p, L_V6);
	/* An IPv4 peer of a dual-stack socket (::ffff:a.b.c.d) is keyed as
	 * IPv4, as the relay learns it. */
	emit(p, LDW(3, 6, CTX(remote_ip6[3])));
	emit(p, STW(FP, 3, K_OFF + 8));
	emit(p, STIW(FP, K_OFF, TAG_BITS + 32));
	emit(p, STIW(FP, K_OFF + 4, 4));
	emit(p, LDW(2, 6, CTX(remote_ip6[0])));
	emit(p, LDW(4, 6, CTX(remote_ip6[1])));
	emit(p, INSN(BPF_ALU64 | BPF_OR | BPF_X, 2, 4, 0, 0));
	jmp(p, BPF_JNE, 2, 0, L_V6KEY);
	emit(p, LDW(2, 6, CTX(remote_ip6[2])));
	jmp32(p, BPF_JEQ, 2, (int32_t)htonl(0xffff), L_LOOKUP);
	/* A real IPv6 address. */
	place(p, L_V6KEY);
	emit(p, STIW(FP, K_OFF, TAG_BITS + 128));
	emit(p, STIW(FP, K_OFF + 4, 6));
	emit(p, LDW(3, 6, CTX(remote_ip6[0])));
	emit(p, STW(FP, 3, K_OFF + 8));
	emit(p, LDW(3, 6, CTX(remote_ip6[1])));
	emit(p, STW(FP, 3, K_OFF + 12));
	emit(p, LDW(3, 6, CTX(remote_ip6[2])));
	emit(p, STW(FP, 3, K_OFF + 16));
	emit(p, LDW(3, 6, CTX(remote_ip6[3])));
	emit(p, STW(FP, 3, K_OFF + 20));

	place(p, L_LOOKUP);
	ld_map_fd(p, 1, map_fd);
	emit(p, MOVR(2, FP));
	emit(p, ADDI(2, K_OFF));
	emit(p, CALL(BPF_FUNC_map_lookup_elem));
	jmp(p, BPF_JEQ, 0, 0, L_OUT);
	emit(p, LDW(3, 0, 0));
	emit(p, STW(FP, 3, -28));
	emit(p, MOVR(1, 6));
	emit(p, MOVI(2, SOL_TCP));
	emit(p, MOVI(3, TCP_BPF_IW));
	emit(p, MOVR(4, FP));
	emit(p, ADDI(4, -28));
	emit(p, MOVI(5, 4));
	emit(p, CALL(BPF_FUNC_setsockopt));
	jmp(p, BPF_JNE, 0, 0, L_OUT);
	emit(p, STIW(FP, -32, 0));
	ld_map_fd(p, 1, ctr_fd);
	emit(p, MOVR(2, FP));
	emit(p, ADDI(2, -32));
	emit(p, CALL(BPF_FUNC_map_lookup_elem));
	jmp(p, BPF_JEQ, 0, 0, L_OUT);
	emit(p, MOVI(1, 1));
	/* An atomic add (BPF_XADD, BPF_ATOMIC with BPF_ADD). */
	emit(p, INSN(BPF_STX | BPF_DW | 0xc0, 0, 1, 0, 0));

	place(p, L_OUT);
	emit(p, MOVI(0, 1));
	emit(p, EXIT());

	if (p->n > MAXINSN || p->nfix > 32)
		return -1;
	for (int f = 0; f < p->nfix; f++) {
		int at = p->fix[f].at;
		int to = p->label[p->fix[f].label];
		if (to < 0)
			return -1;
		p->i[at].off = (int16_t)(to - at - 1);
	}
	return 0;
}

/* --- the cgroup --- */

/* The cgroup v2 directory of this process: the unified hierarchy's mount
 * point (from mountinfo) and our path in it (from /proc/self/cgroup). */
static int
own_cgroup(char *out, size_t outlen, char *err, size_t errlen)
{
	char line[1024], mnt[512] = "", path[512] = "";
	FILE *f;

	if ((f = fopen("/proc/self/mountinfo", "r")) == NULL) {
		snprintf(err, errlen, "/proc/self/mountinfo: %s", strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char m[512], *sep = strstr(line, " - ");
		if (sep && strncmp(sep, " - cgroup2 ", 11) == 0 &&
		    sscanf(line, "%*s %*s %*s %*s %511s", m) == 1) {
			snprintf(mnt, sizeof(mnt), "%s", m);
			break;
		}
	}
	fclose(f);
	if ((f = fopen("/proc/self/cgroup", "r")) == NULL) {
		snprintf(err, errlen, "/proc/self/cgroup: %s", strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "0::", 3) == 0) {
			line[strcspn(line, "\n")] = '\0';
			if ((size_t)snprintf(path, sizeof(path), "%s", line + 3) >= sizeof(path))
				path[0] = '\0';
			break;
		}
	fclose(f);
	if (mnt[0] == '\0' || path[0] == '\0') {
		snprintf(err, errlen, "no cgroup v2 hierarchy mounted");
		return -1;
	}
	if (strcmp(path, "/") == 0) {
		snprintf(err, errlen, "the relay runs in the root cgroup: run it in its own "
		    "(systemd does)");
		return -1;
	}
	if ((size_t)snprintf(out, outlen, "%s%s", mnt, path) >= outlen) {
		snprintf(err, errlen, "cgroup path too long");
		return -1;
	}
	return 0;
}

/* The program would act on every process of the cgroup: the relay must be
 * alone in it. */
static int
cgroup_alone(const char *dir, char *err, size_t errlen)
{
	char p[600];
	FILE *f;
	long pid;
	int others = 0;

	if ((size_t)snprintf(p, sizeof(p), "%s/cgroup.procs", dir) >= sizeof(p) ||
	    (f = fopen(p, "r")) == NULL) {
		snprintf(err, errlen, "%s: %s", p, strerror(errno));
		return -1;
	}
	while (fscanf(f, "%ld", &pid) == 1)
		if (pid != (long)getpid())
			others++;
	fclose(f);
	if (others) {
		snprintf(err, errlen, "cgroup %s holds %d other process%s: the relay must be "
		    "alone in its cgroup (systemd's unit gives it one)", dir, others,
		    others == 1 ? "" : "es");
		return -1;
	}
	return 0;
}

struct iwbpf *
iwbpf_open(uint16_t data_port, size_t max_prefixes, char *err, size_t errlen)
{
	struct iwbpf *b;
	struct prog *p = NULL;
	union bpf_attr a;
	char cg[600], *log = NULL;
	int cg_fd = -1;

	if ((b = calloc(1, sizeof(*b))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	b->map_fd = b->ctr_fd = b->prog_fd = b->link_fd = -1;
	b->capacity = max_prefixes;
	if (own_cgroup(cg, sizeof(cg), err, errlen) == -1 ||
	    cgroup_alone(cg, err, errlen) == -1)
		goto fail;
	if ((cg_fd = open(cg, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) == -1) {
		snprintf(err, errlen, "%s: %s", cg, strerror(errno));
		goto fail;
	}
	if ((b->map_fd = map_create(BPF_MAP_TYPE_LPM_TRIE, sizeof(struct iwkey),
	    sizeof(uint32_t), (uint32_t)max_prefixes, BPF_F_NO_PREALLOC, "slot_iw")) == -1 ||
	    (b->ctr_fd = map_create(BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), sizeof(uint64_t), 1,
	    0, "slot_iw_ctr")) == -1) {
		snprintf(err, errlen, "creating the BPF maps: %s%s", strerror(errno),
		    errno == EPERM ? " (needs CAP_BPF)" : "");
		goto fail;
	}
	if ((p = malloc(sizeof(*p))) == NULL || (log = calloc(1, 65536)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	if (assemble(p, b->map_fd, b->ctr_fd, data_port) == -1) {
		snprintf(err, errlen, "assembling the BPF program failed");
		goto fail;
	}
	memset(&a, 0, sizeof(a));
	a.prog_type = BPF_PROG_TYPE_SOCK_OPS;
	a.insns = (uint64_t)(uintptr_t)p->i;
	a.insn_cnt = (uint32_t)p->n;
	a.license = (uint64_t)(uintptr_t)"ISC";
	a.log_buf = (uint64_t)(uintptr_t)log;
	a.log_size = 65536;
	a.log_level = 1;
	snprintf(a.prog_name, sizeof(a.prog_name), "slot_iw");
	if ((b->prog_fd = sys_bpf(BPF_PROG_LOAD, &a)) == -1) {
		int e = errno;
		size_t l = strlen(log);
		/* The verifier's last lines say why. */
		snprintf(err, errlen, "loading the BPF program: %s%s%s", strerror(e),
		    e == EPERM ? " (needs CAP_BPF and CAP_NET_ADMIN)" : "",
		    l ? "; verifier: " : "");
		if (l) {
			size_t have = strlen(err);
			const char *tail = l > 200 ? log + l - 200 : log;
			snprintf(err + have, errlen - have, "%s", tail);
		}
		goto fail;
	}
	memset(&a, 0, sizeof(a));
	a.link_create.prog_fd = (uint32_t)b->prog_fd;
	a.link_create.target_fd = (uint32_t)cg_fd;
	a.link_create.attach_type = BPF_CGROUP_SOCK_OPS;
	if ((b->link_fd = sys_bpf(BPF_LINK_CREATE, &a)) == -1) {
		snprintf(err, errlen, "attaching the BPF program to cgroup %s: %s", cg,
		    strerror(errno));
		goto fail;
	}
	close(cg_fd);
	free(p);
	free(log);
	return b;
fail:
	if (cg_fd >= 0)
		close(cg_fd);
	free(p);
	free(log);
	iwbpf_close(b);
	return NULL;
}

static void
key_of(struct iwkey *k, const struct addr *prefix, unsigned plen)
{
	memset(k, 0, sizeof(*k));
	k->prefixlen = TAG_BITS + plen;
	k->tag = prefix->family == AF_INET ? 4 : 6;
	memcpy(k->addr, prefix->bytes, prefix->family == AF_INET ? 4 : 16);
}

/* A lookup, update (flags 0: BPF_ANY) or delete (value NULL) of the
 * element key of the map fd. */
static int
map_elem(int cmd, int fd, const void *key, void *value)
{
	union bpf_attr a;

	memset(&a, 0, sizeof(a));
	a.map_fd = (uint32_t)fd;
	a.key = (uint64_t)(uintptr_t)key;
	a.value = (uint64_t)(uintptr_t)value;
	return sys_bpf(cmd, &a);
}

int
iwbpf_set(struct iwbpf *b, const struct addr *prefix, unsigned plen, uint32_t iw)
{
	struct iwkey k;

	key_of(&k, prefix, plen);
	return map_elem(BPF_MAP_UPDATE_ELEM, b->map_fd, &k, &iw) == -1 ? -1 : 0;
}

int
iwbpf_del(struct iwbpf *b, const struct addr *prefix, unsigned plen)
{
	struct iwkey k;

	key_of(&k, prefix, plen);
	if (map_elem(BPF_MAP_DELETE_ELEM, b->map_fd, &k, NULL) == -1 && errno != ENOENT)
		return -1;
	return 0;
}

int
iwbpf_check(struct iwbpf *b, char *err, size_t errlen)
{
	/* 192.0.2.0/24 (TEST-NET-1): never a peer. */
	struct addr t = { .family = AF_INET, .bytes = { 192, 0, 2, 0 } };

	if (iwbpf_set(b, &t, 24, 10) == -1 || iwbpf_del(b, &t, 24) == -1) {
		snprintf(err, errlen, "writing the BPF map without privileges: %s%s",
		    strerror(errno), errno == EPERM ? " (Linux before 6.5 with "
		    "kernel.unprivileged_bpf_disabled set refuses it)" : "");
		return -1;
	}
	return 0;
}

unsigned long long
iwbpf_applied(const struct iwbpf *b)
{
	uint32_t zero = 0;
	uint64_t v = 0;

	if (map_elem(BPF_MAP_LOOKUP_ELEM, b->ctr_fd, &zero, &v) == -1)
		return 0;
	return v;
}

size_t
iwbpf_capacity(const struct iwbpf *b)
{
	return b->capacity;
}

void
iwbpf_close(struct iwbpf *b)
{
	if (b == NULL)
		return;
	if (b->link_fd >= 0)
		close(b->link_fd);
	if (b->prog_fd >= 0)
		close(b->prog_fd);
	if (b->map_fd >= 0)
		close(b->map_fd);
	if (b->ctr_fd >= 0)
		close(b->ctr_fd);
	free(b);
}
