// Writes pi-coding-agent session files with pi-coding-agent's own
// SessionManager into the directory given as the first argument, and prints
// a manifest as JSON to stdout: for each file (and leaf), the messages
// pi-coding-agent itself rebuilds from it (loadEntriesFromFile, its
// migrations and buildSessionContext), so turnlog's import test
// (agenthost/pisession_pi_test.go) compares its log with pi's own reading.
//
//   node make-sessions.mjs DIR
//   stdout: [{"name", "file", "leaf", "parentSession", "messages": [...]}, ...]
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import {
	SessionManager,
	buildSessionContext,
	loadEntriesFromFile,
	migrateSessionEntries,
} from "./node_modules/@mariozechner/pi-coding-agent/dist/core/session-manager.js";

const dir = process.argv[2];
if (!dir) throw new Error("usage: node make-sessions.mjs DIR");

let clock = Date.parse("2026-11-30T09:00:00.000Z");
const tick = () => (clock += 1250);
const model = { api: "anthropic-messages", provider: "anthropic", model: "claude-sonnet-4-5" };
const usage = { input: 120, output: 40, cacheRead: 0, cacheWrite: 0, totalTokens: 160, cost: { input: 0, output: 0, cacheRead: 0, cacheWrite: 0, total: 0 } };
const user = (text) => ({ role: "user", content: [{ type: "text", text }], timestamp: tick() });
const assistant = (content, stopReason, extra = {}) => ({
	role: "assistant", content, ...model, usage, stopReason, timestamp: tick(), ...extra,
});
const toolResult = (toolCallId, toolName, text, isError = false) => ({
	role: "toolResult", toolCallId, toolName, content: [{ type: "text", text }], details: { exitCode: isError ? 1 : 0 }, isError, timestamp: tick(),
});

// A session with signed reasoning, a tool call answered by its result, an
// aborted response, a model and thinking-level change, a label, and a
// branch: the user went back to the second question and asked another
// one, so the file holds a tree and its last entry is on the branch.
const main = SessionManager.create("/work/project", dir);
main.appendThinkingLevelChange("high");
main.appendModelChange(model.provider, model.model);
main.appendMessage(user("Find every TODO in the repository & count them <quickly>."));
main.appendMessage(assistant([
	{ type: "thinking", thinking: "Grep is the quickest way.", thinkingSignature: "EqQBCkYIBxgCKkD+/sig==" },
	{ type: "text", text: "I'll search for TODO markers.", textSignature: "msg_01:txt" },
	{ type: "toolCall", id: "toolu_01", name: "bash", arguments: { command: "grep -rn TODO ." }, thoughtSignature: "tc-sig-01" },
], "toolUse", { responseId: "msg_01" }));
main.appendMessage(toolResult("toolu_01", "bash", "a.go:3: TODO\nb.go:9: TODO"));
const answered = main.appendMessage(assistant([
	{ type: "thinking", thinking: "Two hits.", thinkingSignature: "EqQBsig2" },
	{ type: "text", text: "There are 2 TODOs.", textSignature: "msg_02:txt" },
], "stop", { responseId: "msg_02" }));
main.appendLabelChange(answered, "counted");
const second = main.appendMessage(user("Fix them."));
main.appendMessage(assistant([{ type: "text", text: "Editing a.go" }], "aborted", { errorMessage: "Request was aborted" }));
main.appendMessage(user("Actually, just list the files."));
main.appendMessage(assistant([{ type: "thinking", thinking: "", thinkingSignature: "opaque-redacted", redacted: true }, { type: "text", text: "a.go and b.go." }], "stop"));
const mainLeaf = main.getLeafId();
// Back to "Fix them." 's parent: a second branch from the answered turn.
main.branch(answered);
main.appendMessage(user("Which one is older?"));
main.appendMessage(assistant([{ type: "text", text: "a.go, by two years.", textSignature: "msg_05:txt" }], "stop"));
const mainFile = main.getSessionFile();

// A fork of the whole file into a new session (pi's --fork), continued.
const fork = SessionManager.forkFrom(mainFile, "/work/project-fork", dir);
fork.appendMessage(user("Open a.go."));
fork.appendMessage(assistant([{ type: "toolCall", id: "toolu_09", name: "read", arguments: { path: "a.go" } }], "toolUse"));
fork.appendMessage(toolResult("toolu_09", "read", "ENOENT", true));
fork.appendMessage(assistant([{ type: "text", text: "a.go is gone." }], "stop"));
const forkFile = fork.getSessionFile();

// Older versions, as pi-coding-agent 0.x wrote them: version 1 has no
// tree (entries in order), version 2 still says hookMessage.
const v1File = join(dir, "v1.jsonl");
const v1 = [
	{ type: "session", id: "v1-session", timestamp: "2025-06-01T10:00:00.000Z", cwd: "/old" },
	{ type: "message", timestamp: "2025-06-01T10:00:01.000Z", message: user("hello v1") },
	{ type: "message", timestamp: "2025-06-01T10:00:02.000Z", message: assistant([{ type: "text", text: "hi from v1", textSignature: "v1sig" }], "stop") },
	{ type: "thinking_level_change", timestamp: "2025-06-01T10:00:03.000Z", thinkingLevel: "low" },
	{ type: "message", timestamp: "2025-06-01T10:00:04.000Z", message: user("bye") },
	{ type: "message", timestamp: "2025-06-01T10:00:05.000Z", message: assistant([{ type: "text", text: "bye" }], "stop") },
];
writeFileSync(v1File, v1.map((e) => JSON.stringify(e)).join("\n") + "\n");
const v2File = join(dir, "v2.jsonl");
const v2 = [
	{ type: "session", version: 2, id: "v2-session", timestamp: "2025-09-01T10:00:00.000Z", cwd: "/old2" },
	{ type: "message", id: "aa000001", parentId: null, timestamp: "2025-09-01T10:00:01.000Z", message: user("hello v2") },
	{ type: "message", id: "aa000002", parentId: "aa000001", timestamp: "2025-09-01T10:00:02.000Z", message: { role: "hookMessage", customType: "note", content: "from a hook", display: true, timestamp: tick() } },
	{ type: "message", id: "aa000003", parentId: "aa000002", timestamp: "2025-09-01T10:00:03.000Z", message: assistant([{ type: "text", text: "v2 reply", textSignature: "v2sig" }], "stop") },
];
writeFileSync(v2File, v2.map((e) => JSON.stringify(e)).join("\n") + "\n");

function read(name, file, leaf) {
	const entries = loadEntriesFromFile(file);
	migrateSessionEntries(entries);
	const header = entries.find((e) => e.type === "session");
	const body = entries.filter((e) => e.type !== "session");
	const ctx = buildSessionContext(body, leaf ?? undefined);
	return { name, file, leaf: leaf ?? null, parentSession: header.parentSession ?? "", messages: ctx.messages };
}

process.stdout.write(JSON.stringify([
	read("branched", mainFile),
	read("branched-first-leaf", mainFile, mainLeaf),
	read("fork", forkFile),
	read("v1", v1File),
	read("v2", v2File),
]));
