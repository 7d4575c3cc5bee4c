#!/bin/sh
# Regenerates onnx/onnx.pb-c.c and onnx/onnx.pb-c.h, the protobuf-c reader of
# onnx.proto (the files are committed so the build needs no protoc-c):
#   apt-get install -y protobuf-c-compiler python3-onnx && sh onnx/proto.sh
# Debian 12: protobuf-c 1.4.1, onnx.proto from python3-onnx 1.12 (IR version 8).
set -e
cd "$(dirname "$0")"
proto=${ONNX_PROTO:-/usr/lib/python3/dist-packages/onnx/onnx.proto}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$proto" "$tmp/onnx.proto"
(cd "$tmp" && protoc-c --c_out=. onnx.proto)
cp "$tmp/onnx.pb-c.c" "$tmp/onnx.pb-c.h" .
