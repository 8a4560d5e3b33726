// How pi-coding-agent 1.6 session entries become turnlog events: the same
// mapping as `turnlog import --format pi-session` (internal/pisession), so
// a live recording and an import of the finished file replay alike. The
// golden logs of testdata/pi hold both to the same bytes
// (test/golden.test.ts here, TestGoldenLogs there).

export const COMPACTION_PREFIX = "The conversation history before this point was compacted into the following summary:\n\n<summary>\n";
export const COMPACTION_SUFFIX = "\n</summary>";
export const BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n";
export const BRANCH_SUMMARY_SUFFIX = "</summary>";

/** What an entry became: a message, a message no edit changes, or nothing replay reads. */
export type Kind = "message" | "fixed" | "";

export type Entry = { type: string; id: string; parentId: string | null; timestamp?: string; [k: string]: any };
export type Ev = Record<string, unknown>;

/** A message's own timestamp (Unix ms) as RFC 3339 with milliseconds, else the entry's. */
export function messageTime(m: any, entryTime: string | undefined): string | undefined {
	if (typeof m?.timestamp === "number" && Number.isFinite(m.timestamp)) return new Date(m.timestamp).toISOString();
	return entryTime;
}

/** Content as pi sends an extension message's: a string is one text block, null none. */
export function textBlocks(content: unknown): unknown {
	if (content === undefined || content === null) return [];
	if (typeof content === "string") return [{ type: "text", text: content }];
	return content;
}

/** pi-coding-agent's bashExecutionToText. */
export function bashExecutionText(m: any): string {
	let text = `Ran \`${m.command}\`\n`;
	text += m.output ? `\`\`\`\n${m.output}\n\`\`\`` : "(no output)";
	if (m.cancelled) text += "\n\n(command cancelled)";
	else if (m.exitCode !== undefined && m.exitCode !== null && m.exitCode !== 0) text += `\n\nCommand exited with code ${m.exitCode}`;
	if (m.truncated && m.fullOutputPath) text += `\n\n[Output truncated. Full output: ${m.fullOutputPath}]`;
	return text;
}

export const STOP_REASONS = new Set(["stop", "length", "toolUse", "error", "aborted", "pending", "deferred"]);

/** Event types that carry a message, which compactions and edits may name. */
export const MESSAGE_TYPES = new Set([
	"user/message",
	"assistant/message",
	"response/finish",
	"tool/result",
	"system/message",
	"context/message",
	"context/compaction",
]);

/** Entry types that put something into pi's context; other entries (settings, labels, custom data) alone are nothing to record. */
const CONTEXT_ENTRIES = new Set(["message", "custom_message", "compaction", "branch_summary", "context_edit"]);

/** holdsContext: the entry is part of what pi sends, so a Session is worth having for it. */
export function holdsContext(e: Entry): boolean {
	return CONTEXT_ENTRIES.has(e.type);
}
