#!/usr/bin/python3
"""A real Python gRPC client against a router + prefill + decode cluster on loopback.

Runs with Debian's python3 (python3-grpcio, python3-protobuf). Message classes come from
`protoc --python_out` at test time; calls go through grpcio's generic channel methods, so no
grpc_tools plugin is needed. Covers: health, GetModelInfo, streaming Generate, Abort of a
running request, Abort of an unknown id (NOT_FOUND naming it), INVALID_ARGUMENT.
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import grpc

START_TIMEOUT_S = 60


def generate_messages(protoc, out_dir):
    subprocess.run([protoc, "--proto_path=proto", f"--python_out={out_dir}",
                    "proto/mlaserve/v1/api.proto", "proto/mlaserve/v1/admin.proto"], check=True)
    sys.path.insert(0, out_dir)


class Server:
    """A server process started with port 0; its address comes from 'listening on'."""

    def __init__(self, argv, log_path):
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log)
        line = self._read_line_with_deadline(START_TIMEOUT_S)
        if not line.startswith("listening on "):
            self.proc.kill()
            raise RuntimeError(f"{argv[0]} did not start: stdout {line!r}; see {log_path}")
        self.address = line[len("listening on "):].strip().replace("0.0.0.0", "127.0.0.1")

    def _read_line_with_deadline(self, timeout):
        result = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(timeout)
        return result[0].decode() if result else ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                return self.proc.wait()
        return self.proc.returncode


def health_check(channel, service, timeout=2.0):
    """grpc.health.v1.Health/Check, messages encoded by hand (one string / one enum field)."""
    encoded = service.encode()
    request = (b"\x0a" + bytes([len(encoded)]) + encoded) if encoded else b""
    check = channel.unary_unary("/grpc.health.v1.Health/Check",
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
    response = check(request, timeout=timeout)
    return response[1] if len(response) >= 2 and response[0] == 0x08 else 0  # 1 = SERVING


def wait_ready(channel, deadline_s):
    deadline = time.monotonic() + deadline_s
    last = None
    while time.monotonic() < deadline:
        try:
            if health_check(channel, "mlaserve.v1.Generation") == 1:
                return
            last = "NOT_SERVING"
        except grpc.RpcError as e:
            last = e.code()
        time.sleep(0.05)  # readiness follows the router's poll period
    raise RuntimeError(f"router not ready within {deadline_s} s: {last}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--router-bin", required=True)
    ap.add_argument("--prefill-bin", required=True)
    ap.add_argument("--decode-bin", required=True)
    ap.add_argument("--protoc", default="protoc")
    ap.add_argument("--model", default="tests/fixtures/models/deepseek_v2")
    args = ap.parse_args()
    if not os.path.exists(os.path.join(args.model, "model.safetensors")):
        print(f"SKIP: no fixture model at {args.model}")
        return 0

    tmp = tempfile.mkdtemp(prefix="mlaserve-py-")
    generate_messages(args.protoc, tmp)
    from mlaserve.v1 import api_pb2  # noqa: E402 (generated above)

    common = ["--model", args.model, "--metrics-port", "-1"]
    worker = ["--insecure", "--listen", "127.0.0.1:0", "--backend", "cpu", "--num-kv-pages", "128"]
    servers = []
    try:
        prefill = Server([args.prefill_bin] + worker + common, f"{tmp}/prefill.log")
        servers.append(prefill)
        decode = Server([args.decode_bin] + worker + common + ["--local-prefill-threshold", "0"],
                        f"{tmp}/decode.log")
        servers.append(decode)
        router = Server([args.router_bin, "--insecure", "--listen", "127.0.0.1:0",
                         "--admin-listen", "127.0.0.1:0", "--poll-interval-ms", "100",
                         "--prefill", prefill.address, "--decode", decode.address] + common,
                        f"{tmp}/router.log")
        servers.insert(0, router)
        channel = grpc.insecure_channel(router.address)
        wait_ready(channel, 30)
        assert health_check(channel, "") == 1

        def unary(name, response_cls):
            return channel.unary_unary(f"/mlaserve.v1.Generation/{name}",
                                       request_serializer=lambda m: m.SerializeToString(),
                                       response_deserializer=response_cls.FromString)

        generate = channel.unary_stream("/mlaserve.v1.Generation/Generate",
                                        request_serializer=lambda m: m.SerializeToString(),
                                        response_deserializer=api_pb2.GenerateResponse.FromString)
        abort = unary("Abort", api_pb2.AbortResponse)
        model_info = unary("GetModelInfo", api_pb2.GetModelInfoResponse)(
            api_pb2.GetModelInfoRequest(), timeout=10)
        assert model_info.vocab_size == 512 and model_info.model_type == "deepseek_v2", model_info

        # Streaming Generate.
        req = api_pb2.GenerateRequest(token_ids=api_pb2.TokenIds(ids=list(range(2, 40))))
        req.sampling.max_new_tokens = 12
        req.sampling.temperature = 0.0
        req.sampling.ignore_eos = True
        ids, complete = [], None
        for msg in generate(req, timeout=60):
            if msg.HasField("chunk"):
                ids.extend(msg.chunk.token_ids)
            elif msg.HasField("complete"):
                complete = msg.complete
        assert len(ids) == 12, ids
        assert complete is not None and complete.finish_reason == api_pb2.FINISH_REASON_LENGTH
        assert complete.completion_tokens == 12 and complete.prompt_tokens == 38, complete
        # Greedy is deterministic.
        again = [i for m in generate(req, timeout=60) if m.HasField("chunk") for i in m.chunk.token_ids]
        assert again == ids, (again, ids)

        # logprobs: one TokenLogprobs per token; greedy, so the sampled token leads its sorted
        # top list; the same tokens as without. logit_bias +100 forces a token.
        with_lp = api_pb2.GenerateRequest()
        with_lp.CopyFrom(req)
        with_lp.sampling.logprobs = 3
        lp_ids, lps = [], []
        for m in generate(with_lp, timeout=60):
            if m.HasField("chunk"):
                assert len(m.chunk.logprobs) == len(m.chunk.token_ids), m.chunk
                lp_ids.extend(m.chunk.token_ids)
                lps.extend(m.chunk.logprobs)
        assert lp_ids == ids, (lp_ids, ids)
        for tok, lp in zip(lp_ids, lps):
            top = list(lp.top_logprobs)
            assert len(top) == 3 and top[0].token_id == tok and abs(top[0].logprob - lp.logprob) < 1e-6, lp
            assert top[0].logprob >= top[1].logprob >= top[2].logprob and lp.logprob <= 0, lp
        forced = api_pb2.GenerateRequest()
        forced.CopyFrom(req)
        forced.sampling.logit_bias[77] = 100.0
        forced.sampling.max_new_tokens = 4
        got = [i for m in generate(forced, timeout=60) if m.HasField("chunk") for i in m.chunk.token_ids]
        assert got == [77] * 4, got
        bad = api_pb2.GenerateRequest()
        bad.CopyFrom(req)
        bad.sampling.presence_penalty = 3.0
        try:
            list(generate(bad, timeout=60))
            raise AssertionError("presence_penalty 3 accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "presence_penalty 3" in e.details(), e

        # grpcio clients that compress, channel-wide or per call, are served the same.
        gzip_channel = grpc.insecure_channel(router.address, compression=grpc.Compression.Gzip)
        gzip_generate = gzip_channel.unary_stream(
            "/mlaserve.v1.Generation/Generate", request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=api_pb2.GenerateResponse.FromString)
        got = [i for m in gzip_generate(req, timeout=60) if m.HasField("chunk") for i in m.chunk.token_ids]
        assert got == ids, ("gzip channel", got, ids)
        gzip_channel.close()
        got = [i for m in generate(req, timeout=60, compression=grpc.Compression.Deflate)
               if m.HasField("chunk") for i in m.chunk.token_ids]
        assert got == ids, ("deflate call", got, ids)

        # A deadline shorter than the generation ends the call with DEADLINE_EXCEEDED.
        late = api_pb2.GenerateRequest(token_ids=api_pb2.TokenIds(ids=list(range(2, 30))))
        late.sampling.max_new_tokens = 400
        late.sampling.ignore_eos = True
        try:
            list(generate(late, timeout=0.05))
            raise AssertionError("a 50 ms deadline on 400 tokens was met")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.DEADLINE_EXCEEDED, e

        # Abort a running request by id.
        long_req = api_pb2.GenerateRequest(request_id="py-abort",
                                           token_ids=api_pb2.TokenIds(ids=list(range(2, 30))))
        long_req.sampling.max_new_tokens = 400
        long_req.sampling.ignore_eos = True
        stream = generate(long_req, timeout=60)
        first = next(stream)
        assert first.request_id == "py-abort" and first.HasField("chunk"), first
        abort(api_pb2.AbortRequest(request_id="py-abort"), timeout=10)
        rest = list(stream)
        assert rest and rest[-1].HasField("complete"), rest[-1:]
        assert rest[-1].complete.finish_reason == api_pb2.FINISH_REASON_ABORT
        assert rest[-1].complete.completion_tokens < 400

        try:
            abort(api_pb2.AbortRequest(request_id="no-such-request"), timeout=10)
            raise AssertionError("Abort of an unknown id succeeded")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.NOT_FOUND and "no-such-request" in e.details(), e

        bad = api_pb2.GenerateRequest(token_ids=api_pb2.TokenIds(ids=[5, 6]))
        bad.sampling.temperature = -1
        try:
            list(generate(bad, timeout=10))
            raise AssertionError("temperature -1 was accepted")
        except grpc.RpcError as e:
            assert e.code() == grpc.StatusCode.INVALID_ARGUMENT and "temperature -1" in e.details(), e
        channel.close()
    finally:
        codes = [s.stop() for s in servers]
    assert codes == [0] * len(codes), f"exit codes {codes}; logs in {tmp}"
    print("python client test: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
