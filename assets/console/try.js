// Try it: a form made from a template's slots (colour pickers, texts, image uploads, number
// sliders within the slot's range, vector and gradient editors) and the output's settings;
// submitted with a fresh Idempotency-Key, followed over the job's event stream with a progress
// bar, and the result played in the page. The same request is shown as curl and grpcurl
// commands. A refusal's field errors are shown next to the fields they name.

import { call, get, watch } from './api.js';
import { copyButton, fill, h, problemView, stateName, TERMINAL } from './dom.js';
import { errorView, showOutput } from './jobs.js';
import { colorOf, hexOf, slotsTable } from './slots.js';

const FORMATS = [
  ['FORMAT_MP4', 'MP4 (H.264)'], ['FORMAT_WEBM', 'WebM (VP9, alpha)'], ['FORMAT_GIF', 'GIF'],
  ['FORMAT_PNG', 'PNG still'], ['FORMAT_JPEG', 'JPEG still'], ['FORMAT_WEBP', 'WebP'],
  ['FORMAT_APNG', 'APNG'], ['FORMAT_MP4_HEVC', 'MP4 (HEVC)'], ['FORMAT_MP4_AV1', 'MP4 (AV1)'],
  ['FORMAT_MOV_PRORES_4444', 'ProRes 4444 MOV'],
];
const STILLS = new Set(['FORMAT_PNG', 'FORMAT_JPEG']);
const OPAQUE = new Set(['FORMAT_MP4', 'FORMAT_JPEG', 'FORMAT_MP4_HEVC', 'FORMAT_MP4_AV1']);
// A slider has at most this many steps; a slot whose range is wider gets a number field.
const SLIDER_STEPS = 1000;

export async function show(root, [templateId], signal) {
  if (!templateId) {
    chooser(root, signal);
    return;
  }
  fill(root, h('p', { class: 'muted' }, 'Loading the template…'));
  let template;
  try {
    template = await get(`/v1/templates/${encodeURIComponent(templateId)}`, {}, signal);
  } catch (error) {
    if (!signal.aborted) fill(root, h('h1', {}, 'Try it'), problemView(error));
    return;
  }
  if (!signal.aborted) form(root, template, signal);
}

async function chooser(root, signal) {
  const list = h('ul', { class: 'choices' });
  fill(root, h('h1', {}, 'Try it'), h('p', {}, 'Pick a template:'), list);
  try {
    const page = await get('/v1/templates', { pageSize: 100 }, signal);
    for (const template of page.templates || []) {
      list.append(h('li', {}, h('a', { href: `#/try/${encodeURIComponent(template.templateId)}` }, template.name || template.templateId),
        ' ', h('span', { class: 'muted' }, `${template.width}×${template.height}`)));
    }
    if (!list.childElementCount) list.append(h('li', { class: 'muted' }, 'No templates: upload one on the Templates page.'));
  } catch (error) {
    if (!signal.aborted) list.after(problemView(error));
  }
}

// A labelled control whose errors show under it: `path` is the request field it sets.
function field(path, label, ...controls) {
  return h('div', { class: 'field', dataset: { field: path } }, h('label', {}, h('span', { class: 'label' }, label), ...controls));
}

function markDirty(event) {
  event.target.dataset.dirty = '1';
}

function slotFields(template, modifications) {
  const fields = [];
  const key = (id) => JSON.stringify(String(id));
  for (const slot of template.textSlots || []) {
    const input = h('textarea', { rows: 2, maxlength: 200, class: 'slot-text', dataset: { slotId: slot.id }, value: slot.defaultText || '' });
    modifications.push(() => (input.value !== (slot.defaultText || '') ? ['texts', slot.id, input.value] : null));
    fields.push(field(`modifications.texts[${key(slot.id)}]`, `Text “${slot.id}”`, input));
  }
  for (const slot of template.colorSlots || []) {
    const input = h('input', { type: 'color', class: 'slot-color', dataset: { slotId: slot.id }, value: hexOf(slot.defaultColor), oninput: markDirty });
    modifications.push(() => (input.dataset.dirty ? ['colors', slot.id, colorOf(input.value)] : null));
    fields.push(field(`modifications.colors[${key(slot.id)}]`, `Colour “${slot.id}”`, input));
  }
  for (const slot of template.imageSlots || []) fields.push(imageField(slot, modifications, key));
  for (const slot of template.scalarSlots || []) fields.push(scalarField(slot, modifications, key));
  for (const slot of template.vectorSlots || []) {
    const inputs = (slot.defaultValue || []).map((value) => h('input', { type: 'number', step: 'any', class: 'slot-vector', value: String(value), oninput: markDirty }));
    modifications.push(() => (inputs.some((input) => input.dataset.dirty)
      ? ['vectors', slot.id, { values: inputs.map((input) => Number(input.value)) }] : null));
    fields.push(field(`modifications.vectors[${key(slot.id)}]`, `${slot.property || 'vector'} “${slot.id}”`, ...inputs));
  }
  for (const slot of template.gradientSlots || []) {
    const stops = (slot.defaultStops || []).map((stop) => ({
      offset: h('input', { type: 'number', min: 0, max: 1, step: 0.01, class: 'slot-gradient-offset', value: String(stop.offset ?? 0), oninput: markDirty }),
      color: h('input', { type: 'color', class: 'slot-gradient-color', value: hexOf(stop.color), oninput: markDirty }),
    }));
    modifications.push(() => (stops.some((stop) => stop.offset.dataset.dirty || stop.color.dataset.dirty)
      ? ['gradients', slot.id, { stops: stops.map((stop) => ({ offset: Number(stop.offset.value), color: colorOf(stop.color.value) })) }]
      : null));
    fields.push(field(`modifications.gradients[${key(slot.id)}]`, `Gradient “${slot.id}”`,
      h('span', { class: 'stops' }, stops.map((stop) => h('span', { class: 'stop' }, stop.offset, stop.color)))));
  }
  return fields;
}

function scalarField(slot, modifications, key) {
  const min = Number(slot.min);
  const max = Number(slot.max);
  const value = String(slot.defaultValue ?? 0);
  const bounded = Number.isFinite(min) && Number.isFinite(max) && max > min;
  const number = h('input', { type: 'number', step: 'any', class: 'slot-scalar', value, oninput: markDirty });
  const controls = [number];
  if (bounded) {
    const step = (max - min) / SLIDER_STEPS;
    const slider = h('input', { type: 'range', min, max, step, value, class: 'slot-scalar-slider' });
    slider.addEventListener('input', () => { number.value = slider.value; number.dataset.dirty = '1'; });
    number.addEventListener('input', () => { slider.value = number.value; });
    controls.unshift(slider);
  }
  modifications.push(() => (number.dataset.dirty ? ['scalars', slot.id, Number(number.value)] : null));
  return field(`modifications.scalars[${key(slot.id)}]`,
    `${slot.property || 'number'} “${slot.id}”${bounded ? ` (${min}..${max})` : ''}`, ...controls);
}

// An image slot: the picked file is uploaded at once (POST /v1/images) and named by its id.
function imageField(slot, modifications, key) {
  const file = h('input', { type: 'file', accept: 'image/png,image/jpeg,image/webp', class: 'slot-image' });
  const fit = h('select', { class: 'slot-image-fit' }, ['IMAGE_FIT_COVER', 'IMAGE_FIT_CONTAIN', 'IMAGE_FIT_FILL']
    .map((name) => h('option', { value: name }, name.replace('IMAGE_FIT_', '').toLowerCase())));
  const status = h('span', { class: 'muted' }, `${slot.width}×${slot.height} box`);
  let imageId = '';
  file.addEventListener('change', async () => {
    imageId = '';
    const picked = file.files[0];
    if (!picked) return;
    fill(status, 'uploading…');
    try {
      const data = await base64(picked);
      const { body } = await call('POST', '/v1/images', { body: { data } });
      imageId = body.imageId;
      fill(status, `uploaded: ${body.format} ${body.width}×${body.height}`);
      // The commands shown are written again on the form's input events.
      file.dispatchEvent(new Event('input', { bubbles: true }));
    } catch (error) {
      fill(status, problemView(error));
    }
  });
  modifications.push(() => (imageId ? ['images', slot.id, { imageId, fit: fit.value }] : null));
  return field(`modifications.images[${key(slot.id)}]`, `Image “${slot.id}”`, file, fit, status);
}

function base64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ''));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function outputFields(template) {
  const format = h('select', { id: 'output-format' }, FORMATS.map(([value, label]) => h('option', { value }, label)));
  const width = h('input', { id: 'output-width', type: 'number', value: '480', min: 100, max: 1920 });
  const height = h('input', { id: 'output-height', type: 'number', value: String(Math.max(100, Math.round(480 * (template.height || 1) / (template.width || 1)))), min: 100, max: 1920 });
  const fps = h('select', { id: 'output-fps' }, h('option', { value: '30' }, '30'), h('option', { value: '60' }, '60'));
  const quality = h('select', { id: 'output-quality' }, ['QUALITY_STANDARD', 'QUALITY_HIGH', 'QUALITY_SMALL']
    .map((value) => h('option', { value }, value.replace('QUALITY_', '').toLowerCase())));
  const background = h('input', { id: 'output-background', type: 'color', value: '#ffffff', oninput: markDirty });
  const at = h('input', { id: 'output-at', type: 'number', step: 'any', min: 0, placeholder: 'seconds' });
  const from = h('input', { id: 'segment-from', type: 'number', step: 'any', min: 0, placeholder: 'from s' });
  const to = h('input', { id: 'segment-to', type: 'number', step: 'any', min: 0, placeholder: 'to s' });
  const markers = (template.markers || []).filter((marker) => marker.durationSeconds > 0);
  const marker = h('select', { id: 'segment-marker' }, h('option', { value: '' }, 'whole animation'),
    markers.map((item) => h('option', { value: item.name }, item.name)));
  const poster = h('input', { id: 'output-poster', type: 'checkbox' });
  const theme = h('select', { id: 'render-theme' }, h('option', { value: '' }, 'none'),
    (template.themes || []).map((name) => h('option', { value: name }, name)));
  const controls = { format, width, height, fps, quality, background, at, from, to, marker, poster, theme };
  const rows = [
    field('output.format', 'Format', format),
    field('output.width', 'Width', width),
    field('output.height', 'Height', height),
    field('output.fps', 'Frames per second', fps),
    field('output.quality', 'Quality', quality),
    field('output.background', 'Background (no alpha)', background),
    field('output.at', 'Still at (seconds)', at),
    field('output.segment', 'Segment', from, to, markers.length ? marker : null),
    field('output.poster', 'Poster PNG too', poster),
    template.themes && template.themes.length ? field('theme', 'Theme', theme) : null,
  ];
  const shown = () => {
    const still = STILLS.has(format.value);
    rows[5].hidden = !OPAQUE.has(format.value);
    rows[6].hidden = !(still || format.value === 'FORMAT_WEBP');
    rows[7].hidden = still;
    rows[8].hidden = still;
  };
  format.addEventListener('change', shown);
  shown();
  return { controls, rows };
}

function outputOf({ format, width, height, fps, quality, background, at, from, to, marker, poster }) {
  const out = { format: format.value, fps: Number(fps.value), width: Number(width.value), height: Number(height.value) };
  if (quality.value !== 'QUALITY_STANDARD') out.quality = quality.value;
  if (OPAQUE.has(format.value) && background.dataset.dirty) out.background = colorOf(background.value);
  if (at.value !== '' && (STILLS.has(format.value) || format.value === 'FORMAT_WEBP')) out.at = { seconds: Number(at.value) };
  if (!STILLS.has(format.value)) {
    if (marker.value) out.segment = { marker: marker.value };
    else if (from.value !== '' || to.value !== '') out.segment = { seconds: { from: Number(from.value || 0), to: Number(to.value || 0) } };
    if (poster.checked) out.poster = {};
  }
  return out;
}

function form(root, template, signal) {
  const modifications = [];
  const slots = slotFields(template, modifications);
  const { controls, rows } = outputFields(template);
  const curl = h('pre', { id: 'try-curl', class: 'command' });
  const grpcurl = h('pre', { id: 'try-grpcurl', class: 'command' });
  const errors = h('div', { id: 'try-errors' });
  const result = h('section', { id: 'try-result' });
  const request = () => {
    const body = { templateId: template.templateId };
    const mods = {};
    for (const read of modifications) {
      const entry = read();
      if (!entry) continue;
      const [kind, id, value] = entry;
      (mods[kind] = mods[kind] || {})[id] = value;
    }
    if (Object.keys(mods).length) body.modifications = mods;
    body.output = outputOf(controls);
    if (controls.theme.value) body.theme = controls.theme.value;
    return body;
  };
  const commands = () => {
    const body = JSON.stringify(request());
    const host = window.location.host;
    fill(curl, `curl -sS -X POST '${window.location.origin}/v1/renders' \\\n`
      + '  -H "authorization: Bearer $LOTTIE_RENDER_KEY" \\\n'
      + '  -H "idempotency-key: $(uuidgen)" \\\n'
      + "  -H 'content-type: application/json' \\\n"
      + `  --data-binary @- <<'JSON'\n${body}\nJSON`);
    fill(grpcurl, `grpcurl -plaintext \\\n`
      + '  -H "authorization: Bearer $LOTTIE_RENDER_KEY" \\\n'
      + '  -H "idempotency-key: $(uuidgen)" \\\n'
      + `  -d @ ${host} lottie.render.v1.RenderService/SubmitRender <<'JSON'\n${body}\nJSON`);
  };
  const submit = h('button', { type: 'submit', id: 'try-submit' }, 'Render');
  const formElement = h('form', {
    id: 'try-form',
    novalidate: true,
    oninput: commands,
    onchange: commands,
    onsubmit: async (event) => {
      event.preventDefault();
      submit.disabled = true;
      try {
        await render(request(), formElement, errors, result, signal);
      } finally {
        submit.disabled = false;
      }
    },
  },
  h('h2', {}, 'Slots'), slots.length ? slots : h('p', { class: 'muted' }, 'This template has no slots.'),
  h('h2', {}, 'Output'), rows,
  h('div', { class: 'actions' }, submit));
  fill(root,
    h('h1', {}, 'Try it: ', h('span', { class: 'template-name' }, template.name || '')),
    h('p', { class: 'muted' }, `${template.width}×${template.height}, ${Number(template.durationSeconds || 0).toFixed(2)} s. `,
      h('a', { href: '#/templates' }, 'All templates')),
    h('div', { class: 'try' },
      h('div', {}, formElement, errors),
      h('div', {}, result,
        h('h2', {}, 'The same request'),
        h('h3', {}, 'curl ', copyButton(() => curl.textContent, curl)), curl,
        h('h3', {}, 'grpcurl ', copyButton(() => grpcurl.textContent, grpcurl)), grpcurl,
        h('details', {}, h('summary', {}, 'Slots of this template'), slotsTable(template)))));
  commands();
}

// A fresh key for each submission: crypto.randomUUID where the page is a secure context,
// else a version-4 UUID from crypto.getRandomValues.
function idempotencyKey() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  bytes[6] = (bytes[6] & 0x0f) | 0x40;
  bytes[8] = (bytes[8] & 0x3f) | 0x80;
  const hex = Array.from(bytes, (byte) => byte.toString(16).padStart(2, '0')).join('');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

async function render(body, formElement, errors, result, signal) {
  for (const old of formElement.querySelectorAll('.field-error')) old.remove();
  for (const old of formElement.querySelectorAll('.field.invalid')) old.classList.remove('invalid');
  fill(errors);
  const progress = h('progress', { id: 'try-progress', max: 1, value: 0 });
  const state = h('p', { id: 'try-state' }, 'Submitting…');
  const preview = h('div', { class: 'preview', id: 'try-preview' });
  fill(result, h('h2', {}, 'Result'), state, progress, preview);
  let job;
  try {
    ({ body: job } = await call('POST', '/v1/renders', { body, idempotencyKey: idempotencyKey(), signal }));
  } catch (error) {
    fill(result);
    showRefusal(error, formElement, errors);
    return;
  }
  const update = (next) => {
    job = next;
    const total = Number(next.framesTotal || 0);
    progress.max = Math.max(1, total);
    progress.value = next.state === 'JOB_STATE_SUCCEEDED' ? progress.max : Number(next.framesDone || 0);
    fill(state, h('a', { href: `#/jobs/${encodeURIComponent(next.jobId)}`, id: 'try-job' }, `Job ${next.jobId.slice(0, 8)}`),
      `: ${stateName(next.state)}`, total ? `, ${next.framesDone || 0} / ${total} frames` : '');
    state.dataset.state = next.state;
  };
  update(job);
  if (!TERMINAL.has(job.state)) {
    try {
      job = (await watch(job.jobId, update, signal)) || job;
    } catch (error) {
      if (!signal.aborted) preview.append(problemView(error));
      return;
    }
  }
  if (signal.aborted) return;
  if (job.state === 'JOB_STATE_SUCCEEDED') {
    await showOutput(preview, job, signal);
  } else if (job.error) {
    fill(preview, errorView(job.error));
  }
}

// A refusal: each field error next to the field it names (the longest path that prefixes
// it), the rest and the summary above the form.
function showRefusal(error, formElement, errors) {
  const fields = Array.from(formElement.querySelectorAll('.field[data-field]'));
  const loose = [];
  const problem = error.problem || {};
  for (const violation of problem.errors || []) {
    const path = String(violation.field || '');
    let best = null;
    for (const candidate of fields) {
      const prefix = candidate.dataset.field;
      const fits = path === prefix || (path.startsWith(prefix) && /^[.[]/.test(path.slice(prefix.length)));
      if (fits && (!best || prefix.length > best.dataset.field.length)) best = candidate;
    }
    if (best) {
      best.classList.add('invalid');
      best.append(h('p', { class: 'field-error', dataset: { field: path } }, violation.detail || 'invalid'));
    } else {
      loose.push(violation);
    }
  }
  fill(errors, problemView(error.problem ? { ...problem, errors: loose } : error));
}
