#!/usr/bin/env python3
"""Validates the Kubernetes manifests offline (no cluster is reachable from CI).

    deploy/k8s/check.py [--bin build/bucketrl]

- every object against the Kubernetes OpenAPI schemas of the oldest and newest versions
  kubernetes-validate carries (strict: unknown fields are errors), from PyPI in .venv;
- `kubectl kustomize deploy/k8s` renders the kustomization, where kubectl is installed;
- every container's args are a bucketrl command with flags that command has;
- every ConfigMap the pods read is defined here, and every Secret they read is one that
  deploy/k8s/README.md says how to create (`kubectl create secret generic NAME`);
- no Secret object with data is committed, and every container runs as non-root.
"""
import argparse
import importlib.util
import pathlib
import re
import shutil
import subprocess
import sys

import kubernetes_validate
import yaml

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
spec = importlib.util.spec_from_file_location("docs", ROOT / "scripts" / "docs.py")
docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs)


def schema_versions():
    d = pathlib.Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    vs = sorted({p.name.split("-")[0][1:] for p in d.iterdir()}, key=lambda v: tuple(map(int, v.split("."))))
    return [vs[0], vs[-1]]


def refs(obj, kind):
    """Names of ConfigMaps or Secrets a pod spec reads (envFrom, valueFrom, volumes)."""
    out = set()

    def walk(x):
        if isinstance(x, dict):
            for k, v in x.items():
                if k == f"{kind}Ref" or k == f"{kind}KeyRef":
                    out.add(v["name"])
                elif kind == "secret" and k == "secret" and "secretName" in v:
                    out.add(v["secretName"])
                elif kind == "configMap" and k == "configMap" and "name" in v:
                    out.add(v["name"])
                else:
                    walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(obj)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(ROOT / "build" / "bucketrl"))
    a = ap.parse_args()
    errors, objects = [], []
    for f in sorted(HERE.glob("*.yaml")):
        for obj in yaml.safe_load_all(f.read_text()):
            if obj:
                objects.append((f.name, obj))
    manifests = [(f, o) for f, o in objects if o.get("kind") != "Kustomization"]
    versions = schema_versions()
    for f, obj in manifests:
        for v in versions:
            try:
                kubernetes_validate.validate(obj, v, strict=True)
            except kubernetes_validate.ValidationError as e:
                errors.append(f"{f}: {obj['kind']} {obj['metadata']['name']} is not valid Kubernetes {v}: {e.message}"
                              f" at {'/'.join(map(str, e.path))}")
            except kubernetes_validate.utils.SchemaNotFoundError as e:
                errors.append(f"{f}: {e}")

    names = set(docs.commands(a.bin))
    configmaps = {o["metadata"]["name"] for _, o in manifests if o["kind"] == "ConfigMap"}
    readme = (HERE / "README.md").read_text()
    documented_secrets = set(re.findall(r"kubectl create secret generic ([\w-]+)", readme))
    pods = 0
    for f, obj in manifests:
        if obj["kind"] == "Secret" and (obj.get("data") or obj.get("stringData")):
            errors.append(f"{f}: Secret {obj['metadata']['name']} holds data: secrets are created, never committed")
        tmpl = obj.get("spec", {}).get("template", {}).get("spec")
        if not tmpl:
            continue
        pods += 1
        for c in tmpl["containers"]:
            args = [str(x) for x in c.get("args", [])]
            if not args or args[0] not in names:
                errors.append(f"{f}: container {c['name']}: args {args} do not start with a bucketrl command")
                continue
            known = docs.run(a.bin, args[0], "--help")
            for flag in (x for x in args if x.startswith("--")):
                if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", known):
                    errors.append(f"{f}: container {c['name']}: `bucketrl {args[0]}` has no {flag}")
            ctx = {**tmpl.get("securityContext", {}), **c.get("securityContext", {})}
            if not ctx.get("runAsNonRoot"):
                errors.append(f"{f}: container {c['name']} may run as root (set runAsNonRoot)")
        for name in refs(tmpl, "configMap") - configmaps:
            errors.append(f"{f}: ConfigMap {name} is read but not defined in deploy/k8s")
        for name in refs(tmpl, "secret") - documented_secrets:
            errors.append(f"{f}: Secret {name} is read but deploy/k8s/README.md does not say how to create it")

    if shutil.which("kubectl"):
        r = subprocess.run(["kubectl", "kustomize", str(HERE)], capture_output=True, text=True)
        if r.returncode != 0:
            errors.append(f"kubectl kustomize deploy/k8s failed: {r.stderr.strip()}")
        else:
            rendered = [o for o in yaml.safe_load_all(r.stdout) if o]
            if len(rendered) != len(manifests):
                errors.append(f"kustomize renders {len(rendered)} objects, the files hold {len(manifests)}")
        how = "kubectl kustomize renders them"
    else:
        how = "kubectl not installed: kustomization not rendered"
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"k8s: {len(manifests)} objects valid against Kubernetes {' and '.join(versions)} (strict); "
          f"{pods} pod templates run bucketrl commands with known flags as non-root; {how}")


if __name__ == "__main__":
    main()
