#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/capability.h>

#include "caps.h"

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
caps_keep_only(uint64_t keep, char *err, size_t errlen)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct data[2];
	int last = last_cap();

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
	memset(data, 0, sizeof(data));
	data[0].effective = data[0].permitted = (uint32_t)keep;
	data[1].effective = data[1].permitted = (uint32_t)(keep >> 32);
	if (syscall(SYS_capset, &h, data) == -1) {
		snprintf(err, errlen, "capset: %s", strerror(errno));
		return -1;
	}
	return 0;
}
