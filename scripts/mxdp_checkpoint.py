#!/usr/bin/env python3
"""Reads an mxdp checkpoint step directory (src/io/checkpoint.h) with numpy.

    from mxdp_checkpoint import read_checkpoint
    ck = read_checkpoint("ckpt/step_000004.ckpt")   # or a --save-dir: its `latest`
    ck["iteration"], ck["version"], ck["extra"]
    for p in ck["params"]: p["name"], p["shape"], p["master"], p["m"], p["v"]   # float32 arrays

Checks the manifest's checksum, each rank file's size and header checksum
against the manifest, and that the pieces cover every element of every param
exactly once. The data chunks' checksums are left to mxdp (it verifies them on
every load).

As a command: python3 scripts/mxdp_checkpoint.py CKPT prints a summary.
"""
import json
import os
import struct
import sys

import numpy as np

FNV_OFFSET, FNV_PRIME, MASK = 0xCBF29CE484222325, 0x100000001B3, (1 << 64) - 1


def fnv1a64(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def resolve(path):
    """A step directory, or a save directory whose `latest` names one."""
    if os.path.isfile(os.path.join(path, "manifest")):
        return path
    latest = os.path.join(path, "latest")
    if os.path.isfile(latest):
        return os.path.join(path, open(latest).read().strip())
    raise ValueError(f"{path}: neither a step directory (no manifest) nor a save directory (no latest)")


def read_manifest(step_dir):
    raw = open(os.path.join(step_dir, "manifest"), "rb").read()
    if len(raw) < 32 or raw[:8] != b"MXDPCKPT":
        raise ValueError(f"{step_dir}/manifest: not an mxdp manifest")
    version, _, meta_len = struct.unpack_from("<IIQ", raw, 8)
    if version != 2 or 24 + meta_len + 8 != len(raw):
        raise ValueError(f"{step_dir}/manifest: version {version}, {len(raw)} bytes for {meta_len} of metadata")
    (checksum,) = struct.unpack_from("<Q", raw, 24 + meta_len)
    if fnv1a64(raw[:24 + meta_len]) != checksum:
        raise ValueError(f"{step_dir}/manifest: checksum mismatch")
    return json.loads(raw[24:24 + meta_len])


def read_checkpoint(path):
    step_dir = resolve(path)
    meta = read_manifest(step_dir)
    params = []
    for p in meta["params"]:
        n = int(np.prod(p["shape"], dtype=np.int64)) if p["shape"] else 1
        params.append({"name": p["name"], "shape": list(p["shape"]), "numel": n,
                       "master": np.full(n, np.nan, np.float32), "m": np.full(n, np.nan, np.float32),
                       "v": np.full(n, np.nan, np.float32), "covered": np.zeros(n, np.int32)})
    for f in meta["files"]:
        fp = os.path.join(step_dir, f["name"])
        raw = open(fp, "rb").read()
        if len(raw) != f["bytes"]:
            raise ValueError(f"{fp}: {len(raw)} bytes, the manifest says {f['bytes']}")
        if raw[:8] != b"MXDPSHRD":
            raise ValueError(f"{fp}: not an mxdp rank file")
        _, _, n_pieces, chunk_bytes, data_bytes = struct.unpack_from("<IIQQQ", raw, 8)
        pieces = np.frombuffer(raw, "<u8", 3 * n_pieces, 40).reshape(-1, 3)
        n_chunks = (data_bytes + chunk_bytes - 1) // chunk_bytes
        head = 40 + 24 * n_pieces + 8 * n_chunks
        (hsum,) = struct.unpack_from("<Q", raw, head)
        if fnv1a64(raw[:head]) != hsum or hsum != f["header_checksum"]:
            raise ValueError(f"{fp}: header checksum mismatch")
        data = np.frombuffer(raw, "<f4", data_bytes // 4, head + 8)
        at = 0
        for param, begin, length in pieces.tolist():
            p = params[param]
            for key in ("master", "m", "v"):
                p[key][begin:begin + length] = data[at:at + length]
                at += length
            p["covered"][begin:begin + length] += 1
        if at * 4 != data_bytes:
            raise ValueError(f"{fp}: pieces hold {at * 4} bytes of data, the header says {data_bytes}")
    for p in params:
        if not np.all(p.pop("covered") == 1):
            raise ValueError(f"{step_dir}: the pieces do not cover param {p['name']} exactly once")
        for key in ("master", "m", "v"):
            p[key] = p[key].reshape(p["shape"])
    return {"path": step_dir, "version": meta["version"], "iteration": meta["iteration"], "extra": meta["extra"],
            "params": params, "files": len(meta["files"])}


if __name__ == "__main__":
    ck = read_checkpoint(sys.argv[1])
    n = sum(p["numel"] for p in ck["params"])
    print(f"{ck['path']}: iteration {ck['iteration']}, version {ck['version']}, {len(ck['params'])} params, "
          f"{n} elements, {ck['files']} rank files")
