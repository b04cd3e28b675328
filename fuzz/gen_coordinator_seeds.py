#!/usr/bin/python3
"""Writes the seed programs of coordinator_fuzz (fuzz/corpus/coordinator/).

The byte layout follows coordinator_fuzz.cc: 6 option bytes, then one op
byte per call (Pick(8): 0 Join, 1 CancelJoin, 2 Watch, 3 WatchClosed,
4 Report, 5 Leave, 6 Tick +50ms*b, 7 Tick +1s*b) followed by its operands.
A request is a length byte and serialized protobuf bytes, then a pin byte
(1 node id, 2 incarnation, 4 job id, 8 join sizes / round) and the picks the
pin asks for; a Join ends with its peer pick and its deadline (0: none, or 1
and a byte of seconds). Rerun after changing the layout: /usr/bin/python3 gen_coordinator_seeds.py
"""
import os

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "coordinator")
ALL = 1 | 2 | 4 | 8


def varint(v):
    v &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def field_varint(number, value):
    return varint(number << 3) + varint(value)


def options(min_nodes, extra_nodes, max_restarts, last_call_100ms=5, heartbeat_s=5, min_wait=20):
    return bytes([min_nodes - 1, extra_nodes, max_restarts, last_call_100ms, heartbeat_s - 1,
                  min_wait - 10])


def request(raw=b"", pin=ALL, node=0, incarnation=1, extra=b""):
    out = bytes([len(raw)]) + raw + bytes([pin])
    if pin & 1:
        out += bytes([node])
    if pin & 2:
        out += bytes([incarnation - 1])
    return out + extra


def join(node, incarnation=1, hint=None, raw=b"", peer=0, deadline_s=None):
    hint = node if hint is None else hint
    # peer, then the deadline: 0 = none, or 1 and seconds from now.
    tail = bytes([peer, 0]) if deadline_s is None else bytes([peer, 1, deadline_s])
    return bytes([0]) + request(raw, ALL, node, incarnation, bytes([0, hint + 1])) + tail


def watch(node, incarnation=1, next_round=0):
    return bytes([2]) + request(b"", ALL, node, incarnation, bytes([next_round]))


def report(node, state, incarnation=1, exit_code=0, next_round=0):
    raw = field_varint(4, state) + (field_varint(5, exit_code) if exit_code else b"")
    return bytes([4]) + request(raw, ALL, node, incarnation, bytes([next_round]))


def leave(node, incarnation=1):
    return bytes([5]) + request(b"", ALL & ~8, node, incarnation)


def tick_ms(ms):
    return bytes([6, ms // 50])


def tick_s(s):
    return bytes([7, s])


RUNNING, SUCCEEDED, FAILED = 1, 2, 3
# round 1 closes on the first Tick after last call; its Watch / Report name
# round last.round + pick, and the snapshot's round is 0 until it closes.
SEEDS = {
    "static_two_nodes_succeed": options(2, 0, 0) + join(0) + join(1) + tick_ms(600)
    + watch(0) + watch(1) + report(0, RUNNING) + report(1, RUNNING)
    + report(0, SUCCEEDED) + report(1, SUCCEEDED),
    "worker_fails_restart": options(2, 0, 1) + join(0) + join(1) + tick_ms(600)
    + watch(0) + watch(1) + report(1, FAILED, exit_code=3) + join(0) + join(1)
    + tick_ms(600) + watch(0) + watch(1),
    "heartbeat_lost": options(2, 1, 1) + join(0) + join(1) + join(2) + tick_ms(600)
    + watch(0) + watch(1) + watch(2) + tick_s(3) + report(0, RUNNING) + tick_s(10),
    "fenced_incarnation": options(2, 0, 0) + join(0) + join(1) + tick_ms(600)
    + watch(0) + bytes([3, 0]) + join(0, incarnation=2) + tick_s(6) + report(0, RUNNING),
    "cancel_and_leave": options(1, 2, 0) + join(0) + bytes([1, 0]) + join(1) + join(2)
    + leave(2) + tick_ms(1000) + watch(1) + leave(1),
    # Issue 7, D7: last_round = 2^64-1 wraps the round number to 0, and
    # restart_count is not range-checked (INT32_MAX overflows, -1 is taken).
    "d7_last_round_max_wraps_round": options(1, 0, 0)
    + join(0, raw=field_varint(7, (1 << 64) - 1)) + tick_ms(600) + watch(0),
    "d7_restart_count_max_overflows": options(1, 0, 0)
    + join(0, raw=field_varint(7, 3) + field_varint(10, (1 << 31) - 1)) + tick_ms(600),
    "restart_count_negative": options(1, 0, 0)
    + join(0, raw=field_varint(7, 3) + field_varint(10, -1)) + tick_ms(600),
    # A parked join answered before its deadline, naming the missing rank.
    "join_deadline_expires": options(2, 0, 0) + join(0, deadline_s=3) + tick_s(1) + tick_s(1)
    + tick_s(1) + join(1) + join(0) + tick_ms(600),
    "bad_identity": options(1, 0, 0) + bytes([0]) + request(b"\x0a\x02\x0a\x00", 0)
    + bytes([3]) + join(0, peer=3) + join(0, incarnation=2) + tick_s(1),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
