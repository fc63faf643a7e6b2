#ifndef SLOT_DIRECTORY_DIRD_RPC_H
#define SLOT_DIRECTORY_DIRD_RPC_H

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

#endif
