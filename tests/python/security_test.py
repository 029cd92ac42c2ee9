#!/usr/bin/python3
"""Security of a live cluster, tried as a hostile client would (issue 15), with real TLS.

Certificates are made here with openssl: a cluster CA, one certificate for the router and the
workers, an operator's client certificate (CN=operator), and a rogue CA with its own
"operator". The router, a prefill and a decode worker run with mutual TLS, a cluster token, an
admin token and an API key; the workers register through the router's admin listener. Clients
are Debian's python3-grpcio and mlaservectl. Checked:
  - the cluster serves a request end to end over TLS (router -> workers -> KV transfer);
  - plaintext, a wrong CA, and a rogue client certificate are refused at the handshake;
  - every Admin RPC without credentials: UNAUTHENTICATED; with the cluster token:
    PERMISSION_DENIED; with the admin token or the operator certificate: allowed;
  - a rogue registration (no credential, the API key, a rogue-CA certificate) is refused;
  - a worker refuses TLS clients without a cluster certificate at the handshake, and (plaintext
    with a cluster token) every worker RPC without the token: UNAUTHENTICATED;
  - a Reserve asking for an INT32_MAX lease: INVALID_ARGUMENT (the worker's cap);
  - Generation needs the API key;
  - the OpenAI HTTP API (--http-port) is HTTPS with the router's certificate, needs the same
    API key (401 in OpenAI's error shape without it) and has the same request bounds;
  - oversized inputs are refused fast (60 MiB prompt, 50 MB / 1 MB request ids, stop strings,
    a prompt too long to fit) with the router's peak RSS growing < 200 MB.
"""
import argparse
import http.client
import importlib.util
import json
import os
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from client_test import Server  # noqa: E402

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}", flush=True)


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=d)


def make_cert(d, ca, name, cn):
    with open(os.path.join(d, f"{name}.ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=d)
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=d)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def second_line(server, prefix, timeout=30):
    result = []
    t = threading.Thread(target=lambda: result.append(server.proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    line = result[0].decode() if result else ""
    if not line.startswith(prefix):
        raise RuntimeError(f"expected '{prefix}...', got {line!r}")
    return line[len(prefix):].strip()


def https_call(address, d, method, path, body=None, key=None):
    """(status, parsed JSON body) of one HTTPS request to the router's OpenAI API, checking
    its certificate against the cluster CA."""
    host, port = address.rsplit(":", 1)
    context = ssl.create_default_context(cafile=f"{d}/ca.pem")
    conn = http.client.HTTPSConnection(host, int(port), context=context, timeout=30)
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    try:
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else None
    finally:
        conn.close()


def plaintext_http_refused(address):
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        conn.request("GET", "/health")
        conn.getresponse().read()
        return False
    except (OSError, http.client.HTTPException):
        return True
    finally:
        conn.close()


def check_openai_http_api(address, d, tokens):
    """The HTTP listener takes the public listener's TLS, API keys and bounds."""
    completion = json.dumps({"model": "demo", "prompt": "count from 17:", "max_tokens": 8,
                             "temperature": 0})
    check(plaintext_http_refused(address), "plaintext HTTP to the HTTPS port is refused")
    status, _ = https_call(address, d, "GET", "/health")
    check(status == 200, f"HTTPS /health without a key (probes): {status}")
    status, body = https_call(address, d, "POST", "/v1/completions", completion)
    error = (body or {}).get("error", {})
    check(status == 401 and error.get("type") == "authentication_error"
          and error.get("code") == "invalid_api_key" and "message" in error,
          f"HTTPS completion without an API key: {status} {body}")
    for key in (tokens["admin"], tokens["cluster"], "guessed-key-000000000000"):
        status, body = https_call(address, d, "POST", "/v1/completions", completion, key=key)
        check(status == 401, f"HTTPS completion with a non-API-key token: {status} {body}")
    status, body = https_call(address, d, "GET", "/v1/models")
    check(status == 401, f"HTTPS /v1/models without an API key: {status}")
    status, body = https_call(address, d, "POST", "/v1/completions", completion,
                              key=tokens["api"])
    text = body["choices"][0]["text"] if status == 200 else ""
    check(status == 200 and "18 19 20" in text, f"HTTPS completion with the API key: {status} {body}")
    # The request bounds of the gRPC API.
    many_stops = json.dumps({"model": "demo", "prompt": "hi", "max_tokens": 4,
                             "stop": [f"s{i}" for i in range(17)]})
    status, body = https_call(address, d, "POST", "/v1/completions", many_stops, key=tokens["api"])
    check(status == 400 and "at most 16" in body["error"]["message"],
          f"HTTPS completion with 17 stop strings: {status} {body}")
    long_text = json.dumps({"model": "demo", "prompt": "b" * (3 << 20), "max_tokens": 4})
    status, body = https_call(address, d, "POST", "/v1/completions", long_text, key=tokens["api"])
    check(status == 400 and "cannot fit" in body["error"]["message"],
          f"HTTPS 3 MiB prompt over the context: {status} {body}")
    try:
        status, body = https_call(address, d, "POST", "/v1/completions", "x" * (5 << 20),
                                  key=tokens["api"])
    except OSError as e:  # the server may answer and close before the whole body is sent
        status, body = str(e), None
    check(status == 413, f"HTTPS body over --max-request-bytes (4 MiB): {status} {body}")


def peak_rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


class Rpc:
    """Unary / streaming calls through grpcio's generic methods with generated messages."""

    def __init__(self, channel):
        self.channel = channel

    def unary(self, method, request, response_cls, token=None, timeout=10):
        call = self.channel.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=response_cls.FromString)
        md = [("authorization", f"Bearer {token}")] if token else None
        return call(request, timeout=timeout, metadata=md)

    def code_of(self, method, request, response_cls, token=None):
        try:
            self.unary(method, request, response_cls, token)
            return grpc.StatusCode.OK
        except grpc.RpcError as e:
            return e.code()

    def stream(self, method, request, response_cls, token=None, timeout=30):
        call = self.channel.unary_stream(method,
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=response_cls.FromString)
        md = [("authorization", f"Bearer {token}")] if token else None
        return list(call(request, timeout=timeout, metadata=md))

    def stream_error(self, method, request, response_cls, token=None, timeout=30):
        try:
            self.stream(method, request, response_cls, token, timeout)
            return grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            return e.code(), e.details() or ""


def tls_channel(address, d, ca="ca", cert=None):
    creds = grpc.ssl_channel_credentials(
        root_certificates=read(f"{d}/{ca}.pem"),
        private_key=read(f"{d}/{cert}.key") if cert else None,
        certificate_chain=read(f"{d}/{cert}.pem") if cert else None)
    return grpc.secure_channel(address, creds, options=[
        ("grpc.max_send_message_length", 128 << 20)])


def refused_at_handshake(channel):
    try:
        grpc.channel_ready_future(channel).result(timeout=3)
        return False
    except grpc.FutureTimeoutError:
        return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router-bin", required=True)
    ap.add_argument("--prefill-bin", required=True)
    ap.add_argument("--decode-bin", required=True)
    ap.add_argument("--ctl-bin", required=True)
    ap.add_argument("--protoc", default="protoc")
    ap.add_argument("--model", default="models/demo")
    args = ap.parse_args()
    if subprocess.run(["which", "openssl"], stdout=subprocess.DEVNULL).returncode != 0:
        print("SKIP: openssl is not installed (tools/install_deps.sh installs it)")
        return 0

    d = tempfile.mkdtemp(prefix="mlaserve-sec-")
    subprocess.run([args.protoc, "--proto_path=proto", f"--python_out={d}",
                    "proto/mlaserve/v1/api.proto", "proto/mlaserve/v1/admin.proto",
                    "proto/mlaserve/v1/worker.proto", "proto/mlaserve/v1/kv.proto",
                    "proto/grpc/health/v1/health.proto"], check=True)
    sys.path.insert(0, d)
    from mlaserve.v1 import admin_pb2, api_pb2, kv_pb2, worker_pb2  # noqa: E402

    make_ca(d, "ca")
    make_ca(d, "rogue-ca")
    make_cert(d, "ca", "node", "mlaserve-node")
    make_cert(d, "ca", "operator", "operator")
    make_cert(d, "rogue-ca", "rogue", "operator")
    tokens = {"cluster": "cluster-token-5b0d9a4f1e", "admin": "admin-token-77c1e0b2aa",
              "api": "api-key-3f6a0c9d2b71"}
    for name, value in tokens.items():
        with open(f"{d}/{name}.token", "w") as f:
            f.write(f"# {name}\n{value}\n")
    tls = ["--tls-cert", f"{d}/node.pem", "--tls-key", f"{d}/node.key", "--tls-ca", f"{d}/ca.pem",
           "--cluster-token-file", f"{d}/cluster.token"]
    common = ["--model", args.model, "--metrics-port", "-1"]

    servers = []
    try:
        router = Server([args.router_bin, "--listen", "127.0.0.1:0", "--admin-listen",
                         "127.0.0.1:0", "--http-port", "0", "--poll-interval-ms", "100",
                         "--admin-token-file",
                         f"{d}/admin.token", "--admin-cert-name", "operator", "--api-key-file",
                         f"{d}/api.token"] + tls + common, f"{d}/router.log")
        servers.append(router)
        admin_address = second_line(router, "admin listening on ")
        http_address = second_line(router, "http listening on ")
        worker = ["--listen", "127.0.0.1:0", "--backend", "cpu", "--num-kv-pages", "64",
                  "--router", admin_address] + tls + common
        prefill = Server([args.prefill_bin] + worker, f"{d}/prefill.log")
        servers.append(prefill)
        decode = Server([args.decode_bin] + worker + ["--local-prefill-threshold", "0"],
                        f"{d}/decode.log")
        servers.append(decode)

        public = Rpc(tls_channel(router.address, d))
        admin = Rpc(tls_channel(admin_address, d))
        # The generated module's package path is grpc.health.v1, which grpcio's own `grpc`
        # package shadows: load it from its file.
        spec = importlib.util.spec_from_file_location(
            "health_pb2", os.path.join(d, "grpc/health/v1/health_pb2.py"))
        health = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(health)
        deadline = time.monotonic() + 30
        ready = None
        while time.monotonic() < deadline:
            try:
                ready = public.unary("/grpc.health.v1.Health/Check",
                                     health.HealthCheckRequest(service="mlaserve.v1.Generation"),
                                     health.HealthCheckResponse, timeout=2).status
                if ready == health.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError as e:
                ready = e.code()
            time.sleep(0.05)
        check(ready == health.HealthCheckResponse.SERVING,
              f"router ready over TLS with registered workers: {ready}")

        # End to end over TLS: router -> decode Reserve -> prefill -> KV push -> stream.
        gen = api_pb2.GenerateRequest(text="count from 17:")
        gen.sampling.max_new_tokens = 8
        gen.sampling.temperature = 0
        out = public.stream("/mlaserve.v1.Generation/Generate", gen, api_pb2.GenerateResponse,
                            token=tokens["api"])
        text = "".join(m.chunk.text for m in out if m.HasField("chunk"))
        check("18 19 20" in text, f"served over TLS: {text!r}")

        # --- the handshake refuses plaintext, a wrong CA, a rogue client certificate -------
        check(refused_at_handshake(grpc.insecure_channel(router.address)),
              "plaintext to the public TLS port is refused")
        check(refused_at_handshake(tls_channel(router.address, d, ca="rogue-ca")),
              "a client trusting another CA does not connect")
        check(refused_at_handshake(tls_channel(admin_address, d, cert="rogue")),
              "a client certificate from a rogue CA is refused at the admin listener")
        check(refused_at_handshake(tls_channel(decode.address, d, cert="rogue")),
              "a client certificate from a rogue CA is refused at a worker")

        # --- the Admin API -----------------------------------------------------------------
        admin_calls = [
            ("ListWorkers", admin_pb2.ListWorkersRequest(), admin_pb2.ListWorkersResponse),
            ("GetWorker", admin_pb2.GetWorkerRequest(id="decode-1"), admin_pb2.WorkerStatus),
            ("AddWorker", admin_pb2.AddWorkerRequest(role=admin_pb2.WORKER_ROLE_DECODE,
                                                     address="203.0.113.9:8200"),
             admin_pb2.WorkerStatus),
            ("RemoveWorker", admin_pb2.RemoveWorkerRequest(id="decode-1"),
             admin_pb2.RemoveWorkerResponse),
            ("DrainWorker", admin_pb2.DrainWorkerRequest(id="decode-1"), admin_pb2.WorkerStatus),
            ("UndrainWorker", admin_pb2.UndrainWorkerRequest(id="decode-1"),
             admin_pb2.WorkerStatus),
            ("GetLoads", admin_pb2.GetLoadsRequest(), admin_pb2.GetLoadsResponse),
            ("GetProfiles", admin_pb2.GetProfilesRequest(), admin_pb2.GetProfilesResponse),
        ]
        for name, req, resp in admin_calls:
            m = f"/mlaserve.v1.Admin/{name}"
            code = admin.code_of(m, req, resp)
            check(code == grpc.StatusCode.UNAUTHENTICATED, f"Admin/{name} without credential: {code}")
            code = admin.code_of(m, req, resp, token=tokens["cluster"])
            check(code == grpc.StatusCode.PERMISSION_DENIED, f"Admin/{name} with the cluster token: {code}")
            code = admin.code_of(m, req, resp, token=tokens["api"])
            check(code == grpc.StatusCode.UNAUTHENTICATED, f"Admin/{name} with an API key: {code}")
        lw = admin.unary("/mlaserve.v1.Admin/ListWorkers", admin_pb2.ListWorkersRequest(),
                         admin_pb2.ListWorkersResponse, token=tokens["admin"])
        check(sorted(w.id for w in lw.workers) == ["decode-1", "prefill-1"],
              f"ListWorkers with the admin token: {[w.id for w in lw.workers]}")
        by_cert = Rpc(tls_channel(admin_address, d, cert="operator"))
        code = by_cert.code_of("/mlaserve.v1.Admin/GetLoads", admin_pb2.GetLoadsRequest(),
                               admin_pb2.GetLoadsResponse)
        check(code == grpc.StatusCode.OK, f"GetLoads with the operator certificate: {code}")
        # A cluster member's certificate (CN=mlaserve-node) is not an admin.
        by_node = Rpc(tls_channel(admin_address, d, cert="node"))
        code = by_node.code_of("/mlaserve.v1.Admin/DrainWorker",
                               admin_pb2.DrainWorkerRequest(id="decode-1"), admin_pb2.WorkerStatus)
        check(code == grpc.StatusCode.PERMISSION_DENIED, f"DrainWorker with a node certificate: {code}")

        # --- rogue registration ------------------------------------------------------------
        rogue = admin_pb2.RegisterWorkerRequest()
        rogue.worker.role = admin_pb2.WORKER_ROLE_DECODE
        rogue.worker.address = "203.0.113.7:8200"
        for token in (None, tokens["api"], "guessed-token-0000000000"):
            code = admin.code_of("/mlaserve.v1.Admin/RegisterWorker", rogue,
                                 admin_pb2.RegisterWorkerResponse, token=token)
            check(code == grpc.StatusCode.UNAUTHENTICATED, f"rogue RegisterWorker ({token}): {code}")
        hb = admin_pb2.HeartbeatRequest(worker_id="decode-1")
        code = admin.code_of("/mlaserve.v1.Admin/Heartbeat", hb, admin_pb2.HeartbeatResponse)
        check(code == grpc.StatusCode.UNAUTHENTICATED, f"rogue Heartbeat: {code}")
        lw = admin.unary("/mlaserve.v1.Admin/ListWorkers", admin_pb2.ListWorkersRequest(),
                         admin_pb2.ListWorkersResponse, token=tokens["admin"])
        check(len(lw.workers) == 2, f"no rogue worker registered: {[w.address for w in lw.workers]}")

        # --- worker RPCs need the cluster credential ---------------------------------------
        # With TLS a worker takes only clients with a cluster certificate, at the handshake.
        for addr in (decode.address, prefill.address):
            check(refused_at_handshake(tls_channel(addr, d)),
                  f"a TLS client without a certificate is refused at worker {addr}")
        # In plaintext with a cluster token, every worker RPC checks the token.
        plain = ["--insecure", "--listen", "127.0.0.1:0", "--backend", "cpu", "--num-kv-pages",
                 "16", "--cluster-token-file", f"{d}/cluster.token"] + common
        plain_decode = Server([args.decode_bin] + plain, f"{d}/plain-decode.log")
        servers.append(plain_decode)
        plain_prefill = Server([args.prefill_bin] + plain, f"{d}/plain-prefill.log")
        servers.append(plain_prefill)
        reserve = worker_pb2.ReserveRequest(request_id="evil", prompt_token_ids=[5, 6, 7],
                                            local_prefill=True, kv_lease_ms=2**31 - 1)
        reserve.sampling.max_new_tokens = 4
        for addr, calls in (
                (plain_decode.address, [("/mlaserve.v1.DecodeWorker/Reserve", reserve,
                                         worker_pb2.ReserveResponse),
                                        ("/mlaserve.v1.DecodeWorker/Abort",
                                         worker_pb2.WorkerAbortRequest(request_id="x"),
                                         worker_pb2.WorkerAbortResponse),
                                        ("/mlaserve.v1.DecodeWorker/GetInfo",
                                         worker_pb2.GetWorkerInfoRequest(),
                                         admin_pb2.WorkerDescriptor),
                                        ("/mlaserve.v1.KvService/AbortSession",
                                         kv_pb2.KvAbortSessionRequest(session_id="s"),
                                         kv_pb2.KvAbortSessionResponse)]),
                (plain_prefill.address, [("/mlaserve.v1.PrefillWorker/Prefill",
                                          worker_pb2.PrefillRequest(request_id="x", token_ids=[1]),
                                          worker_pb2.PrefillResponse),
                                         ("/mlaserve.v1.PrefillWorker/Abort",
                                          worker_pb2.WorkerAbortRequest(request_id="x"),
                                          worker_pb2.WorkerAbortResponse),
                                         ("/mlaserve.v1.PrefillWorker/GetInfo",
                                          worker_pb2.GetWorkerInfoRequest(),
                                          admin_pb2.WorkerDescriptor)])):
            anon = Rpc(grpc.insecure_channel(addr))
            for method, req, resp in calls:
                code = anon.code_of(method, req, resp)
                check(code == grpc.StatusCode.UNAUTHENTICATED, f"{method} without credential: {code}")
                code = anon.code_of(method, req, resp, token=tokens["api"])
                check(code == grpc.StatusCode.UNAUTHENTICATED, f"{method} with an API key: {code}")
            get_info = next(m for m, _, _ in calls if m.endswith("/GetInfo"))
            code = anon.code_of(get_info, worker_pb2.GetWorkerInfoRequest(),
                                admin_pb2.WorkerDescriptor, token=tokens["cluster"])
            check(code == grpc.StatusCode.OK, f"GetInfo at {addr} with the cluster token: {code}")
        anon = Rpc(grpc.insecure_channel(plain_decode.address))
        code, _ = anon.stream_error("/mlaserve.v1.DecodeWorker/Stream",
                                    worker_pb2.DecodeStreamRequest(session_id="s"),
                                    worker_pb2.DecodeStreamResponse)
        check(code == grpc.StatusCode.UNAUTHENTICATED, f"DecodeWorker/Stream without credential: {code}")
        push = anon.channel.stream_unary("/mlaserve.v1.KvService/PushPages",
                                         request_serializer=lambda m: m.SerializeToString(),
                                         response_deserializer=kv_pb2.KvPushResult.FromString)
        try:
            push(iter([kv_pb2.KvPushMessage()]), timeout=10)
            code = grpc.StatusCode.OK
        except grpc.RpcError as e:
            code = e.code()
        check(code == grpc.StatusCode.UNAUTHENTICATED, f"KvService/PushPages without credential: {code}")
        try:
            anon.unary("/mlaserve.v1.DecodeWorker/Reserve", reserve, worker_pb2.ReserveResponse,
                       token=tokens["cluster"])
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "--max-kv-lease-ms" in details,
              f"Reserve with the cluster token and kv_lease_ms INT32_MAX: {code} {details}")
        # A cluster member (certificate) over TLS: the lease is still capped by the worker.
        member = Rpc(tls_channel(decode.address, d, cert="node"))
        try:
            member.unary("/mlaserve.v1.DecodeWorker/Reserve", reserve, worker_pb2.ReserveResponse)
            code, details = grpc.StatusCode.OK, ""
        except grpc.RpcError as e:
            code, details = e.code(), e.details()
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "--max-kv-lease-ms" in details,
              f"Reserve with kv_lease_ms INT32_MAX: {code} {details}")

        # --- Generation needs the API key ----------------------------------------------------
        code, _ = public.stream_error("/mlaserve.v1.Generation/Generate", gen,
                                      api_pb2.GenerateResponse)
        check(code == grpc.StatusCode.UNAUTHENTICATED, f"Generate without an API key: {code}")
        code = public.code_of("/mlaserve.v1.Generation/GetModelInfo", api_pb2.GetModelInfoRequest(),
                              api_pb2.GetModelInfoResponse, token=tokens["admin"])
        check(code == grpc.StatusCode.UNAUTHENTICATED, f"GetModelInfo with a non-key token: {code}")

        # --- the OpenAI HTTP API: HTTPS, the same API keys and bounds ----------------------
        check_openai_http_api(http_address, d, tokens)

        # --- mlaservectl with TLS and the token file ---------------------------------------
        ctl = [args.ctl_bin, "--tls-ca", f"{d}/ca.pem", "--admin", admin_address,
               "--server", router.address]
        r = subprocess.run(ctl + ["--token-file", f"{d}/admin.token", "workers", "list", "-o",
                                  "json"], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0 and '"decode-1"' in r.stdout, f"mlaservectl workers list: {r}")
        r = subprocess.run(ctl + ["workers", "drain", "decode-1"], capture_output=True, text=True,
                           timeout=30)
        check(r.returncode == 2 and "UNAUTHENTICATED" in r.stderr, f"mlaservectl without token: {r}")
        r = subprocess.run([args.ctl_bin, "--tls-ca", f"{d}/rogue-ca.pem", "--admin", admin_address,
                            "--token-file", f"{d}/admin.token", "--timeout", "3", "loads"],
                           capture_output=True, text=True, timeout=30)
        check(r.returncode == 3, f"mlaservectl trusting a rogue CA: {r}")

        # --- bounded inputs -----------------------------------------------------------------
        pid = router.proc.pid
        before = peak_rss_kib(pid)
        t0 = time.monotonic()
        code, _ = public.stream_error("/mlaserve.v1.Generation/Generate",
                                      api_pb2.GenerateRequest(text="a" * (60 << 20)),
                                      api_pb2.GenerateResponse, token=tokens["api"])
        elapsed = time.monotonic() - t0
        grown_mb = (peak_rss_kib(pid) - before) / 1024
        print(f"one 60 MiB prompt: {code} in {elapsed:.2f} s, router peak RSS +{grown_mb:.1f} MB",
              flush=True)
        check(code == grpc.StatusCode.RESOURCE_EXHAUSTED, f"60 MiB prompt refused: {code}")
        check(grown_mb < 200, f"router peak RSS grew {grown_mb:.1f} MB for a 60 MiB prompt")
        before = peak_rss_kib(pid)
        t0 = time.monotonic()
        results = []

        def huge_prompt():
            req = api_pb2.GenerateRequest(text="a" * (60 << 20))
            results.append(public.stream_error("/mlaserve.v1.Generation/Generate", req,
                                               api_pb2.GenerateResponse, token=tokens["api"]))
        threads = [threading.Thread(target=huge_prompt) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.monotonic() - t0
        grown_mb = (peak_rss_kib(pid) - before) / 1024
        print(f"4 x 60 MiB prompts: {[c for c, _ in results]} in {elapsed:.2f} s, router peak "
              f"RSS +{grown_mb:.1f} MB", flush=True)
        check(all(c == grpc.StatusCode.RESOURCE_EXHAUSTED for c, _ in results),
              f"60 MiB prompts refused: {results}")
        check(grown_mb < 200, f"router peak RSS grew {grown_mb:.1f} MB for 4 x 60 MiB prompts")
        check(elapsed < 10, f"60 MiB prompts refused in {elapsed:.2f} s")

        def generate_error(req):
            return public.stream_error("/mlaserve.v1.Generation/Generate", req,
                                       api_pb2.GenerateResponse, token=tokens["api"])
        long_text = api_pb2.GenerateRequest(text="b" * (3 << 20))
        before = peak_rss_kib(pid)
        code, details = generate_error(long_text)
        grown_mb = (peak_rss_kib(pid) - before) / 1024
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "cannot fit" in details,
              f"3 MiB prompt over the context refused before tokenizing: {code} {details}")
        check(grown_mb < 50, f"3 MiB prompt grew the router's peak RSS {grown_mb:.1f} MB")
        code, details = generate_error(api_pb2.GenerateRequest(text="hi", request_id="r" * (1 << 20)))
        check(code == grpc.StatusCode.INVALID_ARGUMENT and len(details) < 300,
              f"1 MB request_id: {code}, {len(details)} bytes of message")
        code, _ = generate_error(api_pb2.GenerateRequest(text="hi", request_id="r" * (50 << 20)))
        check(code == grpc.StatusCode.RESOURCE_EXHAUSTED, f"50 MB request_id: {code}")
        many_stops = api_pb2.GenerateRequest(text="hi")
        many_stops.sampling.stop.extend([f"s{i}" for i in range(17)])
        code, details = generate_error(many_stops)
        check(code == grpc.StatusCode.INVALID_ARGUMENT and "at most 16" in details,
              f"17 stop strings: {code} {details}")
        long_stop = api_pb2.GenerateRequest(text="hi")
        long_stop.sampling.stop.append("z" * 10000)
        code, details = generate_error(long_stop)
        check(code == grpc.StatusCode.INVALID_ARGUMENT, f"10 kB stop string: {code} {details}")
        # The cluster still serves after all that.
        out = public.stream("/mlaserve.v1.Generation/Generate", gen, api_pb2.GenerateResponse,
                            token=tokens["api"])
        text = "".join(m.chunk.text for m in out if m.HasField("chunk"))
        check("18 19 20" in text, f"served after the oversized inputs: {text!r}")
    finally:
        for s in servers:
            s.stop()
    if FAILURES:
        print(f"{len(FAILURES)} check(s) failed; logs in {d}")
        return 1
    print("security test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
