// mapping.ts against pi's own code, and what the recorder does beyond the
// mapping the golden logs check (golden.test.ts): each entry once, however
// often pi hands over its path, and a turn a killed process left open.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as pi from "../../test/pi/1/node_modules/@earendil-works/pi-coding-agent/dist/core/messages.js";
import {
	BRANCH_SUMMARY_PREFIX,
	BRANCH_SUMMARY_SUFFIX,
	bashExecutionText,
	COMPACTION_PREFIX,
	COMPACTION_SUFFIX,
	type Entry,
	holdsContext,
	messageTime,
	textBlocks,
} from "../src/mapping.ts";
import { adapterOf, Recorder } from "../src/recorder.ts";
import { fileStore, LOCATION, logEvents, scratch } from "./helpers.ts";

const work = scratch();

test("summaries are wrapped in pi's words", () => {
	assert.equal(COMPACTION_PREFIX, pi.COMPACTION_SUMMARY_PREFIX);
	assert.equal(COMPACTION_SUFFIX, pi.COMPACTION_SUMMARY_SUFFIX);
	assert.equal(BRANCH_SUMMARY_PREFIX, pi.BRANCH_SUMMARY_PREFIX);
	assert.equal(BRANCH_SUMMARY_SUFFIX, pi.BRANCH_SUMMARY_SUFFIX);
});

test("bashExecutionText is pi's bashExecutionToText", () => {
	const base = { role: "bashExecution", command: "make", output: "ok", exitCode: 0, cancelled: false, truncated: false, timestamp: 1 };
	for (const m of [
		base,
		{ ...base, output: "" },
		{ ...base, exitCode: 2 },
		{ ...base, exitCode: undefined },
		{ ...base, exitCode: null },
		{ ...base, cancelled: true, exitCode: 130 },
		{ ...base, truncated: true, fullOutputPath: "/tmp/out.log" },
		{ ...base, truncated: true },
	]) {
		assert.equal(bashExecutionText(m), pi.bashExecutionToText(m as any), JSON.stringify(m));
	}
});

test("messageTime is the message's own time, else the entry's", () => {
	assert.equal(messageTime({ timestamp: Date.UTC(2026, 0, 2, 3, 4, 5, 6) }, "entry"), "2026-01-02T03:04:05.006Z");
	assert.equal(messageTime({ timestamp: "2026-01-02" }, "entry"), "entry");
	assert.equal(messageTime({ timestamp: Number.NaN }, "entry"), "entry");
	assert.equal(messageTime({}, undefined), undefined);
});

test("textBlocks is content as pi sends an extension's", () => {
	assert.deepEqual(textBlocks("hi"), [{ type: "text", text: "hi" }]);
	assert.deepEqual(textBlocks(null), []);
	assert.deepEqual(textBlocks(undefined), []);
	const blocks = [{ type: "image", data: "x", mimeType: "image/png" }];
	assert.equal(textBlocks(blocks), blocks);
});

test("only entries pi sends make a Session worth having", () => {
	for (const type of ["message", "custom_message", "compaction", "branch_summary", "context_edit"]) {
		assert.ok(holdsContext({ type, id: "a", parentId: null }), type);
	}
	for (const type of ["model_change", "thinking_level_change", "label", "custom", "session_info"]) {
		assert.ok(!holdsContext({ type, id: "a", parentId: null }), type);
	}
});

/** path is a pi path: each entry the child of the one before. */
function path(...entries: { type: string; [k: string]: unknown }[]): Entry[] {
	return entries.map((e, i) => ({ ...e, id: `e${i + 1}`, parentId: i === 0 ? null : `e${i}`, timestamp: `2026-01-01T00:00:0${i}.000Z` }));
}
const user = (content: string) => ({ type: "message", message: { role: "user", content, timestamp: 1 } });
const answer = (text: string, stopReason = "stop") => ({
	type: "message",
	message: { role: "assistant", content: [{ type: "text", text }], api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", stopReason },
});
const ADAPTER = adapterOf({ api: "anthropic-messages", provider: "anthropic", id: "claude-sonnet-4-5" });

test("an entry is recorded once, however often pi hands over its path", async () => {
	const p = path(user("one"), answer("1"), user("two"), answer("2", "length"));
	const { store } = fileStore(work);
	const rec = new Recorder(store, LOCATION);
	await rec.open(ADAPTER, { type: "session", id: "pi-1" });
	await rec.record(p.slice(0, 2));
	await rec.record(p.slice(0, 2));
	await rec.record(p);
	await rec.record(p.slice(0, 3)); // an older view of the path
	rec.endTurnIfOpen();
	await rec.close();
	const events = await logEvents(store);
	assert.deepEqual(
		events.map((e) => `${e.type}${e.piEntry ? ` ${e.piEntry.id}` : ""}`),
		["session/start", "turn/start", "user/message e1", "assistant/message e2", "turn/end", "turn/start", "user/message e3", "assistant/message e4", "turn/end"],
	);
	assert.deepEqual(
		events.filter((e) => e.type === "turn/end").map((e) => e.reason),
		["stop", "length"],
	);
	assert.deepEqual(events[0].adapter, { kind: "pi-ai", api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5", releaseLine: "1" });
	assert.deepEqual(events[0].piSession, { type: "session", id: "pi-1" });
});

test("a turn a killed process left open ends, aborted, when the log is opened again", async () => {
	const p = path(user("one"), answer("1"), user("two"));
	const { store } = fileStore(work);
	const first = new Recorder(store, LOCATION);
	await first.open(ADAPTER, { type: "session", id: "pi-1" });
	await first.record(p);
	first.responseStart({ api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5" });
	first.delta({ type: "text_delta", contentIndex: 0, delta: "Cut o" });
	await first.flush(); // and no close: the process is gone

	const second = new Recorder(store, LOCATION);
	let from: string | undefined;
	await second.open(ADAPTER, { type: "session", id: "pi-1" }, (f) => {
		from = f;
	});
	await second.record(p); // nothing new
	await second.close();
	assert.equal(from, "pi-1");
	const tail = (await logEvents(store)).slice(-5);
	assert.deepEqual(
		tail.map((e) => [e.type, e.turn, e.response ?? null, e.stopReason ?? e.reason ?? null]),
		[
			["user/message", 2, null, null],
			["response/start", 2, 0, null],
			["chunk", 2, 0, null],
			["response/finish", 2, 0, "aborted"],
			["turn/end", 2, null, "aborted"],
		],
	);
});
