"""Minimal safetensors reading and writing with torch alone (the format: an 8-byte little-endian
header length, a JSON header of dtype/shape/offsets, then the raw little-endian data)."""
import json
import struct

import numpy as np
import torch

_NP = {"F32": np.float32, "I32": np.int32, "I64": np.int64, "F16": np.float16}


def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        if info["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
            t = torch.from_numpy(u.view(np.float32).copy())
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=_NP[info["dtype"]]).copy())
        out[name] = t.reshape(info["shape"])
    return out


def bf16_bits(t):
    """float tensor -> uint16 numpy array of its bf16 values (round to nearest even, like torch)."""
    u = t.detach().float().cpu().contiguous().numpy().view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return rounded.astype(np.uint16)


def save(path, tensors, dtype="BF16"):
    """Writes tensors (name -> float tensor) as BF16 (or F32), names sorted like safetensors does."""
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        raw = bf16_bits(t).tobytes() if dtype == "BF16" else t.detach().float().cpu().contiguous().numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((-len(h)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def round_bf16_(module):
    """Rounds every parameter of module to bf16 in place (what the written folder will hold)."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    return module
