#!/usr/bin/env python3
"""plan_schema.py SCHEMA FILE... - validates plan files (docs/plan.schema.json) or --json
documents (docs/output.schema.json) against a schema.

A small validator for the part of JSON Schema (2020-12) the schema uses: type,
const, enum, required, properties, additionalProperties: false, items,
minItems, maxItems, minimum, maximum, pattern, oneOf and $ref to #/$defs.  It
refuses a schema keyword it does not know, so the schema cannot grow past what
is checked.  Where the jsonschema package is installed it validates too, and
both must agree.  Prints one line per file; exit 1 when any file fails.
"""
import json, re, sys

KNOWN = {"$schema", "title", "description", "type", "const", "enum", "required", "properties",
         "additionalProperties", "items", "minItems", "maxItems", "minimum", "maximum", "pattern",
         "oneOf", "$ref", "$defs"}
TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def is_type(x, t):
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool) or isinstance(x, float) and x.is_integer()
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool)
    return isinstance(x, TYPES[t])


def check(x, s, root, path):
    """Returns the first error as 'path: what', or None."""
    for k in s:
        if k not in KNOWN:
            raise SystemExit("plan_schema.py: schema keyword %r is not supported" % k)
    if "$ref" in s:
        return check(x, root["$defs"][s["$ref"].split("/")[-1]], root, path)
    if "type" in s and not is_type(x, s["type"]):
        return "%s: not a %s" % (path, s["type"])
    if "const" in s and x != s["const"]:
        return "%s: must be %r" % (path, s["const"])
    if "enum" in s and x not in s["enum"]:
        return "%s: %r not one of %r" % (path, x, s["enum"])
    if "pattern" in s and isinstance(x, str) and not re.search(s["pattern"], x):
        return "%s: %r does not match %s" % (path, x, s["pattern"])
    if "minimum" in s and is_type(x, "number") and x < s["minimum"]:
        return "%s: below %s" % (path, s["minimum"])
    if "maximum" in s and is_type(x, "number") and x > s["maximum"]:
        return "%s: above %s" % (path, s["maximum"])
    if "oneOf" in s:
        errs = [check(x, o, root, path) for o in s["oneOf"]]
        n = errs.count(None)
        if n == 0:  # the choice that got deepest before failing says most
            return max(errs, key=lambda e: len(e.split(":")[0]))
        if n != 1:
            return "%s: matches %d of the oneOf choices, not 1" % (path, n)
    if isinstance(x, dict):
        for r in s.get("required", []):
            if r not in x:
                return "%s: missing %r" % (path, r)
        props = s.get("properties", {})
        for k, v in x.items():
            if k in props:
                e = check(v, props[k], root, path + "." + k)
                if e:
                    return e
            elif s.get("additionalProperties") is False:
                return "%s: unknown key %r" % (path, k)
    if isinstance(x, list):
        if len(x) < s.get("minItems", 0) or len(x) > s.get("maxItems", len(x)):
            return "%s: %d items" % (path, len(x))
        if "items" in s:
            for i, v in enumerate(x):
                e = check(v, s["items"], root, "%s[%d]" % (path, i))
                if e:
                    return e
    return None


def main():
    schema = json.load(open(sys.argv[1]))
    try:
        import jsonschema
    except ImportError:
        jsonschema = None
    bad = 0
    for f in sys.argv[2:]:
        doc = json.load(open(f))
        e = check(doc, schema, schema, "plan")
        if jsonschema is not None:
            ok2 = jsonschema.Draft202012Validator(schema).is_valid(doc)
            if ok2 != (e is None):
                e = e or "jsonschema disagrees: %s" % next(jsonschema.Draft202012Validator(schema).iter_errors(doc)).message
        print("%s: %s" % (f, e or "valid"))
        bad += e is not None
    sys.exit(1 if bad else 0)


main()
