#!/bin/sh
# Regenerates onnx/onnx.pb-c.c and onnx/onnx.pb-c.h, the protobuf-c reader of
# onnx.proto (the files are committed so the build needs no protoc-c):
#   apt-get install -y protobuf-c-compiler && ONNX_PROTO=$CARVE_VENV/lib/python3.11/site-packages/onnx/onnx.proto sh onnx/proto.sh
# Debian 12: protobuf-c 1.4.1; onnx.proto of the pinned onnx 1.23.2 (tests/requirements.txt): IR
# version 11, with the nodes' metadata_props torch 2's exporter writes its module scopes in
# (python3-onnx 1.12's proto, the default below, lacks them: onnx/layers.c needs them).
set -e
cd "$(dirname "$0")"
proto=${ONNX_PROTO:-/usr/lib/python3/dist-packages/onnx/onnx.proto}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$proto" "$tmp/onnx.proto"
(cd "$tmp" && protoc-c --c_out=. onnx.proto)
cp "$tmp/onnx.pb-c.c" "$tmp/onnx.pb-c.h" .
