// sample-cells.mjs: N cells drawn uniformly from the million-cell sweep's grid (delay 0-199,
// period 1-100, startup 0-49; desired 6, ledger, 900 s, deaths 300:2), in the reference driver's
// JSON-lines format (scripts/reference-batch.mjs). Used by compare-reference.sh and
// sweep-vs-reference.sh, so that both time the same cells.
//
// usage: node scripts/sample-cells.mjs SEED N > sample.jsonl

// mulberry32: a small seeded generator, so that the sample is the same on every machine.
let s = +process.argv[2] >>> 0;
const rand = () => { s = (s + 0x6d2b79f5) >>> 0; let t = s;
  t = Math.imul(t ^ (t >>> 15), t | 1); t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296; };
const pick = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));
const lines = [];
for (let i = 0; i < +process.argv[3]; i++)
  lines.push(JSON.stringify({ desired: 6, U: pick(1, 100), G: pick(0, 199), B: pick(0, 49),
    duration: 900, intent: false, deaths: [[300, 2]] }));
console.log(lines.join("\n"));
