// tiktoken_bench.mjs - the peer for bench_tokenizer: single-thread encode throughput of OpenAI's
// tiktoken (npm package `tiktoken`, the WASM build of the Rust implementation) on the same text.
//
// Run it:
//   npm install --prefix DIR tiktoken
//   NODE_PATH=DIR/node_modules node tiktoken_bench.mjs FILE ENCODING [SECONDS]
// FILE is encoded as one text with encode_ordinary (no special tokens), repeatedly for about
// SECONDS (default 1). A FILE ending in .jsonl is read as documents ({"text": ...} a line, parsed
// before the clock starts) and each document is encoded on its own, as ingot preprocess text
// encodes them; MB/s then counts the documents' text. ENCODING: gpt2, r50k_base, cl100k_base or o200k_base. Prints one JSON line:
//   {"bench":"tiktoken","encoding":...,"file":...,"mb_per_s":...,"tokens_per_s":...}
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import path from "node:path";

const require = createRequire(path.join(process.cwd(), "noop.js"));
const { get_encoding } = require("tiktoken");

const [file, encoding = "gpt2", secondsArg = "1"] = process.argv.slice(2);
if (!file) {
  console.error("usage: node tiktoken_bench.mjs FILE ENCODING [SECONDS]");
  process.exit(2);
}
const raw = readFileSync(file, "utf8");
const docs = file.endsWith(".jsonl")
  ? raw.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l).text)
  : [raw];
let bytes = 0;
for (const d of docs) bytes += Buffer.byteLength(d, "utf8");
const enc = get_encoding(encoding);
const encodeAll = () => {
  let n = 0;
  for (const d of docs) n += enc.encode_ordinary(d).length;
  return n;
};
encodeAll(); // warm up
const seconds = Number(secondsArg);
let rounds = 0;
let tokens = 0;
const t0 = process.hrtime.bigint();
let el = 0;
do {
  tokens += encodeAll();
  rounds++;
  el = Number(process.hrtime.bigint() - t0) / 1e9;
} while (el < seconds);
enc.free();
console.log(JSON.stringify({
  bench: "tiktoken", encoding, file: path.basename(file), threads: 1,
  mb_per_s: Number(((bytes * rounds) / el / 1e6).toFixed(2)),
  tokens_per_s: Math.round(tokens / el),
}));
