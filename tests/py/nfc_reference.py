#!/usr/bin/env python3
"""The reference for the NFC test of tests/test_tokenizers.cpp: Python's unicodedata.

    nfc_reference.py OUT_JSON

For every code point c in U+0000..U+2FFFF and U+E0000..U+E0FFF (no surrogates)
and each probe p of PROBES (c alone, c + U+0301, "a" + c, c + U+1161 U+11A8),
writes [probe index, c, NFC(p)] where NFC changes the probe, and the Unicode version.
"""
import json
import sys
import unicodedata

PROBES = [lambda c: c, lambda c: c + "\u0301", lambda c: "a" + c, lambda c: c + "\u1161\u11a8"]


def main():
    out = []
    cps = [cp for r in (range(0, 0x30000), range(0xE0000, 0xE1000)) for cp in r if not 0xD800 <= cp <= 0xDFFF]
    for cp in cps:
        for k, probe in enumerate(PROBES):
            s = probe(chr(cp))
            n = unicodedata.normalize("NFC", s)
            if n != s:
                out.append([k, cp, n])
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump({"unicode": unicodedata.unidata_version, "changed": out}, f, ensure_ascii=True)


if __name__ == "__main__":
    main()
