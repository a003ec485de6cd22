import { SEMVER } from './images.ts';

/**
 * Semantic Versioning 2.0.0 precedence (§11) and the ranges a rollout's `fw_range` is written in (docs/api.md,
 * "Firmware updates"): space-separated comparators that must all hold (`>=1.2.0 <1.5.0`), alternatives joined
 * by `||`. Only what the API documents: no tilde, caret or wildcard forms.
 */
type Parsed = { core: [number, number, number]; pre: string[] };

function parse(version: string): Parsed | null {
  const m = SEMVER.exec(version);
  if (!m) return null;
  return { core: [Number(m[1]), Number(m[2]), Number(m[3])], pre: m[4] ? m[4].split('.') : [] };
}

/** §11.4: numeric identifiers compare as numbers and before alphanumeric ones; a shorter list first when equal so far. */
function comparePre(a: string[], b: string[]): number {
  if (a.length === 0 || b.length === 0) return b.length - a.length; // §11.3: a pre-release is lower than its release
  for (let i = 0; i < Math.min(a.length, b.length); i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x === y) continue;
    const xn = /^\d+$/.test(x);
    const yn = /^\d+$/.test(y);
    if (xn && yn) return Number(x) - Number(y);
    if (xn !== yn) return xn ? -1 : 1;
    return x < y ? -1 : 1;
  }
  return a.length - b.length;
}

/** Negative, zero or positive as `a` precedes, equals or follows `b`; null when either is not semver. */
export function compareVersions(a: string, b: string): number | null {
  const x = parse(a);
  const y = parse(b);
  if (!x || !y) return null;
  for (let i = 0; i < 3; i++) if (x.core[i] !== y.core[i]) return x.core[i]! - y.core[i]!;
  return comparePre(x.pre, y.pre);
}

const COMPARATOR = /^(>=|<=|>|<|=)?(.+)$/;

/** Whether a range is well formed: every comparator an operator and a semver version. */
export function isRange(range: string): boolean {
  const alternatives = range.split('||').map((s) => s.trim().split(/\s+/).filter(Boolean));
  return alternatives.every((set) => set.length > 0 && set.every((c) => parse(COMPARATOR.exec(c)?.[2] ?? '') !== null));
}

/** Whether `version` satisfies `range` (isRange checked it at the edge); a version that is not semver never does. */
export function satisfies(version: string, range: string): boolean {
  if (!parse(version)) return false;
  return range.split('||').some((alt) => alt.trim().split(/\s+/).filter(Boolean).every((c) => {
    const [, op = '=', v = ''] = COMPARATOR.exec(c) ?? [];
    const d = compareVersions(version, v);
    if (d === null) return false;
    return op === '>=' ? d >= 0 : op === '<=' ? d <= 0 : op === '>' ? d > 0 : op === '<' ? d < 0 : d === 0;
  }));
}
