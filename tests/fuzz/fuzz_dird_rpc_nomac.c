/* fuzz_dird_rpc with any MAC accepted (drpc_fuzz_no_mac, a hook of the fuzz
 * build only): mutated values reach the methods' own checks. */
#define FUZZ_NO_MAC 1
#include "fuzz_dird_rpc.c"
