"""A kernel that does not defer a connect's last ACK, as seen from one
namespace's loopback: every SYN-ACK on lo is answered at once with the ACK
the connecting socket holds back, sent from a raw socket, so the listener
completes the handshake and its application can accept. slot-relayd's
start-up check (sock_ackcheck_*, over 127.0.0.1) must then find "early".
IPv4 only, as the check tries 127.0.0.1 first."""

import socket
import struct
import threading

ETH_P_ALL = 0x0003
ETH_HLEN = 14                      # lo carries an Ethernet header of zeros
PACKET_OUTGOING = 4
TCP_SYN, TCP_ACK = 0x02, 0x10
TCPOPT_EOL, TCPOPT_NOP, TCPOPT_TIMESTAMP = 0, 1, 8


def _csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def _timestamps(opts):
    """(tsval, tsecr) from TCP options, or None."""
    i = 0
    while i < len(opts):
        kind = opts[i]
        if kind == TCPOPT_EOL:
            break
        if kind == TCPOPT_NOP:
            i += 1
            continue
        if i + 1 >= len(opts) or opts[i + 1] < 2:
            break
        if kind == TCPOPT_TIMESTAMP and opts[i + 1] == 10 and i + 10 <= len(opts):
            return struct.unpack("!II", opts[i + 2:i + 10])
        i += opts[i + 1]
    return None


def ack_for(frame):
    """(packet, destination address): the IPv4 packet that completes the
    handshake a SYN-ACK (an Ethernet frame from lo) belongs to, from its
    client's side; None for anything else. Its timestamps echo the
    SYN-ACK's, as the client's own would."""
    if len(frame) < ETH_HLEN + 40 or frame[12:14] != b"\x08\x00":
        return None
    ip = frame[ETH_HLEN:]
    ihl = (ip[0] & 0x0f) * 4
    if ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP or len(ip) < ihl + 20:
        return None
    src, dst = ip[12:16], ip[16:20]
    tcp = ip[ihl:]
    sport, dport, seq, ack, off, flags = struct.unpack("!HHIIBB", tcp[:14])
    if flags & (TCP_SYN | TCP_ACK) != TCP_SYN | TCP_ACK:
        return None
    ts = _timestamps(tcp[20:(off >> 4) * 4])
    opts = b""
    if ts is not None:
        # tsval: the SYN's own (echoed in the SYN-ACK), never older
        opts = struct.pack("!BBBBII", TCPOPT_NOP, TCPOPT_NOP, TCPOPT_TIMESTAMP, 10, ts[1], ts[0])
    hdr = struct.pack("!HHIIBBHHH", dport, sport, ack, (seq + 1) & 0xffffffff,
                      (5 + len(opts) // 4) << 4, TCP_ACK, 1024, 0, 0) + opts
    pseudo = dst + src + struct.pack("!BBH", 0, socket.IPPROTO_TCP, len(hdr))
    hdr = hdr[:16] + struct.pack("!H", _csum(pseudo + hdr)) + hdr[18:]
    # the kernel fills in the IP checksum, total length and id (raw(7))
    iph = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 0, 0, 0x4000, 64, socket.IPPROTO_TCP, 0,
                      dst, src)
    return iph + hdr, socket.inet_ntoa(src)


class EarlyAcker:
    """with EarlyAcker(net, ns): while inside, every SYN-ACK on ns's lo is
    ACKed at once; .sent counts the ACKs."""

    def __init__(self, net, ns):
        self.net, self.ns = net, ns
        self.sent = 0
        self._stop = threading.Event()
        self._thread = None
        self._rx = self._tx = None

    def __enter__(self):
        def socks():
            rx = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
            rx.bind(("lo", 0))
            rx.settimeout(0.05)
            return rx, socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
        self._rx, self._tx = self.net.in_ns(self.ns, socks)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            try:
                frame, where = self._rx.recvfrom(65536)
            except socket.timeout:
                continue
            # lo shows each packet twice: sent, then received
            if where[2] != PACKET_OUTGOING:
                continue
            out = ack_for(frame)
            if out is not None:
                self._tx.sendto(out[0], (out[1], 0))
                self.sent += 1

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(5)
        self._rx.close()
        self._tx.close()
        return False
