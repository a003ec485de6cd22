// The join link and its QR code. The encoder is uqr from node_modules, served under the console's hash
// (api/console/static.ts); the SVG is built node by node from its module matrix, never parsed from markup.
import { encode } from './vendor/uqr.mjs';

const SVG_NS = 'http://www.w3.org/2000/svg';
/** Medium error correction: a notice-board sheet gets creased and dirty; the 4-module quiet zone is the standard's. */
export const QR_OPTIONS = { ecc: 'M', border: 0 };
const QUIET = 4;

/**
 * PUBLIC_URL when the operator set it (index.html's meta, filled in by the server), else the page's own origin:
 * an admin on the mosque's Wi-Fi at http://192.168.1.10:8080 must still print a link that works from home.
 */
export function joinLink(code) {
  const configured = document.querySelector('meta[name="minaret-public-url"]')?.getAttribute('content');
  return `${configured || location.origin}/join/${code}`;
}

/** An <svg role=img> of `text`: one path of dark 1x1 modules on white, scaled by CSS. */
export function qrSvg(text, label) {
  const { data, size } = encode(text, QR_OPTIONS);
  const el = (tag, attrs) => {
    const node = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
    return node;
  };
  let d = '';
  data.forEach((row, y) => row.forEach((dark, x) => { if (dark) d += `M${x} ${y}h1v1h-1z`; }));
  const svg = el('svg', { viewBox: `${-QUIET} ${-QUIET} ${size + 2 * QUIET} ${size + 2 * QUIET}`, role: 'img', 'aria-label': label, class: 'qr', 'data-size': size, 'shape-rendering': 'crispEdges' });
  svg.append(el('rect', { x: -QUIET, y: -QUIET, width: size + 2 * QUIET, height: size + 2 * QUIET, fill: '#fff' }), el('path', { d, fill: '#000' }));
  return svg;
}
