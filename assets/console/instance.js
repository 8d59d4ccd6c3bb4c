// Instance: this server's queue and workers (GET /v1/status): jobs waiting and rendering,
// workers busy, refusals by reason in the last hour, webhooks pending. For identities marked
// as operators (everyone when authentication is off); others are told so.

import { get } from './api.js';
import { facts, fill, h, problemView } from './dom.js';

// Asked again this often while the page is shown and visible.
const POLL_MS = 5000;

export function show(root, _params, signal) {
  const view = h('section', { id: 'instance-view' }, h('p', { class: 'muted' }, 'Loading…'));
  fill(root, h('h1', {}, 'Instance'), view);
  const load = async () => {
    try {
      draw(view, await get('/v1/status', {}, signal));
    } catch (error) {
      if (signal.aborted) return;
      if (error.status === 403) {
        fill(view, h('p', { class: 'problem', id: 'instance-forbidden' },
          'Operators only: the key in use is not an operator’s.'));
      } else {
        fill(view, problemView(error));
      }
    }
  };
  load();
  const timer = setInterval(() => { if (!document.hidden) load(); }, POLL_MS);
  signal.addEventListener('abort', () => clearInterval(timer));
}

function draw(view, status) {
  const workers = Number(status.workers || 0);
  const busy = Number(status.workersBusy || 0);
  const refusals = (status.refusalsLastHour || []).slice()
    .sort((a, b) => Number(b.count || 0) - Number(a.count || 0));
  fill(view,
    h('div', { class: 'tiles' },
      tile('Jobs waiting', status.jobsWaiting, 'instance-waiting'),
      tile('Jobs rendering', status.jobsRendering, 'instance-rendering'),
      tile('Workers busy', `${busy} / ${workers}`, 'instance-workers'),
      tile('Webhooks pending', status.webhooksPending, 'instance-webhooks')),
    h('h2', {}, 'Refusals in the last hour'),
    refusals.length
      ? h('table', { class: 'refusals', id: 'instance-refusals' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Reason'), h('th', {}, 'Count'))),
        h('tbody', {}, refusals.map((row) => h('tr', {}, h('td', {}, h('code', {}, row.reason || '')), h('td', {}, String(row.count || 0))))))
      : h('p', { class: 'muted' }, 'None.'),
    facts([['Instance', status.instanceId], ['Version', status.version],
      ['Updated', new Date().toLocaleTimeString()]]),
    h('progress', { max: Math.max(1, workers), value: busy, title: 'workers busy' }));
}

function tile(label, value, id) {
  return h('div', { class: 'tile', id }, h('span', { class: 'tile-value' }, String(value ?? 0)), h('span', { class: 'tile-label' }, label));
}
