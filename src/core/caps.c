#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "slot/caps.h"

static int
last_cap(void)
{
	FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "r");
	int n = CAP_LAST_CAP;

	if (f) {
		if (fscanf(f, "%d", &n) != 1)
			n = CAP_LAST_CAP;
		fclose(f);
	}
	return n;
}

int
caps_lookup(const char *user, uid_t *uid, gid_t *gid, char *err, size_t errlen)
{
	struct passwd *pw;

	if (strcmp(user, "root") == 0) {
		*uid = 0;
		*gid = 0;
		return 0;
	}
	errno = 0;
	if ((pw = getpwnam(user)) == NULL) {
		snprintf(err, errlen, "user '%s' does not exist (create it, or set [slotd] user; "
		    "\"root\" keeps root)", user);
		return -1;
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return 0;
}

int
caps_drop(uid_t uid, gid_t gid, uint64_t eff, uint64_t amb, char *err, size_t errlen)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	uint64_t keep = eff | amb;
	int last = last_cap();

	/* The bounding set first, while CAP_SETPCAP is effective; dropping a
	 * capability there leaves the permitted set as it is, so CAP_SETUID
	 * still works below. */
	for (int c = 0; c <= last && c < 64; c++) {
		/* Already out (a unit's CapabilityBoundingSet=): dropping it
		 * again would need CAP_SETPCAP for nothing. */
		if ((keep & (1ull << c)) || prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 0)
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) == -1 && errno != EINVAL) {
			snprintf(err, errlen, "dropping capability %d from the bounding set: %s",
			    c, strerror(errno));
			return -1;
		}
	}
	(void)prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
	if (uid != 0) {
		/* setuid() would clear the permitted set without this. */
		if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == -1 || setgroups(0, NULL) == -1 ||
		    setgid(gid) == -1 || setuid(uid) == -1) {
			snprintf(err, errlen, "cannot switch to uid %u gid %u: %s", (unsigned)uid,
			    (unsigned)gid, strerror(errno));
			return -1;
		}
		(void)prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
	}
	memset(data, 0, sizeof(data));
	data[0].effective = (uint32_t)eff;
	data[1].effective = (uint32_t)(eff >> 32);
	data[0].permitted = data[0].inheritable = (uint32_t)keep;
	data[1].permitted = data[1].inheritable = (uint32_t)(keep >> 32);
	if (syscall(SYS_capset, &h, data) == -1) {
		snprintf(err, errlen, "capset: %s", strerror(errno));
		return -1;
	}
	/* Root's programs get the bounding set anyway; another user's only
	 * what is ambient. */
	for (int c = 0; uid != 0 && c <= last && c < 64; c++)
		if ((keep & (1ull << c)) &&
		    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, c, 0, 0) == -1) {
			snprintf(err, errlen, "raising capability %d in the ambient set: %s", c,
			    strerror(errno));
			return -1;
		}
	if (uid != 0 && (setuid(0) != -1 || seteuid(0) != -1)) {
		snprintf(err, errlen, "root could be regained after dropping it");
		return -1;
	}
	return 0;
}
