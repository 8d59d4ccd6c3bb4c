// Jobs: the caller's render jobs, newest first (GET /v1/renders), filtered by state, template
// and reason; the list is polled every few seconds and the unfinished jobs on screen are
// followed over their event streams (a few at once). A job's page shows why it failed and
// whether and when a retry helps, its output (played, downloadable), and its webhook
// deliveries; a running job can be cancelled.

import { call, get, output, watch } from './api.js';
import { bytes, facts, fill, h, problemView, seconds, shortId, stateName, TERMINAL, when } from './dom.js';

// The list is asked for again this often while the page is shown and visible.
const POLL_MS = 4000;
// Unfinished jobs followed live at once (each holds one event stream, a watcher slot of the
// tenant's on the server).
const MAX_FOLLOWED = 3;
// Jobs per page of the list.
const PAGE_SIZE = 20;
// A job's deliveries are made once its events were seen, shortly after it ended: its page asks
// for it again for this long after it ended.
const DELIVERIES_MAY_COME_MS = 60000;
// Thumbnails kept (object URLs of fetched posters and still outputs).
const MAX_THUMBNAILS = 60;

const STATES = ['JOB_STATE_QUEUED', 'JOB_STATE_RUNNING', 'JOB_STATE_SUCCEEDED',
  'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED'];

const thumbnails = new Map(); // jobId → Promise<object URL | null>
const filters = { state: '', templateId: '', reason: '' };

export function show(root, [jobId], signal) {
  if (jobId) {
    showJob(root, jobId, signal);
    return;
  }
  const stateSelect = h('select', { id: 'filter-state', name: 'state' },
    h('option', { value: '' }, 'any state'),
    STATES.map((state) => h('option', { value: state }, stateName(state))));
  stateSelect.value = filters.state;
  const templateInput = h('input', { id: 'filter-template', placeholder: 'template id', value: filters.templateId, size: 38 });
  const reasonInput = h('input', { id: 'filter-reason', placeholder: 'reason, e.g. RENDER_CRASHED', value: filters.reason });
  const status = h('p', { class: 'muted', id: 'jobs-status' });
  const body = h('tbody', { id: 'jobs-body' });
  const more = h('button', { type: 'button', id: 'jobs-more', hidden: true }, 'More');
  const errors = h('div', { id: 'jobs-error' });
  const list = { pages: 1, nextPageToken: '', rows: new Map(), followed: new Map() };
  const form = h('form', {
    class: 'filters',
    onsubmit: (event) => {
      event.preventDefault();
      filters.state = stateSelect.value;
      filters.templateId = templateInput.value.trim();
      filters.reason = reasonInput.value.trim();
      list.pages = 1;
      list.names = undefined;
      refresh(list, body, more, status, errors, signal, false);
    },
  }, stateSelect, templateInput, reasonInput, h('button', { type: 'submit', id: 'filter-apply' }, 'Filter'));
  more.addEventListener('click', () => refresh(list, body, more, status, errors, signal, true));
  fill(root,
    h('h1', {}, 'Jobs'),
    form,
    errors,
    h('table', { class: 'jobs', id: 'jobs-table' },
      h('thead', {}, h('tr', {}, ['Created', 'Job', 'Template', 'State', 'Progress', 'Reason', 'Output']
        .map((title) => h('th', {}, title)))),
      body),
    more, status);
  refresh(list, body, more, status, errors, signal, false);
  const timer = setInterval(() => {
    if (!document.hidden && list.pages === 1) refresh(list, body, more, status, errors, signal, false);
  }, POLL_MS);
  signal.addEventListener('abort', () => {
    clearInterval(timer);
    for (const follower of list.followed.values()) follower.abort();
  });
}

async function refresh(list, body, more, status, errors, signal, nextPage) {
  // Only the latest call's answer is drawn (a poll's may come back after a new filter's).
  list.calls = (list.calls || 0) + 1;
  const call = list.calls;
  let page;
  try {
    page = await get('/v1/renders', {
      state: filters.state,
      templateId: filters.templateId,
      reason: filters.reason,
      pageSize: PAGE_SIZE,
      pageToken: nextPage ? list.nextPageToken : '',
    }, signal);
  } catch (error) {
    if (signal.aborted || call !== list.calls) return;
    fill(errors, problemView(error));
    return;
  }
  if (!list.names) list.names = await templateNames(signal);
  if (signal.aborted || call !== list.calls) return;
  fill(errors);
  if (nextPage) {
    list.pages += 1;
  } else {
    body.replaceChildren();
    list.rows.clear();
  }
  for (const job of page.jobs || []) {
    const row = jobRow(job, list.names);
    list.rows.set(job.jobId, row);
    body.append(row);
  }
  list.nextPageToken = page.nextPageToken || '';
  more.hidden = !list.nextPageToken;
  status.textContent = list.pages > 1
    ? 'Live updates paused while more than one page is shown (filter again to resume).'
    : `Updated ${new Date().toLocaleTimeString()}; unfinished jobs on screen are followed live.`;
  if (!list.rows.size) body.append(h('tr', {}, h('td', { colspan: 7, class: 'muted' }, 'No jobs.')));
  follow(list, signal);
}

// Follows up to MAX_FOLLOWED unfinished jobs of the list over their event streams.
function follow(list, signal) {
  for (const [jobId, follower] of list.followed) {
    if (!list.rows.has(jobId)) {
      follower.abort();
      list.followed.delete(jobId);
    }
  }
  for (const [jobId, row] of list.rows) {
    if (list.followed.size >= MAX_FOLLOWED) break;
    if (list.followed.has(jobId) || TERMINAL.has(row.dataset.state)) continue;
    const follower = new AbortController();
    signal.addEventListener('abort', () => follower.abort());
    list.followed.set(jobId, follower);
    watch(jobId, (job) => {
      const current = list.rows.get(jobId);
      if (!current) return;
      const updated = jobRow(job, list.names);
      current.replaceWith(updated);
      list.rows.set(jobId, updated);
    }, follower.signal).catch(() => {}).finally(() => {
      if (list.followed.get(jobId) === follower) list.followed.delete(jobId);
    });
  }
}

function progress(job) {
  const total = Number(job.framesTotal || 0);
  const done = Number(job.framesDone || 0);
  if (job.state === 'JOB_STATE_SUCCEEDED') return h('progress', { max: 1, value: 1 });
  if (!total) return '';
  return h('progress', { max: total, value: done, title: `${done} / ${total} frames` });
}

// The names of the caller's templates (the first page of them), by id, for the list.
async function templateNames(signal) {
  try {
    const page = await get('/v1/templates', { pageSize: 100 }, signal);
    return new Map((page.templates || []).map((template) => [template.templateId, template.name || '']));
  } catch {
    return new Map();
  }
}

function jobRow(job, names = new Map()) {
  const link = h('a', { href: `#/jobs/${encodeURIComponent(job.jobId)}`, class: 'job-link' }, shortId(job.jobId));
  const row = h('tr', { class: `job state-${stateName(job.state)}`, dataset: { jobId: job.jobId, state: job.state || '' } },
    h('td', {}, when(job.createdAt)),
    h('td', {}, link),
    h('td', { class: 'template' }, names.has(job.templateId)
      ? names.get(job.templateId) : h('span', { class: 'mono' }, shortId(job.templateId))),
    h('td', { class: 'state' }, stateName(job.state)),
    h('td', {}, progress(job)),
    h('td', { class: 'reason', title: job.error ? job.error.message || '' : null }, job.error ? job.error.reason : ''),
    h('td', { class: 'thumb-cell' }));
  if (job.state === 'JOB_STATE_SUCCEEDED') thumbnailInto(row.lastChild, job);
  return row;
}

// A small picture of a succeeded job: its poster, or the output itself when it is a picture.
function thumbnailInto(cell, job) {
  const out = job.output || {};
  const part = out.poster ? 'OUTPUT_PART_POSTER' : (String(out.contentType).startsWith('image/') ? '' : null);
  if (part === null) {
    cell.append(h('span', { class: 'muted' }, out.contentType || ''));
    return;
  }
  if (!thumbnails.has(job.jobId)) {
    if (thumbnails.size >= MAX_THUMBNAILS) {
      const [oldest] = thumbnails.keys();
      thumbnails.get(oldest).then((url) => url && URL.revokeObjectURL(url));
      thumbnails.delete(oldest);
    }
    thumbnails.set(job.jobId, output(job.jobId, part).then((blob) => URL.createObjectURL(blob), () => null));
  }
  thumbnails.get(job.jobId).then((url) => {
    if (url) cell.append(h('img', { class: 'thumb', src: url, alt: 'output' }));
  });
}

async function showJob(root, jobId, signal) {
  const view = h('section', { id: 'job-detail' });
  fill(root, h('p', {}, h('a', { href: '#/jobs' }, '← all jobs')), h('h1', {}, 'Job ', h('code', {}, jobId)), view);
  let job;
  try {
    job = await get(`/v1/renders/${encodeURIComponent(jobId)}`, {}, signal);
  } catch (error) {
    if (!signal.aborted) fill(view, problemView(error));
    return;
  }
  renderJob(view, job, signal);
  if (!TERMINAL.has(job.state)) {
    job = (await watch(jobId, (next) => { if (!signal.aborted) renderJob(view, next, signal); }, signal)
      .catch(() => undefined)) || job;
  }
  // Webhook deliveries go on after the job ended: asked for again while one is pending, or
  // may still come (the job ended within the last minute).
  while (!signal.aborted && (pendingDeliveries(job) || Date.now() - Date.parse(job.finishedAt) < DELIVERIES_MAY_COME_MS)) {
    await new Promise((resolve) => { setTimeout(resolve, POLL_MS); });
    if (signal.aborted || document.hidden) continue;
    try {
      job = await get(`/v1/renders/${encodeURIComponent(jobId)}`, {}, signal);
      renderJob(view, job, signal);
    } catch {
      return;
    }
  }
}

function pendingDeliveries(job) {
  return (job.webhooks || []).some((delivery) => delivery.state === 'WEBHOOK_DELIVERY_STATE_PENDING');
}

function renderJob(view, job, signal) {
  const out = job.output;
  const actions = h('div', { class: 'actions' });
  if (!TERMINAL.has(job.state)) {
    actions.append(h('button', {
      type: 'button',
      id: 'job-cancel',
      onclick: async (event) => {
        event.currentTarget.disabled = true;
        try {
          const { body } = await call('POST', `/v1/renders/${encodeURIComponent(job.jobId)}:cancel`);
          renderJob(view, body, signal);
        } catch (error) {
          actions.append(problemView(error));
        }
      },
    }, 'Cancel'));
  }
  // The output, fetched once: a view drawn again (webhooks pending) keeps the one it shows.
  const shown = view.querySelector('#job-preview');
  const preview = shown && shown.dataset.jobId === job.jobId ? shown : h('div', { class: 'preview', id: 'job-preview' });
  if (job.state === 'JOB_STATE_SUCCEEDED' && out) {
    actions.append(h('button', {
      type: 'button',
      id: 'job-download',
      onclick: () => download(job, actions),
    }, `Download (${bytes(out.sizeBytes)})`));
    if (preview !== shown) {
      preview.dataset.jobId = job.jobId;
      showOutput(preview, job, signal);
    }
  }
  fill(view,
    facts([
      ['State', h('span', { class: 'state', id: 'job-state' }, stateName(job.state))],
      ['Template', h('a', { href: `#/try/${encodeURIComponent(job.templateId)}` }, job.templateId)],
      ['Frames', `${job.framesDone || 0} / ${job.framesTotal || 0}`],
      ['Created', when(job.createdAt)],
      ['Started', when(job.startedAt)],
      ['Finished', when(job.finishedAt)],
      ['Output', out ? `${out.contentType}, ${out.width}×${out.height}, ${bytes(out.sizeBytes)}` : ''],
    ]),
    progress(job),
    job.error ? errorView(job.error) : null,
    actions,
    preview,
    webhooksView(job.webhooks || []));
}

// Why a job failed, and whether and when submitting it again may succeed.
export function errorView(error) {
  const after = seconds(error.retryAfter);
  return h('div', { class: 'problem job-error', id: 'job-error', role: 'alert' },
    h('strong', { class: 'reason' }, error.reason || 'failed'), ' ',
    h('span', { class: 'message' }, error.message || ''),
    h('p', { class: 'retry' }, error.retryable
      ? `Retrying may succeed${after !== undefined ? ` after ${after} s` : ''}.`
      : 'Retrying the same request will fail the same way.'));
}

function webhooksView(webhooks) {
  if (!webhooks.length) return null;
  return h('section', {},
    h('h2', {}, 'Webhook deliveries'),
    h('table', { class: 'webhooks', id: 'job-webhooks' },
      h('thead', {}, h('tr', {}, ['Event', 'Delivery id', 'State', 'Attempts', 'Last status', 'Next attempt']
        .map((title) => h('th', {}, title)))),
      h('tbody', {}, webhooks.map((delivery) => h('tr', { class: 'delivery' },
        h('td', {}, String(delivery.event || '').replace(/^WEBHOOK_EVENT_/, '').toLowerCase()),
        h('td', { class: 'mono' }, delivery.webhookId || ''),
        h('td', {}, String(delivery.state || '').replace(/^WEBHOOK_DELIVERY_STATE_/, '').toLowerCase()),
        h('td', {}, String(delivery.attempts || 0)),
        h('td', {}, String(delivery.lastStatus || '')),
        h('td', {}, when(delivery.nextAttemptAt)))))));
}

// Plays or shows a succeeded job's output in `preview`, from a blob: URL (the download needs
// the key, which an <img> or <video> cannot send).
export async function showOutput(preview, job, signal) {
  let blob;
  try {
    blob = await output(job.jobId, '', signal);
  } catch (error) {
    if (!signal.aborted) fill(preview, problemView(error));
    return null;
  }
  if (signal.aborted) return null;
  const url = URL.createObjectURL(blob);
  signal.addEventListener('abort', () => URL.revokeObjectURL(url));
  const type = (job.output && job.output.contentType) || blob.type;
  const media = type.startsWith('video/')
    ? h('video', { src: url, controls: true, autoplay: true, muted: true, loop: true, playsinline: true, class: 'output' })
    : h('img', { src: url, alt: 'output', class: 'output' });
  if (media.tagName === 'VIDEO') media.muted = true;
  fill(preview, media);
  return media;
}

async function download(job, actions) {
  try {
    const blob = await output(job.jobId, '');
    const url = URL.createObjectURL(blob);
    const extension = (job.output.contentType.split('/')[1] || 'bin').replace('quicktime', 'mov');
    const link = h('a', { href: url, download: `${job.jobId}.${extension}` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (error) {
    actions.append(problemView(error));
  }
}
