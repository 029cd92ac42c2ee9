"""Tests of charts/mlaserve: its values schema, and what it renders.

Run with Debian's python3 (python3-yaml, python3-jsonschema) and CHART_RENDER pointing at the
chart-render binary; tests/chart/CMakeLists.txt registers the classes with ctest:
  python3 tests/chart/chart_test.py SchemaTest
"""

import json
import os
import subprocess
import sys
import unittest

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from chart_util import (CHART_DIR, EXAMPLE_2P4D, SOURCE_DIR, ChartCopy, RenderError,  # noqa: E402
                        by_kind, container, deep_merge, find, flag_values, load_yaml, render,
                        render_text)
import k8s_checks  # noqa: E402

YAMLLINT = os.environ.get("YAMLLINT", "yamllint")
YAMLLINT_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "yamllint.yaml")
WORKERS = ("prefill", "decode")


def defaults():
    return load_yaml(os.path.join(CHART_DIR, "values.yaml"))


class SchemaTest(unittest.TestCase):
    """values.schema.json accepts the shipped values and rejects broken ones, as Helm would
    (Helm validates the merged values before rendering)."""

    @classmethod
    def setUpClass(cls):
        with open(os.path.join(CHART_DIR, "values.schema.json")) as f:
            cls.schema = json.load(f)
        jsonschema.Draft7Validator.check_schema(cls.schema)
        cls.validator = jsonschema.Draft7Validator(cls.schema)

    def errors(self, values):
        return [e.message for e in self.validator.iter_errors(values)]

    def assertRejected(self, override, fragment):
        errs = self.errors(deep_merge(defaults(), override))
        self.assertTrue(errs, f"schema accepted {override}")
        self.assertTrue(any(fragment in e for e in errs), f"{fragment!r} not in {errs}")

    def test_default_values_validate(self):
        self.assertEqual(self.errors(defaults()), [])

    def test_example_2p4d_validates(self):
        merged = deep_merge(defaults(), load_yaml(EXAMPLE_2P4D))
        self.assertEqual(self.errors(merged), [])
        self.assertEqual(merged["prefill"]["replicas"], 2)
        self.assertEqual(merged["decode"]["replicas"], 4)

    def test_negative_replicas_rejected(self):
        self.assertRejected({"decode": {"replicas": -1}}, "-1 is less than the minimum of 0")
        self.assertRejected({"prefill": {"replicas": -3}}, "-3 is less than the minimum of 0")

    def test_more_than_one_router_rejected(self):
        self.assertRejected({"router": {"replicas": 2}}, "2 is greater than the maximum of 1")

    def test_missing_model_path_rejected(self):
        # A user null deletes the key (Helm's coalescing), so this is "path" missing.
        self.assertRejected({"model": {"path": None}}, "'path' is a required property")
        self.assertRejected({"model": {"path": ""}}, "'' is too short")
        self.assertRejected({"model": {"path": "models/x"}}, "does not match '^/'")

    def test_pvc_needs_a_claim_and_hostpath_a_path(self):
        self.assertRejected({"model": {"volume": {"claimName": ""}}}, "'' is too short")
        self.assertRejected({"model": {"volume": {"type": "hostPath"}}}, "'' is too short")
        self.assertRejected({"model": {"volume": {"type": "hostPath", "hostPath": None}}},
                            "'hostPath' is a required property")

    def test_wrong_types_rejected(self):
        self.assertRejected({"prefill": {"replicas": "two"}}, "'two' is not of type 'integer'")
        self.assertRejected({"decode": {"gpus": "1"}}, "'1' is not of type 'integer'")
        self.assertRejected({"router": {"port": 70000}}, "70000 is greater than the maximum")
        self.assertRejected({"decode": {"numKvPages": 1.5}}, "1.5 is not of type 'integer', 'null'")
        self.assertRejected({"prefill": {"kvTransport": "rdma"}}, "'rdma' is not one of")
        self.assertRejected({"decode": {"kvCacheDtype": "fp16"}}, "'fp16' is not one of")
        self.assertRejected({"logLevel": "verbose"}, "'verbose' is not one of")
        self.assertRejected({"rdma": {"enabled": "yes"}}, "'yes' is not of type 'boolean'")

    def test_unknown_keys_rejected(self):
        # A typo must not silently keep the default.
        self.assertRejected({"decode": {"replica": 4}}, "'replica' was unexpected")
        self.assertRejected({"prefil": {}}, "'prefil' was unexpected")

    def test_gpus_per_worker_bounded_and_layouts_named(self):
        self.assertRejected({"prefill": {"gpus": 65}}, "65 is greater than the maximum of 64")
        self.assertRejected({"decode": {"moeParallel": "pipeline"}}, "'pipeline' is not one of")
        self.assertRejected({"decode": {"moeDispatch": "alltoall"}}, "'alltoall' is not one of")
        self.assertEqual(self.errors(deep_merge(defaults(), {"decode": {"gpus": 8}})), [])

    def test_pdb_takes_one_bound(self):
        self.assertRejected({"decode": {"pdb": {"minAvailable": 1}}}, "should not be valid")

    def test_prefix_cache_and_affinity_values_checked(self):
        self.assertRejected({"prefill": {"prefixCache": "false"}},
                            "'false' is not of type 'boolean', 'null'")
        self.assertRejected({"router": {"prefixAffinity": 1}}, "1 is not of type 'boolean', 'null'")
        self.assertRejected({"router": {"prefixAffinityEntries": 0}},
                            "0 is less than the minimum of 1")
        self.assertRejected({"router": {"prefixAffinityEntries": 2**30 + 1}},
                            "1073741825 is greater than the maximum of 1073741824")
        self.assertRejected({"router": {"prefixAffinityEntries": "1M"}},
                            "'1M' is not of type 'integer', 'null'")
        self.assertRejected({"decode": {"prefixCache": 0}}, "0 is not of type 'boolean', 'null'")
        ok = {"prefill": {"prefixCache": False}, "decode": {"prefixCache": False},
              "router": {"prefixAffinity": True, "prefixAffinityEntries": 2**30}}
        self.assertEqual(self.errors(deep_merge(defaults(), ok)), [])

    def test_decode_affinity_values_checked(self):
        self.assertRejected({"router": {"decodeAffinity": "true"}},
                            "'true' is not of type 'boolean', 'null'")
        self.assertRejected({"router": {"decodeAffinityBalanceAbs": -1}},
                            "-1 is less than the minimum of 0")
        self.assertRejected({"router": {"decodeAffinityBalanceAbs": 1.5}},
                            "1.5 is not of type 'integer', 'null'")
        self.assertRejected({"router": {"decodeAffinityBalanceRel": 0.5}},
                            "0.5 is less than the minimum of 1")
        ok = {"router": {"decodeAffinity": False, "decodeAffinityBalanceAbs": 0,
                         "decodeAffinityBalanceRel": 2.5}}
        self.assertEqual(self.errors(deep_merge(defaults(), ok)), [])

    def test_trust_request_chat_template_checked(self):
        self.assertRejected({"router": {"trustRequestChatTemplate": "yes"}},
                            "'yes' is not of type 'boolean', 'null'")
        ok = {"router": {"trustRequestChatTemplate": True}}
        self.assertEqual(self.errors(deep_merge(defaults(), ok)), [])


class RenderTest(unittest.TestCase):
    """Every template renders with the default values and the 2p4d example, each object is a
    well-formed Kubernetes object, and the objects point at each other correctly."""

    @classmethod
    def setUpClass(cls):
        cls.default = render()
        cls.example = render([EXAMPLE_2P4D], release="ds", namespace="mlaserve")

    def each(self):
        return (("default", self.default, "test", "serving"),
                ("2p4d", self.example, "ds", "mlaserve"))

    def test_every_template_renders(self):
        templates = sorted(f for f in os.listdir(os.path.join(CHART_DIR, "templates"))
                           if f.endswith(".yaml"))
        for values in ([], [EXAMPLE_2P4D]):
            text = render_text(values, extra_values={"metrics": {"serviceMonitor":
                                                                 {"enabled": True}}})
            for t in templates + ["tests/test-health.yaml"]:
                self.assertIn(f"# Source: mlaserve/templates/{t}", text)

    def test_objects_are_well_formed(self):
        for label, objs, _, _ in self.each():
            with self.subTest(values=label):
                self.assertEqual(k8s_checks.check_objects(objs), [])
                kinds = sorted({o["kind"] for o in objs})
                expected = ["ConfigMap", "Deployment", "NetworkPolicy", "Pod",
                            "PodDisruptionBudget", "Service", "ServiceAccount"]
                if label == "2p4d":
                    expected.append("ServiceMonitor")
                self.assertEqual(kinds, sorted(expected))

    def test_yamllint_accepts_the_output_and_the_values(self):
        for values in ([], [EXAMPLE_2P4D]):
            proc = subprocess.run([YAMLLINT, "-c", YAMLLINT_CONFIG, "-"],
                                  input=render_text(values), capture_output=True, text=True)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
        files = [os.path.join(CHART_DIR, f) for f in ("Chart.yaml", "values.yaml")]
        proc = subprocess.run([YAMLLINT, "-c", YAMLLINT_CONFIG, *files, EXAMPLE_2P4D],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)

    def test_replicas_and_gpus(self):
        for label, objs, _, _ in self.each():
            want = {"default": (1, 1), "2p4d": (2, 4)}[label]
            for role, n in zip(WORKERS, want):
                d = find(objs, "Deployment", role)
                self.assertEqual(d["spec"]["replicas"], n, (label, role))
                res = container(d)["resources"]
                self.assertEqual(res["limits"]["nvidia.com/gpu"], 1)
                self.assertEqual(res["requests"]["nvidia.com/gpu"], 1)
            router_res = container(find(objs, "Deployment", "router"))["resources"]
            self.assertNotIn("nvidia.com/gpu", router_res.get("limits", {}))

    def test_multi_gpu_worker_gets_the_layout_flags(self):
        objs = render(extra_values={"decode": {"gpus": 8, "moeParallel": "tensor"}})
        c = container(find(objs, "Deployment", "decode"))
        self.assertEqual(c["resources"]["limits"]["nvidia.com/gpu"], 8)
        flags = flag_values(c["args"])
        self.assertEqual(flags["--tp-size"], "8")
        self.assertEqual(flags["--attention-parallel"], "tensor")
        self.assertEqual(flags["--moe-parallel"], "tensor")
        self.assertNotIn("--moe-dispatch", flags)  # gather: the worker's default
        self.assertNotIn("--tp-size", flag_values(container(find(objs, "Deployment", "prefill"))["args"]))
        objs = render(extra_values={"prefill": {"gpus": 4, "attentionParallel": "data",
                                                "moeDispatch": "all-to-all"}})
        flags = flag_values(container(find(objs, "Deployment", "prefill"))["args"])
        self.assertEqual(flags["--attention-parallel"], "data")
        self.assertEqual(flags["--moe-dispatch"], "all-to-all")

    def test_probes_check_health_on_the_serving_port(self):
        for label, objs, _, _ in self.each():
            for role, port in (("router", 8000), ("prefill", 8100), ("decode", 8200)):
                c = container(find(objs, "Deployment", role))
                ports = {p["name"]: p["containerPort"] for p in c["ports"]}
                self.assertEqual(ports["grpc"], port)
                self.assertEqual(ports["metrics"], 9090)
                self.assertEqual(flag_values(c["args"])["--listen"], f"0.0.0.0:{port}")
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    # With TLS (the tests' values) the kubelet's plaintext gRPC probe cannot
                    # connect: mlaservectl checks health over TLS.
                    self.assertEqual(c[probe]["exec"]["command"],
                                     ["mlaservectl", "--tls-ca", "/etc/mlaserve/tls/ca.crt",
                                      "--tls-cert", "/etc/mlaserve/tls/tls.crt", "--tls-key",
                                      "/etc/mlaserve/tls/tls.key",
                                      "--tls-server-name", "mlaserve.cluster", "--server",
                                      f"127.0.0.1:{port}", "--timeout", "4", "health"],
                                     (label, role, probe))
                startup = c["startupProbe"]
                budget = startup["periodSeconds"] * startup["failureThreshold"]
                # Workers load the model before serving: allow half an hour.
                self.assertGreaterEqual(budget, 1800 if role != "router" else 300)

    def test_workers_register_with_the_router_admin_service(self):
        for label, objs, release, ns in self.each():
            svc = find(objs, "Service", "admin")
            admin_port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "admin")
            router_addr = f"{svc['metadata']['name']}.{ns}.svc.cluster.local:{admin_port}"
            self.assertEqual(svc["metadata"]["name"], f"{release}-mlaserve-admin")
            self.assertEqual(svc["spec"]["clusterIP"], "None")
            for role in WORKERS:
                c = container(find(objs, "Deployment", role))
                self.assertEqual(c["command"], [f"mlaserve-{role}"])
                flags = flag_values(c["args"])
                self.assertEqual(flags["--router"], router_addr, (label, role))
                port = next(p["containerPort"] for p in c["ports"] if p["name"] == "grpc")
                self.assertEqual(flags["--advertise"], f"$(POD_IP):{port}")
                env = {e["name"]: e for e in c["env"]}
                self.assertEqual(env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"],
                                 "status.podIP")
            test_pod = by_kind(objs, "Pod")[0]
            public = find(objs, "Service", "router")
            public_addr = f"{public['metadata']['name']}.{ns}.svc.cluster.local:8000"
            self.assertEqual(test_pod["spec"]["containers"][0]["args"],
                             ["--tls-ca", "/etc/mlaserve/tls/ca.crt", "--tls-server-name",
                              "mlaserve.cluster", "--server", public_addr, "health"])

    def test_profiles_configmap_is_mounted_at_profiles_dir(self):
        for label, objs, _, _ in self.each():
            cm = by_kind(objs, "ConfigMap")
            self.assertEqual(len(cm), 1)
            for role in WORKERS:
                d = find(objs, "Deployment", role)
                c = container(d)
                profiles_dir = flag_values(c["args"])["--profiles-dir"]
                mount = next(m for m in c["volumeMounts"] if m["mountPath"] == profiles_dir)
                vol = next(v for v in d["spec"]["template"]["spec"]["volumes"]
                           if v["name"] == mount["name"])
                self.assertEqual(vol["configMap"]["name"], cm[0]["metadata"]["name"])
                self.assertIn("checksum/profiles", d["spec"]["template"]["metadata"]["annotations"])

    def test_shm_and_model_volumes(self):
        d = find(self.default, "Deployment", "decode")
        vols = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container(d)["volumeMounts"]}
        self.assertEqual(vols[mounts["/dev/shm"]]["emptyDir"], {"medium": "Memory",
                                                                "sizeLimit": "16Gi"})
        self.assertEqual(vols[mounts["/models"]]["persistentVolumeClaim"],
                         {"claimName": "mlaserve-models", "readOnly": True})
        self.assertEqual(flag_values(container(d)["args"])["--model"], "/models/DeepSeek-V2-Lite")
        host = render(extra_values={"model": {"volume": {"type": "hostPath",
                                                         "hostPath": "/mnt/nvme/models"}}})
        for role in ("router",) + WORKERS:
            vols = {v["name"]: v for v in
                    find(host, "Deployment", role)["spec"]["template"]["spec"]["volumes"]}
            self.assertEqual(vols["model"]["hostPath"], {"path": "/mnt/nvme/models",
                                                         "type": "Directory"})

    def test_pdbs_cover_the_workers(self):
        for label, objs, _, _ in self.each():
            pdbs = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p["spec"]
                    for p in by_kind(objs, "PodDisruptionBudget")}
            self.assertEqual(sorted(pdbs), ["decode", "prefill"])
            for role in WORKERS:
                self.assertEqual(pdbs[role]["maxUnavailable"], 1)
                sel = find(objs, "Deployment", role)["spec"]["selector"]["matchLabels"]
                self.assertEqual(pdbs[role]["selector"]["matchLabels"], sel)

    def test_rdma_adds_the_resource_and_ipc_lock(self):
        for role in WORKERS:
            c = container(find(self.example, "Deployment", role))
            self.assertEqual(c["resources"]["limits"]["rdma/rdma_shared_device_a"], 1)
            self.assertEqual(c["securityContext"]["capabilities"]["add"], ["IPC_LOCK"])
            self.assertEqual(c["securityContext"]["capabilities"]["drop"], ["ALL"])
            self.assertEqual(flag_values(c["args"])["--kv-transport"], "nccl")
            c = container(find(self.default, "Deployment", role))
            self.assertNotIn("add", c["securityContext"]["capabilities"])
        router = container(find(self.example, "Deployment", "router"))
        self.assertNotIn("add", router["securityContext"]["capabilities"])

    def test_optional_flags_only_when_set(self):
        default_flags = flag_values(container(find(self.default, "Deployment", "decode"))["args"])
        for flag in ("--num-kv-pages", "--max-running-requests", "--local-prefill-threshold",
                     "--device"):
            self.assertNotIn(flag, default_flags)
        flags = flag_values(container(find(self.example, "Deployment", "decode"))["args"])
        self.assertEqual(flags["--max-running-requests"], "256")
        self.assertEqual(flags["--local-prefill-threshold"], "-1")
        self.assertEqual(flags["--kv-lease-ms"], "30000")
        prefill = flag_values(container(find(self.example, "Deployment", "prefill"))["args"])
        self.assertEqual(prefill["--max-batch-tokens"], "16384")
        self.assertNotIn("--max-running-requests", prefill)

    def test_service_monitor_scrapes_every_component(self):
        sm = by_kind(self.example, "ServiceMonitor")[0]
        self.assertEqual(sm["metadata"]["labels"]["release"], "kube-prometheus-stack")
        self.assertEqual(sm["spec"]["endpoints"][0]["port"], "metrics")
        services = by_kind(self.example, "Service")
        selected = [s for s in services
                    if all(s["metadata"]["labels"].get(k) == v
                           for k, v in sm["spec"]["selector"]["matchLabels"].items())
                    and s["metadata"]["labels"]["app.kubernetes.io/component"]
                    in sm["spec"]["selector"]["matchExpressions"][0]["values"]]
        self.assertEqual(len(selected), 3)
        for s in selected:
            self.assertIn("metrics", [p["name"] for p in s["spec"]["ports"]])
        self.assertEqual(by_kind(self.default, "ServiceMonitor"), [])

    def test_ipv6_brackets_addresses(self):
        objs = render(extra_values={"ipFamily": "IPv6"})
        flags = flag_values(container(find(objs, "Deployment", "prefill"))["args"])
        self.assertEqual(flags["--listen"], "[::]:8100")
        self.assertEqual(flags["--advertise"], "[$(POD_IP)]:8100")

    def test_template_errors_name_the_value(self):
        with self.assertRaisesRegex(RenderError, "model.volume.claimName is required"):
            render(extra_values={"model": {"volume": {"claimName": ""}}})
        with self.assertRaisesRegex(RenderError, "model.path is required"):
            render(extra_values={"model": {"path": None}})

    def test_notes_tell_how_to_reach_the_router(self):
        notes = render_text([EXAMPLE_2P4D], release="ds", namespace="mlaserve", notes=True)
        self.assertIn("kubectl -n mlaserve port-forward svc/ds-mlaserve-router 8000:8000", notes)
        self.assertIn("exec deploy/ds-mlaserve-router -- mlaservectl --tls-ca "
                      "/etc/mlaserve/tls/ca.crt --tls-server-name mlaserve.cluster --server "
                      "localhost:8000 --admin localhost:8001 --token-file "
                      "/etc/mlaserve/admin-token/token workers list", notes)
        self.assertIn("register with the router's admin port at "
                      "ds-mlaserve-admin.mlaserve.svc.cluster.local:8001", notes)
        self.assertIn("prefill  2 x ds-mlaserve-prefill", notes)
        self.assertIn("decode   4 x ds-mlaserve-decode", notes)

    def test_router_exposes_the_openai_http_port(self):
        objs = render()
        c = container(find(objs, "Deployment", "router"))
        self.assertEqual(flag_values(c["args"])["--http-port"], "8080")
        self.assertEqual({p["name"]: p["containerPort"] for p in c["ports"]}["http"], 8080)
        svc = find(objs, "Service", "router")
        http = next(p for p in svc["spec"]["ports"] if p["name"] == "http")
        self.assertEqual((http["port"], http["targetPort"]), (8080, "http"))
        self.assertIn("/v1/completions", render_text([EXAMPLE_2P4D], release="ds", namespace="m", notes=True))
        off = render(extra_values={"router": {"httpPort": None}})
        c = container(find(off, "Deployment", "router"))
        self.assertNotIn("--http-port", c["args"])
        self.assertNotIn("http", [p["name"] for p in c["ports"]])
        self.assertNotIn("http", [p["name"] for p in find(off, "Service", "router")["spec"]["ports"]])

    def test_router_queue_timeout_is_passed_only_when_set(self):
        args = find(render(), "Deployment", "router")["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertNotIn("--queue-timeout-ms", args)
        objs = render(extra_values={"router": {"queueTimeoutMs": 0}})
        args = find(objs, "Deployment", "router")["spec"]["template"]["spec"]["containers"][0]["args"]
        self.assertEqual(args[args.index("--queue-timeout-ms") + 1], "0")

    def test_prefix_cache_and_affinity_flags_only_when_set(self):
        prefix_flags = ("--prefix-cache", "--prefix-affinity", "--prefix-affinity-entries")
        for name, objs, _, _ in self.each():
            for component in ("router", "prefill", "decode"):
                flags = flag_values(container(find(objs, "Deployment", component))["args"])
                for flag in prefix_flags:
                    self.assertNotIn(flag, flags, f"{name} {component}")

        objs = render(extra_values={"prefill": {"prefixCache": False},
                                    "decode": {"prefixCache": True},
                                    "router": {"prefixAffinity": False,
                                               "prefixAffinityEntries": 2**30}})
        prefill = container(find(objs, "Deployment", "prefill"))["args"]
        router = container(find(objs, "Deployment", "router"))["args"]
        # One item "--flag=false": the router's --prefix-affinity is a CLI11 flag, which
        # takes its value only after "=" (a separate "false" is an unexpected argument).
        self.assertIn("--prefix-cache=false", prefill)
        self.assertIn("--prefix-affinity=false", router)
        self.assertNotIn("false", prefill + router)
        self.assertEqual(flag_values(router)["--prefix-affinity-entries"], "1073741824")
        self.assertIn("--prefix-cache=true", container(find(objs, "Deployment", "decode"))["args"])
        for component, others in (("prefill", ("--prefix-affinity", "--prefix-affinity-entries")),
                                  ("router", ("--prefix-cache",)),
                                  ("decode", ("--prefix-affinity", "--prefix-affinity-entries"))):
            flags = flag_values(container(find(objs, "Deployment", component))["args"])
            for flag in others:
                self.assertNotIn(flag, flags, component)

        objs = render(extra_values={"prefill": {"prefixCache": True},
                                    "router": {"prefixAffinity": True}})
        self.assertIn("--prefix-cache=true", container(find(objs, "Deployment", "prefill"))["args"])
        router = container(find(objs, "Deployment", "router"))["args"]
        self.assertIn("--prefix-affinity=true", router)
        self.assertNotIn("--prefix-affinity-entries", flag_values(router))

    def test_decode_affinity_flags_only_when_set(self):
        decode_flags = ("--decode-affinity", "--decode-affinity-balance-abs",
                        "--decode-affinity-balance-rel")
        for name, objs, _, _ in self.each():
            flags = flag_values(container(find(objs, "Deployment", "router"))["args"])
            for flag in decode_flags:
                self.assertNotIn(flag, flags, name)
        objs = render(extra_values={"router": {"decodeAffinity": False,
                                               "decodeAffinityBalanceAbs": 32,
                                               "decodeAffinityBalanceRel": 2.5}})
        router = container(find(objs, "Deployment", "router"))["args"]
        self.assertIn("--decode-affinity=false", router)
        flags = flag_values(router)
        self.assertEqual(flags["--decode-affinity-balance-abs"], "32")
        # A ratio keeps its fraction; a whole one is written as an integer, as counts are.
        self.assertEqual(flags["--decode-affinity-balance-rel"], "2.5")
        objs = render(extra_values={"router": {"decodeAffinityBalanceRel": 2}})
        flags = flag_values(container(find(objs, "Deployment", "router"))["args"])
        self.assertEqual(flags["--decode-affinity-balance-rel"], "2")

    def test_trust_request_chat_template_flag_only_when_set(self):
        for name, objs, _, _ in self.each():
            args = container(find(objs, "Deployment", "router"))["args"]
            self.assertFalse(any(a.startswith("--trust-request-chat-template") for a in args), name)
        for value, flag in ((True, "--trust-request-chat-template=true"),
                            (False, "--trust-request-chat-template=false")):
            objs = render(extra_values={"router": {"trustRequestChatTemplate": value}})
            self.assertIn(flag, container(find(objs, "Deployment", "router"))["args"])

    def test_kv_cache_dtype_reaches_both_workers_and_must_agree(self):
        objs = render(extra_values={"prefill": {"kvCacheDtype": "fp8"},
                                    "decode": {"kvCacheDtype": "fp8"}})
        for role in ("prefill", "decode"):
            args = find(objs, "Deployment", role)["spec"]["template"]["spec"]["containers"][0]["args"]
            self.assertEqual(args[args.index("--kv-cache-dtype") + 1], "fp8")
        with self.assertRaisesRegex(RenderError, "kvCacheDtype .* differ"):
            render(extra_values={"prefill": {"kvCacheDtype": "fp8"}})


class SecurityTest(unittest.TestCase):
    """Transport security and credentials (docs/security.md): a choice is required, secrets
    are mounted where the flags point, the admin port stays off the public Service, and
    NetworkPolicies fence the admin and worker ports."""

    def test_no_choice_no_render(self):
        with self.assertRaises(RenderError) as e:
            render(security=False)
        self.assertIn("security.tls.secretName", str(e.exception))
        with self.assertRaises(RenderError) as e:
            render(security=False, extra_values={"security": {"insecure": True}})
        self.assertIn("security.insecure needs security.adminTokenSecret", str(e.exception))
        with self.assertRaises(RenderError) as e:
            render(extra_values={"security": {"insecure": True}})
        self.assertIn("choose one", str(e.exception))

    def test_tls_secrets_are_mounted_where_the_flags_point(self):
        objs = render(extra_values={"security": {"clusterTokenSecret": "ct",
                                                 "apiKeySecret": "keys",
                                                 "adminCertNames": ["operator"]}})
        for role in ("router",) + WORKERS:
            d = find(objs, "Deployment", role)
            c = container(d)
            flags = flag_values(c["args"])
            self.assertNotIn("--insecure", c["args"])
            mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
            volumes = {v["name"]: v for v in d["spec"]["template"]["spec"]["volumes"]}
            self.assertEqual(volumes["tls"]["secret"]["secretName"], "mlaserve-tls")
            for flag, file in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"),
                               ("--tls-ca", "ca.crt")):
                self.assertEqual(flags[flag], f"{mounts['tls']}/{file}")
            self.assertEqual(volumes["cluster-token"]["secret"]["secretName"], "ct")
            self.assertEqual(flags["--cluster-token-file"], f"{mounts['cluster-token']}/token")
            self.assertEqual(flags["--tls-server-name"], "mlaserve.cluster")
        router = container(find(objs, "Deployment", "router"))
        flags = flag_values(router["args"])
        mounts = {m["name"]: m["mountPath"] for m in router["volumeMounts"]}
        self.assertEqual(flags["--admin-token-file"], f"{mounts['admin-token']}/token")
        self.assertEqual(flags["--api-key-file"], f"{mounts['api-keys']}/token")
        self.assertEqual(flags["--admin-cert-name"], "operator")
        self.assertEqual(flags["--admin-listen"], "0.0.0.0:8001")
        self.assertEqual(k8s_checks.check_objects(objs), [])

    def test_metrics_tls_serves_https_and_the_service_monitor_trusts_the_cluster_ca(self):
        plain = render(extra_values={"metrics": {"serviceMonitor": {"enabled": True}}})
        for role in ("router",) + WORKERS:
            self.assertNotIn("--metrics-tls", container(find(plain, "Deployment", role))["args"])
        self.assertNotIn("scheme", by_kind(plain, "ServiceMonitor")[0]["spec"]["endpoints"][0])
        objs = render(extra_values={"metrics": {"tls": True, "serviceMonitor": {"enabled": True}}})
        for role in ("router",) + WORKERS:
            self.assertIn("--metrics-tls", container(find(objs, "Deployment", role))["args"])
        endpoint = by_kind(objs, "ServiceMonitor")[0]["spec"]["endpoints"][0]
        self.assertEqual(endpoint["scheme"], "https")
        self.assertEqual(endpoint["tlsConfig"]["ca"]["secret"],
                         {"name": "mlaserve-tls", "key": "ca.crt"})
        self.assertEqual(endpoint["tlsConfig"]["serverName"], "mlaserve.cluster")
        self.assertEqual(k8s_checks.check_objects(objs), [])
        with self.assertRaises(RenderError) as e:
            render(security=False, extra_values={"security": {"insecure": True,
                                                              "adminTokenSecret": "admin"},
                                                 "metrics": {"tls": True}})
        self.assertIn("metrics.tls", str(e.exception))

    def test_admin_port_is_not_on_the_public_service(self):
        objs = render()
        public = find(objs, "Service", "router")
        self.assertEqual(sorted(p["name"] for p in public["spec"]["ports"]),
                         ["grpc", "http", "metrics"])
        self.assertNotIn(8001, [p["port"] for p in public["spec"]["ports"]])

    def test_network_policies_fence_admin_and_worker_ports(self):
        objs = render()
        policies = {o["metadata"]["labels"]["app.kubernetes.io/component"]: o
                    for o in by_kind(objs, "NetworkPolicy")}
        self.assertEqual(sorted(policies), ["decode", "prefill", "router"])

        def admitted(policy, port):
            """Component names allowed to `port` (None = anyone)."""
            for rule in policy["spec"]["ingress"]:
                if port in [p["port"] for p in rule.get("ports", [])]:
                    if "from" not in rule:
                        return None
                    return sorted(peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
                                  for peer in rule["from"])
            return []
        self.assertIsNone(admitted(policies["router"], "grpc"))
        self.assertIsNone(admitted(policies["router"], "http"))
        self.assertEqual(admitted(policies["router"], "admin"), ["decode", "prefill"])
        self.assertEqual(admitted(policies["prefill"], "grpc"), ["router"])
        self.assertEqual(admitted(policies["decode"], "grpc"), ["prefill", "router"])
        self.assertIsNone(admitted(policies["decode"], "metrics"))
        off = render(extra_values={"security": {"networkPolicy": {"enabled": False}}})
        self.assertEqual(by_kind(off, "NetworkPolicy"), [])
        no_http = render(extra_values={"router": {"httpPort": None}})
        self.assertEqual(admitted(find(no_http, "NetworkPolicy", "router"), "http"), [])

    def test_openai_http_api_takes_the_public_tls_and_api_keys(self):
        # HTTPS: the router gets the TLS flags (its HTTP listener uses the public certificate),
        # the Service says https, and NOTES show curl with the CA and the API key.
        values = {"security": {"apiKeySecret": "keys"}}
        objs = render(extra_values=values)
        router = container(find(objs, "Deployment", "router"))
        flags = flag_values(router["args"])
        self.assertEqual(flags["--http-port"], "8080")
        self.assertNotIn("--insecure", router["args"])
        self.assertIn("--tls-cert", flags)
        self.assertEqual(flags["--api-key-file"], "/etc/mlaserve/api-keys/token")
        http = next(p for p in find(objs, "Service", "router")["spec"]["ports"] if p["name"] == "http")
        self.assertEqual(http["appProtocol"], "https")
        notes = render_text(release="ds", namespace="m", notes=True, extra_values=values)
        self.assertIn("--cacert ca.crt --connect-to mlaserve.cluster:8080:localhost:8080 "
                      "https://mlaserve.cluster:8080/v1/completions", notes)
        self.assertIn('-H "Authorization: Bearer $API_KEY"', notes)
        # Plaintext only with security.insecure.
        plain = {"security": {"insecure": True, "adminTokenSecret": "adm"}}
        objs = render(security=False, extra_values=plain)
        self.assertIn("--insecure", container(find(objs, "Deployment", "router"))["args"])
        http = next(p for p in find(objs, "Service", "router")["spec"]["ports"] if p["name"] == "http")
        self.assertEqual(http["appProtocol"], "http")
        notes = render_text(release="ds", namespace="m", notes=True, security=False,
                            extra_values=plain)
        self.assertIn("PLAINTEXT HTTP", notes)
        self.assertIn("http://localhost:8080/v1/completions", notes)

    def test_insecure_is_explicit_everywhere(self):
        objs = render(security=False, extra_values={"security": {"insecure": True,
                                                                 "adminTokenSecret": "adm"}})
        for role in ("router",) + WORKERS:
            c = container(find(objs, "Deployment", role))
            self.assertIn("--insecure", c["args"])
            self.assertNotIn("--tls-cert", c["args"])
            self.assertEqual(c["readinessProbe"]["grpc"]["port"], c["ports"][0]["containerPort"])
        pod = by_kind(objs, "Pod")[0]
        self.assertIn("--insecure", pod["spec"]["containers"][0]["args"])
        self.assertEqual(k8s_checks.check_objects(objs), [])


class ProfilesTest(unittest.TestCase):
    """GPU profiles: file names with spaces map to valid ConfigMap keys and back."""

    H100 = "NVIDIA H100 80GB HBM3.json"

    def test_chart_profiles_and_value_overrides(self):
        with ChartCopy({self.H100: '{"gpu": "h100"}\n', "cpu.json": '{"gpu": "none"}\n'}) as d:
            objs = render(chart_dir=d, extra_values={"profiles": {"files": {
                "cpu.json": '{"gpu": "override"}', "NVIDIA H200.json": '{"gpu": "h200"}'}}})
            self.assertEqual(k8s_checks.check_objects(objs), [])
        data = by_kind(objs, "ConfigMap")[0]["data"]
        # Profiles are rendered as YAML block scalars ("|-"), which drop trailing newlines.
        self.assertEqual(data, {"NVIDIA_H100_80GB_HBM3.json": '{"gpu": "h100"}',
                                "NVIDIA_H200.json": '{"gpu": "h200"}',
                                "cpu.json": '{"gpu": "override"}'})
        for role in WORKERS:
            d = find(objs, "Deployment", role)
            vol = next(v for v in d["spec"]["template"]["spec"]["volumes"]
                       if v["name"] == "profiles")
            items = {i["key"]: i["path"] for i in vol["configMap"]["items"]}
            self.assertEqual(items, {"NVIDIA_H100_80GB_HBM3.json": self.H100,
                                     "NVIDIA_H200.json": "NVIDIA H200.json",
                                     "cpu.json": "cpu.json"})

    def test_checksum_follows_the_profiles(self):
        def checksum(content):
            with ChartCopy({self.H100: content}) as d:
                objs = render(chart_dir=d)
            return find(objs, "Deployment", "decode")["spec"]["template"]["metadata"][
                "annotations"]["checksum/profiles"]
        self.assertNotEqual(checksum('{"a": 1}'), checksum('{"a": 2}'))

    def test_colliding_names_fail(self):
        with self.assertRaisesRegex(RenderError, "map to the same ConfigMap key"):
            render(extra_values={"profiles": {"files": {"a b.json": "{}", "a_b.json": "{}"}}})

    def test_existing_configmap_is_mounted_whole(self):
        objs = render(extra_values={"profiles": {"existingConfigMap": "my-profiles"}})
        self.assertEqual(by_kind(objs, "ConfigMap"), [])
        d = find(objs, "Deployment", "prefill")
        vol = next(v for v in d["spec"]["template"]["spec"]["volumes"] if v["name"] == "profiles")
        self.assertEqual(vol["configMap"], {"name": "my-profiles"})

    def test_repository_profiles_reach_the_chart(self):
        # charts/mlaserve/profiles links to the repository's profiles/ (one source of truth);
        # Helm follows the link, and fails on a dangling one.
        link = os.path.join(CHART_DIR, "profiles")
        self.assertTrue(os.path.islink(link))
        self.assertEqual(os.path.realpath(link), os.path.join(SOURCE_DIR, "profiles"))
        self.assertTrue(os.path.isdir(link), "profiles/ is missing: Helm cannot load the chart")
        shipped = sorted(f for f in os.listdir(link) if f.endswith(".json"))
        data = by_kind(render(), "ConfigMap")[0].get("data") or {}
        self.assertEqual(len(data), len(shipped))


if __name__ == "__main__":
    unittest.main()
