// reference-batch.mjs: runs the lesson's reference model on many scenarios in one node process.
//
// The model itself is not part of setpoint: this driver imports it from the reference folder
// (default ../shared/reference next to the repository, or $SETPOINT_REFERENCE) and only feeds it.
//
// usage: node scripts/reference-batch.mjs < cases.jsonl > results.jsonl
//   each input line:  {"desired":6,"U":15,"G":20,"B":5,"duration":900,"intent":false,"deaths":[[300,2]]}
//   each output line: the model's result object, in input order.
// Omitted keys take the lesson's defaults.
import { readFileSync } from "node:fs";
import { resolve, dirname } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const folder = process.env.SETPOINT_REFERENCE ?? resolve(here, "../../shared/reference");
const { run } = await import(pathToFileURL(resolve(folder, "reconcile.mjs")).href);

const lines = readFileSync(0, "utf8").split("\n").filter((l) => l.trim() !== "");
const out = lines.map((l) => JSON.stringify(run(JSON.parse(l))));
process.stdout.write(out.join("\n") + (out.length ? "\n" : ""));
