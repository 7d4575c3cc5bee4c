#!/usr/bin/env python3
"""refpb.py FILE.pb - the tensors of tests/onnx's reference files, read without onnx.

A .ref.pb is an ONNX GraphProto whose initializers are the batch, "loss" and
"grad:PARAM" (tests/onnx/hf.py writes them).  This reads the few TensorProto
fields those use (dims, data_type, float_data, int64_data, raw_data, name)
with the standard library only, so the suite checks `carve run --inputs`
against torch's figures on a machine without onnx or numpy.  As a module:
read(path) -> {name: (dims, [values])}.
"""
import struct, sys


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7f) << s
        s += 7
        if c < 0x80:
            return v, i


def fields(b):
    i = 0
    while i < len(b):
        key, i = varint(b, i)
        num, wire = key >> 3, key & 7
        if wire == 0:
            v, i = varint(b, i)
        elif wire == 1:
            v, i = b[i:i + 8], i + 8
        elif wire == 5:
            v, i = b[i:i + 4], i + 4
        elif wire == 2:
            n, i = varint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wire)
        yield num, wire, v


def tensor(b):
    dims, kind, name, vals, raw = [], 1, "", [], None
    for num, wire, v in fields(b):
        if num == 1:
            dims += [v] if wire == 0 else list(packed(v))
        elif num == 2:
            kind = v
        elif num == 8:
            name = v.decode()
        elif num == 4:
            vals += list(struct.unpack("<%df" % (len(v) // 4), v)) if wire == 2 else [struct.unpack("<f", v)[0]]
        elif num == 7:
            vals += list(packed(v)) if wire == 2 else [v]
        elif num == 9:
            raw = v
    if raw is not None:
        fmt = {1: "f", 6: "i", 7: "q", 11: "d"}[kind]
        vals = list(struct.unpack("<%d%s" % (len(raw) // struct.calcsize(fmt), fmt), raw))
    return name, (dims, vals)


def packed(b):
    i = 0
    while i < len(b):
        v, i = varint(b, i)
        yield v - (1 << 64) if v >= 1 << 63 else v


def read(path):
    b = open(path, "rb").read()
    return dict(tensor(v) for num, wire, v in fields(b) if num == 5)


if __name__ == "__main__":
    for k, (d, v) in read(sys.argv[1]).items():
        print(k, d, len(v))
