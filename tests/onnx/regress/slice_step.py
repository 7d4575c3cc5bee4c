#!/usr/bin/python3
"""Writes slice_step.onnx: Slice with steps far beyond its dim (fuzz_onnx found
2^62-sized steps overflowing the folded slice's strides).  y = x[:, 0::2^62] +
C[:, -1::-2^63], x a float input [4, 6], C a constant [4, 6]: y is [4, 1],
x's first column plus C's last.  Run: /usr/bin/python3 slice_step.py"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

big, low = 2**62, -2**63
c = numpy_helper.from_array(np.arange(24, dtype=np.float32).reshape(4, 6), "C")
ints = lambda name, v: numpy_helper.from_array(np.array(v, dtype=np.int64), name)
inits = [c, ints("s0", [0]), ints("e0", [6]), ints("ax", [1]), ints("st0", [big]),
         ints("s1", [-1]), ints("e1", [low]), ints("st1", [low])]
nodes = [helper.make_node("Slice", ["x", "s0", "e0", "ax", "st0"], ["xs"], name="slice_x"),
         helper.make_node("Slice", ["C", "s1", "e1", "ax", "st1"], ["cs"], name="slice_c"),
         helper.make_node("Add", ["xs", "cs"], ["y"], name="add")]
g = helper.make_graph(nodes, "slice_step", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 1])], inits)
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
m.ir_version = 8
onnx.checker.check_model(m)
onnx.save(m, __file__.replace(".py", ".onnx"))
