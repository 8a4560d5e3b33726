// Writes pi-coding-agent session files with pi-coding-agent's own
// SessionManager into the directory given as the first argument, and prints
// a manifest as JSON to stdout: for each file (and leaf), what
// pi-coding-agent itself reads from it (loadEntriesFromFile, its migrations
// and buildSessionContext), so turnlog's import test
// (agenthost/pisession_pi_test.go) compares its log and its transcript with
// pi's own reading.
//
//   node make-sessions.mjs DIR
//   stdout: [{"name", "file", "leaf", "parentSession", "messages": [...], "context": [...]}, ...]
//     messages: the messages on the path to the leaf, compacted ones included
//     context:  convertToLlm(buildSessionContext(...).messages): what pi
//               resumes with and hands to pi-ai
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import {
	SessionManager,
	buildSessionContext,
	loadEntriesFromFile,
	migrateSessionEntries,
} from "./node_modules/@mariozechner/pi-coding-agent/dist/core/session-manager.js";
import { convertToLlm } from "./node_modules/@mariozechner/pi-coding-agent/dist/core/messages.js";

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
// tree (entries in order), version 2 still says hookMessage (and compacts).
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
	{ type: "message", id: "aa000004", parentId: "aa000003", timestamp: "2025-09-01T10:00:04.000Z", message: user("and then?") },
	{ type: "message", id: "aa000005", parentId: "aa000004", timestamp: "2025-09-01T10:00:05.000Z", message: assistant([{ type: "text", text: "then this" }], "stop") },
	{ type: "compaction", id: "aa000006", parentId: "aa000005", timestamp: "2025-09-01T10:00:06.000Z", summary: "Hello, a hook, a reply.", firstKeptEntryId: "aa000004", tokensBefore: 3000 },
	{ type: "message", id: "aa000007", parentId: "aa000006", timestamp: "2025-09-01T10:00:07.000Z", message: user("last v2") },
	{ type: "message", id: "aa000008", parentId: "aa000007", timestamp: "2025-09-01T10:00:08.000Z", message: assistant([{ type: "text", text: "last v2 reply" }], "stop") },
];
writeFileSync(v2File, v2.map((e) => JSON.stringify(e)).join("\n") + "\n");

// Compactions, as pi 0.73.1 writes them: one keeping from a user message,
// one cutting a turn (its first kept entry is a tool result), and one
// reaching back before the previous one's kept entries (an extension may
// choose any entry): pi follows the recorded id.
const turn = (sm, question, answer) => {
	const u = sm.appendMessage(user(question));
	const a = sm.appendMessage(assistant([{ type: "text", text: answer, textSignature: `sig-${answer}` }], "stop", { responseId: `msg-${answer}` }));
	return { u, a };
};
const compacted = SessionManager.create("/work/compacted", dir);
compacted.appendModelChange(model.provider, model.model);
turn(compacted, "What does main.go do?", "It starts the server.");
const kept = turn(compacted, "And server.go?", "It routes requests.");
compacted.appendCompaction("The user asked about main.go.", kept.u, 12000);
compacted.appendMessage(user("Run the tests."));
compacted.appendMessage(assistant([{ type: "toolCall", id: "toolu_c1", name: "bash", arguments: { command: "go test ./..." } }], "toolUse"));
const result = compacted.appendMessage(toolResult("toolu_c1", "bash", "ok"));
compacted.appendMessage(assistant([{ type: "text", text: "All pass." }], "stop"));
compacted.appendCompaction("Files explained; tests run.", result, 18000);
turn(compacted, "Thanks.", "Welcome.");
const compactedFile = compacted.getSessionFile();

const reaching = SessionManager.create("/work/reaching", dir);
reaching.appendModelChange(model.provider, model.model);
turn(reaching, "One.", "1");
const two = turn(reaching, "Two.", "2");
const three = turn(reaching, "Three.", "3");
reaching.appendCompaction("One and two.", three.u, 9000);
turn(reaching, "Four.", "4");
reaching.appendCompaction("One.", two.u, 11000);
turn(reaching, "Five.", "5");
const reachingFile = reaching.getSessionFile();

// Version 1 with a compaction: the kept entry is named by its index in the
// file (the header is 0), which pi's migration turns into an id.
const v1CompactedFile = join(dir, "v1-compacted.jsonl");
const at = (i) => `2025-06-02T10:00:${String(i).padStart(2, "0")}.000Z`;
const v1Compacted = [
	{ type: "session", id: "v1-compacted", timestamp: at(0), cwd: "/old" },
	{ type: "model_change", timestamp: at(1), provider: model.provider, modelId: model.model },
	{ type: "message", timestamp: at(2), message: user("U1") },
	{ type: "message", timestamp: at(3), message: assistant([{ type: "text", text: "A1" }], "stop") },
	{ type: "message", timestamp: at(4), message: user("U2") },
	{ type: "message", timestamp: at(5), message: assistant([{ type: "text", text: "A2" }], "stop") },
	{ type: "message", timestamp: at(6), message: user("U3") },
	{ type: "message", timestamp: at(7), message: assistant([{ type: "text", text: "A3" }], "stop") },
	{ type: "compaction", timestamp: at(8), summary: "U1 to A2.", firstKeptEntryIndex: 6, tokensBefore: 5000 },
	{ type: "message", timestamp: at(9), message: user("U4") },
	{ type: "message", timestamp: at(10), message: assistant([{ type: "text", text: "A4" }], "stop") },
];
writeFileSync(v1CompactedFile, v1Compacted.map((e) => JSON.stringify(e)).join("\n") + "\n");

function read(name, file, leaf) {
	const entries = loadEntriesFromFile(file);
	migrateSessionEntries(entries);
	const header = entries.find((e) => e.type === "session");
	const body = entries.filter((e) => e.type !== "session");
	const ctx = buildSessionContext(body, leaf ?? undefined);
	// Every message on the path: the context with no compaction in it.
	const path = buildSessionContext(body.map((e) => (e.type === "compaction" ? { ...e, type: "compaction-set-aside" } : e)), leaf ?? undefined);
	return {
		name, file, leaf: leaf ?? null, parentSession: header.parentSession ?? "",
		messages: path.messages, context: convertToLlm(ctx.messages),
	};
}

const check = (cond, what) => {
	if (!cond) throw new Error(`pi did not behave as this script expects: ${what}`);
};
const cases = [
	read("branched", mainFile),
	read("branched-first-leaf", mainFile, mainLeaf),
	read("fork", forkFile),
	read("v1", v1File),
	read("v2", v2File),
	read("compactions", compactedFile),
	read("compaction-reaches-back", reachingFile),
	read("v1-compaction", v1CompactedFile),
];
const texts = (c) => JSON.stringify(cases.find((x) => x.name === c).context);
check(texts("compaction-reaches-back").includes("Two.") && !texts("compaction-reaches-back").includes("One and two."), "a compaction reaching back brings back what the earlier one summarized");
check(texts("v1-compaction").includes("U3") && texts("v1-compaction").includes("A3") && !texts("v1-compaction").includes("U2"), "a version-1 compaction keeps from its firstKeptEntryIndex");
process.stdout.write(JSON.stringify(cases));
