// A template's slots, kind by kind, as the Template message lists them: one table for the
// gallery, and the facts both pages show.

import { h } from './dom.js';

// A colour {r, g, b, a} in 0..1 as #rrggbb.
export function hexOf(color) {
  const channel = (value) => Math.round(Math.min(1, Math.max(0, Number(value || 0))) * 255)
    .toString(16).padStart(2, '0');
  return `#${channel(color && color.r)}${channel(color && color.g)}${channel(color && color.b)}`;
}

// #rrggbb as {r, g, b} in 0..1 (3 decimals: what 8 bits hold).
export function colorOf(hex) {
  const value = parseInt(hex.slice(1), 16);
  const round = (channel) => Math.round((channel / 255) * 1000) / 1000;
  return { r: round((value >> 16) & 255), g: round((value >> 8) & 255), b: round(value & 255) };
}

// A sample of `color` (set through the CSS object model: the policy allows no style attribute).
function swatch(color) {
  const sample = h('span', { class: 'swatch', title: hexOf(color) });
  sample.style.backgroundColor = hexOf(color);
  return h('span', { class: 'swatch-wrap' }, sample, ' ', hexOf(color),
    color && color.a !== undefined ? ` α ${color.a}` : '');
}

// Every slot of `template`: [kind, id, default as a node or text].
export function slotRows(template) {
  return [
    ...(template.textSlots || []).map((slot) => ['text', slot.id,
      `“${slot.defaultText || ''}”${slot.fontFamily ? ` (${slot.fontFamily})` : ''}`]),
    ...(template.colorSlots || []).map((slot) => ['colour', slot.id, swatch(slot.defaultColor)]),
    ...(template.imageSlots || []).map((slot) => ['image', slot.id,
      `${slot.width}×${slot.height}${slot.hasDefault ? ', has a default' : ', empty'}`]),
    ...(template.scalarSlots || []).map((slot) => ['number', slot.id,
      `${slot.property}: ${slot.defaultValue ?? 0} (${slot.min ?? ''}..${slot.max ?? ''})`]),
    ...(template.vectorSlots || []).map((slot) => ['vector', slot.id,
      `${slot.property}: [${(slot.defaultValue || []).join(', ')}]`]),
    ...(template.gradientSlots || []).map((slot) => ['gradient', slot.id,
      h('span', {}, (slot.defaultStops || []).map((stop) =>
        h('span', {}, `${stop.offset ?? 0}: `, swatch(stop.color), ' ')))]),
  ];
}

export function slotsTable(template) {
  const rows = slotRows(template);
  if (!rows.length) return h('p', { class: 'muted' }, 'No slots.');
  return h('table', { class: 'slots' },
    h('thead', {}, h('tr', {}, h('th', {}, 'Kind'), h('th', {}, 'Slot'), h('th', {}, 'Default'))),
    h('tbody', {}, rows.map(([kind, id, value]) =>
      h('tr', { class: `slot slot-${kind}` }, h('td', {}, kind), h('td', { class: 'slot-id' }, id), h('td', {}, value)))),
    template.slotsTruncated ? h('caption', {}, 'Some slots were left out (too many to list).') : null);
}
