#!/usr/bin/python3
"""Malformed requests while renders run, over HTTP/JSON and over gRPC (issue 23).

Starts a fresh `serve` (one worker, a data directory of its own, a free port on 127.0.0.1),
registers a one-frame template, keeps its worker busy with renders submitted one after another
over gRPC, and meanwhile sends malformed requests from CLIENTS threads for SECONDS per protocol:
over HTTP/1.1 (Python's http.client, keep-alive) a body that is not JSON, an unknown member, a
value of the wrong type, an unknown route and a missing Idempotency-Key; over gRPC (Debian's
python3-grpcio) a body that does not decode, an unknown field and a missing key. Prints, per
protocol, the refusals per second, their median and p99 latency, answers that were not a
refusal of the caller's mistake (5xx or success: must be 0), and the renders finished meanwhile.

Usage: bench/http_rejects.py [--seconds N] [--clients N] EXECUTABLE   (./dev bench-http runs it)
"""

import argparse
import http.client
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import grpc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from latency import TEMPLATE, messages, percentile, start_server  # noqa: E402

# One render may take this long before the run is abandoned.
JOB_LIMIT_SECONDS = 30

HTTP_CASES = [
    ("POST", "/v1/renders", b'{"templateId": ', True),          # not JSON: 400
    ("POST", "/v1/renders", b'{"output": {"widht": 3}}', True),  # unknown member: 422
    ("POST", "/v1/renders", b'{"templateId": 7}', True),         # wrong type: 422
    ("GET", "/v1/nothing/here", None, False),                    # unknown route: 404
    ("POST", "/v1/renders", b'{"templateId": "x"}', False),      # no Idempotency-Key: 422
]
GRPC_CASES = [
    (b"\xff\xff\xff", True),   # does not decode: INVALID_ARGUMENT BODY_UNDECODABLE
    (b"\xa0\x06\x01", True),   # field 100 unknown: UNKNOWN_FIELDS
    (b"", False),              # no idempotency-key: IDEMPOTENCY_KEY_MISSING
]
SUBMIT = "/lottie.render.v1.RenderService/SubmitRender"


def keep_rendering(address, types, template_id, stop, finished):
    channel = grpc.insecure_channel(address)
    submit = channel.unary_unary(SUBMIT, request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=types["RenderJob"].FromString)
    watch = channel.unary_stream("/lottie.render.v1.RenderService/WatchRenderJob",
                                 request_serializer=lambda m: m.SerializeToString(),
                                 response_deserializer=types["RenderJob"].FromString)
    index = 0
    while not stop.is_set():
        request = types["RenderRequest"](template_id=template_id)
        request.output.format = 1
        request.output.width = 400
        request.output.height = 400
        request.output.background.r = (index % 256) / 255
        request.output.background.g = (index // 256 % 256) / 255
        index += 1
        job = submit(request, timeout=JOB_LIMIT_SECONDS,
                     metadata=[("idempotency-key", str(uuid.uuid4()))])
        for update in watch(types["WatchRenderJobRequest"](job_id=job.job_id),
                            timeout=JOB_LIMIT_SECONDS):
            if update.state in (3, 4, 5):
                finished.append(update.state)
                break
    channel.close()


def http_client(address, deadline, timings, wrong):
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=JOB_LIMIT_SECONDS)
    turn = 0
    while time.perf_counter() < deadline:
        method, path, body, keyed = HTTP_CASES[turn % len(HTTP_CASES)]
        turn += 1
        headers = {"content-type": "application/json"}
        if keyed:
            headers["idempotency-key"] = str(uuid.uuid4())
        began = time.perf_counter()
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        response.read()
        timings.append((time.perf_counter() - began) * 1000)
        if not 400 <= response.status < 500:
            wrong.append(response.status)
    connection.close()


def grpc_client(address, deadline, timings, wrong):
    channel = grpc.insecure_channel(address)
    raw = channel.unary_unary(SUBMIT, request_serializer=None, response_deserializer=None)
    turn = 0
    while time.perf_counter() < deadline:
        body, keyed = GRPC_CASES[turn % len(GRPC_CASES)]
        turn += 1
        metadata = [("idempotency-key", str(uuid.uuid4()))] if keyed else []
        began = time.perf_counter()
        try:
            raw(body, timeout=JOB_LIMIT_SECONDS, metadata=metadata)
            wrong.append("OK")
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
                wrong.append(error.code())
        timings.append((time.perf_counter() - began) * 1000)
    channel.close()


def run(protocol, client, address, seconds, clients):
    timings, wrong = [], []
    deadline = time.perf_counter() + seconds
    threads = [threading.Thread(target=client, args=(address, deadline, timings, wrong))
               for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    return {
        "protocol": protocol, "refusals": len(timings) - len(wrong),
        "per_second": len(timings) / elapsed, "median": statistics.median(timings),
        "p99": percentile(timings, 0.99), "wrong": len(wrong),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("executable")
    args = parser.parse_args()
    types = messages()
    with tempfile.TemporaryDirectory(prefix="lottie-render-http-") as data_dir:
        server, address = start_server(args.executable, data_dir)
        try:
            host, port = address.rsplit(":", 1)
            connection = http.client.HTTPConnection(host, int(port), timeout=JOB_LIMIT_SECONDS)
            connection.request("POST", "/v1/templates?name=bench",
                               body=json.dumps(TEMPLATE).encode(),
                               headers={"content-type": "application/json"})
            response = connection.getresponse()
            template = json.loads(response.read())
            if response.status != 201:
                sys.exit(f"the template was refused: {response.status} {template}")
            stop, finished = threading.Event(), []
            renders = threading.Thread(target=keep_rendering, daemon=True, args=(
                address, types, template["templateId"], stop, finished))
            renders.start()
            print(f"{'protocol':<10} {'refusals':>9} {'per s':>8} {'median ms':>10} "
                  f"{'p99 ms':>8} {'not 4xx':>8} {'renders':>8}")
            for protocol, client in [("http/1.1", http_client), ("grpc", grpc_client)]:
                before = len(finished)
                result = run(protocol, client, address, args.seconds, args.clients)
                print(f"{result['protocol']:<10} {result['refusals']:>9} "
                      f"{result['per_second']:>8.0f} {result['median']:>10.2f} "
                      f"{result['p99']:>8.2f} {result['wrong']:>8} "
                      f"{len(finished) - before:>8}", flush=True)
            stop.set()
            renders.join(JOB_LIMIT_SECONDS)
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


if __name__ == "__main__":
    main()
