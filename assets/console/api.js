// The console's only API: the HTTP/JSON door of the server that served it (/v1/..., see
// /openapi.json). Every call carries the caller's key as `authorization: Bearer KEY` when one
// was given; the key lives in this tab's sessionStorage (gone when the tab closes), never in a
// cookie, so no request the browser makes on its own carries a credential.

const KEY_STORAGE = 'lottie-render-api-key';

export function apiKey() {
  return sessionStorage.getItem(KEY_STORAGE) || '';
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_STORAGE, key);
  else sessionStorage.removeItem(KEY_STORAGE);
}

function headers(extra = {}) {
  const all = { ...extra };
  const key = apiKey();
  if (key) all.authorization = `Bearer ${key}`;
  return all;
}

// A refused call: its problem document (docs/http.md, "Status codes") and HTTP status.
export class Refusal extends Error {
  constructor(status, problem) {
    super(problem.detail || `HTTP ${status}`);
    this.status = status;
    this.problem = problem;
  }
}

// Listeners told of every 401 (the page asks for a key).
const unauthenticatedListeners = [];
export function onUnauthenticated(listener) {
  unauthenticatedListeners.push(listener);
}

async function refusal(response) {
  let problem;
  try {
    problem = await response.json();
  } catch {
    problem = { status: response.status, title: response.statusText, detail: '' };
  }
  if (typeof problem !== 'object' || problem === null) problem = { status: response.status };
  if (response.status === 401) unauthenticatedListeners.forEach((listener) => listener());
  return new Refusal(response.status, problem);
}

// A call answered with JSON; a refusal is thrown as a Refusal.
export async function call(method, path, { body, query, idempotencyKey, raw, signal } = {}) {
  const url = new URL(path, window.location.origin);
  for (const [name, value] of Object.entries(query || {})) {
    if (value !== undefined && value !== null && value !== '') url.searchParams.set(name, value);
  }
  const extra = {};
  let payload;
  if (raw !== undefined) {
    payload = raw; // an ArrayBuffer: sent unlabelled, as `curl --data-binary` would
  } else if (body !== undefined) {
    payload = JSON.stringify(body);
    extra['content-type'] = 'application/json';
  } else if (method === 'POST') {
    payload = '{}';
    extra['content-type'] = 'application/json';
  }
  if (idempotencyKey) extra['idempotency-key'] = idempotencyKey;
  const response = await fetch(url, {
    method, headers: headers(extra), body: payload, signal, credentials: 'omit', cache: 'no-store',
  });
  if (!response.ok) throw await refusal(response);
  const text = await response.text();
  return { body: text ? JSON.parse(text) : {}, response };
}

export async function get(path, query, signal) {
  return (await call('GET', path, { query, signal })).body;
}

// A job's output (or its poster) as a Blob, fetched with the key.
export async function output(jobId, part, signal) {
  const url = new URL(`/v1/renders/${encodeURIComponent(jobId)}/output`, window.location.origin);
  if (part) url.searchParams.set('part', part);
  const response = await fetch(url, { headers: headers(), signal, credentials: 'omit' });
  if (!response.ok) throw await refusal(response);
  return response.blob();
}

// Follows a job's Server-Sent Events (GET /v1/renders/{id}/events) until it ends: EventSource
// cannot send an authorization header, so the stream is read with fetch. `onJob` gets each
// state; the promise resolves with the last job, or rejects with the Refusal of an `error`
// event. `signal` stops it.
export async function watch(jobId, onJob, signal) {
  const response = await fetch(`/v1/renders/${encodeURIComponent(jobId)}/events`, {
    headers: headers({ accept: 'text/event-stream' }), signal, credentials: 'omit',
  });
  if (!response.ok) throw await refusal(response);
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let last;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, '');
      const event = parseEvent(block);
      if (event.type === 'job') {
        last = JSON.parse(event.data);
        onJob(last);
      } else if (event.type === 'error') {
        const problem = JSON.parse(event.data);
        throw new Refusal(problem.status || 0, problem);
      }
    }
  }
  return last;
}

function parseEvent(block) {
  let type = 'message';
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (line.startsWith(':')) continue; // a keep-alive comment
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
    if (field === 'event') type = value;
    else if (field === 'data') data.push(value);
  }
  return { type, data: data.join('\n') };
}
