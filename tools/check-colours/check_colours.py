#!/usr/bin/env python3
"""`./dev check-colours`: do our outputs decode to the requested colours in headless Chromium?

Renders solid fills and a gradient with the `render` verb of a lottie-render binary, in every
format Chromium plays (MP4, WebM, GIF, PNG, JPEG, WebP, APNG, AV1) at an SD, an HD and an odd
size; serves them and page.html on localhost; Chromium
(Debian's package, headless), once per decode path (PATHS), draws one frame of each onto a
canvas and posts the pixels it read back; every channel is compared with the requested colour.
One line per case, a summary per path, and exit status 1 when any case is off by more than
TOLERANCE (2 when the check itself could not run). Python's standard library only.
"""

import argparse
import http.server
import json
import math
import os
import shutil
import signal
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

# A decoded channel may differ from the requested one by this much (in 1/255): the promise in
# DESIGN.md "Colour"; limited-range 8-bit YUV cannot round-trip every sRGB value exactly.
TOLERANCE = 2

# Chromium must post its results within this many seconds: ~80 small files decode in a few
# seconds here; two minutes leave room for a loaded machine and still end a hung browser.
BROWSER_DEADLINE_S = 120

# A render of a few frames at these sizes takes about a second; a minute means it hung.
RENDER_TIMEOUT_S = 60

# Frames per output: a few identical frames, enough for every encoder to write a normal stream.
FRAMES = 3
FPS = 30

# Sizes: SD, HD, and an odd size (MP4 pads odd sizes by a pixel of background).
SIZES = [("sd", 640, 480), ("hd", 1280, 720), ("odd", 333, 251)]

# Opaque fills: the brand colours, white, black and a mid grey.
SOLIDS = ["#AF52DE", "#34C759", "#FF3B30", "#007AFF", "#FFFFFF", "#000000", "#808080"]

# A translucent fill: composited over BACKGROUND by the encoder (MP4) or by the canvas (WebM,
# which keeps alpha). GIF has binary transparency only, so it is not asked for there.
TRANSLUCENT = "#007AFF80"

# The background: MP4 is rendered over it, the canvas is filled with it before a frame is drawn
# (so a WebM frame whose alpha is wrong shows it). Not one of the colours checked.
BACKGROUND = "#202020"

# A horizontal linear gradient between two brand colours, compared in vertical bands.
GRADIENT = ("#AF52DE", "#34C759")
GRADIENT_BANDS = 12
# Each band's mean over this many columns is compared with the mean of the exact gradient
# over the same columns: it averages out rlottie's 8-bit steps and the encoders' noise on a
# slope, not a colour shift.
GRADIENT_BAND_WIDTH = 16

# The formats Chromium plays (HEVC and ProRes it does not: tests/engine/colours.rs decodes those
# with ffmpeg). Stills are drawn through an <img>, as are the animated images (first frame).
FORMATS = ["mp4", "webm", "gif", "png", "jpeg", "webp", "apng", "av1"]
# The file name's extension per format, so the test server names each its content type.
EXTENSIONS = {"apng": "png", "jpeg": "jpg", "av1": "mp4"}
# Drawn from an <img> rather than a <video>.
IMAGES = {"gif", "png", "jpeg", "webp", "apng"}
# Composited over --background by the encoder (no alpha).
OPAQUE = {"mp4", "av1", "jpeg"}
# The frame a still shows (`--at`): the middle one, as the videos are drawn.
STILLS = {"png", "jpeg"}
# Formats with alpha: a fill over the middle quarter only must leave the corners transparent,
# so the canvas's background shows there.
ALPHA = {"webm", "gif", "png", "webp", "apng"}

HERE = Path(__file__).resolve().parent


def parse_colour(text):
    """`#RRGGBB[AA]` → ([r, g, b], a) in 0..255."""
    digits = text.lstrip("#")
    channels = [int(digits[i : i + 2], 16) for i in range(0, len(digits), 2)]
    return channels[:3], channels[3] if len(channels) == 4 else 255


def over(colour, background):
    """The straight-alpha colour composited over an opaque background, in 0..255 floats."""
    rgb, alpha = parse_colour(colour)
    under, _ = parse_colour(background)
    a = alpha / 255
    return [c * a + b * (1 - a) for c, b in zip(rgb, under)]


def template(width, height, paint, half=False):
    """A Lottie file of the output's size: one full-frame rectangle painted by `paint` (with
    `half`, a centred rectangle half as wide and high, the corners left empty)."""
    rect_w, rect_h = (width / 2, height / 2) if half else (width, height)
    def static(value):
        return {"a": 0, "k": value}

    return {
        "v": "5.7.0", "fr": FPS, "ip": 0, "op": FRAMES, "w": width, "h": height,
        "nm": "check-colours", "ddd": 0, "assets": [],
        "layers": [{
            "ddd": 0, "ind": 1, "ty": 4, "nm": "fill", "sr": 1, "ip": 0, "op": FRAMES, "st": 0,
            "bm": 0, "ao": 0,
            "ks": {"o": static(100), "r": static(0), "p": static([0, 0, 0]),
                   "a": static([0, 0, 0]), "s": static([100, 100, 100])},
            "shapes": [{"ty": "gr", "nm": "group", "it": [
                {"ty": "rc", "nm": "rectangle", "d": 1, "s": static([rect_w, rect_h]),
                 "p": static([width / 2, height / 2]), "r": static(0)},
                paint,
                {"ty": "tr", "p": static([0, 0]), "a": static([0, 0]), "s": static([100, 100]),
                 "r": static(0), "o": static(100), "sk": static(0), "sa": static(0)},
            ]}],
        }],
    }


def solid_paint():
    # Black here; the colour comes in through the `fill` slot (`--color fill=#RRGGBB[AA]`), the
    # way callers' brand colours do.
    return {"ty": "fl", "nm": "fill", "c": {"a": 0, "k": [0, 0, 0, 1]}, "o": {"a": 0, "k": 100}, "r": 1}


def gradient_paint(width):
    start, _ = parse_colour(GRADIENT[0])
    end, _ = parse_colour(GRADIENT[1])
    stops = [0] + [c / 255 for c in start] + [1] + [c / 255 for c in end]
    return {"ty": "gf", "nm": "gradient", "o": {"a": 0, "k": 100}, "r": 1, "t": 1,
            "s": {"a": 0, "k": [0, 0]}, "e": {"a": 0, "k": [width, 0]},
            "g": {"p": 2, "k": {"a": 0, "k": stops}}}


def inner(width, height):
    """The flat middle of a frame: a margin of an eighth on each side (away from edges, padding
    and chroma bleeding)."""
    return {"x": width // 8, "y": height // 8, "w": width - 2 * (width // 8), "h": height - 2 * (height // 8)}


def gradient_bands(width, height):
    """(rectangle, expected mean colour) for each band of the gradient."""
    start, _ = parse_colour(GRADIENT[0])
    end, _ = parse_colour(GRADIENT[1])
    bands = []
    for band in range(GRADIENT_BANDS):
        centre = int((band + 0.5) * width / GRADIENT_BANDS)
        x0 = max(0, min(width - GRADIENT_BAND_WIDTH, centre - GRADIENT_BAND_WIDTH // 2))
        columns = range(x0, x0 + GRADIENT_BAND_WIDTH)
        expected = [
            sum(s + (e - s) * (x + 0.5) / width for x in columns) / len(columns)
            for s, e in zip(start, end)
        ]
        rect = {"x": x0, "y": height // 4, "w": GRADIENT_BAND_WIDTH, "h": height // 2}
        bands.append((rect, expected))
    return bands


class Case:
    def __init__(self, fmt, size, width, height, colour, kind):
        self.fmt, self.size, self.width, self.height = fmt, size, width, height
        self.colour, self.kind = colour, kind  # kind: solid | translucent | gradient
        label = {"gradient": "gradient", "corners": "corners"}.get(kind, colour.lstrip("#"))
        self.id = f"{fmt}-{size}-{label}"
        self.file = f"{self.id}.{EXTENSIONS.get(fmt, fmt)}"
        if kind == "gradient":
            bands = gradient_bands(width, height)
            self.regions = [rect for rect, _ in bands]
            self.expected = [want for _, want in bands]
        elif kind == "corners":
            # The top-left corner, well away from the centred rectangle's edge.
            self.regions = [{"x": 0, "y": 0, "w": width // 8, "h": height // 8}]
            self.expected = [[float(c) for c in parse_colour(BACKGROUND)[0]]]
        else:
            self.regions = [inner(width, height)]
            self.expected = [over(colour, BACKGROUND)]

    def describe(self):
        if self.kind == "gradient":
            return f"{GRADIENT[0]}→{GRADIENT[1]}"
        if self.kind == "translucent":
            return f"{self.colour} over {BACKGROUND}"
        if self.kind == "corners":
            return f"transparent corner ({BACKGROUND} shows)"
        return self.colour


def cases():
    found = []
    for fmt in FORMATS:
        for size, width, height in SIZES:
            for colour in SOLIDS:
                found.append(Case(fmt, size, width, height, colour, "solid"))
            if fmt != "gif":
                found.append(Case(fmt, size, width, height, TRANSLUCENT, "translucent"))
            found.append(Case(fmt, size, width, height, GRADIENT[0], "gradient"))
            if fmt in ALPHA:
                found.append(Case(fmt, size, width, height, SOLIDS[0], "corners"))
    return found


def render(binary, work, case):
    source = work / "templates" / f"{case.kind}-{case.width}x{case.height}.json"
    if not source.exists():
        paint = gradient_paint(case.width) if case.kind == "gradient" else solid_paint()
        half = case.kind == "corners"
        source.write_text(json.dumps(template(case.width, case.height, paint, half)))
    command = [str(binary), "render", str(source), "--format", case.fmt, "--fps", str(FPS),
               "--width", str(case.width), "--height", str(case.height),
               "--output", str(work / "site" / case.file)]
    if case.kind != "gradient":
        command += ["--color", f"fill={case.colour}"]
    if case.fmt in OPAQUE:
        command += ["--background", BACKGROUND]
    if case.fmt in STILLS:
        command += ["--at", str(FRAMES // 2)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=RENDER_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"render of {case.id} failed ({done.returncode}): {done.stderr.strip()[-500:]}")


class Site(http.server.SimpleHTTPRequestHandler):
    """Serves the work folder (with byte ranges, which media elements ask for) and takes the
    page's results on POST /results."""

    results = None
    arrived = threading.Event()

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path.rstrip("/").endswith("/results"):
            Site.results = json.loads(body)
            Site.arrived.set()
        self.send_response(204)
        self.end_headers()

    def send_head(self):
        self._remaining = None
        spec = self.headers.get("Range")
        path = Path(self.translate_path(self.path))
        if not spec or not spec.startswith("bytes=") or not path.is_file():
            return super().send_head()
        size = path.stat().st_size
        first, _, last = spec[len("bytes="):].split(",")[0].partition("-")
        start = int(first) if first else max(0, size - int(last))
        end = min(int(last), size - 1) if first and last else size - 1
        if start >= size or start > end:
            self.send_error(416)
            return None
        handle = path.open("rb")
        handle.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(str(path)))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        self._remaining = end - start + 1
        return handle

    def copyfile(self, source, outputfile):
        if self._remaining is None:
            return super().copyfile(source, outputfile)
        outputfile.write(source.read(self._remaining))


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


# Chromium draws a video frame onto a canvas in one of two ways, and they differ by up to 12/255
# in blue, so each is a run of its own (`--paths`):
# - gpu: the path of every viewer with GPU compositing: YUV → RGB in a shader, in floats, with
#   the matrix the stream is tagged with. Here on SwiftShader (Chromium's CPU implementation of
#   the GPU API) since the machine has no GPU.
# - software: `--disable-gpu`, the path of Chromium without GPU acceleration: YUV → RGB by
#   libyuv in 6-bit fixed point, whose U → B coefficient is capped at 2.0 (128/64) unless built
#   with LIBYUV_UNLIMITED_DATA, which Chromium is not: BT.601 wants 2.018 (blue up to 1/255
#   low), BT.709 wants 2.112 (blue up to 12/255 low on saturated blues).
PATHS = {
    "gpu": ["--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist"],
    "software": ["--disable-gpu"],
}


def browse(chromium, work, port, path, log):
    """Runs Chromium (decode path `path`) on the page until it posts its results; returns them."""
    command = [
        chromium, "--headless", "--no-sandbox", *PATHS[path], "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={work / f'profile-{path}'}",
        # The display profile that canvases are colour-managed to: sRGB on every machine.
        "--force-color-profile=srgb",
        "--autoplay-policy=no-user-gesture-required",
        f"http://127.0.0.1:{port}/page.html",
    ]
    shutil.rmtree(work / f"profile-{path}", ignore_errors=True)
    Site.arrived.clear()
    Site.results = None
    browser = subprocess.Popen(command, stdout=log, stderr=log, start_new_session=True)
    try:
        if not Site.arrived.wait(BROWSER_DEADLINE_S):
            raise RuntimeError(f"Chromium ({path}) posted no results within {BROWSER_DEADLINE_S} s (log: {log.name})")
    finally:
        # The browser and its helpers are in the process group started above.
        try:
            os.killpg(browser.pid, signal.SIGTERM)
            browser.wait(10)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(browser.pid, signal.SIGKILL)
            browser.wait()
    if "fatal" in Site.results:
        raise RuntimeError(f"the page failed in Chromium ({path}): {Site.results['fatal']}")
    return Site.results


def tags(output):
    """The colour tags ffprobe reads from an output's video stream."""
    fields = "color_range,color_space,color_primaries,color_transfer"
    done = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                           f"stream={fields}", "-of", "default=noprint_wrappers=1", str(output)],
                          capture_output=True, text=True)
    found = dict(line.split("=", 1) for line in done.stdout.split() if "=" in line)
    return ", ".join(f"{key.removeprefix('color_')} {found.get(key, '?')}" for key in fields.split(","))


def judge(case, result):
    """(decoded text, max error, passed) for one case."""
    if "error" in result:
        return f"error: {result['error']}", None, False
    worst, worst_at = -1.0, 0
    for index, (region, want) in enumerate(zip(result["regions"], case.expected)):
        if case.kind == "gradient":
            # A band's mean against the exact gradient's mean over the same columns.
            error = max(abs(region["mean"][c] - want[c]) for c in range(3))
        else:
            # Every pixel of the flat region: the farthest of its min and max from the request.
            error = max(max(abs(region["min"][c] - want[c]), abs(region["max"][c] - want[c])) for c in range(3))
        if error > worst:
            worst, worst_at = error, index
    region, want = result["regions"][worst_at], case.expected[worst_at]
    got = "rgb({})".format(", ".join(str(round(v)) for v in region["mean"][:3]))
    if case.kind == "gradient":
        got += " want rgb({}) in band {}".format(", ".join(str(round(v)) for v in want), worst_at + 1)
    elif case.kind == "translucent":
        got += " want rgb({})".format(", ".join(str(round(v)) for v in want))
    if region["mean"][3] < 255:
        got += f" alpha {round(region['mean'][3])}"
    return got, worst, worst <= TOLERANCE + 1e-9


def arguments():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="target/release/lottie-render", help="the lottie-render binary")
    parser.add_argument("--chromium", default="/usr/bin/chromium", help="the Chromium binary")
    parser.add_argument("--keep", metavar="DIR", help="work in DIR and keep the outputs there")
    parser.add_argument("--only", metavar="TEXT", help="only the cases whose id contains TEXT (e.g. mp4-hd)")
    parser.add_argument("--failures", action="store_true", help="print only the cases that FAIL")
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="Chromium's decode paths to check, comma-separated (gpu, software)")
    args = parser.parse_args()
    args.paths = [path for path in args.paths.split(",") if path]
    if not args.paths or any(path not in PATHS for path in args.paths):
        parser.error(f"--paths: choose among {', '.join(PATHS)}")
    args.binary = Path(args.binary).resolve()
    if not args.binary.is_file():
        raise RuntimeError(f"no binary at {args.binary}")
    if not shutil.which(args.chromium):
        raise RuntimeError(f"no Chromium at {args.chromium}")
    return args


def prepare(binary, work, chosen):
    """Renders every case into work/site beside the page and its list of cases; returns the
    seconds it took."""
    (work / "templates").mkdir(parents=True, exist_ok=True)
    (work / "site").mkdir(parents=True, exist_ok=True)
    shutil.copy(HERE / "page.html", work / "site" / "page.html")
    started = time.monotonic()
    for case in chosen:
        render(binary, work, case)
    listing = [{"id": case.id, "url": case.file, "kind": "image" if case.fmt in IMAGES else "video",
                "time": (FRAMES // 2 + 0.5) / FPS, "background": BACKGROUND, "regions": case.regions}
               for case in chosen]
    (work / "site" / "cases.json").write_text(json.dumps(listing))
    return time.monotonic() - started


def measure_all(chromium, work, paths):
    """Serves work/site on a free port of 127.0.0.1 and runs Chromium on it once per path."""
    handler = lambda *a, **k: Site(*a, directory=str(work / "site"), **k)  # noqa: E731
    server = Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    answers = {}
    try:
        for path in paths:
            with open(work / f"chromium-{path}.log", "w") as log:
                answers[path] = browse(chromium, work, server.server_address[1], path, log)
    finally:
        server.shutdown()
    return answers


def report(path, chosen, answer, failures_only):
    """Prints one path's table; returns (its summary, how many failed)."""
    print(f"\nChromium, {path} path ({' '.join(PATHS[path])}):")
    print(f"{'format':6} {'size':9} {'colour':28} {'decoded':46} {'max error':>9}  result")
    by_id = {result["id"]: result for result in answer["results"]}
    failed = {fmt: 0 for fmt in FORMATS}
    counted = {fmt: 0 for fmt in FORMATS}
    for case in chosen:
        got, error, passed = judge(case, by_id.get(case.id, {"error": "no result"}))
        counted[case.fmt] += 1
        failed[case.fmt] += 0 if passed else 1
        # Rounded up, so that an error shown as 2.0 passes.
        shown = "-" if error is None else f"{math.ceil(error * 10 - 1e-9) / 10:.1f}"
        size = f"{case.width}×{case.height}"
        if passed and failures_only:
            continue
        print(f"{case.fmt:6} {size:9} {case.describe():28} {got:46} {shown:>9}  {'PASS' if passed else 'FAIL'}")
    per_format = ", ".join(f"{fmt} {counted[fmt] - failed[fmt]}/{counted[fmt]}" for fmt in FORMATS if counted[fmt])
    total = sum(failed.values())
    return f"{path}: {len(chosen) - total}/{len(chosen)} PASS ({per_format})", total


def main():
    args = arguments()
    chosen = [case for case in cases() if not args.only or args.only in case.id]
    with tempfile.TemporaryDirectory(prefix="check-colours-") as temporary:
        work = Path(args.keep).resolve() if args.keep else Path(temporary)
        rendered_in = prepare(args.binary, work, chosen)
        answers = measure_all(args.chromium, work, args.paths)

        version = subprocess.run([args.chromium, "--version"], capture_output=True, text=True).stdout.strip()
        print(f"{version}; {len(chosen)} outputs rendered in {rendered_in:.1f} s by {os.path.relpath(args.binary)}")
        print(f"tolerance {TOLERANCE}/255 per channel; solid: every pixel of the middle; "
              f"gradient: {GRADIENT_BANDS} bands of {GRADIENT_BAND_WIDTH} columns, mean per band")
        for fmt in FORMATS:
            sample = next((case for case in chosen if case.fmt == fmt), None)
            if sample and fmt not in IMAGES:
                print(f"{fmt} tags (ffprobe): {tags(work / 'site' / sample.file)}")
        summaries, failed = [], 0
        for path in args.paths:
            summary, path_failed = report(path, chosen, answers[path], args.failures)
            summaries.append(summary)
            failed += path_failed
    print("\n" + "; ".join(summaries) + (f" — {failed} FAIL" if failed else " — all PASS"))
    if args.keep:
        print(f"outputs, templates and Chromium's logs kept in {work}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    try:
        main()
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        print(f"check-colours: {error}", file=sys.stderr)
        sys.exit(2)
