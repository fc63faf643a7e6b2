#!/usr/bin/python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) and
dictionaries (tests/fuzz/<target>.dict): small valid inputs of every format,
from docs/protocol.md's test vectors (tests/unit/proto_vectors.h), the
directory's worked example (docs/directory.md), etc/*.conf and a cut of the
WonderNetwork data. Run from anywhere; the output is deterministic, and
`make fuzz` never rewrites it. Crashing inputs found later are added by hand
under corpus/<target>/crash-*."""

import hashlib
import hmac
import os
import re
import struct
import sys
import xmlrpc.client

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
KEY = bytes(range(32))
TS = "1700000000000000"


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def write_dict(target, words):
    with open(os.path.join(HERE, target + ".dict"), "w") as f:
        f.write("# libFuzzer dictionary, written by gen_corpus.py\n")
        for w in sorted(set(words)):
            esc = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "\\x%02x" % ord(c)
                          for c in w)
            f.write('"%s"\n' % esc)


# ---- wire codec: the test vectors, alone and as one stream
def proto():
    text = open(os.path.join(TOP, "tests/unit/proto_vectors.h")).read()
    vecs = {}
    for name, body in re.findall(r"static const uint8_t (pv_\w+)\[\] = \{([^}]*)\}", text):
        vecs[name] = bytes(int(x, 16) for x in re.findall(r"0x([0-9a-f]{2})", body))
    for name, b in vecs.items():
        write("proto", name[3:], b)
    write("proto", "stream", b"".join(list(vecs.values())[:3]))


# ---- packets: IPv4/IPv6 SYNs (syn_parse), SYN-ACK and RST (synp_parse)
def csum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def tcp(sport, dport, seq, ack, flags, opts=b""):
    off = (20 + len(opts)) // 4
    return struct.pack("!HHIIBBHHH", sport, dport, seq, ack, off << 4, flags, 64240, 0, 0) + opts


def ip4(src, dst, seg, ipopts=b""):
    ihl = (20 + len(ipopts)) // 4
    h = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl, 0, 4 * ihl + len(seg), 0, 0x4000, 64, 6, 0,
                    bytes(src), bytes(dst)) + ipopts
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    return h + seg


def ip6(src, dst, seg):
    return struct.pack("!IHBB16s16s", 6 << 28, len(seg), 6, 64, bytes(src), bytes(dst)) + seg


def syn():
    opts = bytes([2, 4, 5, 0xb4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7])
    a, b = [192, 0, 2, 1], [203, 0, 113, 5]
    a6 = [0x20, 1, 0xd, 0xb8] + [0] * 11 + [7]
    b6 = [0x20, 1, 0xd, 0xb8] + [0] * 11 + [5]
    write("syn", "syn4", b"\0" + ip4(a, b, tcp(40000, 443, 0xdeadbeef, 0, 0x02, opts)))
    write("syn", "syn4_ipopts", b"\0" + ip4(a, b, tcp(40000, 443, 1, 0, 0x02), b"\x01" * 4))
    write("syn", "syn4_tfo", b"\x40" + ip4(a, b, tcp(40000, 443, 7, 0, 0x02, opts)))
    write("syn", "syn6", b"\0" + ip6(a6, b6, tcp(40000, 443, 0xdeadbeef, 0, 0x02, opts)))
    write("syn", "synack4", b"\0" + ip4(b, a, tcp(443, 40000, 99, 0xdeadbef0, 0x12, opts[:4])))
    write("syn", "rst4", b"\0" + ip4(b, a, tcp(443, 40000, 0, 0xdeadbef0, 0x14)))
    # what the IPv6 raw socket reads: the TCP segment alone (synp_parse6)
    write("syn", "synack6_segment", b"\0" + tcp(443, 40000, 99, 0xdeadbef0, 0x12, opts[:4]))
    # with a pipe token (kind 253, ExID "SL"), as the relay's saved SYN has it
    tok = bytes([253, 12, 0x53, 0x4c]) + bytes(range(1, 9))
    write("syn", "syn4_token", b"\0" + ip4(a, b, tcp(40000, 443, 0xdeadbeef, 0, 0x02, tok + opts)))
    write("syn", "syn6_token", b"\0" + ip6(a6, b6, tcp(40000, 443, 0xdeadbeef, 0, 0x02, tok + opts)))


# ---- slot-dird's XML-RPC calls, signed with KEY (docs/directory.md)
def body_of(method, f):
    if method == "slot.register":
        return "%s\n%d" % (f["relay"], f["data_port"])
    if method == "slot.heartbeat":
        return f["relay"]
    if method == "slot.report":
        return f["relay"] + "\n" + "".join("%s %d\n" % (e["peer"], e["rtt_us"])
                                           for e in f["rtts"])
    return f["version"]


def call(method, fields, nonce, mac=None):
    text = "slot-dird/1\n%s\n%s\n%s\n%s" % (method, TS, nonce, body_of(method, fields))
    if mac is None:
        mac = hmac.new(KEY, text.encode(), hashlib.sha256).hexdigest()
    return xmlrpc.client.dumps((dict(fields, ts=TS, nonce=nonce, mac=mac),), methodname=method)


def dird_rpc():
    calls = {
        "register_new": call("slot.register", {"relay": "198.51.100.7:7600", "data_port": 7601},
                             "0000000000000001"),
        "register_known": call("slot.register", {"relay": "192.0.2.1:7600", "data_port": 7602},
                               "0000000000000002"),
        "register_v6": call("slot.register", {"relay": "[2001:db8::9]:7600", "data_port": 7601},
                            "0000000000000003"),
        "heartbeat": call("slot.heartbeat", {"relay": "192.0.2.1:7600"}, "0123456789abcdef"),
        "heartbeat_unknown": call("slot.heartbeat", {"relay": "198.51.100.9:7600"},
                                  "0000000000000004"),
        "report": call("slot.report", {"relay": "192.0.2.1:7600", "rtts": [
            {"peer": "192.0.2.2:7600", "rtt_us": 1500},
            {"peer": "[2001:db8::3]:7600", "rtt_us": 61000}]}, "0123456789abcdef"),
        "report_empty": call("slot.report", {"relay": "192.0.2.2:7600", "rtts": []},
                             "0000000000000005"),
        "list_new": call("slot.list", {"version": ""}, "0000000000000006"),
        "list_old": call("slot.list", {"version": "0123456789abcdef-1"}, "0000000000000007"),
        "bad_mac": call("slot.heartbeat", {"relay": "192.0.2.1:7600"}, "0000000000000008",
                        mac="00" * 32),
        "no_struct": xmlrpc.client.dumps((1, "x"), methodname="slot.list"),
        "unknown_method": xmlrpc.client.dumps(({"version": ""},), methodname="slot.nope"),
    }
    for name, xml in calls.items():
        write("dird_rpc", name, xml)
        write("dird_rpc_nomac", name, xml)
    words = ["<?xml version='1.0'?>", "<methodCall>", "</methodCall>", "<methodName>",
             "</methodName>", "<params>", "</params>", "<param>", "</param>", "<value>",
             "</value>", "<struct>", "</struct>", "<member>", "</member>", "<name>", "</name>",
             "<string>", "</string>", "<int>", "</int>", "<i4>", "</i4>", "<i8>", "<boolean>",
             "<double>", "<base64>", "<array>", "</array>", "<data>", "</data>", "<nil/>",
             "<dateTime.iso8601>", "slot.register", "slot.heartbeat", "slot.report",
             "slot.list", "relay", "data_port", "rtts", "peer", "rtt_us", "version", "ts",
             "nonce", "mac", "192.0.2.1:7600", "[2001:db8::3]:7600", "&amp;", "&#x41;"]
    write_dict("dird_rpc", words)
    write_dict("dird_rpc_nomac", words)
    return words


# ---- slot.list answers, as slotd reads them
def dirclient(words):
    relays = [{"relay": "192.0.2.1:7600", "data_port": 7601, "group": 0},
              {"relay": "192.0.2.2:7600", "data_port": 7601, "group": 0},
              {"relay": "[2001:db8::3]:7600", "data_port": 7601, "group": 1}]
    rtt = struct.pack("<6H", 0, 15, 15, 0, 610, 605)
    land = {"index": [0, 2], "weight": [2.0, 1.0], "rtt": xmlrpc.client.Binary(rtt)}
    ans = {
        "list_full": {"version": "0123456789abcdef-3", "changed": True, "relays": relays,
                      "landmarks": land},
        "list_noland": {"version": "0123456789abcdef-3", "changed": True, "relays": relays},
        "list_unchanged": {"version": "0123456789abcdef-3", "changed": False, "relays": []},
        "list_empty": {"version": "0123456789abcdef-0", "changed": True, "relays": []},
    }
    # The text form (docs/directory.md): dirp_list_text's lines, the rows beside.
    text = "".join("%s\n" % x for x in [
        "slot-listing/1", "nonce 0123456789abcdef", "version 0123456789abcdef-3", "changed 1",
        "relays 3"] + ["relay %s %d %d -" % (r["relay"], r["data_port"], r["group"])
                       for r in relays] + [
        "landmarks 2 " + hashlib.sha256(rtt).hexdigest(), "landmark 0 2", "landmark 2 1",
        "revoked 0"])
    ans["text_full"] = {"format": "text", "text": xmlrpc.client.Binary(text.encode()),
                        "rtt": xmlrpc.client.Binary(rtt)}
    for name, v in ans.items():
        write("dirclient", name, xmlrpc.client.dumps((v,), methodresponse=True))
    write("dirclient", "fault", xmlrpc.client.dumps(xmlrpc.client.Fault(2, "mac does not verify")))
    write_dict("dirclient", words + ["<methodResponse>", "</methodResponse>", "<fault>",
                                     "faultCode", "faultString", "changed", "relays", "group",
                                     "landmarks", "index", "weight", "rtt", "format",
                                     "text", "slot-listing/1", "landmark"])


def xmlguard():
    for src in ("dird_rpc/report", "dird_rpc/list_new"):
        write("xmlguard", os.path.basename(src),
              open(os.path.join(HERE, "corpus", src), "rb").read())
    write("xmlguard", "utf16le", b"\xff\xfe<\x00?\x00")
    write("xmlguard", "latin1", '<?xml version="1.0" encoding="ISO-8859-1"?><a/>')
    write("xmlguard", "dtd", '<?xml version="1.0"?><!DOCTYPE a [<!ENTITY b "c">]><a>&b;</a>')
    write("xmlguard", "surrogate", b"<a>\xc3\xa9\xed\xa0\x80</a>")


def dsnap():
    good = ("slot-dird-state 1\nboot 0123456789abcdef\ncounter 7\nclean 1\nsaved %d\n"
            "relay 192.0.2.1:7600 7601 0 1699999990000000\n"
            "relay 192.0.2.2:7600 7601 0 1699999995000000\n"
            "relay [2001:db8::3]:7600 7601 1 1699999999000000\n"
            "rtt 192.0.2.1:7600 192.0.2.2:7600 1500\n"
            "rtt 192.0.2.1:7600 [2001:db8::3]:7600 61000\n"
            "rtt 192.0.2.2:7600 192.0.2.1:7600 1600\n"
            "end 3 3\n") % 1700000000000000
    write("dsnap", "three", good)
    write("dsnap", "empty", "slot-dird-state 1\nboot 0000000000000001\ncounter 0\nclean 0\n"
          "saved 1700000000000000\nend 0 0\n")
    write("dsnap", "expired", good.replace("1699999990000000", "1600000000000000"))
    write_dict("dsnap", ["slot-dird-state 1\n", "boot ", "counter ", "clean ", "saved ",
                         "relay ", "rtt ", "end ", "192.0.2.1:7600", "[::1]:1"])


def dirsync():
    write("dirsync", "three", "slot-relays 1 0123456789abcdef-3\n192.0.2.1:7600 7601 0\n"
          "192.0.2.2:7600 7601 0\n[2001:db8::3]:7600 7601 1\n")
    write("dirsync", "empty", "slot-relays 1 v1\n")
    write_dict("dirsync", ["slot-relays 1 ", "192.0.2.1:7600", "[2001:db8::3]:7600", " 7601 "])


def ctl():
    for i, l in enumerate(["status\n", "status json\n", "pipes json\r\n", "counters\n",
                           "metrics\n", "relays 192.0.2.1:7600 json\n", "cache x\n"]):
        write("ctl_line", "line%d" % i, l)
    for i, r in enumerate(["GET /metrics HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n",
                           "GET /metrics?x=1 HTTP/1.0\n\n", "POST /metrics HTTP/1.1\r\n\r\n",
                           "GET /other HTTP/1.1\r\n\r\n"]):
        write("ctl_http", "req%d" % i, bytes([3 + 17 * i]) + r.encode())
    write_dict("ctl_http", ["GET", "HTTP/1.1", "HTTP/1.0", "/metrics", "\r\n", "\r\n\r\n",
                            "\n\n", "Host: "])


def conf():
    for t, f in (("cconf", "slotd"), ("rconf", "relayd"), ("dconf", "dird")):
        text = open(os.path.join(TOP, "etc", f + ".conf")).read()
        lines = [l for l in text.splitlines() if l.strip() and not l.lstrip().startswith("#")]
        write(t, "etc", "\n".join(lines) + "\n")
        words = []
        for l in lines:
            m = re.match(r"\s*\[(\w+)\]", l)
            if m:
                words.append("[%s]" % m.group(1))
            m = re.match(r"\s*(\w+)\s*=", l)
            if m:
                words.append(m.group(1) + " = ")
        words += ["yes", "no", "1s", "250ms", "64k", "1M", "0x", "::1", "127.0.0.1:7600",
                  "http://", "https://", " ; ", "\n"]
        write_dict(t, words)
    write("cconf", "min", "[slotd]\nkey_file = /k\ncontrol_socket = /s\n[hijack]\nports = 443\n"
          "[relays]\nrelay = 192.0.2.1:7600 data=7601 group=2\nrelay = [2001:db8::3]:7600\n")
    write("rconf", "min", "[relay]\nkey_file = /k\nstats_socket = /s\n")
    write("dconf", "min", "[dird]\nkey_file = /k\ncontrol_socket = /s\n")


def matrices():
    pings = os.path.join("/work/shared/data/wondernetwork",
                         "pings-2020-07-19-2020-07-20-grouped.csv")
    servers = os.path.join("/work/shared/data/wondernetwork", "servers-2020-07-19.csv")
    cut = None
    if os.path.exists(pings):
        rows = open(pings).read().splitlines()
        keep = [r for r in rows[1:] if all(int(x) in (0, 1, 2, 3, 125)
                                           for x in r.split(",")[:2])]
        cut = rows[0] + "\n" + "\n".join(keep) + "\n"
    else:
        cut = "source,destination,min,avg,max,mdev\n0,1,1,2,3,0\n1,0,1,2.5,3,0\n"
    write("rttmat", "pairs", b"\x00" + cut.encode())
    write("rttmat", "pairs_quoted", b"\x81" + b'"source","destination","avg"\r\n'
          b'"a","b","10.5"\r\n"b","a",""\r\n"a","c",0\r\n')
    sq = "# 3 nodes\n0 10 20\n10 0 nan\n20.5 -  0\n"
    write("rttmat", "square", b"\x01" + sq.encode())
    srv = (open(servers).read().splitlines()[:4] if os.path.exists(servers) else
           ["id,name", "1,Melbourne"])
    write("rttmat", "servers", b"\x02" + ("\n".join(srv + ["a,Alpha", '"b","B, q"']) +
                                          "\n").encode())
    write("simmat", "pairs", b"\x01" + cut.encode())
    write("simmat", "square", b"\x00" + sq.encode())
    write("simmat", "square9", b"\x00" + "".join(
        " ".join("0" if i == j else "%d.%03d" % (i + j, i * j) for j in range(9)) + "\n"
        for i in range(9)).encode())
    words = ["source", "destination", "avg", "min", "id", "name", "nan", "inf", "-", "x",
             ",", "\"", "\r\n", "1e308", "0.001"]
    write_dict("rttmat", words)
    write_dict("simmat", words)


def main():
    proto()
    syn()
    dirclient(dird_rpc())
    xmlguard()
    dsnap()
    dirsync()
    ctl()
    conf()
    matrices()
    return 0


if __name__ == "__main__":
    sys.exit(main())
