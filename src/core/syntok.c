/*
 * The pipe token as a TCP option of the hijacked SYN: written by slotd into
 * the packet it hands back to NFQUEUE, read by the relay from the saved SYN.
 * Byte by byte in network order, like the wire codec.
 */

#include <string.h>
#include <netinet/in.h>

#include "slot/be.h"
#include "slot/synprobe.h"
#include "slot/syntok.h"

#define TCP_HDR_MIN 20
#define TCP_HDR_MAX 60

/* Where the TCP header starts and where the segment ends. exact: the
 * packet's IP length must be len (a whole packet, not saved headers). */
static enum syntok_result
locate(const uint8_t *pkt, size_t len, int exact, size_t *ihl, size_t *total)
{
	size_t doff;

	if (len < 1)
		return SYNTOK_MALFORMED;
	switch (pkt[0] >> 4) {
	case 4:
		if (len < 20)
			return SYNTOK_MALFORMED;
		*ihl = (size_t)(pkt[0] & 0x0f) * 4;
		*total = get16(pkt + 2);
		if (*ihl < 20 || pkt[9] != IPPROTO_TCP ||
		    (get16(pkt + 6) & 0x3fff) != 0)
			return SYNTOK_MALFORMED;
		break;
	case 6:
		/* Extension headers are not followed: slot's SYNs have none. */
		if (len < 40 || pkt[6] != IPPROTO_TCP)
			return SYNTOK_MALFORMED;
		*ihl = 40;
		*total = 40 + (size_t)get16(pkt + 4);
		break;
	default:
		return SYNTOK_MALFORMED;
	}
	if (exact ? *total != len : *total < len)
		return SYNTOK_MALFORMED;
	if (*ihl + TCP_HDR_MIN > len)
		return SYNTOK_MALFORMED;
	doff = (size_t)(pkt[*ihl + 12] >> 4) * 4;
	if (doff < TCP_HDR_MIN || *ihl + doff > len)
		return SYNTOK_MALFORMED;
	/* SYN without ACK, RST or FIN. */
	if ((pkt[*ihl + 13] & 0x17) != 0x02)
		return SYNTOK_MALFORMED;
	return SYNTOK_OK;
}

enum syntok_result
syntok_insert(uint8_t *pkt, size_t len, size_t cap, const uint8_t token[PROTO_TOKEN_LEN],
    size_t *newlen)
{
	enum syntok_result r;
	size_t ihl, total, doff;
	uint8_t *tcp;

	if ((r = locate(pkt, len, 1, &ihl, &total)) != SYNTOK_OK)
		return r;
	tcp = pkt + ihl;
	doff = (size_t)(tcp[12] >> 4) * 4;
	if (doff + SYNTOK_OPT_LEN > TCP_HDR_MAX || len + SYNTOK_OPT_LEN > cap ||
	    len + SYNTOK_OPT_LEN > 0xffff)
		return SYNTOK_NO_ROOM;
	/* First among the options: nothing to learn about an end-of-list
	 * option or padding at the end of the others. */
	memmove(tcp + TCP_HDR_MIN + SYNTOK_OPT_LEN, tcp + TCP_HDR_MIN, len - ihl - TCP_HDR_MIN);
	tcp[TCP_HDR_MIN] = SYNTOK_KIND;
	tcp[TCP_HDR_MIN + 1] = SYNTOK_OPT_LEN;
	put16(tcp + TCP_HDR_MIN + 2, SYNTOK_EXID);
	memcpy(tcp + TCP_HDR_MIN + 4, token, PROTO_TOKEN_LEN);
	tcp[12] = (uint8_t)(((doff + SYNTOK_OPT_LEN) / 4) << 4 | (tcp[12] & 0x0f));
	len += SYNTOK_OPT_LEN;
	put16(tcp + 16, 0);
	if ((pkt[0] >> 4) == 4) {
		put16(pkt + 2, (uint16_t)len);
		put16(pkt + 10, 0);
		put16(pkt + 10, synp_ip_checksum(pkt, ihl));
		put16(tcp + 16, synp_checksum(pkt + 12, pkt + 16, tcp, len - ihl));
	} else {
		put16(pkt + 4, (uint16_t)(len - 40));
		put16(tcp + 16, synp_checksum6(pkt + 8, pkt + 24, tcp, len - ihl));
	}
	*newlen = len;
	return SYNTOK_OK;
}

enum syntok_result
syntok_find(const uint8_t *hdr, size_t len, uint8_t token[PROTO_TOKEN_LEN])
{
	enum syntok_result r;
	size_t ihl, total, doff, i;
	const uint8_t *o;

	if ((r = locate(hdr, len, 0, &ihl, &total)) != SYNTOK_OK)
		return r;
	o = hdr + ihl;
	doff = (size_t)(o[12] >> 4) * 4;
	for (i = TCP_HDR_MIN; i < doff;) {
		if (o[i] == 0)		/* end of option list */
			break;
		if (o[i] == 1) {	/* no-operation */
			i++;
			continue;
		}
		if (i + 1 >= doff || o[i + 1] < 2 || i + o[i + 1] > doff)
			return SYNTOK_MALFORMED;
		if (o[i] == SYNTOK_KIND && o[i + 1] == SYNTOK_OPT_LEN &&
		    get16(o + i + 2) == SYNTOK_EXID) {
			memcpy(token, o + i + 4, PROTO_TOKEN_LEN);
			return SYNTOK_OK;
		}
		i += o[i + 1];
	}
	return SYNTOK_ABSENT;
}

const char *
syntok_str(enum syntok_result r)
{
	switch (r) {
	case SYNTOK_OK:
		return "ok";
	case SYNTOK_NO_ROOM:
		return "no room for the option";
	case SYNTOK_ABSENT:
		return "no token";
	case SYNTOK_MALFORMED:
		return "malformed";
	}
	return "?";
}
