// usage: node text_reference.js FILE OUTDIR F1,F2,... FONT_FILE [FALLBACK_FONT_FILE…]
//
// A second reference for templates lottie-web itself draws wrongly (right-to-left text: it
// places characters one by one, so Hebrew comes out reversed and Arabic unjoined): the same
// texts laid out by Chromium's own text engine (HarfBuzz shaping, ICU bidi, line breaking
// and font fallback in HTML), in the given font files (first the face, then the fallbacks),
// placed as lottie-web places lines: point text's first baseline on the layer's position,
// aligned there by its justification; box text wrapped at its box's width and aligned in it,
// its first baseline at the box position's y (`ps`) plus the font's ascent (`fonts.list`),
// or on the layer's position when it has no `ps`; lines `lh` apart. Writes
// OUTDIR/<frame>.png at the file's native size.
//
// It draws only what such a template holds: solid layers and static, un-animated text
// layers with a position alone; anything else is refused (exit 1), so a score it gives is
// never a score of something it did not draw.
const puppeteer = require('puppeteer-core');
const fs = require('fs');
const path = require('path');
const [file, outDir, framesS, ...fontFiles] = process.argv.slice(2);
const FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
  '--disable-component-update', '--disable-sync', '--no-first-run', '--allow-file-access-from-files'];

function refuse(message) {
  throw new Error(`text_reference: ${message}`);
}

function staticValue(property, what) {
  if (property === undefined) return undefined;
  if (property.a === 1 || property.x !== undefined) refuse(`${what} is animated or has an expression`);
  return property.k;
}

// The layers it can draw, bottom first, as plain data for the page.
function drawable(data) {
  const layers = [];
  for (const layer of [...data.layers].reverse()) {
    for (const key of Object.keys(layer.ks || {})) {
      if (key !== 'p') refuse(`layer '${layer.nm}' has a transform other than a position (${key})`);
    }
    const p = staticValue((layer.ks || {}).p, `layer '${layer.nm}' position`) || [0, 0];
    const base = { name: layer.nm, ip: layer.ip, op: layer.op, x: p[0], y: p[1] };
    if (layer.ty === 1) {
      layers.push({ ...base, kind: 'solid', colour: layer.sc, w: layer.sw, h: layer.sh });
    } else if (layer.ty === 5) {
      const t = layer.t;
      if ((t.a || []).length > 0) refuse(`text layer '${layer.nm}' has text animators`);
      if (t.d.k.length !== 1 || t.d.x !== undefined) refuse(`text layer '${layer.nm}' changes its text`);
      if (t.p && Object.keys(t.p).length > 0) refuse(`text layer '${layer.nm}' is on a path`);
      const s = t.d.k[0].s;
      const font = ((data.fonts || {}).list || []).find((entry) => entry.fName === s.f) || {};
      if (s.sz && s.ps && typeof font.ascent !== 'number') refuse(`text layer '${layer.nm}' has a box but its font no ascent`);
      if (![0, 1, 2].includes(s.j || 0)) refuse(`text layer '${layer.nm}' is justified (${s.j})`);
      if (s.tr || s.ls || s.sc || s.sw) refuse(`text layer '${layer.nm}' has tracking, shift or stroke`);
      layers.push({ ...base, kind: 'text', text: s.t, size: s.s, justify: s.j || 0, lineHeight: s.lh || s.s * 1.2,
        colour: s.fc, box: s.sz, boxAt: s.ps || [0, 0],
        // lottie-web: yPos starts at 0, or at ps[1] + ascent (SVGTextLottieElement, TextAnimatorProperty).
        firstBaseline: s.ps ? s.ps[1] + font.ascent * s.s / 100 : 0 });
    } else {
      refuse(`layer '${layer.nm}' is of type ${layer.ty}`);
    }
  }
  return layers;
}

(async () => {
  const data = JSON.parse(fs.readFileSync(file, 'utf8'));
  const w = Math.round(data.w), h = Math.round(data.h);
  if (fontFiles.length === 0) refuse('no font file given');
  const layers = drawable(data);
  const faces = fontFiles.map((font, index) =>
    `@font-face { font-family: "face${index}"; src: url("file://${path.resolve(font)}"); }`).join('\n');
  const families = fontFiles.map((_, index) => `"face${index}"`).join(', ');
  fs.mkdirSync(outDir, { recursive: true });
  const page_path = path.join(outDir, 'page.html');
  fs.writeFileSync(page_path, `<!doctype html><html><head><meta charset="utf-8"><style>${faces}
    body { margin: 0; background: #fff; } #c { position: relative; width: ${w}px; height: ${h}px; overflow: hidden; }
    .t { position: absolute; font-family: ${families}; white-space: pre; font-kerning: normal; }
    .mark { display: inline-block; width: 0; height: 0; vertical-align: baseline; }
  </style></head><body><div id="c"></div></body></html>`);
  const browser = await puppeteer.launch({ executablePath: '/usr/bin/chromium', headless: true, args: FLAGS });
  try {
    const page = await browser.newPage();
    await page.setViewport({ width: w, height: h, deviceScaleFactor: 1 });
    await page.goto(`file://${path.resolve(page_path)}`);
    // Every face loaded before anything is measured (a face loads when first used, and text
    // measured before then has the default font's metrics).
    const names = fontFiles.map((_, index) => `face${index}`);
    const allText = layers.filter((layer) => layer.kind === 'text').map((layer) => layer.text).join('');
    const loaded = await page.evaluate(async (names, allText) => {
      const faces = await Promise.all(names.map((name) => document.fonts.load(`16px "${name}"`, allText)));
      return faces.map((found) => found.length);
    }, names, allText);
    if (loaded.some((count) => count === 0)) refuse(`a font file did not load (faces found per file: ${loaded})`);
    for (const frame of framesS.split(',').map(Number)) {
      await page.evaluate(async (layers, frame) => {
        const canvas = document.getElementById('c');
        canvas.innerHTML = '';
        const rgb = (c) => `rgb(${c.map((v) => Math.round(v * 255)).join(',')})`;
        // Where a baseline is: the top of a zero-size inline block standing on it.
        const baselineOf = (element) => {
          const mark = document.createElement('span');
          mark.className = 'mark';
          element.prepend(mark);
          const y = mark.getBoundingClientRect().top - canvas.getBoundingClientRect().top;
          mark.remove();
          return y;
        };
        for (const layer of layers) {
          if (frame < layer.ip || frame >= layer.op) continue;
          if (layer.kind === 'solid') {
            const solid = document.createElement('div');
            Object.assign(solid.style, { position: 'absolute', left: `${layer.x}px`, top: `${layer.y}px`,
              width: `${layer.w}px`, height: `${layer.h}px`, background: layer.colour });
            canvas.append(solid);
            continue;
          }
          const style = { fontSize: `${layer.size}px`, lineHeight: `${layer.lineHeight}px`, color: rgb(layer.colour) };
          if (layer.box) {
            const box = document.createElement('div');
            box.className = 't';
            box.dir = 'auto';
            box.textContent = layer.text.replace(/\r/g, '\n');
            Object.assign(box.style, style, { whiteSpace: 'pre-wrap', width: `${layer.box[0]}px`,
              left: `${layer.x + layer.boxAt[0]}px`, top: '0px', textAlign: ['left', 'right', 'center'][layer.justify] });
            canvas.append(box);
            box.style.top = `${layer.y + layer.firstBaseline - baselineOf(box)}px`;
            continue;
          }
          // Point text: each line's baseline `lh` below the last, aligned on the position.
          layer.text.split(/\r\n|\r|\n/).forEach((text, index) => {
            const line = document.createElement('div');
            line.className = 't';
            line.dir = 'auto';
            line.textContent = text;
            Object.assign(line.style, style, { left: '0px', top: '0px' });
            canvas.append(line);
            const width = line.getBoundingClientRect().width;
            const left = layer.x - [0, width, width / 2][layer.justify];
            line.style.left = `${left}px`;
            line.style.top = `${layer.y + index * layer.lineHeight - baselineOf(line)}px`;
          });
        }
        await document.fonts.ready;
      }, layers, frame);
      await page.screenshot({ path: `${outDir}/${frame}.png`, clip: { x: 0, y: 0, width: w, height: h } });
    }
  } finally {
    await browser.close();
  }
})().catch((e) => { console.error(e.message); process.exit(1); });
