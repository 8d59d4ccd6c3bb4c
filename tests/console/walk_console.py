#!/usr/bin/env python3
"""A person's walk through the web console (/console/) in Debian's headless Chromium, driven
over WebDriver (Debian's python3-selenium and chromium-driver), against a running server.

Launched by tests/service/console/browser.rs with the server's address; prints one line per
step it saw happen and exits 0, or prints what it did not see (with the page's console
messages and a screenshot `failed.png`) and exits 1.

  walk_console.py --base http://127.0.0.1:PORT --screenshots DIR
                  [--key KEY [--other-key KEY]] [--full --hang-template FILE]
                  [--also-upload FILE]... [--image-template FILE]

The template it uploads is written here (`template`): a 320×180 canvas filled by a colour
slot (`background`, a fill's name), with a text slot (a text layer's name) in the middle.

`--full` (the run with authentication on) adds: the key refused and asked for, the hostile
texts (XSS probes) in a template name, a slot id, a text value and a filter, a refused
request's field errors, a failed job's reason, and a cancel.
"""

import argparse
import http.server
import threading
import json
import signal
import sys
import traceback
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select, WebDriverWait

# The longest the walk may take in all: a backstop that ends a hung browser (the steps take
# some 20-40 s on a loaded 2-core machine).
WALK_DEADLINE_S = 240
# The longest one step waits for what it expects (a render, a picture, a failure).
STEP_WAIT_S = 90
# The colour asked for, and how far a decoded channel may be from it (in 1/255): H.264's
# limited-range 8-bit YUV (DESIGN.md, "Colour": within 2/255 in Chromium) and one for luck.
ASKED = (0x34, 0xC7, 0x59)
TOLERANCE = 3
# The hostile texts: each must show as text, and window.__xss must stay undefined.
XSS_IMG = "<img src=x onerror=window.__xss=1>"
XSS_SCRIPT = '"><script>window.__xss=1</script>'
WINDOW = (1280, 800)
COLOUR_SLOT = "background"


def template(text_slot):
    """A 1 s, 30 fps Lottie document: a rectangle over the whole canvas whose fill is the
    colour slot `background`, and a text layer named `text_slot` (its text slot)."""
    static = lambda value: {"a": 0, "k": value}  # noqa: E731
    transform = {"o": static(100), "r": static(0), "p": static([160, 100, 0]),
                 "a": static([0, 0, 0]), "s": static([100, 100, 100])}
    return {
        "v": "5.7.0", "fr": 30, "ip": 0, "op": 30, "w": 320, "h": 180, "assets": [],
        "fonts": {"list": [{"fName": "Sans", "fFamily": "DejaVu Sans", "fStyle": "Book", "ascent": 75}]},
        "layers": [
            {"ddd": 0, "ind": 1, "ty": 5, "nm": text_slot, "sr": 1, "ks": transform,
             "ip": 0, "op": 30, "st": 0, "bm": 0,
             "t": {"d": {"k": [{"s": {"s": 24, "f": "Sans", "t": "Hello", "j": 2, "tr": 0,
                                      "lh": 28, "ls": 0, "fc": [0, 0, 0]}, "t": 0}]},
                   "p": {}, "m": {"g": 1, "a": static([0, 0])}, "a": []}},
            {"ddd": 0, "ind": 2, "ty": 4, "nm": "canvas", "sr": 1,
             "ks": dict(transform, p=static([160, 90, 0])), "ao": 0, "ip": 0, "op": 30, "st": 0,
             "shapes": [{"ty": "gr", "nm": "group", "it": [
                 {"ty": "rc", "d": 1, "nm": "rect", "s": static([320, 180]), "p": static([0, 0]), "r": static(0)},
                 {"ty": "fl", "nm": COLOUR_SLOT, "c": static([0.2, 0.3, 0.8, 1]), "o": static(100), "r": 1},
                 {"ty": "tr", "p": static([0, 0]), "a": static([0, 0]), "s": static([100, 100]),
                  "r": static(0), "o": static(100), "sk": static(0), "sa": static(0)}]}]},
        ],
    }


def log(line):
    print(line, flush=True)


class Walk:
    def __init__(self, args):
        self.args = args
        self.base = args.base.rstrip("/")
        self.shots = Path(args.screenshots)
        self.shots.mkdir(parents=True, exist_ok=True)
        options = Options()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--autoplay-policy=no-user-gesture-required", "--no-first-run",
                     "--disable-extensions", "--disable-background-networking",
                     "--disable-component-update", "--disable-sync", "--disable-default-apps",
                     "--lang=en-US", f"--window-size={WINDOW[0]},{WINDOW[1]}"):
            options.add_argument(flag)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.downloads = (self.shots / "downloads").resolve()
        self.downloads.mkdir(exist_ok=True)
        for old in self.downloads.iterdir():
            old.unlink()
        options.add_experimental_option("prefs", {
            "download.default_directory": str(self.downloads), "download.prompt_for_download": False})
        self.driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        self.driver.set_window_size(*WINDOW)
        # The page's own size (the window's holds the browser's frame too): the screenshots'.
        self.driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": WINDOW[0], "height": WINDOW[1], "deviceScaleFactor": 1, "mobile": False})
        self.driver.execute_cdp_cmd("Browser.setDownloadBehavior", {
            "behavior": "allow", "downloadPath": str(self.downloads)})
        self.wait = WebDriverWait(self.driver, STEP_WAIT_S, poll_frequency=0.2)

    # --- helpers -------------------------------------------------------------------------

    def open(self, fragment):
        self.driver.get(f"{self.base}/console/#/{fragment}")

    def go(self, fragment):
        """Shows another page, and waits until the page shown before is gone (the router
        empties it as the hash changes), so that nothing of it is found for the new one."""
        if self.driver.execute_script("return window.location.hash") == f"#/{fragment}":
            return
        self.driver.execute_script(
            "const old = document.getElementById('page').firstElementChild;"
            "if (old) old.dataset.walkOld = '1';"
            "window.location.hash = arguments[0];", f"#/{fragment}")
        self.until_js(f"the page #/{fragment}", "return !document.querySelector('#page [data-walk-old]')")

    def find(self, css):
        return self.driver.find_element(By.CSS_SELECTOR, css)

    def until(self, what, condition):
        try:
            return self.wait.until(lambda driver: condition())
        except TimeoutException:
            raise AssertionError(f"did not see {what} within {STEP_WAIT_S} s") from None

    def until_js(self, what, script, *args):
        return self.until(what, lambda: self.driver.execute_script(script, *args))

    def shot(self, name):
        self.driver.save_screenshot(str(self.shots / f"{name}.png"))
        log(f"ok: screenshot {name}.png")

    def set_value(self, element, value, event="input"):
        self.driver.execute_script(
            "arguments[0].value = arguments[1];"
            "arguments[0].dispatchEvent(new Event(arguments[2], {bubbles: true}));",
            element, value, event)

    def api(self, method, path, body=None, raw=None, key=None):
        """A call of the test's own, beside the browser's (urllib, the same door)."""
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        request = urllib.request.Request(self.base + path, data=data, method=method)
        if key:
            request.add_header("idempotency-key", key)
        if self.args.key:
            request.add_header("authorization", f"Bearer {self.args.key}")
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read() or b"{}")

    # --- steps ---------------------------------------------------------------------------

    def key(self):
        self.open("templates")
        if self.args.full:
            # No key yet: the API answers 401 and the page asks for one.
            self.until_js("the page asking for a key",
                          "const b = document.getElementById('banner');"
                          "return !b.hidden && b.textContent.includes('needs an API key')")
            log("ok: without a key the page asks for one")
        if self.args.key:
            self.find("#api-key").send_keys(self.args.key)
            self.find("#key-save").click()
            self.until_js("the key in use", "return document.getElementById('key-state').textContent.includes('key in use')")
            stored = self.driver.execute_script("return sessionStorage.getItem('lottie-render-api-key')")
            assert stored == self.args.key, "the key is kept in the tab's sessionStorage"
            log("ok: key entered, kept in sessionStorage")

    def upload(self, name, path):
        self.go("templates")
        self.until("the upload form", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#template-file"))
        self.find("#template-name").send_keys(name)
        self.find("#template-file").send_keys(str(Path(path).resolve()))
        self.find("#template-upload").click()
        code = self.until("the template uploaded", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#upload-ok code"))
        template_id = code[0].text
        log(f"ok: uploaded {Path(path).name} as {template_id}")
        return template_id

    def gallery(self, template_id, name, slots):
        card = f"article.template-card[data-template-id='{template_id}']"
        self.until("the template's card", lambda: self.driver.find_elements(By.CSS_SELECTOR, card))
        shown = self.find(f"{card} .template-name").get_attribute("textContent")
        assert shown == name, f"the name shows as text: {shown!r} != {name!r}"
        ids = [cell.get_attribute("textContent") for cell in self.driver.find_elements(By.CSS_SELECTOR, f"{card} .slot-id")]
        for slot in slots:
            assert slot in ids, f"slot {slot!r} listed: {ids}"
        kinds = [row.get_attribute("class") for row in self.driver.find_elements(By.CSS_SELECTOR, f"{card} tr.slot")]
        assert any("slot-colour" in kind for kind in kinds) and any("slot-text" in kind for kind in kinds), kinds
        self.until_js("the template's picture decoded",
                      "const img = document.querySelector(arguments[0] + ' img.template-picture');"
                      "return img !== null && img.complete && img.naturalWidth > 0", card)
        log("ok: the gallery shows the name as text, the colour and text slots, and a decoded picture")

    def try_render(self, template_id, text_slot, colour_slot, text):
        self.go(f"try/{template_id}")
        self.until("the Try it form", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#try-form"))
        colour = self.find(f"input.slot-color[data-slot-id='{colour_slot}']")
        self.set_value(colour, "#%02x%02x%02x" % ASKED)
        textarea = self.driver.find_elements(By.CSS_SELECTOR, "textarea.slot-text")
        textarea = [element for element in textarea if element.get_attribute("data-slot-id") == text_slot][0]
        textarea.clear()
        textarea.send_keys(text)
        Select(self.find("#output-format")).select_by_value("FORMAT_MP4")
        for field, value in (("#output-width", "320"), ("#output-height", "180")):
            self.find(field).clear()
            self.find(field).send_keys(value)
        self.find("#output-poster").click()
        curl = self.find("#try-curl").get_attribute("textContent")
        request = json.loads(curl.split("<<'JSON'\n")[1].split("\nJSON")[0])
        assert request["modifications"]["texts"][text_slot] == text, request
        assert request["modifications"]["colors"][colour_slot] == {"r": 0.204, "g": 0.78, "b": 0.349}, request
        assert "grpcurl" in self.find("#try-grpcurl").get_attribute("textContent")
        self.find("#try-submit").click()
        # The progress bar is there from the answer on, and full at the end.
        self.until("the progress bar", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#try-progress"))
        self.until_js("the render succeeded",
                      "return document.getElementById('try-state').dataset.state === 'JOB_STATE_SUCCEEDED'")
        full = self.driver.execute_script("const p = document.getElementById('try-progress'); return [p.value, p.max]")
        assert full[0] == full[1] and full[1] > 1, f"progress full at the end: {full}"
        log(f"ok: submitted, progress followed to {full[0]}/{full[1]} frames")
        # The video plays in the page: its frames are decoded (time advances), and a frame
        # drawn on a canvas has the colour asked for.
        self.until_js("the video playing",
                      "const v = document.querySelector('#try-preview video');"
                      "return v !== null && v.readyState >= 2 && v.played.length > 0 && v.currentTime > 0")
        pixel = self.driver.execute_script(
            "const v = document.querySelector('#try-preview video'); v.pause();"
            "const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;"
            "const g = c.getContext('2d'); g.drawImage(v, 0, 0);"
            "return {rgba: Array.from(g.getImageData(6, 6, 1, 1).data), w: v.videoWidth, h: v.videoHeight, t: v.currentTime};")
        got = pixel["rgba"][:3]
        assert all(abs(a - b) <= TOLERANCE for a, b in zip(got, ASKED)), f"pixel {got} != asked {ASKED} ({pixel})"
        assert (pixel["w"], pixel["h"]) == (320, 180), pixel
        log(f"ok: the video played ({pixel['t']:.2f} s) and its frame shows {got} for {list(ASKED)}")
        return self.driver.execute_script("return document.getElementById('try-job').href").rsplit("/", 1)[1]

    def download(self, job_id):
        """The job's page plays the output, and its download button saves the file."""
        self.go(f"jobs/{job_id}")
        self.until_js("the output playing on the job's page",
                      "const v = document.querySelector('#job-preview video'); return v !== null && v.readyState >= 2")
        size = int(self.api("GET", f"/v1/renders/{job_id}")["output"]["sizeBytes"])
        self.until_js("the download clicked", "const b = document.getElementById('job-download');"
                      "if (b) b.click(); return b !== null")
        saved = self.downloads / f"{job_id}.mp4"
        self.until(f"{saved.name} downloaded", lambda: saved.exists() and saved.stat().st_size == size)
        log(f"ok: the job's page plays its output and downloads it ({size} bytes)")

    def image_slot(self, template_id, picture):
        """An image slot's file is uploaded at once (POST /v1/images) and named by its id."""
        self.go(f"try/{template_id}")
        file = self.until("the image slot", lambda: self.driver.find_elements(By.CSS_SELECTOR, "input.slot-image"))
        file[0].send_keys(str(picture.resolve()))
        self.until_js("the image uploaded", "return Array.from(document.querySelectorAll('.field span.muted'))"
                      ".some((s) => s.textContent.startsWith('uploaded: png'))")
        curl = self.find("#try-curl").get_attribute("textContent")
        request = json.loads(curl.split("<<'JSON'\n")[1].split("\nJSON")[0])
        images = request["modifications"]["images"]
        assert all(len(image["imageId"]) == 64 for image in images.values()), images
        log(f"ok: an image slot's picture uploaded and named by its id in the request: {list(images)}")

    def webhooks(self, template_id):
        """A job whose webhook receiver answers 503: its page shows the delivery pending,
        with its attempts and the receiver's last status."""
        class Refusing(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the standard library's name)
                self.rfile.read(int(self.headers.get("content-length") or 0))
                self.send_response(503)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refusing)
        threading.Thread(target=receiver.serve_forever, daemon=True).start()
        job = self.api("POST", "/v1/renders", key="walk-webhook", body={
            "templateId": template_id,
            "output": {"format": "FORMAT_PNG", "width": 160, "height": 100, "at": {"frame": 0}},
            "notify": {"webhookUrl": f"http://127.0.0.1:{receiver.server_address[1]}/hook"}})
        self.go(f"jobs/{job['jobId']}")
        self.until_js("the delivery's attempt on the job's page",
                      "const row = document.querySelector('#job-webhooks tr.delivery');"
                      "if (!row) return false; const cells = Array.from(row.cells).map((c) => c.textContent);"
                      "return Number(cells[3]) >= 1 && cells[4] === '503'")
        cells = self.driver.execute_script(
            "return Array.from(document.querySelector('#job-webhooks tr.delivery').cells).map((c) => c.textContent)")
        receiver.shutdown()
        log(f"ok: the job's webhook delivery shown: {cells}")

    def field_errors(self):
        width = self.find("#output-width")
        width.clear()
        width.send_keys("50")
        self.find("#try-submit").click()
        error = self.until("the width's field error",
                           lambda: self.driver.find_elements(By.CSS_SELECTOR, ".field[data-field='output.width'] .field-error"))
        assert error[0].text, "the field error says something"
        log(f"ok: a refused request's field error next to the width: {error[0].text!r}")
        width.clear()
        width.send_keys("100")

    def submit_hang(self, template_id, width):
        """Submits the template that never finishes; answers the job's id."""
        self.go(f"try/{template_id}")
        self.until("the Try it form", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#try-form"))
        for field, value in (("#output-width", str(width)), ("#output-height", "100")):
            self.find(field).clear()
            self.find(field).send_keys(value)
        self.find("#try-submit").click()
        # The job's line is drawn anew at each of its events: read in one script.
        href = self.until_js("the job's link", "const link = document.getElementById('try-job'); return link && link.href")
        return href.rsplit("/", 1)[1]

    def cancel(self, job_id):
        self.go(f"jobs/{job_id}")
        # The job's view is drawn anew at each of its events: the button is found and
        # clicked in one script, as a person's click finds what is on screen.
        self.until_js("the cancel button clicked",
                      "const button = document.getElementById('job-cancel');"
                      "if (button) button.click(); return button !== null")
        self.until_js("the job cancelled", "const s = document.getElementById('job-state'); return s && s.textContent === 'cancelled'")
        log(f"ok: job {job_id[:8]} cancelled from its page")

    def jobs(self, failed_job):
        self.go("jobs")
        self.until("the jobs list", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#jobs-body tr.job"))
        if failed_job:
            row = f"#jobs-body tr[data-job-id='{failed_job}']"
            self.until_js("the failed job in the list with its reason",
                          "const r = document.querySelector(arguments[0]);"
                          "return r !== null && r.dataset.state === 'JOB_STATE_FAILED' && r.querySelector('.reason').textContent !== ''",
                          row)
            # Rows are drawn anew at each poll and event: read in one script.
            reason = self.driver.execute_script("return document.querySelector(arguments[0]).querySelector('.reason').textContent", row)
            log(f"ok: the jobs list shows the failed job's reason {reason}")
        self.until_js("a thumbnail", "return Array.from(document.querySelectorAll('#jobs-body img.thumb')).some((i) => i.naturalWidth > 0)")
        self.shot("jobs")
        if failed_job:
            # A hostile reason filter is refused (no reason of the contract), then the failed
            # jobs by state.
            self.find("#filter-reason").send_keys(XSS_IMG)
            self.find("#filter-apply").click()
            self.until_js("the hostile filter refused", "const e = document.querySelector('#jobs-error .problem');"
                          "return e !== null && e.textContent.includes('reason')")
            log("ok: a hostile reason filter refused, its field named")
            self.find("#filter-reason").clear()
            Select(self.find("#filter-state")).select_by_value("JOB_STATE_FAILED")
            self.find("#filter-apply").click()
            self.until_js("only failed jobs", "const rows = document.querySelectorAll('#jobs-body tr.job');"
                          "return rows.length > 0 && Array.from(rows).every((r) => r.dataset.state === 'JOB_STATE_FAILED')")
            self.until_js("the failed job's link clicked",
                          "const link = document.querySelector(arguments[0]);"
                          "if (link) link.click(); return link !== null",
                          f"#jobs-body tr[data-job-id='{failed_job}'] a.job-link")
            error = self.until("the failed job's reason and retry advice",
                               lambda: self.driver.find_elements(By.CSS_SELECTOR, "#job-error .retry"))
            reason = self.find("#job-error .reason").text
            log(f"ok: the failed job's page: {reason}: {self.find('#job-error .message').text!r}; {error[0].text}")
            self.shot("job-failed")

    def instance(self):
        self.go("instance")
        self.until("the instance's figures", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#instance-waiting"))
        refusals = self.driver.execute_script(
            "return Array.from(document.querySelectorAll('#instance-refusals code')).map((c) => c.textContent)")
        log(f"ok: the instance page shows its figures; refusals of the last hour: {refusals}")
        self.shot("instance")

    def not_an_operator(self, key):
        """Another key, of a caller that is no operator: the status is not for it."""
        self.set_value(self.find("#api-key"), key)
        self.find("#key-save").click()
        self.until("operators only", lambda: self.driver.find_elements(By.CSS_SELECTOR, "#instance-forbidden"))
        log("ok: with a key that is no operator's the instance page says operators only")

    def safe(self):
        self.until_js("nothing run from the hostile texts",
                      "return window.__xss === undefined && document.scripts.length === 1"
                      " && document.querySelectorAll('img[src=\"x\"]').length === 0")
        assert self.driver.execute_script("return document.cookie") == "", "no cookie"
        log("ok: window.__xss undefined, no injected element, no cookie")

    def failure_report(self):
        try:
            self.driver.save_screenshot(str(self.shots / "failed.png"))
            for entry in self.driver.get_log("browser"):
                log(f"browser: {entry.get('level')} {entry.get('message')}")
            log("page: " + self.driver.execute_script("return document.getElementById('page').innerText")[:3000])
        except Exception as error:  # the report must not hide the failure it reports
            log(f"(no report: {error})")


def walk(args, steps):
    steps.key()
    name = f"{XSS_IMG} {XSS_SCRIPT}" if args.full else "colour and text"
    # The text slot's id is a hostile text too (a layer's name) in the full walk.
    text_slot = XSS_IMG if args.full else "title"
    document = steps.shots / "colour-and-text.json"
    document.write_text(json.dumps(template(text_slot)))
    template_id = steps.upload(name, document)
    steps.gallery(template_id, name, [text_slot, COLOUR_SLOT])
    added = [steps.api("POST", f"/v1/templates?name={Path(extra).stem}", raw=Path(extra).read_bytes())["templateId"]
             for extra in args.also_upload]
    if added:
        steps.go("jobs")
        steps.go("templates")
        for other in added:
            steps.until_js("its picture", "const img = document.querySelector(arguments[0]);"
                           "return img !== null && img.naturalWidth > 0",
                           f"article[data-template-id='{other}'] img.template-picture")
        log(f"ok: {len(added)} more templates uploaded, their pictures shown")
    steps.shot("templates")
    hang = failed = None
    if args.full:
        hang = steps.api("POST", "/v1/templates?name=never-finishes", raw=Path(args.hang_template).read_bytes())["templateId"]
        failed = steps.submit_hang(hang, 100)
        log(f"ok: submitted job {failed[:8]}, which runs out of its budget")
    rendered = steps.try_render(template_id, text_slot, COLOUR_SLOT, XSS_SCRIPT if args.full else "Hello, console")
    steps.shot("try")
    if args.full:
        steps.field_errors()
        steps.cancel(steps.submit_hang(hang, 120))
        steps.webhooks(template_id)
    else:
        steps.download(rendered)
        if args.image_template:
            picture = steps.api("POST", "/v1/templates?name=image-slot", raw=Path(args.image_template).read_bytes())
            steps.image_slot(picture["templateId"], steps.shots / "templates.png")
    steps.jobs(failed)
    steps.instance()
    if args.other_key:
        steps.not_an_operator(args.other_key)
    steps.safe()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--screenshots", required=True)
    parser.add_argument("--key", default="")
    parser.add_argument("--other-key", default="")
    parser.add_argument("--also-upload", action="append", default=[])
    parser.add_argument("--full", action="store_true")
    parser.add_argument("--hang-template")
    parser.add_argument("--image-template")
    args = parser.parse_args()

    def overdue(*_):
        # An exception, not an exit: the browser is still reported on and quit below.
        raise AssertionError(f"the walk passed {WALK_DEADLINE_S} s")

    signal.signal(signal.SIGALRM, overdue)
    signal.alarm(WALK_DEADLINE_S)
    steps = Walk(args)
    try:
        walk(args, steps)
    except Exception as error:
        ours = [frame for frame in traceback.extract_tb(error.__traceback__) if frame.filename == __file__]
        where = "; ".join(f"line {frame.lineno} ({frame.line})" for frame in ours[-2:])
        log(f"FAILED at {where}: {str(error).splitlines()[0]}")
        signal.alarm(0)
        steps.failure_report()
        steps.driver.quit()
        sys.exit(1)
    steps.driver.quit()
    log("walk: all steps seen")


if __name__ == "__main__":
    main()
