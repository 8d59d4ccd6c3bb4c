// Packs a dotLottie archive with @dotlottie/dotlottie-js (LottieFiles' library, MIT), so the
// service tests read .lottie files written by a tool that is not ours (tests/service/api/
// dotlottie_js.rs). Reads a JSON document on stdin:
//   {"version": 1 | 2, "animations": [{"id": "...", "data": {Lottie JSON}}, ...],
//    "themes": [{"id": "...", "data": {"rules": [...]}}, ...]}       (themes: version 2)
// and writes the archive to the file named by its one argument. The library moves embedded
// images (data URIs) to i/ (images/ in version 1) and embedded fonts to f/ itself.
import { DotLottie, DotLottieV1 } from '@dotlottie/dotlottie-js';
import { readFileSync, writeFileSync } from 'node:fs';

const spec = JSON.parse(readFileSync(0, 'utf8'));
const archive = spec.version === 1 ? new DotLottieV1() : new DotLottie();
for (const animation of spec.animations) {
  archive.addAnimation({ id: animation.id, data: animation.data });
}
for (const theme of spec.themes ?? []) {
  archive.addTheme({ id: theme.id, data: theme.data });
}
await archive.build();
writeFileSync(process.argv[2], Buffer.from(await archive.toArrayBuffer()));
