// Building the page: every element is made with createElement and every text a caller
// controls (names, texts, slot ids, messages, reasons, URLs) goes in as a text node, never as
// HTML. Nothing in the console parses a string as HTML or as code (a test of the suite reads
// these files for the DOM's and JavaScript's calls that do).

// h('tag', {class, dataset, on<event>: fn, attribute: value}, ...children): an element.
// Children are nodes or strings (text nodes); null, undefined and false are skipped.
export function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') {
      element.className = value;
    } else if (name === 'dataset') {
      Object.assign(element.dataset, value);
    } else if (name.startsWith('on') && typeof value === 'function') {
      element.addEventListener(name.slice(2), value);
    } else if (name === 'value' || name === 'checked') {
      element[name] = value;
    } else {
      element.setAttribute(name, value === true ? '' : String(value));
    }
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : String(child));
  }
}

// Replaces an element's children.
export function fill(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

// A labelled line of a definition list.
export function facts(pairs) {
  return h('dl', { class: 'facts' },
    pairs.filter(([, value]) => value !== undefined && value !== null && value !== '')
      .map(([term, value]) => [h('dt', {}, term), h('dd', {}, value)]));
}

// "2026-12-07T18:00:00Z" as the reader's local time.
export function when(timestamp) {
  if (!timestamp) return '';
  const date = new Date(timestamp);
  return Number.isNaN(date.getTime()) ? String(timestamp) : date.toLocaleString();
}

// A canonical-JSON Duration ("1.500s") as seconds.
export function seconds(duration) {
  if (duration === undefined || duration === null) return undefined;
  const value = parseFloat(String(duration));
  return Number.isFinite(value) ? value : undefined;
}

export function shortId(id) {
  return id ? String(id).slice(0, 8) : '';
}

export function bytes(count) {
  const value = Number(count || 0);
  if (value < 1024) return `${value} B`;
  if (value < 1024 * 1024) return `${(value / 1024).toFixed(1)} KiB`;
  return `${(value / 1024 / 1024).toFixed(1)} MiB`;
}

// A state name without its enum prefix: JOB_STATE_FAILED → failed.
export function stateName(state) {
  return String(state || 'JOB_STATE_UNSPECIFIED').replace(/^JOB_STATE_/, '').toLowerCase();
}

export const TERMINAL = new Set(['JOB_STATE_SUCCEEDED', 'JOB_STATE_FAILED', 'JOB_STATE_CANCELLED']);

// A button that copies `text()` to the clipboard (or selects `target` where it cannot).
export function copyButton(text, target) {
  return h('button', {
    type: 'button',
    class: 'small',
    onclick: async (event) => {
      const button = event.currentTarget;
      try {
        await navigator.clipboard.writeText(text());
        button.textContent = 'Copied';
      } catch {
        const range = document.createRange();
        range.selectNodeContents(target);
        const selection = window.getSelection();
        selection.removeAllRanges();
        selection.addRange(range);
        button.textContent = 'Selected: press Ctrl+C';
      }
      setTimeout(() => { button.textContent = 'Copy'; }, 2000);
    },
  }, 'Copy');
}

// A problem document (or an Error) as an element: its detail, reason, whether and when a
// retry helps, and each field error.
export function problemView(problem) {
  if (problem instanceof Error && !problem.problem) {
    return h('div', { class: 'problem' }, problem.message);
  }
  const doc = problem.problem || problem;
  return h('div', { class: 'problem', role: 'alert' },
    h('strong', {}, `${doc.status || ''} ${doc.reason || doc.code || doc.title || 'error'}`),
    ' ', doc.detail || '',
    doc.retryable ? h('span', { class: 'muted' },
      ` (a retry may succeed${doc.retryAfterSeconds ? ` after ${doc.retryAfterSeconds} s` : ''})`) : null,
    Array.isArray(doc.errors) && doc.errors.length
      ? h('ul', { class: 'field-errors' }, doc.errors.map((error) =>
        h('li', {}, h('code', {}, error.field || ''), ': ', error.detail || '')))
      : null);
}
