// Times the pi package's start on a Session's log for BenchmarkPackageStart:
// Recorder.open, then offPath and record of pi's path, as on session_start,
// against reading every segment of the log, as open did before. Each is run
// RUNS times; it prints the median time of each and the segments it read.
//
//   start.ts STORE_URL NAMESPACE/SESSION/UID SESSION_FILE RUNS
import { readFileSync } from "node:fs";
import { rootOf, SegmentLog } from "../../../pi-turnlog/src/log.ts";
import type { Entry } from "../../../pi-turnlog/src/mapping.ts";
import { adapterOf, Recorder } from "../../../pi-turnlog/src/recorder.ts";
import { openStore } from "../../../pi-turnlog/src/openstore.ts";
import { withGetHook } from "../../../pi-turnlog/src/store.ts";

async function main() {
	const [url, where, file, runs] = process.argv.slice(2);
	const [namespace, session, uid] = where.split("/");
	const location = { namespace, session, uid };
	const [header, ...entries] = readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Entry);
	const byId = new Map(entries.map((e) => [e.id, e]));
	const path: Entry[] = [];
	for (let e: Entry | undefined = entries.at(-1); e; e = e.parentId ? byId.get(e.parentId) : undefined) path.unshift(e);

	let gets = 0;
	const store = withGetHook(openStore(url), (key) => {
		if (key.includes("/log/")) gets++;
	});
	const segments = (await new SegmentLog(store, rootOf(location)).segments()).length;
	const timed = async (fn: () => Promise<void>) => {
		const ms: number[] = [];
		for (let i = 0; i < Number(runs); i++) {
			gets = 0;
			const t0 = performance.now();
			await fn();
			ms.push(performance.now() - t0);
		}
		return { ms: ms.sort((a, b) => a - b)[ms.length >> 1], gets };
	};
	const start = await timed(async () => {
		const rec = new Recorder(store, location);
		await rec.open(adapterOf({ api: "anthropic-messages", provider: "fake", id: "model-a" }), header);
		await rec.offPath(path, (id) => byId.has(id));
		await rec.record(path);
		await rec.close();
	});
	const readAll = await timed(async () => {
		await new SegmentLog(store, rootOf(location)).readAll();
	});
	console.log(JSON.stringify({ segments, start, readAll }));
}

main().catch((err) => {
	console.error(err);
	process.exit(1);
});
