// The console's frame: the key form, the banner, and a hash router over the four pages
// (#/jobs, #/templates, #/try/<templateId>, #/instance). Each page is shown with an
// AbortSignal that is aborted when another page is shown, so its timers and streams stop.

import { apiKey, setApiKey, onUnauthenticated } from './api.js';
import { fill, h } from './dom.js';
import * as jobs from './jobs.js';
import * as templates from './templates.js';
import * as tryIt from './try.js';
import * as instance from './instance.js';

const PAGES = { jobs, templates, try: tryIt, instance };

let current;

function show() {
  const [name, ...rest] = window.location.hash.replace(/^#\/?/, '').split('/');
  const page = PAGES[name] ? name : 'jobs';
  if (current) current.abort();
  current = new AbortController();
  for (const link of document.querySelectorAll('nav a')) {
    link.classList.toggle('active', link.dataset.page === page);
  }
  hideBanner();
  const root = document.getElementById('page');
  fill(root);
  root.dataset.page = page;
  PAGES[page].show(root, rest.map(decodeURIComponent), current.signal);
}

function showKeyState() {
  document.getElementById('key-state').textContent = apiKey() ? 'key in use (this tab only)' : 'no key';
}

export function banner(...children) {
  const element = document.getElementById('banner');
  fill(element, ...children);
  element.hidden = false;
}

function hideBanner() {
  document.getElementById('banner').hidden = true;
}

document.getElementById('key-form').addEventListener('submit', (event) => {
  event.preventDefault();
  const input = document.getElementById('api-key');
  setApiKey(input.value.trim());
  input.value = '';
  showKeyState();
  show();
});

document.getElementById('key-forget').addEventListener('click', () => {
  setApiKey('');
  showKeyState();
  show();
});

onUnauthenticated(() => {
  banner(h('strong', {}, 'This server needs an API key. '),
    apiKey() ? 'The key in use was not accepted: enter another above.' : 'Enter it above.');
  document.getElementById('api-key').focus();
});

window.addEventListener('hashchange', show);
showKeyState();
show();
