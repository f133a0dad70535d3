#!/usr/bin/env python3
"""The reference for tests/test_utf8.cpp: Python's own UTF-8 decoder.
Reads records (u32 little-endian length, then that many bytes) from argv[1]
and writes, in the same framing, bytes.decode("utf-8", errors="replace")
re-encoded as UTF-8 to argv[2]."""
import struct
import sys

data = open(sys.argv[1], "rb").read()
out, i = [], 0
while i < len(data):
    (n,) = struct.unpack_from("<I", data, i)
    s = data[i + 4:i + 4 + n]
    i += 4 + n
    r = s.decode("utf-8", errors="replace").encode("utf-8")
    out.append(struct.pack("<I", len(r)) + r)
open(sys.argv[2], "wb").write(b"".join(out))
