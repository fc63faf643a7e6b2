#ifndef SLOT_DIRECTORY_DIRD_RPC_H
#define SLOT_DIRECTORY_DIRD_RPC_H

#include <stdbool.h>

#include <xmlrpc-c/base.h>
#include <xmlrpc-c/server.h>

#include "dird.h"

/* slot-dird's XML-RPC methods: slot.register, slot.heartbeat, slot.report,
 * slot.list (docs/directory.md is normative). Each checks the fields' types,
 * the stamp, the MAC, freshness, then its own values, in that order, and
 * answers a fault with a code of enum dirp_fault at the first failure. */

/* A registry holding the four methods, their server info d. NULL with the
 * reason in env on failure. Free with xmlrpc_registry_free. */
xmlrpc_registry *drpc_registry(xmlrpc_env *env, struct dird *d);

#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
/* Only in the fuzz targets' build (tests/fuzz, make fuzz): true makes any
 * MAC verify, so that the fuzzer reaches the methods' own checks. */
extern bool drpc_fuzz_no_mac;
#endif

#endif
