#!/usr/bin/env python3
"""make_onnx.py - writes the ONNX regression inputs of fuzz/seeds/onnx/ (Python's
standard library only: the protobuf wire format by hand, so no onnx package is
needed and nothing in them depends on one).  tests/e2e_readers.sh runs carve on
them; ./build.sh fuzz adds them to the ONNX target's corpus.

  deep-sequence.onnx   an input whose type is 6,000 nested sequence types
                       (12,000 nested messages, 44 KB): protobuf-c's recursive
                       unpack overflowed the stack (SIGSEGV) before carve
                       checked the depth first
  consts-total.onnx    ten ConstantOfShape nodes of 60M elements each, all
                       alive at once (about 4.8 GB of folded doubles from a
                       file under 1 KB), each added to the input: the fills
                       stay lazy (no elements made) and become constants of
                       the graph, so it imports in a few MB
  consts-read.onnx     the same fills, each read by a folded Neg (so their
                       elements are made): refused by the bound on the total
  ext-*.onnx           one float parameter w[2] in external data, read by
                       `--weights`; the location is ext.bin (the good one),
                       fifo (a named pipe: blocked open() for ever), link (a
                       symbolic link, to /etc/passwd in the tests: followed),
                       d/passwd (through a linked folder, d -> /etc: followed)
                       or ext.bin given twice (accepted)

Run it from anywhere: python3 fuzz/seeds/make_onnx.py (it writes beside itself).
"""
import os
import struct


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def ld(field, payload):  # a length-delimited field
    if isinstance(payload, str):
        payload = payload.encode()
    return varint(field << 3 | 2) + varint(len(payload)) + payload


def num(field, n):  # a varint field
    return varint(field << 3) + varint(n)


FLOAT, INT64 = 1, 7


def tensor_type(elem, dims):  # TypeProto{tensor_type{elem_type, shape{dim{dim_value}}}}
    shape = b"".join(ld(1, num(1, d)) for d in dims)
    return ld(1, num(1, elem) + ld(2, shape))


def value_info(name, type_bytes):
    return ld(1, name) + ld(2, type_bytes)


def node(op, inputs, outputs, attrs=b""):
    return b"".join(ld(1, i) for i in inputs) + b"".join(ld(2, o) for o in outputs) + ld(4, op) + attrs


def model(nodes, inputs, outputs, initializers=b""):
    graph = b"".join(ld(1, n) for n in nodes) + ld(2, "g") + initializers
    graph += b"".join(ld(11, i) for i in inputs) + b"".join(ld(12, o) for o in outputs)
    opset = ld(8, ld(1, "") + num(2, 17))
    return num(1, 8) + ld(2, "make_onnx.py") + ld(7, graph) + opset


def deep_sequence(levels):
    t = tensor_type(FLOAT, [2])
    for _ in range(levels):
        t = ld(4, ld(1, t))  # TypeProto{sequence_type{elem_type: t}}
    return model([], [value_info("x", t)], [value_info("y", tensor_type(FLOAT, []))])


def consts_total(count, elems, read=False):
    # TensorProto: dims(1), data_type(2), int64_data(7) packed, float_data(4) packed, name(8)
    shape = ld(8, "n") + num(1, 1) + num(2, INT64) + ld(7, varint(elems))
    one = num(1, 1) + num(2, FLOAT) + ld(4, struct.pack("<f", 1.0))
    value = ld(1, "value") + ld(5, one) + num(20, 4)  # AttributeProto{name, t, type=TENSOR}
    nodes = [node("ConstantOfShape", ["n"], ["c%d" % i], ld(5, value)) for i in range(count)]
    if read:  # a folder reads each fill's elements
        nodes += [node("Neg", ["c%d" % i], ["d%d" % i]) for i in range(count)]
    prev = "x"
    for i in range(count):
        nodes.append(node("Add", [prev, ("d%d" if read else "c%d") % i], ["s%d" % i]))
        prev = "s%d" % i
    nodes.append(node("ReduceSum", [prev], ["loss"], ld(5, ld(1, "keepdims") + num(3, 0) + num(20, 2))))
    return model(nodes, [value_info("x", tensor_type(FLOAT, [elems]))], [value_info("loss", tensor_type(FLOAT, []))],
                 ld(5, shape))


def external(locations):
    # w: float[2], data_location EXTERNAL (14 = 1), external_data entries (13) key/value
    entries = b"".join(ld(13, ld(1, k) + ld(2, v)) for k, v in locations)
    w = num(1, 2) + num(2, FLOAT) + ld(8, "w") + entries + num(14, 1)
    nodes = [node("Mul", ["x", "w"], ["y"]),
             node("ReduceSum", ["y"], ["loss"], ld(5, ld(1, "keepdims") + num(3, 0) + num(20, 2)))]
    return model(nodes, [value_info("x", tensor_type(FLOAT, [2]))], [value_info("loss", tensor_type(FLOAT, []))], ld(5, w))


def main():
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "onnx")
    os.makedirs(here, exist_ok=True)
    files = {
        "deep-sequence.onnx": deep_sequence(6000),
        "consts-total.onnx": consts_total(10, 60000000),
        "consts-read.onnx": consts_total(10, 60000000, read=True),
        "ext-good.onnx": external([("location", "ext.bin"), ("offset", "0"), ("length", "8")]),
        "ext-fifo.onnx": external([("location", "fifo")]),
        "ext-link.onnx": external([("location", "link"), ("length", "8")]),
        "ext-linked-folder.onnx": external([("location", "d/passwd"), ("length", "8")]),
        "ext-location-twice.onnx": external([("location", "ext.bin"), ("location", "ext.bin")]),
    }
    for name, data in files.items():
        with open(os.path.join(here, name), "wb") as f:
            f.write(data)
    with open(os.path.join(here, "ext.bin"), "wb") as f:  # w = [0.5, -2]
        f.write(struct.pack("<2f", 0.5, -2.0))


if __name__ == "__main__":
    main()
