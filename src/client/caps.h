#ifndef SLOT_CLIENT_CAPS_H
#define SLOT_CLIENT_CAPS_H

#include <stddef.h>
#include <stdint.h>

/* Keeps only the capabilities in keep (a mask of 1 << CAP_x) in every set,
 * the bounding set included, so that programs slotd runs (iptables-restore)
 * get no more either. The user stays root: files slotd needs on reload
 * (config, key) are root's. Returns 0, or -1 with a reason in err. */
int caps_keep_only(uint64_t keep, char *err, size_t errlen);

#endif
