#!/usr/bin/python3
"""Real-model check of the worker pair: a decode and a prefill process on loopback.

The same greedy request runs twice on the decode worker: once prefilled locally, once prefilled
by the prefill worker in small chunks (so pages are re-sent across chunk boundaries) with its KV
shipped over the tcp transport. The token streams must be identical, the prefill worker's first
token must be the stream's first, and every KV page must be back in both pools afterwards.
Runs with Debian's python3 (python3-grpcio, python3-protobuf); messages come from protoc.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--decode-bin', required=True)
    ap.add_argument('--prefill-bin', required=True)
    ap.add_argument('--protoc', required=True)
    ap.add_argument('--model', default='tests/fixtures/models/deepseek_v2')
    args = ap.parse_args()

    gen = tempfile.mkdtemp(prefix='mlaserve_e2e_')
    subprocess.check_call([args.protoc, '--proto_path=proto', '--python_out=' + gen] +
                          ['proto/mlaserve/v1/' + f for f in sorted(os.listdir('proto/mlaserve/v1'))
                           if f.endswith('.proto')])
    sys.path.insert(0, gen)
    import grpc
    from mlaserve.v1 import admin_pb2, worker_pb2

    procs = []

    def start(binary):
        p = subprocess.Popen([binary, '--insecure', '--listen', '127.0.0.1:0', '--model', args.model,
                              '--backend', 'cpu', '--num-kv-pages', '64', '--chunk-size', '16'],
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        line = p.stdout.readline()
        m = re.match(r'listening on (\S+)', line)
        if not m:
            raise RuntimeError('%s did not start: %r' % (binary, line))
        return m.group(1)

    try:
        dch = grpc.insecure_channel(start(args.decode_bin))
        pch = grpc.insecure_channel(start(args.prefill_bin))

        def call(ch, method, req, resp_cls):
            return ch.unary_unary(method, request_serializer=lambda m: m.SerializeToString(),
                                  response_deserializer=resp_cls.FromString)(req, timeout=120)

        def info(ch, service):
            return call(ch, '/mlaserve.v1.%s/GetInfo' % service, worker_pb2.GetWorkerInfoRequest(),
                        admin_pb2.WorkerDescriptor)

        pinfo = info(pch, 'PrefillWorker')
        dinfo = info(dch, 'DecodeWorker')
        vocab = dinfo.model.vocab_size
        prompt = [(i * 37 + 11) % vocab for i in range(70)]
        max_new = 12

        def run(request_id, local):
            r = worker_pb2.ReserveRequest(request_id=request_id, prompt_token_ids=prompt,
                                          local_prefill=local)
            r.sampling.temperature = 0
            r.sampling.seed = 1
            r.sampling.max_new_tokens = max_new
            r.sampling.ignore_eos = True
            if not local:
                r.prefill_kv_compat_hash = pinfo.model.kv_compat_hash
            res = call(dch, '/mlaserve.v1.DecodeWorker/Reserve', r, worker_pb2.ReserveResponse)
            stream = dch.unary_stream(
                '/mlaserve.v1.DecodeWorker/Stream',
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=worker_pb2.DecodeStreamResponse.FromString)(
                    worker_pb2.DecodeStreamRequest(session_id=res.session_id), timeout=120)
            fut = None
            if not local:
                p = worker_pb2.PrefillRequest(request_id=request_id, token_ids=prompt,
                                              kv_session=res.session)
                p.sampling.temperature = 0
                p.sampling.seed = 1
                fut = pch.unary_unary(
                    '/mlaserve.v1.PrefillWorker/Prefill',
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=worker_pb2.PrefillResponse.FromString).future(p, timeout=120)
            tokens, finished = [], None
            for m in stream:
                if m.HasField('tokens'):
                    tokens += list(m.tokens.token_ids)
                else:
                    finished = m.finished
            return tokens, finished, (fut.result() if fut else None)

        local, fin_local, _ = run('local-1', True)
        remote, fin_remote, prefill = run('remote-1', False)
        print('local :', local)
        print('remote:', remote, '(first token from prefill: %d, %d KV bytes)' %
              (prefill.first_token, prefill.kv_bytes_sent))
        assert len(local) == max_new and fin_local.completion_tokens == max_new
        assert remote == local, 'remote prefill + KV transfer decoded differently'
        assert prefill.first_token == remote[0]
        assert fin_remote.finish_reason == fin_local.finish_reason
        dload = info(dch, 'DecodeWorker').load
        pload = info(pch, 'PrefillWorker').load
        assert dload.kv_pages_free == dload.kv_pages_total, dload
        assert pload.kv_pages_free == pload.kv_pages_total, pload
        import time
        t0 = time.time()
        for p in procs:
            p.terminate()
        for p in procs:
            assert p.wait(timeout=30) == 0, 'worker did not exit cleanly on SIGTERM'
        stop_s = time.time() - t0
        print('stopped in %.2f s' % stop_s)
        assert stop_s < 5, 'idle workers took %.1f s to stop' % stop_s
        print('OK')
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()


if __name__ == '__main__':
    main()
