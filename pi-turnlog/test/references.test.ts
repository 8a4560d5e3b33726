// Forks by reference (docs/log-format.md, "Forks by reference") against
// testdata/stores/forked (its README says what it is): the package reads
// each Session of the tree, through the references its children hold, to
// exactly the bytes of expected/, forks and appends through them, and
// refuses a manifest that is not the documented shape.
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { LogIndex } from "../src/logindex.ts";
import { type Location, MAX_REFERENCES, MAX_REFERENCES_BYTES, recordedFrom, rootOf, SegmentLog } from "../src/log.ts";
import type { Entry } from "../src/mapping.ts";
import { openStore } from "../src/openstore.ts";
import { adapterOf, Recorder } from "../src/recorder.ts";
import { type Store, withGetHook } from "../src/store.ts";
import { logText, scratch } from "./helpers.ts";

const FIXTURE = join(import.meta.dirname, "..", "..", "testdata", "stores", "forked");
const UIDS: Record<string, string> = { src: "u1", mid: "u2", leaf: "u3" };
const work = scratch();

const at = (session: string, uid = UIDS[session], prefix?: string): Location => ({ prefix, namespace: "ns", session, uid });
const logOf = (store: Store, loc: Location) => new SegmentLog(store, rootOf(loc));

/** expected is the whole log of a Session of the tree, as expected/ holds it. */
function expected(session: string): string {
	return readFileSync(join(FIXTURE, "expected", `${session}.jsonl`), "utf8");
}

/** lines is a log file's lines, each with its newline. */
function lines(text: string): string[] {
	return text.split(/(?<=\n)/).filter((l) => l !== "");
}

/** serialised is events as a log file, each re-serialised. */
function serialised(events: unknown[]): string {
	return events.map((e) => `${JSON.stringify(e)}\n`).join("");
}

/** rawLog is the log's bytes: its segments, as segments() lists them, concatenated unparsed. */
async function rawLog(store: Store, loc: Location): Promise<string> {
	const log = logOf(store, loc);
	return (await Promise.all((await log.segments()).map((s) => store.get(s.key)))).join("");
}

/** copy is a writable copy of the fixture's store, below prefix (a path) when given. */
function copy(prefix = ""): { store: Store; dir: string } {
	const dir = mkdtempSync(join(work, "store-"));
	cpSync(join(FIXTURE, "store"), join(dir, prefix), { recursive: true });
	return { store: openStore(`file://${dir}`), dir };
}

/** manifest writes a Session's log/references.json into the store at dir. */
function manifest(dir: string, loc: Location, body: string): string {
	const key = `${rootOf(loc)}log/references.json`;
	mkdirSync(join(dir, rootOf(loc), "log"), { recursive: true });
	writeFileSync(join(dir, key), body);
	return key;
}

test("each Session of the tree reads to expected/, through its references, and reading writes nothing", async () => {
	// The fixture itself: reads only, which the last check holds it to.
	const store = openStore(`file://${join(FIXTURE, "store")}`);
	for (const session of ["src", "mid", "leaf"]) {
		const want = expected(session);
		assert.ok(want.length > 0, session);
		assert.equal(serialised(await logOf(store, at(session)).readAll()), want, `${session}: readAll, re-serialised`);
		assert.equal(await rawLog(store, at(session)), want, `${session}: the segments' bytes`);
	}
	assert.deepEqual(
		(await logOf(store, at("leaf")).segments()).map((s) => s.key),
		["ns/src/u1/log/00000000000000000000.jsonl", "ns/mid/u2/log/00000000000000000006.jsonl", "ns/leaf/u3/log/00000000000000000008.jsonl"],
	);
	assert.ok(!existsSync(join(FIXTURE, "store", ".turnlog-tmp")), "the file store wrote into the fixture");
});

test("references are flattened: a referenced root's own references.json is never read", async () => {
	const { store: files, dir } = copy();
	// mid's manifest, broken: leaf, which refers to mid's segments but not
	// to mid's references, reads as before; mid itself does not.
	const midKey = manifest(dir, at("mid"), '{"version":1,"refs":[{"session":"mid","uid":"u2","through":5}]}');
	const got: string[] = [];
	const store = withGetHook(files, (k) => got.push(k));
	assert.equal(serialised(await logOf(store, at("leaf")).readAll()), expected("leaf"));
	assert.deepEqual(got.sort(), [
		"ns/leaf/u3/log/00000000000000000008.jsonl",
		"ns/leaf/u3/log/references.json",
		"ns/mid/u2/log/00000000000000000006.jsonl",
		"ns/src/u1/log/00000000000000000000.jsonl",
	]);
	await assert.rejects(logOf(store, at("mid")).readAll(), { message: `bad log data: ${midKey}: refs[0]: names the log's own Session mid/u2` });
});

test("a referenced root is the log's own prefix and namespace with the reference's Session and uid", async () => {
	const { store } = copy("p/q");
	for (const session of ["src", "mid", "leaf"]) {
		assert.equal(serialised(await logOf(store, at(session, UIDS[session], "p/q/")).readAll()), expected(session), session);
	}
	// Without the prefix, nothing is there.
	assert.deepEqual(await logOf(store, at("leaf")).readAll(), []);
});

test("the recorder's index and recordedFrom read a child through its references", async () => {
	const store = openStore(`file://${join(FIXTURE, "store")}`);
	const index = new LogIndex(logOf(store, at("leaf")));
	assert.equal(await index.open(), 11);
	assert.equal(index.start?.type, "session/start"); // src's, seq 0
	assert.equal(await index.typeAt(6), "user/message"); // mid's
	assert.equal(await index.typeAt(7), "turn/end");
	const back: number[] = [];
	for await (const [seq] of index.before(11)) back.push(seq);
	assert.deepEqual(back, [10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
	// The fixture's session/start names no pi session.
	assert.equal(await recordedFrom(store, at("leaf")), undefined);
});

test("forkTo from a child reads its source through references and writes a plain, whole copy", async () => {
	const { store, dir } = copy();
	const leaf = lines(expected("leaf"));
	for (const cut of [4, 5, 7, 10]) {
		const child = at(`copy-${cut}`, "c1");
		await logOf(store, at("leaf")).forkTo(logOf(store, child), cut);
		const want = leaf.slice(0, cut + 1).join("");
		// Its own segments alone hold the whole prefix: no references.json,
		// whose pins only the manager writes.
		assert.equal(await logText(store, child), want, `cut ${cut}: the child's own segments`);
		assert.deepEqual(
			(await store.list(`${rootOf(child)}log/`)).filter((k) => !k.endsWith(".jsonl")),
			[],
			`cut ${cut}: the child's log/`,
		);
		assert.equal(serialised(await logOf(store, child).readAll()), want, `cut ${cut}: readAll`);
	}
	await assert.rejects(logOf(store, at("leaf")).forkTo(logOf(store, at("copy-11", "c1")), 11), /the log ends at seq 10, before the cut at seq 11/);
	// A child that refers to segments already has a log.
	manifest(dir, at("kid", "u4"), '{"version":1,"refs":[{"session":"src","uid":"u1","through":5}]}');
	await assert.rejects(logOf(store, at("leaf")).forkTo(logOf(store, at("kid", "u4")), 7), /already has a log/);
	// The sources are as they were.
	for (const session of ["src", "mid", "leaf"]) assert.equal(await rawLog(store, at(session)), expected(session), session);
});

/** path is a pi path: each entry the child of the one before. */
function path(...entries: { type: string; [k: string]: unknown }[]): Entry[] {
	return entries.map((e, i) => ({ ...e, id: `k${i + 1}`, parentId: i === 0 ? null : `k${i}`, timestamp: `2026-01-01T00:00:0${i}.000Z` }));
}
const ADAPTER = adapterOf({ api: "anthropic-messages", provider: "anthropic", id: "claude-sonnet-4-5" });

test("a child with no segments of its own is appended to at the end of its last reference", async () => {
	const { store, dir } = copy();
	// A fork of leaf cut at seq 7, mid's segment's end: the manager writes
	// the manifest and no segment.
	const kid = at("kid", "u4");
	manifest(dir, kid, '{"version":1,"refs":[{"session":"src","uid":"u1","through":5},{"session":"mid","uid":"u2","through":7}]}');
	const rec = new Recorder(store, kid);
	await rec.open(ADAPTER, { type: "session", id: "pi-kid" });
	assert.equal(rec.next, 8);
	await rec.record(
		path(
			{ type: "message", message: { role: "user", content: "kid turn 3", timestamp: 1 } },
			{
				type: "message",
				message: { role: "assistant", content: [{ type: "text", text: "ok" }], api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", stopReason: "stop" },
			},
		),
	);
	rec.endTurnIfOpen();
	await rec.close();
	assert.deepEqual(await store.list(`${rootOf(kid)}log/`), ["ns/kid/u4/log/00000000000000000008.jsonl", "ns/kid/u4/log/references.json"]);
	const events = await logOf(store, kid).readAll();
	assert.equal(serialised(events.slice(0, 8)), lines(expected("leaf")).slice(0, 8).join(""));
	assert.deepEqual(
		events.slice(8).map((e) => [e.seq, e.type, e.turn]),
		[
			[8, "turn/start", 3],
			[9, "user/message", 3],
			[10, "assistant/message", 3],
			[11, "turn/end", 3],
		],
	);

	// Referring to src through seq 5, a turn/start: the turn the reference
	// leaves open is ended at seq 6, in the child's first own segment.
	const open = at("open", "u5");
	manifest(dir, open, '{"version":1,"refs":[{"session":"src","uid":"u1","through":5}]}');
	const again = new Recorder(store, open);
	await again.open(ADAPTER, { type: "session", id: "pi-open" });
	await again.close();
	assert.equal(again.next, 7);
	const tail = (await logOf(store, open).readAll()).slice(5);
	assert.deepEqual(
		tail.map((e) => [e.seq, e.type, e.turn, e.reason ?? null]),
		[
			[5, "turn/start", 2, null],
			[6, "turn/end", 2, "aborted"],
		],
	);
	assert.deepEqual(await store.list(`${rootOf(open)}log/`), ["ns/open/u5/log/00000000000000000006.jsonl", "ns/open/u5/log/references.json"]);
});

test("a manifest that is not the documented shape is refused, naming references.json and what is wrong", async () => {
	const { store, dir } = copy();
	const ref = (session: string, uid: string, through: unknown) => ({ session, uid, through });
	const many = Array.from({ length: MAX_REFERENCES + 1 }, (_, i) => ref(i % 2 ? "src" : "mid", i % 2 ? "u1" : "u2", i));
	const cases: [string, string, RegExp][] = [
		["invalid JSON", '{"version": 1,\n"refs": [\n', /invalid JSON/],
		["not an object", "[]", /not a JSON object/],
		["another version", JSON.stringify({ version: 2, refs: [ref("src", "u1", 5)] }), /version 2: this reader knows version 1/],
		["no version", JSON.stringify({ refs: [ref("src", "u1", 5)] }), /version missing/],
		["refs not an array", JSON.stringify({ version: 1, refs: { session: "src", uid: "u1", through: 5 } }), /refs: not an array/],
		["no refs", JSON.stringify({ version: 1 }), /refs: missing/],
		["empty refs", JSON.stringify({ version: 1, refs: [] }), /refs: no references/],
		["an unknown member", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5)], root: "other/ns/" }), /unknown member "root"/],
		["an unknown member of a ref", JSON.stringify({ version: 1, refs: [{ ...ref("src", "u1", 5), namespace: "other" }] }), /refs\[0\]: unknown member "namespace"/],
		["too many refs", JSON.stringify({ version: 1, refs: many }), /refs: 1025 references, more than 1024/],
		["a ref not an object", JSON.stringify({ version: 1, refs: ["src"] }), /refs\[0\]: not a JSON object/],
		["an empty session", JSON.stringify({ version: 1, refs: [ref("", "u1", 5)] }), /refs\[0\]\.session: "": want a non-empty name without '\/'/],
		["a session with '/'", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5), ref("../other/mid", "u2", 7)] }), /refs\[1\]\.session: "\.\.\/other\/mid"/],
		["a session '..'", JSON.stringify({ version: 1, refs: [ref("..", "ns", 5)] }), /refs\[0\]\.session: "\.\."/],
		["a uid with '/'", JSON.stringify({ version: 1, refs: [ref("src", "u1/../../x", 5)] }), /refs\[0\]\.uid: "u1\/\.\.\/\.\.\/x"/],
		["no uid", JSON.stringify({ version: 1, refs: [{ session: "src", through: 5 }] }), /refs\[0\]\.uid: missing/],
		["a through that is not an integer", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5.5)] }), /refs\[0\]\.through: 5\.5: want an integer seq/],
		["a through that is a string", JSON.stringify({ version: 1, refs: [ref("src", "u1", "5")] }), /refs\[0\]\.through: "5": want an integer seq/],
		["a first range ending before 0", JSON.stringify({ version: 1, refs: [ref("src", "u1", -1)] }), /refs\[0\]\.through: -1: the range starts at seq 0/],
		["a range that does not follow", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5), ref("mid", "u2", 5)] }), /refs\[1\]\.through: 5: the range starts at seq 6/],
		["ranges out of order", JSON.stringify({ version: 1, refs: [ref("mid", "u2", 7), ref("src", "u1", 5)] }), /refs\[1\]\.through: 5: the range starts at seq 8/],
		["a Session that does not exist", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5), ref("gone", "u0", 7)] }), /refs\[1\]: p\d+\/ns\/gone\/u0\/log\/ has no segment starting at seq 6/],
		["a Session with no segment where its range starts", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5), ref("leaf", "u3", 7)] }), /refs\[1\]: p\d+\/ns\/leaf\/u3\/log\/ has no segment starting at seq 6/],
		["a reference to the log's own root", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5), ref("forged", "u9", 7)] }), /refs\[1\]: names the log's own Session forged\/u9/],
		["over 1 MiB", JSON.stringify({ version: 1, refs: [ref("src", "u1", 5)], pad: "x".repeat(MAX_REFERENCES_BYTES) }), /\d+ bytes, over the 1048576 a references\.json may have/],
	];
	for (const [i, [what, body, why]] of cases.entries()) {
		// Each its own Session: one whose log would otherwise read.
		const loc = at("forged", "u9", `p${i}`);
		const key = manifest(dir, loc, body);
		mkdirSync(join(dir, `p${i}`, "ns"), { recursive: true });
		cpSync(join(dir, "ns", "src"), join(dir, `p${i}`, "ns", "src"), { recursive: true });
		cpSync(join(dir, "ns", "mid"), join(dir, `p${i}`, "ns", "mid"), { recursive: true });
		cpSync(join(dir, "ns", "leaf"), join(dir, `p${i}`, "ns", "leaf"), { recursive: true });
		const refused = (err: unknown) => {
			const msg = (err as Error).message;
			assert.ok(msg.startsWith(`bad log data: ${key}: `), `${what}: ${msg}`);
			assert.ok(!msg.includes("\n"), `${what}: not one line: ${JSON.stringify(msg)}`);
			assert.match(msg, why, what);
			return true;
		};
		await assert.rejects(logOf(store, loc).readAll(), refused, what);
		// Every reader goes through segments(): the recorder's start, too.
		await assert.rejects(new Recorder(store, loc).open(ADAPTER, { type: "session", id: "pi-forged" }), refused, what);
		assert.ok(!readdirSync(join(dir, rootOf(loc), "log")).some((n) => n.endsWith(".jsonl")), `${what}: the refused log was written to`);
	}
	// The same manifests, well formed, read.
	const good = at("forged", "u9", "good");
	manifest(dir, good, JSON.stringify({ version: 1, refs: [ref("src", "u1", 5), ref("mid", "u2", 7)] }));
	cpSync(join(dir, "ns"), join(dir, "good", "ns"), { recursive: true, force: false });
	assert.equal(serialised(await logOf(store, good).readAll()), lines(expected("leaf")).slice(0, 8).join(""));
});

test("segments that do not fit the manifest's ranges are bad data naming the segment", async () => {
	const { store, dir } = copy();
	// src's first segment holds 0..5: a range through 4 cannot take it.
	const short = at("short", "u6");
	manifest(dir, short, '{"version":1,"refs":[{"session":"src","uid":"u1","through":4}]}');
	await assert.rejects(logOf(store, short).readAll(), {
		message: "bad log data: ns/src/u1/log/00000000000000000000.jsonl line 6 (seq 5): past seq 4, the end of the range ns/short/u6/log/references.json refers to this segment for",
	});
	// An own segment where a reference already holds events.
	const twice = at("twice", "u7");
	manifest(dir, twice, '{"version":1,"refs":[{"session":"src","uid":"u1","through":5},{"session":"mid","uid":"u2","through":7}]}');
	cpSync(join(dir, "ns/mid/u2/log/00000000000000000006.jsonl"), join(dir, "ns/twice/u7/log/00000000000000000006.jsonl"));
	const overlap = /^Error: bad log data: ns\/(mid\/u2|twice\/u7)\/log\/00000000000000000006\.jsonl: starts at seq 6, as ns\/(mid\/u2|twice\/u7)\/log\/00000000000000000006\.jsonl does$/;
	await assert.rejects(logOf(store, twice).readAll(), overlap);
	await assert.rejects(logOf(store, twice).forkTo(logOf(store, at("y", "u8")), 9), overlap);
	// A gap: an own segment after the references, not where they end.
	const gap = at("gap", "u9");
	manifest(dir, gap, '{"version":1,"refs":[{"session":"src","uid":"u1","through":5}]}');
	cpSync(join(dir, "ns/mid/u2/log/00000000000000000008.jsonl"), join(dir, "ns/gap/u9/log/00000000000000000008.jsonl"));
	await assert.rejects(logOf(store, gap).readAll(), { message: "bad log data: ns/gap/u9/log/00000000000000000008.jsonl: starts at seq 8, the log has 6 events before it" });
	await assert.rejects(logOf(store, gap).forkTo(logOf(store, at("z", "u8")), 9), { message: "bad log data: ns/gap/u9/log/00000000000000000008.jsonl: starts at seq 8, the log has 6 events before it" });
	// A stray object under a referenced root's log/ is reported as in any log.
	writeFileSync(join(dir, "ns/src/u1/log/notes.txt"), "x");
	await assert.rejects(logOf(store, at("leaf")).readAll(), { message: "bad log data: ns/src/u1/log/notes.txt: not a segment" });
});
