#!/usr/bin/env bash
# Seeds the fuzz corpora (fuzz/corpus/TARGET/, git-ignored) from the shared test corpus at run
# time, so no corpus file is copied into the repository:
#   - template, slots, prepare: every JSON template of ../shared/corpus up to MAX_SEED_BYTES
#     (larger ones would be cut by libFuzzer's -max_len into invalid JSON) and fuzz/seeds/
#     (a template with a slot of every kind and markers); template also a gzipped one (.tgs)
#     and a dotLottie archive of one (.lottie, Python's zipfile);
#   - image: PNG, JPEG (baseline, progressive, EXIF-rotated) and WebP files ffmpeg makes;
#   - request: RenderRequest and CreateTemplateRequest bodies encoded by protoc from the
#     text-format requests below (the smallest corpus templates as lottie_json).
# Usage: fuzz/seed.sh [TARGET…]   (all targets when none is given)
# LOTTIE_CORPUS overrides where the shared corpus is (default: ../shared/corpus of the crate).
set -euo pipefail
fuzz_dir=$(cd "$(dirname "$0")" && pwd)
crate_dir=$(dirname "$fuzz_dir")
corpus=${LOTTIE_CORPUS:-$crate_dir/../shared/corpus}
# Matches -max_len in ./dev fuzz.
MAX_SEED_BYTES=${MAX_SEED_BYTES:-131072}
[ -d "$corpus" ] || { echo "seed.sh: no shared corpus at $corpus" >&2; exit 1; }

json_seeds() {
  local target=$1 file
  mkdir -p "$fuzz_dir/corpus/$target"
  while IFS= read -r -d '' file; do
    cp "$file" "$fuzz_dir/corpus/$target/seed-$(basename "$file")"
  done < <(find "$corpus" "$fuzz_dir/seeds" -name '*.json' -size -"$((MAX_SEED_BYTES + 1))"c -print0)
  if [ "$target" = template ]; then
    gzip -c "$corpus/tiny-solid-layer.json" > "$fuzz_dir/corpus/$target/seed-tiny.tgs"
    python3 - "$corpus/tiny-solid-layer.json" "$fuzz_dir/corpus/$target/seed-tiny.lottie" <<'PY'
import json, sys, zipfile
with zipfile.ZipFile(sys.argv[2], "w", zipfile.ZIP_DEFLATED) as archive:
    archive.writestr("manifest.json", json.dumps({"version": "1", "animations": [{"id": "tiny"}]}))
    archive.write(sys.argv[1], "animations/tiny.json")
PY
  fi
}

image_seeds() {
  local out=$fuzz_dir/corpus/image
  mkdir -p "$out"
  ffmpeg -v error -y -f lavfi -i testsrc=size=32x24 -frames:v 1 "$out/seed.png"
  ffmpeg -v error -y -f lavfi -i testsrc=size=32x24 -frames:v 1 -pix_fmt rgba "$out/seed-alpha.png"
  ffmpeg -v error -y -f lavfi -i testsrc=size=32x24 -frames:v 1 "$out/seed.jpg"
  ffmpeg -v error -y -f lavfi -i testsrc=size=32x24 -frames:v 1 -c:v libwebp "$out/seed.webp"
  ffmpeg -v error -y -f lavfi -i testsrc=size=32x24 -frames:v 1 -c:v libwebp -lossless 1 "$out/seed-lossless.webp"
}

# One text-format request per line: MESSAGE<TAB>TEXT.
request_seeds() {
  local out=$fuzz_dir/corpus/request index=0 message text tiny
  mkdir -p "$out"
  tiny=$(python3 -c 'import json,sys; print(json.dumps(open(sys.argv[1]).read()))' "$corpus/tiny-solid-layer.json")
  while IFS=$'\t' read -r message text; do
    index=$((index + 1))
    printf '%s\n' "$text" | protoc --proto_path="$crate_dir/proto" \
      --encode="lottie.render.v1.$message" lottie/render/v1/render_service.proto \
      lottie/render/v1/template_service.proto > "$out/seed-$index-$message.bin"
  done <<REQUESTS
RenderRequest	template_id: "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11" output { format: FORMAT_MP4 }
RenderRequest	template_id: "0b8f2f4e-3f6e-4a5e-9a51-6c0d1d7b2c11" modifications { texts { key: "title" value: "Hello\\nWorld" } colors { key: "primary_bg" value { r: 0 g: 1 b: 0.5 a: 1 } } } output { format: FORMAT_WEBM fps: 60 width: 1920 height: 100 background { r: 1 g: 1 b: 1 } }
RenderRequest	template_id: "not-a-uuid" modifications { colors { key: "" value { r: 255 g: nan b: inf } } texts { key: "tab" value: "a\\tb" } } output { format: FORMAT_GIF fps: 24 width: 99 height: 1921 }
CreateTemplateRequest	name: "tiny" lottie_json: $tiny
CreateTemplateRequest	name: "with font" lottie_json: $tiny fonts { key: "Family" value: "OTTO\\000\\001" } fonts { key: "" value: "not a font" }
CreateTemplateRequest	name: "" lottie_json: "{\\"v\\":\\"5\\"}"
REQUESTS
}

targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(request template slots prepare image)
for target in "${targets[@]}"; do
  case "$target" in
    request) request_seeds ;;
    image) image_seeds ;;
    template | slots | prepare) json_seeds "$target" ;;
    *) echo "seed.sh: unknown target $target" >&2; exit 64 ;;
  esac
  echo "seed.sh: $target: $(find "$fuzz_dir/corpus/$target" -type f | wc -l) inputs" >&2
done
