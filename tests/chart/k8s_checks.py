"""Structural checks of rendered Kubernetes objects, without a cluster or its OpenAPI schema.

Each check follows a rule the API server (or the controller that reads the object) enforces;
check_objects returns every violation found, as messages naming the object and the field.
"""

import re

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
# IANA service name, as Kubernetes validates container and Service port names.
PORT_NAME = re.compile(r"^(?=.*[a-z])[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")

KNOWN_KINDS = {
    "Deployment": "apps/v1",
    "Service": "v1",
    "ConfigMap": "v1",
    "ServiceAccount": "v1",
    "Pod": "v1",
    "PodDisruptionBudget": "policy/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
}


def _labels_ok(where, labels, errors):
    for k, v in (labels or {}).items():
        name = k.split("/")[-1]
        if len(name) > 63 or not LABEL_VALUE.match(name) or not name:
            errors.append(f"{where}: label key {k!r} is not a valid label name")
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errors.append(f"{where}: label {k}={v!r} is not a valid label value")


def _check_pod_spec(where, spec, errors):
    volumes = {}
    for v in spec.get("volumes", []):
        if v["name"] in volumes:
            errors.append(f"{where}: volume {v['name']!r} defined twice")
        volumes[v["name"]] = v
        sources = [k for k in v if k != "name"]
        if len(sources) != 1:
            errors.append(f"{where}: volume {v['name']!r} has sources {sources}, needs one")
        if "configMap" in v:
            for item in v["configMap"].get("items", []):
                if not CONFIGMAP_KEY.match(item["key"]):
                    errors.append(f"{where}: configMap item key {item['key']!r} is invalid")
                if item["path"].startswith("/") or ".." in item["path"].split("/"):
                    errors.append(f"{where}: configMap item path {item['path']!r} is invalid")
    containers = spec.get("containers", [])
    if not containers:
        errors.append(f"{where}: no containers")
    for c in containers:
        cw = f"{where} container {c.get('name')!r}"
        if not DNS1123_LABEL.match(c.get("name", "")):
            errors.append(f"{cw}: name is not a DNS-1123 label")
        if not c.get("image"):
            errors.append(f"{cw}: no image")
        for key in ("command", "args"):
            if key in c and not all(isinstance(a, str) for a in c[key]):
                errors.append(f"{cw}: {key} holds non-strings: {c[key]}")
        port_names = set()
        for p in c.get("ports", []):
            name = p.get("name")
            if not name:
                errors.append(f"{cw}: port {p.get('containerPort')} has no name")
            elif len(name) > 15 or not PORT_NAME.match(name):
                errors.append(f"{cw}: port name {name!r} is not an IANA service name")
            elif name in port_names:
                errors.append(f"{cw}: port name {name!r} used twice")
            port_names.add(name)
            if not isinstance(p.get("containerPort"), int) or not 0 < p["containerPort"] < 65536:
                errors.append(f"{cw}: containerPort {p.get('containerPort')!r} out of range")
        numbers = [p.get("containerPort") for p in c.get("ports", [])]
        if len(numbers) != len(set(numbers)):
            errors.append(f"{cw}: containerPort numbers repeat: {numbers}")
        for e in c.get("env", []):
            if not ENV_NAME.match(e.get("name", "")):
                errors.append(f"{cw}: env name {e.get('name')!r} is invalid")
            if ("value" in e) == ("valueFrom" in e):
                errors.append(f"{cw}: env {e.get('name')!r} needs exactly one of value/valueFrom")
        mounts = set()
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                errors.append(f"{cw}: volumeMount {m['name']!r} names no volume")
            if m["mountPath"] in mounts:
                errors.append(f"{cw}: mountPath {m['mountPath']} used twice")
            mounts.add(m["mountPath"])
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            if probe in c:
                handlers = [k for k in ("grpc", "httpGet", "tcpSocket", "exec") if k in c[probe]]
                if len(handlers) != 1:
                    errors.append(f"{cw}: {probe} has handlers {handlers}, needs one")
        res = c.get("resources", {})
        for name, qty in res.get("limits", {}).items():
            req = res.get("requests", {}).get(name)
            if "/" in name and req is not None and req != qty:
                # Extended resources (nvidia.com/gpu, rdma/...) cannot be overcommitted.
                errors.append(f"{cw}: extended resource {name} requests {req} != limits {qty}")
        for name in res.get("requests", {}):
            if "/" in name and name not in res.get("limits", {}):
                errors.append(f"{cw}: extended resource {name} is requested but not limited")


def check_object(obj, errors):
    kind = obj.get("kind")
    name = obj.get("metadata", {}).get("name", "")
    where = f"{kind}/{name}"
    if kind not in KNOWN_KINDS:
        errors.append(f"{where}: unexpected kind")
        return
    if obj.get("apiVersion") != KNOWN_KINDS[kind]:
        errors.append(f"{where}: apiVersion {obj.get('apiVersion')!r}, want {KNOWN_KINDS[kind]}")
    limit = 63 if kind in ("Service", "Deployment") else 253
    pattern = DNS1123_LABEL if kind == "Service" else DNS1123_SUBDOMAIN
    if not name or len(name) > limit or not pattern.match(name):
        errors.append(f"{where}: metadata.name is not a valid {kind} name")
    labels = obj["metadata"].get("labels", {})
    _labels_ok(where, labels, errors)
    for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance",
                "app.kubernetes.io/managed-by", "helm.sh/chart"):
        if key not in labels:
            errors.append(f"{where}: missing label {key}")

    if kind == "Deployment":
        spec = obj["spec"]
        selector = spec.get("selector", {}).get("matchLabels", {})
        tmpl_labels = spec["template"]["metadata"].get("labels", {})
        if not selector:
            errors.append(f"{where}: empty selector")
        for k, v in selector.items():
            if tmpl_labels.get(k) != v:
                errors.append(f"{where}: selector {k}={v} does not match the pod template")
        if "app.kubernetes.io/version" in selector or "helm.sh/chart" in selector:
            errors.append(f"{where}: selector holds a label that changes on upgrade")
        if not isinstance(spec.get("replicas"), int) or spec["replicas"] < 0:
            errors.append(f"{where}: replicas {spec.get('replicas')!r}")
        _labels_ok(where + " pod", tmpl_labels, errors)
        _check_pod_spec(where, spec["template"]["spec"], errors)
    elif kind == "Pod":
        _check_pod_spec(where, obj["spec"], errors)
    elif kind == "Service":
        spec = obj["spec"]
        if not spec.get("selector"):
            errors.append(f"{where}: no selector")
        for p in spec.get("ports", []):
            if not p.get("name") or not PORT_NAME.match(p["name"]):
                errors.append(f"{where}: port {p} needs a valid name")
    elif kind == "PodDisruptionBudget":
        spec = obj["spec"]
        if ("minAvailable" in spec) == ("maxUnavailable" in spec):
            errors.append(f"{where}: needs exactly one of minAvailable/maxUnavailable")
        if not spec.get("selector", {}).get("matchLabels"):
            errors.append(f"{where}: no selector")
    elif kind == "ConfigMap":
        for k, v in (obj.get("data") or {}).items():
            if not CONFIGMAP_KEY.match(k):
                errors.append(f"{where}: data key {k!r} is invalid")
            if not isinstance(v, str):
                errors.append(f"{where}: data {k!r} is not a string")


def _selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def check_references(objects, errors):
    """Cross-object rules: Services and PDBs select pods of a Deployment of this release, a
    Service's targetPort names a port of those pods, mounted ConfigMaps exist."""
    deployments = [o for o in objects if o["kind"] == "Deployment"]
    configmaps = {o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"}
    for o in objects:
        where = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Service":
            sel = o["spec"]["selector"]
            targets = [d for d in deployments
                       if _selects(sel, d["spec"]["template"]["metadata"]["labels"])]
            if len(targets) != 1:
                errors.append(f"{where}: selects {len(targets)} Deployments, want 1")
                continue
            names = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"]
                     for p in c.get("ports", [])}
            for p in o["spec"]["ports"]:
                if isinstance(p.get("targetPort"), str) and p["targetPort"] not in names:
                    errors.append(f"{where}: targetPort {p['targetPort']!r} names no pod port")
        elif o["kind"] == "NetworkPolicy":
            # The policy selects one workload's pods; the named ports it admits are theirs, and
            # every peer selector selects some workload's pods.
            sel = o["spec"]["podSelector"]["matchLabels"]
            targets = [d for d in deployments
                       if _selects(sel, d["spec"]["template"]["metadata"]["labels"])]
            if len(targets) != 1:
                errors.append(f"{where}: selects {len(targets)} Deployments, want 1")
                continue
            names = {p["name"] for c in targets[0]["spec"]["template"]["spec"]["containers"]
                     for p in c.get("ports", [])}
            for rule in o["spec"].get("ingress", []):
                for p in rule.get("ports", []):
                    if isinstance(p.get("port"), str) and p["port"] not in names:
                        errors.append(f"{where}: port {p['port']!r} names no pod port")
                for peer in rule.get("from", []):
                    psel = peer.get("podSelector", {}).get("matchLabels", {})
                    if not any(_selects(psel, d["spec"]["template"]["metadata"]["labels"])
                               for d in deployments):
                        errors.append(f"{where}: a peer selector {psel} selects no pods")
        elif o["kind"] == "PodDisruptionBudget":
            sel = o["spec"]["selector"]["matchLabels"]
            if not any(_selects(sel, d["spec"]["template"]["metadata"]["labels"])
                       for d in deployments):
                errors.append(f"{where}: selects no Deployment's pods")
        if o["kind"] in ("Deployment", "Pod"):
            spec = o["spec"]["template"]["spec"] if o["kind"] == "Deployment" else o["spec"]
            mounted = {m["name"] for c in spec["containers"] for m in c.get("volumeMounts", [])}
            for v in spec.get("volumes", []):
                if v["name"] not in mounted:
                    errors.append(f"{where}: volume {v['name']!r} is mounted by no container")
                cm = v.get("configMap", {}).get("name")
                if cm and cm not in configmaps:
                    errors.append(f"{where}: mounts ConfigMap {cm!r}, which is not rendered")


def check_objects(objects):
    errors = []
    seen = set()
    for o in objects:
        check_object(o, errors)
        key = (o.get("kind"), o.get("metadata", {}).get("name"))
        if key in seen:
            errors.append(f"{key[0]}/{key[1]}: rendered twice")
        seen.add(key)
    if not errors:
        check_references(objects, errors)
    return errors
