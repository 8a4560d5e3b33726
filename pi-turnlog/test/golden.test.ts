// The recorder against the golden logs of testdata/pi (its README says what
// they are): for each pi session file there, what the recorder writes when
// pi hands it the session's path is the log `turnlog import --format
// pi-session` writes from the file (testdata/pi/logs, which
// internal/pisession's TestGoldenLogs holds the Go importer to byte for
// byte), line for line and byte for byte, but for what the two writers
// stamp apart (`normal`).
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { test } from "node:test";
import { SessionManager } from "../../test/pi/1/node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js";
import type { Entry } from "../src/mapping.ts";
import { adapterOf, Recorder } from "../src/recorder.ts";
import { fileStore, LOCATION, logText, scratch } from "./helpers.ts";

const TESTDATA = join(import.meta.dirname, "..", "..", "testdata", "pi");
const work = scratch();

/**
 * recorded is the log the recorder writes from the pi session file: pi
 * opens it (its own reader and migrations), and the recorder, started on an
 * empty log as on pi's session_start, records pi's path entry by entry, as
 * pi persists them, or all at once, as when pi resumes the file; then pi
 * settles.
 */
async function recorded(file: string, entryByEntry: boolean): Promise<string> {
	const dir = mkdtempSync(join(work, "pi-"));
	const copy = join(dir, basename(file));
	copyFileSync(file, copy); // pi rewrites a file it migrates
	const sm = SessionManager.open(copy, dir);
	const path = sm.getBranch() as unknown as Entry[];
	const { store } = fileStore(work);
	const rec = new Recorder(store, LOCATION);
	await rec.open(adapterOf(undefined), sm.getHeader());
	if (entryByEntry) for (let i = 1; i <= path.length; i++) await rec.record(path.slice(0, i));
	else await rec.record(path);
	rec.endTurnIfOpen();
	await rec.close();
	return logText(store);
}

/**
 * normal is a log line without what the writers legitimately stamp apart:
 * the time of session/start and turn/end (the recorder's clock; the
 * importer has none for the first and an entry's time for the second) and
 * session/start's adapter (the model pi has when it starts recording, which
 * no file holds; the importer's is the model pi resumes the file with).
 * Every other line is compared as written.
 */
function normal(line: string): string {
	if (line === "") return line;
	const e = JSON.parse(line);
	if (e.type !== "session/start" && e.type !== "turn/end") return line;
	delete e.time;
	if (e.type === "session/start") delete e.adapter;
	return JSON.stringify(e);
}

const sessions = readdirSync(join(TESTDATA, "sessions")).filter((f) => f.endsWith(".jsonl"));

test("testdata/pi has sessions", () => assert.ok(sessions.length > 0));

for (const name of sessions) {
	for (const entryByEntry of [false, true]) {
		test(`${name} (${entryByEntry ? "entry by entry" : "all at once"})`, async () => {
			const got = (await recorded(join(TESTDATA, "sessions", name), entryByEntry)).split("\n");
			const want = readFileSync(join(TESTDATA, "logs", name), "utf8").split("\n");
			for (let i = 0; i < Math.max(got.length, want.length); i++) {
				assert.equal(normal(got[i] ?? ""), normal(want[i] ?? ""), `line ${i + 1} of logs/${name}`);
			}
		});
	}
}
