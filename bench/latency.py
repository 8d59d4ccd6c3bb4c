#!/usr/bin/python3
"""Small-job latency, measured from outside as a caller sees it (issue 11, part 5).

For each lottie-render executable given, starts a fresh `serve` (one worker, a data directory
of its own, a free port on 127.0.0.1), registers a one-frame 100×100 template, then submits
JOBS renders one after another with a stock gRPC client (Debian's python3-grpcio, messages
built from the service's own .proto files through protoc's descriptor set) and times each
SubmitRender call to the SUCCEEDED update on WatchRenderJob. Prints the median and p90 in ms.

Usage: bench/latency.py [--jobs N] EXECUTABLE [EXECUTABLE…]   (./dev bench-latency runs it)
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proto")
PROTO_FILES = [
    "lottie/render/v1/common.proto",
    "lottie/render/v1/render_service.proto",
    "lottie/render/v1/template_service.proto",
]
# How long the started server may take to log that it serves.
START_LIMIT_SECONDS = 30
# Jobs submitted before the timed ones: the first connections, caches and page faults.
WARM_UP_JOBS = 3
# One job may take this long before the run is abandoned.
JOB_LIMIT_SECONDS = 30
SUCCEEDED = 3
TERMINAL = {3, 4, 5}

# One frame at 30 fps, 100×100: a square over the background.
TEMPLATE = {
    "v": "5.7.0", "fr": 30, "ip": 0, "op": 1, "w": 100, "h": 100, "nm": "latency",
    "layers": [{
        "ty": 4, "nm": "square", "ind": 1, "ip": 0, "op": 1, "st": 0, "sr": 1, "ddd": 0,
        "ks": {"o": {"a": 0, "k": 100}, "r": {"a": 0, "k": 0}, "p": {"a": 0, "k": [50, 50, 0]},
               "a": {"a": 0, "k": [0, 0, 0]}, "s": {"a": 0, "k": [100, 100, 100]}},
        "shapes": [{"ty": "gr", "nm": "group", "it": [
            {"ty": "rc", "nm": "rect", "d": 1, "s": {"a": 0, "k": [60, 60]},
             "p": {"a": 0, "k": [0, 0]}, "r": {"a": 0, "k": 0}},
            {"ty": "fl", "nm": "fill", "c": {"a": 0, "k": [0.69, 0.32, 0.87, 1]},
             "o": {"a": 0, "k": 100}, "r": 1},
            {"ty": "tr", "p": {"a": 0, "k": [0, 0]}, "a": {"a": 0, "k": [0, 0]},
             "s": {"a": 0, "k": [100, 100]}, "r": {"a": 0, "k": 0}, "o": {"a": 0, "k": 100}},
        ]}],
    }],
}


def messages():
    """The service's message classes, from a descriptor set protoc writes of the .proto files."""
    with tempfile.NamedTemporaryFile(suffix=".pb") as out:
        subprocess.run(["protoc", "--include_imports", f"--descriptor_set_out={out.name}",
                        f"-I{PROTO_ROOT}", *PROTO_FILES], check=True)
        files = descriptor_pb2.FileDescriptorSet.FromString(out.read())
    pool = descriptor_pool.DescriptorPool()
    for file in files.file:
        pool.Add(file)
    names = ["CreateTemplateRequest", "Template", "RenderRequest", "RenderJob",
             "WatchRenderJobRequest"]
    factory = message_factory.MessageFactory(pool)
    return {name: factory.GetPrototype(pool.FindMessageTypeByName(f"lottie.render.v1.{name}"))
            for name in names}


def start_server(executable, data_dir):
    server = subprocess.Popen(
        [executable, "serve", "--listen", "127.0.0.1:0", "--workers", "1", "--data-dir", data_dir],
        # LOTTIE_RENDER_* settings of the caller's environment apply (e.g. _SPARE_WORKERS).
        env={"RUST_LOG": "info", "NO_COLOR": "1", "PATH": os.environ.get("PATH", ""),
             **{k: v for k, v in os.environ.items() if k.startswith("LOTTIE_RENDER_")}},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = threading.Event()
    address = []

    def read_log():
        for line in server.stderr:
            if not found.is_set() and " serving " in line:
                match = re.search(r"listen=Some\(([^)]+)\)", line)
                if match:
                    address.append(match.group(1))
                    found.set()
    threading.Thread(target=read_log, daemon=True).start()
    if not found.wait(START_LIMIT_SECONDS):
        server.kill()
        sys.exit(f"{executable}: the server did not start within {START_LIMIT_SECONDS} s")
    return server, address[0]


def measure(executable, jobs, types):
    with tempfile.TemporaryDirectory(prefix="lottie-render-latency-") as data_dir:
        server, address = start_server(executable, data_dir)
        try:
            channel = grpc.insecure_channel(address)
            grpc.channel_ready_future(channel).result(timeout=START_LIMIT_SECONDS)
            call = lambda path, request, response, stream=False: (
                channel.unary_stream if stream else channel.unary_unary)(
                path, request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=response.FromString)
            create = call("/lottie.render.v1.TemplateService/CreateTemplate",
                          types["CreateTemplateRequest"], types["Template"])
            submit = call("/lottie.render.v1.RenderService/SubmitRender",
                          types["RenderRequest"], types["RenderJob"])
            watch = call("/lottie.render.v1.RenderService/WatchRenderJob",
                         types["WatchRenderJobRequest"], types["RenderJob"], stream=True)
            template = create(types["CreateTemplateRequest"](
                name="latency", lottie_json=json.dumps(TEMPLATE).encode()),
                timeout=JOB_LIMIT_SECONDS)
            timings = []
            for index in range(WARM_UP_JOBS + jobs):
                request = types["RenderRequest"](template_id=template.template_id)
                request.output.format = 1  # FORMAT_MP4
                request.output.fps = 30
                request.output.width = 100
                request.output.height = 100
                # A different background each time: identical requests share one render.
                request.output.background.r = (index % 256) / 255
                request.output.background.g = (index // 256) / 255
                began = time.perf_counter()
                job = submit(request, timeout=JOB_LIMIT_SECONDS,
                             metadata=[("idempotency-key", str(uuid.uuid4()))])
                state = job.state
                if state not in TERMINAL:
                    for update in watch(types["WatchRenderJobRequest"](job_id=job.job_id),
                                        timeout=JOB_LIMIT_SECONDS):
                        state = update.state
                        if state in TERMINAL:
                            break
                elapsed = (time.perf_counter() - began) * 1000
                if state != SUCCEEDED:
                    sys.exit(f"{executable}: job {job.job_id} ended in state {state}")
                if index >= WARM_UP_JOBS:
                    timings.append(elapsed)
            channel.close()
            return timings
        finally:
            server.send_signal(signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.kill()


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=30)
    parser.add_argument("executables", nargs="+")
    args = parser.parse_args()
    types = messages()
    print(f"{'executable':<48} {'jobs':>5} {'median ms':>10} {'p90 ms':>8} {'min ms':>8} {'max ms':>8}")
    for executable in args.executables:
        timings = measure(executable, args.jobs, types)
        print(f"{executable:<48} {len(timings):>5} {statistics.median(timings):>10.1f} "
              f"{percentile(timings, 0.9):>8.1f} {min(timings):>8.1f} {max(timings):>8.1f}",
              flush=True)


if __name__ == "__main__":
    main()
