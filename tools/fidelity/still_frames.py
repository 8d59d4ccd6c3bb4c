"""RENDERER_CMD for ../shared/tools/fidelity/fidelity.py that renders only the asked frames, as PNG
stills, so two builds (a debug one too) can be compared against lottie-web in minutes: each template
frame f is the 60 fps output frame round(f * 60 / fr) (`render --format png --at`), at the size
project_frames.py renders (native, clamped to 100..=1920 keeping the aspect), composited over white
and scaled back to the native size. No codec: it measures the renderer, not the encoder.

usage: LR_BIN=target/debug/lottie-render python3 ../shared/tools/fidelity/fidelity.py DIR \\
         "python3 tools/fidelity/still_frames.py"
       (LR_BIN defaults to target/release/lottie-render)
"""
import json, os, subprocess, sys

from PIL import Image

BIN = os.environ.get("LR_BIN", os.path.join("target", "release", "lottie-render"))


def main():
    path, out, names = sys.argv[1], sys.argv[2], sys.argv[3].split(",")
    d = json.load(open(path))
    fr, w, h = float(d["fr"]), int(round(float(d["w"]))), int(round(float(d["h"])))
    scale = max(min(1.0, 1920 / max(w, h)), 100 / min(w, h))
    ow, oh = max(100, min(1920, round(w * scale))), max(100, min(1920, round(h * scale)))
    for name in names:
        png = os.path.join(out, f"still-{name}.png")
        r = subprocess.run([BIN, "render", path, "--format", "png", "--fps", "60",
                            "--at", str(round(float(name) * 60 / fr)), "--width", str(ow),
                            "--height", str(oh), "-o", png], capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-500:])
            sys.exit(1)
        frame = Image.open(png).convert("RGBA")
        white = Image.new("RGBA", frame.size, (255, 255, 255, 255))
        white.alpha_composite(frame)
        white.convert("RGB").resize((w, h), Image.BICUBIC).save(os.path.join(out, f"{name}.png"))


if __name__ == "__main__":
    main()
