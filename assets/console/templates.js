// Templates: the caller's templates (GET /v1/templates, paged), each with a picture, its
// size, duration, markers, warnings and every slot with its kind and default; upload (a
// .json, .lottie or .tgs file dropped or picked, sent raw: POST /v1/templates?name=…) and
// delete.
//
// A template's picture is a render like any other (so it is bounded like any other): a small
// PNG still of its middle frame, submitted with the Idempotency-Key
// `console-picture-<templateId>`, so the service renders it once per template and every later
// look is answered from that job.

import { call, get, output, watch, Refusal } from './api.js';
import { facts, fill, h, problemView, when } from './dom.js';
import { slotsTable } from './slots.js';

// The picture fits in this many pixels a side (the service's smallest output side is 100).
const PICTURE_SIDE = 240;
const MIN_SIDE = 100;
// Pictures asked for at once: each is a job in the caller's queue share.
const PICTURES_AT_ONCE = 2;
// A picture refused for a moment (its key still being handled, the queue full) is asked for
// again after the delay the service gave, this many times at most.
const PICTURE_RETRIES = 3;

const pictures = new Map(); // templateId → Promise<object URL>
const waiting = [];
let running = 0;

export function show(root, _params, signal) {
  const gallery = h('div', { class: 'gallery', id: 'templates-gallery' });
  const more = h('button', { type: 'button', id: 'templates-more', hidden: true }, 'More');
  const errors = h('div', { id: 'templates-error' });
  const state = { nextPageToken: '', calls: 0 };
  const load = async (append) => {
    // Only the latest call's answer is drawn (the first page may be asked for again by an
    // upload while it is on its way).
    state.calls += 1;
    const call = state.calls;
    try {
      const page = await get('/v1/templates', { pageSize: 24, pageToken: append ? state.nextPageToken : '' }, signal);
      if (call !== state.calls) return;
      if (!append) gallery.replaceChildren();
      for (const template of page.templates || []) gallery.append(card(template, () => load(false), signal));
      if (!gallery.childElementCount) gallery.append(h('p', { class: 'muted' }, 'No templates yet: upload one above.'));
      state.nextPageToken = page.nextPageToken || '';
      more.hidden = !state.nextPageToken;
      fill(errors);
    } catch (error) {
      if (!signal.aborted) fill(errors, problemView(error));
    }
  };
  more.addEventListener('click', () => load(true));
  fill(root, h('h1', {}, 'Templates'), uploader(() => load(false)), errors, gallery, more);
  load(false);
}

function uploader(reload) {
  const name = h('input', { id: 'template-name', placeholder: 'name (the file’s, when empty)', maxlength: 128, size: 30 });
  const file = h('input', { id: 'template-file', type: 'file', accept: '.json,.lottie,.tgs,application/json' });
  const chosen = h('span', { class: 'muted', id: 'template-chosen' }, 'Drop a .json, .lottie or .tgs file here, or pick one.');
  const result = h('div', { id: 'upload-result' });
  let pending = null;
  const choose = (picked) => {
    pending = picked;
    fill(chosen, picked ? `${picked.name} (${picked.size} bytes)` : '');
  };
  file.addEventListener('change', () => choose(file.files[0] || null));
  const zone = h('div', {
    class: 'drop-zone',
    id: 'drop-zone',
    ondragover: (event) => { event.preventDefault(); zone.classList.add('over'); },
    ondragleave: () => zone.classList.remove('over'),
    ondrop: (event) => {
      event.preventDefault();
      zone.classList.remove('over');
      choose(event.dataTransfer.files[0] || null);
    },
  }, chosen, h('br'), file);
  const upload = h('button', {
    type: 'submit',
    id: 'template-upload',
  }, 'Upload');
  const form = h('form', {
    class: 'upload',
    onsubmit: async (event) => {
      event.preventDefault();
      if (!pending) {
        fill(result, h('div', { class: 'problem' }, 'Choose a file first.'));
        return;
      }
      upload.disabled = true;
      fill(result, h('span', { class: 'muted' }, 'Uploading and analysing…'));
      try {
        const query = { name: name.value.trim() || pending.name.replace(/\.(json|lottie|tgs)$/i, '') };
        const { body } = await call('POST', '/v1/templates', { query, raw: await pending.arrayBuffer() });
        fill(result, h('p', { class: 'ok', id: 'upload-ok' }, 'Uploaded ',
          h('strong', {}, body.name || ''), ' as ', h('code', {}, body.templateId), '. ',
          h('a', { href: `#/try/${encodeURIComponent(body.templateId)}` }, 'Try it')));
        name.value = '';
        file.value = '';
        choose(null);
        reload();
      } catch (error) {
        fill(result, problemView(error));
      } finally {
        upload.disabled = false;
      }
    },
  }, zone, h('label', {}, 'Name ', name), upload);
  return h('section', { class: 'panel' }, h('h2', {}, 'Upload'), form, result);
}

function card(template, reload, signal) {
  const picture = h('div', { class: 'picture' }, h('span', { class: 'muted' }, 'picture…'));
  pictureInto(picture, template, signal);
  const remove = h('button', { type: 'button', class: 'danger template-delete' }, 'Delete');
  let armed = false;
  remove.addEventListener('click', async () => {
    if (!armed) {
      armed = true;
      remove.textContent = 'Really delete?';
      return;
    }
    remove.disabled = true;
    try {
      await call('DELETE', `/v1/templates/${encodeURIComponent(template.templateId)}`);
      reload();
    } catch (error) {
      remove.after(problemView(error));
    }
  });
  const markers = template.markers || [];
  const warnings = template.warnings || [];
  return h('article', { class: 'template-card', dataset: { templateId: template.templateId } },
    picture,
    h('h2', { class: 'template-name' }, template.name || ''),
    facts([
      ['Id', h('code', {}, template.templateId)],
      ['Size', `${template.width}×${template.height}`],
      ['Duration', `${Number(template.durationSeconds || 0).toFixed(2)} s at ${template.frameRate} fps`],
      ['Created', when(template.createdAt)],
      ['Themes', (template.themes || []).join(', ')],
      ['Animation', template.animationId],
    ]),
    markers.length ? h('details', {}, h('summary', {}, `${markers.length} markers`),
      h('ul', {}, markers.map((marker) => h('li', {}, h('code', {}, marker.name || ''),
        ` at ${marker.startSeconds ?? 0} s${marker.durationSeconds ? ` for ${marker.durationSeconds} s` : ''}`)))) : null,
    warnings.length ? h('details', { class: 'warnings' }, h('summary', {}, `${warnings.length} warnings`),
      h('ul', {}, warnings.map((warning) => h('li', {}, warning))),
      template.warningsTruncated ? h('p', { class: 'muted' }, 'More were left out.') : null) : null,
    slotsTable(template),
    h('div', { class: 'actions' },
      h('a', { class: 'button', href: `#/try/${encodeURIComponent(template.templateId)}` }, 'Try it'),
      remove));
}

// The picture's request: a PNG of the middle frame, fitted in PICTURE_SIDE.
function pictureRequest(template) {
  const width = Number(template.width) || PICTURE_SIDE;
  const height = Number(template.height) || PICTURE_SIDE;
  const scale = PICTURE_SIDE / Math.max(width, height);
  const frames = Math.round(Number(template.durationSeconds || 0) * 30);
  return {
    templateId: template.templateId,
    output: {
      format: 'FORMAT_PNG',
      fps: 30,
      width: Math.max(MIN_SIDE, Math.round(width * scale)),
      height: Math.max(MIN_SIDE, Math.round(height * scale)),
      at: { frame: Math.floor(frames / 2) },
    },
  };
}

function pictureInto(element, template, signal) {
  if (!pictures.has(template.templateId)) {
    const made = new Promise((resolve, reject) => {
      waiting.push(() => makePicture(template).then(resolve, reject));
      next();
    });
    made.catch(() => pictures.delete(template.templateId));
    pictures.set(template.templateId, made);
  }
  pictures.get(template.templateId).then((url) => {
    if (signal.aborted) return;
    fill(element, h('img', { src: url, alt: `picture of ${template.name || 'the template'}`, class: 'template-picture' }));
  }, (error) => {
    if (!signal.aborted) fill(element, h('div', { class: 'picture-failed' }, problemView(error)));
  });
}

function next() {
  while (running < PICTURES_AT_ONCE && waiting.length) {
    running += 1;
    waiting.shift()().finally(() => { running -= 1; next(); });
  }
}

async function makePicture(template) {
  const request = pictureRequest(template);
  for (let attempt = 0; ; attempt += 1) {
    try {
      let { body: job } = await call('POST', '/v1/renders', {
        body: request, idempotencyKey: `console-picture-${template.templateId}`,
      });
      if (job.state !== 'JOB_STATE_SUCCEEDED' && job.state !== 'JOB_STATE_FAILED' && job.state !== 'JOB_STATE_CANCELLED') {
        job = (await watch(job.jobId, () => {})) || job;
      }
      if (job.state !== 'JOB_STATE_SUCCEEDED') {
        const error = job.error || { reason: 'NOT_RENDERED', message: `the picture's job ended ${job.state}` };
        throw new Refusal(0, { reason: error.reason, detail: error.message });
      }
      return URL.createObjectURL(await output(job.jobId, ''));
    } catch (error) {
      const delay = error.problem && error.problem.retryable ? error.problem.retryAfterSeconds : undefined;
      if (attempt >= PICTURE_RETRIES || delay === undefined) throw error;
      await new Promise((resolve) => { setTimeout(resolve, Math.max(1, delay) * 1000); });
    }
  }
}
