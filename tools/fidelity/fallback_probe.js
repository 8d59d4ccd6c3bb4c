// usage: node fallback_probe.js   (from target/fidelity-tool, after `./dev fidelity` set it up)
//
// Which face Chromium draws a font family in that it does not have: the same SVG text drawn in
// unknown families and in generic and named ones, screenshots compared byte for byte. The
// evidence for src/lottie/lowering/text/faces.rs's UNKNOWN_FAMILY_CLASS (docs/fidelity.md, Fonts). Weight 200 and
// italic too, as lottie-web asks for "Light Italic".
const puppeteer = require('puppeteer-core');
(async () => {
  const browser = await puppeteer.launch({ executablePath: '/usr/bin/chromium', headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu'] });
  const page = await browser.newPage();
  await page.setViewport({ width: 800, height: 100, deviceScaleFactor: 1 });
  const families = ['Ubuntu', 'Comic Neue', 'NoSuchFamilyXyz', 'serif', 'sans-serif', 'Times New Roman', 'Liberation Serif', 'DejaVu Sans', 'DejaVu Serif'];
  const shots = {};
  for (const style of ['normal', 'italic']) {
    for (const fam of families) {
      await page.setContent(`<html><body style="margin:0;background:#fff"><svg width="800" height="100"><text x="10" y="60" font-size="40" font-family="${fam}" font-style="${style}" font-weight="200">Hamburgefonstiv Qy 123</text></svg></body></html>`);
      shots[style + ' ' + fam] = (await page.screenshot({ encoding: 'base64' }));
    }
  }
  for (const style of ['normal', 'italic']) {
    for (const fam of ['Ubuntu', 'Comic Neue', 'NoSuchFamilyXyz']) {
      const same = families.filter(f => !['Ubuntu', 'Comic Neue', 'NoSuchFamilyXyz'].includes(f) && shots[style + ' ' + f] === shots[style + ' ' + fam]);
      console.log(`${style} "${fam}" draws identical to: ${same.join(', ') || 'none'}`);
    }
  }
  await browser.close();
})().catch(e => { console.error(e.message); process.exit(1); });
