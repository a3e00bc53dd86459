#!/usr/bin/env python3
"""Extracts the validation schema of one version of a CustomResourceDefinition as JSON.

    python3 extract.py CRD.yaml VERSION OUT.json

Writes spec.versions[name == VERSION].schema.openAPIV3Schema of the CRD, with every
`description` keyword removed (they document, they do not validate: without them the files are a
quarter of the size) and nothing else changed; keys sorted, compact. Needs PyYAML.
"""
import json
import sys

import yaml


def strip(schema):
    """`schema` without its `description` keywords (a property named `description` stays)."""
    if isinstance(schema, list):
        return [strip(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key in ("properties", "patternProperties", "definitions", "$defs"):
            out[key] = {name: strip(s) for name, s in value.items()}
        else:
            out[key] = strip(value)
    return out


def main():
    crd_path, version, out_path = sys.argv[1:4]
    with open(crd_path) as f:
        crd = yaml.safe_load(f)
    versions = [v for v in crd["spec"]["versions"] if v["name"] == version]
    if not versions:
        names = [v["name"] for v in crd["spec"]["versions"]]
        sys.exit(f"{crd_path}: no version {version} (it has {names})")
    schema = strip(versions[0]["schema"]["openAPIV3Schema"])
    with open(out_path, "w") as f:
        json.dump(schema, f, sort_keys=True, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    main()
