// The stored transcript of a forked Session (docs/log-format.md, "Forks by
// reference"): its first parts are its source's, shared, named by the
// Session that holds them; parts written after a rewrite carry its epoch.
// The package reads them where the workers put them, and refuses a part
// whose holder is not a Session's name.
import assert from "node:assert/strict";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { rootOf } from "../src/log.ts";
import { openStore } from "../src/openstore.ts";
import { crc32c, loadTranscript, type Target, transcriptDir } from "../src/transcript.ts";
import { scratch } from "./helpers.ts";

const TARGET: Target = { kind: "pi-ai", api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", releaseLine: "" };

/** part is a stored part of the messages' texts, from message start on, and its checkpoint entry. */
function part(start: number, seq: number, texts: string[]): { data: Buffer; ref: Record<string, unknown> } {
	const lines = texts.map((text) => JSON.stringify({ role: "user", content: [{ type: "text", text }], timestamp: 0 }));
	const header = {
		start,
		seqs: texts.map((_, i) => seq + i),
		roles: texts.map(() => "user"),
		synthetic: texts.map(() => false),
		bytes: lines.map((l) => Buffer.byteLength(l)),
	};
	const body = Buffer.from(lines.map((l) => `${l}\n`).join(""));
	const data = Buffer.concat([Buffer.from(`${JSON.stringify(header)}\n`), body]);
	return { data, ref: { start, count: texts.length, bytes: body.length, crc32c: crc32c(data) } };
}

function put(dir: string, key: string, data: string | Buffer) {
	mkdirSync(dirname(join(dir, key)), { recursive: true });
	writeFileSync(join(dir, key), data);
}

/** forkedStore holds a source's shared part and a child's checkpoint listing it, then a part of its own. */
function forkedStore(shared: Record<string, unknown>): { url: string; child: string } {
	const dir = scratch();
	const src = rootOf({ prefix: "p", namespace: "ns", session: "src", uid: "u1" });
	const child = rootOf({ prefix: "p", namespace: "ns", session: "child", uid: "u2" });
	const first = part(0, 2, ["one", "two"]);
	const second = part(2, 9, ["three"]);
	const range = (s: number, e: number) => `${String(s).padStart(20, "0")}-${String(e).padStart(20, "0")}`;
	put(dir, `${transcriptDir(src, TARGET)}${range(0, 2)}.jsonl`, first.data);
	put(dir, `${transcriptDir(child, TARGET)}${range(2, 3)}.e7.jsonl`, second.data);
	const cp = { summary: {}, next: 12, parts: [{ ...first.ref, ...shared }, { ...second.ref, epoch: 7 }] };
	put(dir, `${transcriptDir(child, TARGET)}checkpoint.json`, JSON.stringify(cp));
	return { url: `file://${dir}`, child };
}

test("a forked Session's transcript reads its source's shared parts, then its own", async () => {
	const { url, child } = forkedStore({ session: "src", uid: "u1" });
	const tr = await loadTranscript(openStore(url), child, TARGET);
	assert.deepEqual(
		tr.messages.map((m) => [m.seq, m.message.content[0].text]),
		[
			[2, "one"],
			[3, "two"],
			[9, "three"],
		],
	);
});

test("a shared part whose holder is not a Session's name is refused, naming the field", async () => {
	for (const [shared, want] of [
		[{ session: "../other", uid: "u1" }, /parts\[0\]\.session: "\.\.\/other": want a non-empty name without '\/'/],
		[{ session: "src" }, /parts\[0\]\.uid: missing/],
		[{ session: "src", uid: "u9" }, /no such|not found|ENOENT/i],
	] as const) {
		const { url, child } = forkedStore(shared);
		await assert.rejects(loadTranscript(openStore(url), child, TARGET), want);
	}
});

// testdata/stores/shared-transcripts (its README says what it is): a
// source, a fork of it and a fork of that fork, written and replayed by
// Go's workers, the children sharing their ancestors' sealed parts.
// internal/worker's TestSharedTranscriptFixture holds the store to what
// Go writes and Go's reader to expected/; this holds the package to it.
const SHARED = join(import.meta.dirname, "..", "..", "testdata", "stores", "shared-transcripts");

test("each Session of the shared-parts tree reads to expected/, through the parts its ancestors hold", async () => {
	const dir = mkdtempSync(join(scratch(), "shared-"));
	cpSync(join(SHARED, "store"), dir, { recursive: true });
	const store = openStore(`file://${dir}`);
	for (const [session, uid] of [
		["src", "u1"],
		["mid", "u2"],
		["leaf", "u3"],
	]) {
		const want = readFileSync(join(SHARED, "expected", `${session}.jsonl`), "utf8")
			.split("\n")
			.filter((l) => l !== "")
			.map((l) => JSON.parse(l));
		const tr = await loadTranscript(store, rootOf({ namespace: "ns", session, uid }), TARGET);
		assert.deepEqual(
			tr.messages.map((m) => ({ seq: m.seq, role: m.role, message: m.message })),
			want,
			session,
		);
	}
});
