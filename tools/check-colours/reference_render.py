#!/usr/bin/env python3
"""A stand-in for `lottie-render render` that encodes check_colours.py's templates with ffmpeg,
in the colour convention given by the environment, so that conventions can be compared in
Chromium without changing the encoders:

    CHECK_COLOURS_MATRIX=bt709 CHECK_COLOURS_PRIMARIES=bt709 CHECK_COLOURS_TRANSFER=bt709 \\
        python3 tools/check-colours/check_colours.py --binary tools/check-colours/reference_render.py

Values are ffmpeg's names (bt709, smpte170m, iec61966-2-1, …); each defaults to bt709. Frames
are exact: the fill's colour (composited over --background for MP4, straight alpha for WebM),
or the gradient computed per column; swscale converts them with accurate rounding. Understands
only the templates check_colours.py writes and the options it passes.
"""

import argparse
import json
import os
import subprocess
import sys


def colour(text):
    digits = text.lstrip("#")
    channels = [int(digits[i : i + 2], 16) for i in range(0, len(digits), 2)]
    return channels if len(channels) == 4 else channels + [255]


def frame(template, width, height, fill, background, fmt):
    """One RGBA frame, bytes."""
    paint = template["layers"][0]["shapes"][0]["it"][1]
    if paint["ty"] == "gf":
        stops = paint["g"]["k"]["k"]
        start, end = [v * 255 for v in stops[1:4]], [v * 255 for v in stops[5:8]]
        row = bytearray()
        for x in range(width):
            t = (x + 0.5) / width
            row += bytes(round(s + (e - s) * t) for s, e in zip(start, end)) + b"\xff"
        return bytes(row) * height
    red, green, blue, alpha = colour(fill)
    if fmt == "mp4":
        under = colour(background)
        a = alpha / 255
        pixel = bytes(round(c * a + u * (1 - a)) for c, u in zip((red, green, blue), under)) + b"\xff"
    else:
        pixel = bytes((red, green, blue, alpha))
    return pixel * (width * height)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("verb", choices=["render"])
    parser.add_argument("template")
    parser.add_argument("--format", required=True)
    parser.add_argument("--fps", type=int, default=30)
    parser.add_argument("--width", type=int, required=True)
    parser.add_argument("--height", type=int, required=True)
    parser.add_argument("--color", default="fill=#000000")
    parser.add_argument("--background", default="#FFFFFF")
    parser.add_argument("--output", required=True)
    args = parser.parse_args()
    with open(args.template) as source:
        template = json.load(source)
    pixels = frame(template, args.width, args.height, args.color.split("=", 1)[1], args.background, args.format)

    matrix = os.environ.get("CHECK_COLOURS_MATRIX", "bt709")
    tags = ["-colorspace", matrix, "-color_primaries", os.environ.get("CHECK_COLOURS_PRIMARIES", "bt709"),
            "-color_trc", os.environ.get("CHECK_COLOURS_TRANSFER", "bt709"), "-color_range", "tv"]
    convert = f"scale=out_color_matrix={matrix}:out_range=tv:flags=accurate_rnd+full_chroma_int"
    if args.format == "mp4":
        padded = f"pad={args.width + args.width % 2}:{args.height + args.height % 2}"
        encoder = ["-vf", f"{padded},{convert},format=yuv420p", "-c:v", "libx264", "-crf", "20",
                   "-preset", "veryfast", *tags]
    elif args.format == "webm":
        encoder = ["-vf", f"{convert},format=yuva420p", "-c:v", "libvpx-vp9", "-crf", "31", "-b:v", "0",
                   "-auto-alt-ref", "0", *tags]
    else:
        encoder = ["-vf", "split[a][b];[a]palettegen[p];[b][p]paletteuse"]
    frames = template["op"]
    command = ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "rgba",
               "-s", f"{args.width}x{args.height}", "-r", str(args.fps), "-i", "-", *encoder,
               "-frames:v", str(frames), "-f", args.format, args.output]
    done = subprocess.run(command, input=pixels * frames)
    sys.exit(done.returncode)


if __name__ == "__main__":
    main()
