#!/usr/bin/env python3
"""Writes the hand-made seeds of the whole-core targets: inputs holding issue 64's
attacks (fuzz/src/frames.rs, `Attack`) next to genuine traffic, encoded the way the
`arbitrary` crate (1.x) decodes the targets' `Input`:

- integers little-endian, a bool as the low bit of a byte;
- an enum as a u32 tag `t`, variant `(t * variants) >> 32`, then its fields;
- the input's last field, its action list, as `1` and an action, again and again.

Only variants whose fields have fixed sizes are written here. Run it from fuzz/ after
changing an action enum (the variant lists below must follow the declaration order):

    python3 seeds.py
"""

import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def u8(value):
    return struct.pack("<B", value)


def u16(value):
    return struct.pack("<H", value)


def u32(value):
    return struct.pack("<I", value)


def boolean(value):
    return u8(1 if value else 0)


def variant(variants, name):
    """The u32 tag that `arbitrary` decodes as variant `name` of `variants`."""
    index = variants.index(name)
    tag = (index * (1 << 32) + len(variants) - 1) // len(variants)
    assert (tag * len(variants)) >> 32 == index
    return u32(tag)


def actions(*encoded):
    return b"".join(boolean(True) + action for action in encoded)


ATTACK = ["ChallengeFlood", "GaveUpFlood", "ParityPaths", "ManyPaths", "GapsHeldOpen",
          "AnswerChallenges"]


def challenge_flood(datagrams, path_id):
    return variant(ATTACK, "ChallengeFlood") + u8(datagrams) + u8(path_id)


def gave_up_flood(datagrams, first_seq, count):
    return variant(ATTACK, "GaveUpFlood") + u8(datagrams) + u32(first_seq) + u16(count)


def parity_paths(paths):
    return variant(ATTACK, "ParityPaths") + u8(paths)


def many_paths(paths):
    return variant(ATTACK, "ManyPaths") + u8(paths)


def gaps_held_open(packets, gap):
    return variant(ATTACK, "GapsHeldOpen") + u8(packets) + u16(gap)


def answer_challenges(path_id):
    return variant(ATTACK, "AnswerChallenges") + u8(path_id)


class TwoSessions:
    ACTION = ["Genuine", "Hostile"]
    GENUINE = ["Send", "DeliverAll", "Lose", "Advance"]
    HOSTILE = ["Init", "Sealed", "Burst", "Attack", "Raw"]

    @classmethod
    def genuine(cls, name, fields=b""):
        return variant(cls.ACTION, "Genuine") + variant(cls.GENUINE, name) + fields

    @classmethod
    def send(cls, packets, length):
        return cls.genuine("Send", u8(packets) + u16(length))

    @classmethod
    def deliver_all(cls):
        return cls.genuine("DeliverAll")

    @classmethod
    def lose(cls, to_server):
        return cls.genuine("Lose", boolean(to_server))

    @classmethod
    def advance(cls, millis, live):
        return cls.genuine("Advance", u16(millis) + boolean(live))

    @classmethod
    def attack(cls, attack, source):
        return variant(cls.ACTION, "Hostile") + variant(cls.HOSTILE, "Attack") + attack + u8(source)

    @classmethod
    def init(cls, path_id, sender, clock_step_ms, source):
        return (variant(cls.ACTION, "Hostile") + variant(cls.HOSTILE, "Init") + u8(path_id)
                + u32(sender) + u16(clock_step_ms) + u8(source))


class ServerCore:
    ACTION = ["Deliver", "DeliverAll", "Lose", "Replay", "RogueInit", "RogueSealed",
              "RogueAttack", "Raw", "ClientTun", "ServerTun", "Advance", "ClientSocket",
              "ServerSendFailed", "CloseClient", "CloseServer"]
    EDIT = ["None", "SetByte", "XorByte", "SetPathId", "Truncate", "Append"]

    @classmethod
    def rogue_init(cls, path_id, sender, clock_step_ms, source):
        return (variant(cls.ACTION, "RogueInit") + u8(path_id) + u32(sender) + u16(clock_step_ms)
                + variant(cls.EDIT, "None") + u8(source))

    @classmethod
    def attack(cls, attack, source):
        return variant(cls.ACTION, "RogueAttack") + attack + u8(source)

    @classmethod
    def advance(cls, millis):
        return variant(cls.ACTION, "Advance") + u16(millis)

    @classmethod
    def deliver_all(cls):
        return variant(cls.ACTION, "DeliverAll")


def write(target, name, data):
    directory = os.path.join(HERE, "corpus", target)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as seed:
        seed.write(data)


def two_sessions():
    t = TwoSessions
    # Genuine traffic around each attack: packets, delivered, time for the holds.
    def around(*hostile):
        return actions(t.send(7, 600), t.deliver_all(), *hostile, t.send(7, 1200),
                       t.deliver_all(), t.advance(300, True), t.send(3, 80), t.lose(True),
                       t.send(5, 400), t.advance(1500, True))
    write("two_sessions", "genuine-only", actions(
        t.send(7, 1000), t.deliver_all(), t.send(7, 50), t.lose(True), t.advance(200, False),
        t.deliver_all(), t.advance(1000, True)))
    # From the hostile peer's own address (0), the genuine client's (4) and a victim's (7).
    write("two_sessions", "challenge-flood", around(
        t.attack(challenge_flood(99, 0), 0), t.attack(challenge_flood(20, 1), 7)))
    write("two_sessions", "challenge-flood-validated", around(
        t.attack(many_paths(1), 7), t.attack(answer_challenges(1), 7),
        t.attack(challenge_flood(50, 1), 7)))
    write("two_sessions", "gave-up-flood", around(
        t.attack(gave_up_flood(99, 10, 65535), 0), t.attack(gave_up_flood(30, 0xffff_ff00, 4096), 0)))
    write("two_sessions", "parity-paths", around(t.attack(parity_paths(63), 0)))
    write("two_sessions", "many-paths", around(t.attack(many_paths(63), 4)))
    write("two_sessions", "gaps-held-open", around(
        t.attack(gaps_held_open(255, 3), 0), t.attack(gaps_held_open(100, 900), 0)))
    write("two_sessions", "handshakes", around(
        t.init(0, 7, 1, 4), t.init(1, 8, 1, 7), t.attack(gaps_held_open(40, 1), 1),
        t.init(2, 9, 0, 0)))


def server_core():
    s = ServerCore
    # Established, then the rogue's handshake (from a victim's address) answered.
    def rogue(*attacks):
        return boolean(True) + actions(s.rogue_init(0, 0x5e55_1011, 1, 10), s.advance(5),
                                       *attacks, s.advance(200), s.deliver_all())
    write("server_core", "rogue-challenge-flood", rogue(s.attack(challenge_flood(40, 0), 10),
                                                          s.attack(challenge_flood(10, 2), 0)))
    write("server_core", "rogue-gave-up-flood", rogue(s.attack(gave_up_flood(40, 1, 65535), 10)))
    write("server_core", "rogue-parity-paths", rogue(s.attack(parity_paths(63), 10)))
    write("server_core", "rogue-gaps-held-open", rogue(s.attack(gaps_held_open(60, 5), 10)))
    write("server_core", "rogue-validated-path", rogue(
        s.attack(many_paths(2), 11), s.attack(answer_challenges(1), 11),
        s.attack(answer_challenges(2), 12), s.attack(challenge_flood(5, 1), 11)))


if __name__ == "__main__":
    two_sessions()
    server_core()
