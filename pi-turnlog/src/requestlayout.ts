// Which blocks a provider refused, read as turnlog's replay reads them
// (internal/replay/refused.go, "one reader of pi-ai's recorded
// transformations"), so that what pi sends with refused blocks left out
// is the transcript a Session that drops them stores.
//
// Anthropic reports a dropped thinking block by its path in the request,
// messages.{i}.content.{j}: the request pi-ai's anthropic-messages provider
// built (buildParams, convertMessages, insertThinkingLevelMessages) from the
// messages before the response. anthropicLayout lays that request out as
// replay's BuildAnthropicLayout does, block for block; OpenAI's Responses
// API names a withheld reasoning item by its id, which the thinking block's
// signature holds. No pi import here: the module is pure, so that a test can
// run it under plain node against the Go reader.

/** A block the provider refused: its message (messageKey), its index in pi's message, its signature. */
export interface RefusedBlock {
	key: string;
	index: number;
	signature: string;
}

/** Where a request block comes from: the message of the list laid out, and the block's index in it. */
export interface BlockAt {
	message: number;
	block: number;
}

/** The request options that move messages and blocks (replay.AnthropicLayout). */
export interface LayoutOptions {
	midConvoSystem: boolean;
	toolChanges: boolean;
	/** The provider of a model with managed effort; "" for none. */
	effortProvider: string;
}

/** The request's messages: for each, the blocks it holds of the list's assistant messages (null: not an assistant's). */
export type RequestLayout = (BlockAt[] | null)[];

const DROPPED = "thinking_dropped";
const ANTHROPIC_REPORT = "anthropic_input_transformations";
const OPENAI_REPORT = "openai_input_transformations";
const OPENAI_RESPONSES = new Set(["openai-responses", "azure-openai-responses", "openai-codex-responses"]);
const EFFORTS = new Set(["low", "medium", "high", "xhigh", "max"]);

/** blank is Go replay's blank, which is JavaScript's trim. */
const blank = (s: unknown) => typeof s !== "string" || s.trim() === "";

/**
 * messageKey names an assistant message the same in pi's session entries
 * and in the copy pi hands a context handler.
 */
export function messageKey(m: any): string {
	return `${m?.timestamp ?? ""}\0${m?.responseId ?? ""}\0${m?.provider ?? ""}\0${m?.model ?? ""}`;
}

/** sameModel: the message is the model's (replay's Adapter.SameModel). */
export function sameModel(m: any, model: { api?: string; provider?: string; id?: string }): boolean {
	return m?.api === model.api && m?.provider === model.provider && m?.model === model.id;
}

function reported(m: any, type: string): any[] {
	if (!Array.isArray(m?.diagnostics)) return [];
	return m.diagnostics.flatMap((d: any) => (d?.type === type && Array.isArray(d.details?.transformations) ? d.details.transformations : []));
}

/** anthropicRefusals are the paths of the blocks a response's report says Anthropic dropped. */
export function anthropicRefusals(m: any): string[] {
	if (m?.api !== "anthropic-messages") return [];
	return reported(m, ANTHROPIC_REPORT)
		.filter((t) => t?.type === DROPPED && typeof t.path === "string")
		.map((t) => t.path as string);
}

/** openAIRemovals are the ids of the reasoning items a response's report says OpenAI withheld. */
export function openAIRemovals(m: any): string[] {
	if (!OPENAI_RESPONSES.has(m?.api)) return [];
	return reported(m, OPENAI_REPORT)
		.filter((t) => t?.type === "reasoning" && t.action === "removed" && typeof t.id === "string")
		.map((t) => t.id as string);
}

/** reportsRefusals: the assistant message carries a report of blocks refused. */
export function reportsRefusals(m: any): boolean {
	return m?.role === "assistant" && (anthropicRefusals(m).length > 0 || openAIRemovals(m).length > 0);
}

/**
 * layoutOptionsOf is the layout of the request that produced m, as far as
 * the message tells (replay.LayoutOf): pi-ai sets providerThinkingLevel
 * exactly when the request carried effort messages, and every such model
 * takes mid-conversation system messages and tool changes.
 */
export function layoutOptionsOf(m: any): LayoutOptions {
	if (typeof m?.providerThinkingLevel === "string" && m.providerThinkingLevel !== "") {
		return { midConvoSystem: true, toolChanges: true, effortProvider: m.provider ?? "" };
	}
	return { midConvoSystem: false, toolChanges: false, effortProvider: "" };
}

/** A message as request building reads it (replay's layoutEntry). */
interface Described {
	role: string;
	text: boolean;
	toolChanges: boolean;
	addsTools: boolean;
	sent: boolean;
	blocks: number[];
	api: string;
	provider: string;
	effort: boolean;
}

function contentText(content: unknown): string {
	if (typeof content === "string") return content;
	if (!Array.isArray(content)) return "";
	return content
		.filter((b: any) => b?.type === "text")
		.map((b: any) => (typeof b.text === "string" ? b.text : ""))
		.join("\n");
}

function userSent(content: unknown): boolean {
	if (typeof content === "string") return !blank(content);
	if (!Array.isArray(content)) return false;
	return content.some((b: any) => b?.type !== "text" || !blank(b.text));
}

function describe(m: any): Described {
	const d: Described = { role: m?.role ?? "", text: false, toolChanges: false, addsTools: false, sent: false, blocks: [], api: "", provider: "", effort: false };
	switch (d.role) {
		case "system": {
			const added = Array.isArray(m.toolsAdded) ? m.toolsAdded.length : 0;
			const removed = Array.isArray(m.toolsRemoved) ? m.toolsRemoved.length : 0;
			d.text = (m.sections && typeof m.sections === "object" && Object.keys(m.sections).length > 0) || contentText(m.content) !== "";
			d.toolChanges = added > 0 || removed > 0;
			d.addsTools = added > 0;
			break;
		}
		case "user":
			d.sent = userSent(m.content);
			break;
		case "assistant": {
			const content: any[] = Array.isArray(m.content) ? m.content : [];
			content.forEach((b, j) => {
				switch (b?.type) {
					case "text":
						if (!blank(b.text)) d.blocks.push(j);
						break;
					case "thinking":
						if (b.redacted || !blank(b.thinking) || !blank(b.thinkingSignature)) d.blocks.push(j);
						break;
					case "toolCall":
						d.blocks.push(j);
						break;
				}
			});
			d.api = m.api ?? "";
			d.provider = m.provider ?? "";
			d.effort = EFFORTS.has(m.providerThinkingLevel);
			break;
		}
	}
	return d;
}

/**
 * anthropicLayout lays out the request pi-ai 1.x's anthropic-messages
 * provider builds from msgs (pi-ai messages as it sends them: after
 * transformMessages), as replay's layoutOf does: the leading system message
 * goes to the request's system prompt; without mid-conversation system
 * messages every system message is folded into it, with them later ones
 * that render to text (or change tools when the leading one adds tools)
 * wait for the next assistant message that converts to blocks; user
 * messages with only blank text are left out; consecutive tool results are
 * one user message; an assistant message keeps its blocks but blank text and
 * blank unsigned thinking, and is left out without any; with managed effort
 * an effort message goes before each assistant message of the provider with
 * a known providerThinkingLevel, and one at the end.
 */
export function anthropicLayout(msgs: any[], opts: LayoutOptions): RequestLayout {
	const entries = msgs.map(describe);
	const nativeTools = entries.length > 0 && entries[0].role === "system" && opts.midConvoSystem && opts.toolChanges && entries[0].addsTools;
	const out: RequestLayout = [];
	const levels: boolean[] = [];
	let pending = 0;
	const push = (refs: BlockAt[] | null, level: boolean) => {
		out.push(refs);
		levels.push(level);
	};
	const flush = () => {
		for (; pending > 0; pending--) push(null, false);
	};
	for (let i = 0; i < entries.length; i++) {
		const e = entries[i];
		switch (e.role) {
			case "system":
				if (i > 0 && opts.midConvoSystem && (e.text || (nativeTools && e.toolChanges))) pending++;
				break;
			case "user":
				if (e.sent) push(null, false);
				break;
			case "assistant": {
				if (e.blocks.length === 0) break;
				flush();
				const level = opts.effortProvider !== "" && e.api === "anthropic-messages" && e.provider === opts.effortProvider && e.effort;
				push(
					e.blocks.map((block) => ({ message: i, block })),
					level,
				);
				break;
			}
			case "toolResult":
				while (i + 1 < entries.length && entries[i + 1].role === "toolResult") i++;
				push(null, false);
				break;
		}
	}
	flush();
	if (opts.effortProvider === "") return out;
	const withEffort: RequestLayout = [];
	out.forEach((refs, i) => {
		if (levels[i]) withEffort.push(null);
		withEffort.push(refs);
	});
	withEffort.push(null);
	return withEffort;
}

/** locate maps a path of the request (messages.{i}.content.{j}) to the block it names; undefined if it names none. */
export function locate(layout: RequestLayout, path: string): BlockAt | undefined {
	const m = /^messages\.(\d+)\.content\.(\d+)$/.exec(path);
	if (!m) return undefined;
	const refs = layout[Number(m[1])];
	return refs?.[Number(m[2])];
}

/**
 * A message as pi-ai sends it to the model that wrote a response, with each
 * assistant block's index in pi's own message (transformMessages: thinking
 * of another model and blank unsigned thinking go, errored and aborted
 * responses are skipped, tool calls left without a result get one before
 * the next user or assistant message, and system messages that came
 * between a call and its results wait for them).
 */
interface Sent {
	message: any;
	/** For an assistant message: pi's message, and the index there of each block of message.content. */
	source?: any;
	index?: number[];
}

function sentTo(msgs: any[], model: { api?: string; provider?: string; id?: string }): Sent[] {
	const out: Sent[] = [];
	let pending: any[] = [];
	let answered = new Set<string>();
	const held: Sent[] = [];
	const close = () => {
		for (const c of pending) {
			if (!answered.has(c.id)) out.push({ message: { role: "toolResult", toolCallId: c.id, toolName: c.name, content: [] } });
		}
		pending = [];
		answered = new Set();
		out.push(...held.splice(0));
	};
	for (const m of msgs) {
		switch (m?.role) {
			case "assistant": {
				close();
				if (m.stopReason === "error" || m.stopReason === "aborted") break;
				const same = sameModel(m, model);
				const content: any[] = [];
				const index: number[] = [];
				(Array.isArray(m.content) ? m.content : []).forEach((b: any, j: number) => {
					if (b?.type === "thinking" && (!same || (!b.redacted && !b.thinkingSignature && blank(b.thinking)))) return;
					content.push(b);
					index.push(j);
				});
				const calls = content.filter((b) => b?.type === "toolCall");
				if (calls.length > 0) {
					pending = calls;
					answered = new Set();
				}
				out.push({ message: { ...m, content }, source: m, index });
				break;
			}
			case "toolResult":
				answered.add(m.toolCallId);
				out.push({ message: m });
				break;
			case "system":
				if (pending.length > 0) held.push({ message: m });
				else out.push({ message: m });
				break;
			case "user":
				close();
				out.push({ message: m });
				break;
			default:
				out.push({ message: m });
		}
	}
	close();
	return out;
}

/** isDropped: the block at index of pi's message m is one of refused. */
function isDropped(refused: RefusedBlock[], key: string, index: number, b: any): boolean {
	return b?.type === "thinking" && refused.some((r) => r.key === key && r.index === index && r.signature === (b.thinkingSignature ?? ""));
}

/**
 * refusedBy maps the refusals reported on the response m to the blocks
 * they name. before is the context its request was built from (pi-ai
 * messages: convertToLlm of pi's context), which went out without the
 * blocks of refused: replay lays a dropping Session's requests out from its
 * transcript, which leaves those out. A path that names no thinking block
 * is left alone, as replay counts it unmapped and drops nothing.
 */
export function refusedBy(m: any, before: any[], refused: RefusedBlock[]): RefusedBlock[] {
	const model = { api: m.api, provider: m.provider, id: m.model };
	const sent = sentTo(before, model).map((s) => {
		if (!s.source) return s;
		const key = messageKey(s.source);
		const keep = s.message.content.map((b: any, k: number) => !isDropped(refused, key, s.index![k], b));
		return { ...s, message: { ...s.message, content: s.message.content.filter((_: any, k: number) => keep[k]) }, index: s.index!.filter((_, k) => keep[k]) };
	});
	const found: RefusedBlock[] = [];
	const add = (s: Sent, k: number) => {
		const b = s.message.content[k];
		const r = { key: messageKey(s.source), index: s.index![k], signature: b.thinkingSignature ?? "" };
		if (!found.some((f) => f.key === r.key && f.index === r.index)) found.push(r);
	};
	const paths = anthropicRefusals(m);
	if (paths.length > 0) {
		const layout = anthropicLayout(
			sent.map((s) => s.message),
			layoutOptionsOf(m),
		);
		for (const path of paths) {
			const at = locate(layout, path);
			const s = at ? sent[at.message] : undefined;
			if (at && s?.source && s.message.content[at.block]?.type === "thinking") add(s, at.block);
		}
	}
	// A reasoning item's id is in the signature pi-ai sends it from: the
	// last block that holds it, as replay finds it.
	for (const id of openAIRemovals(m)) {
		search: for (let i = sent.length - 1; i >= 0; i--) {
			const s = sent[i];
			if (!s.source) continue;
			for (let k = 0; k < s.message.content.length; k++) {
				const b = s.message.content[k];
				if (b?.type !== "thinking" || !b.thinkingSignature) continue;
				let item: any;
				try {
					item = JSON.parse(b.thinkingSignature);
				} catch {
					continue;
				}
				if (item?.id === id) {
					add(s, k);
					break search;
				}
			}
		}
	}
	return found;
}

/**
 * dropRefused leaves the refused blocks out of the assistant messages of
 * msgs, editing each such message's content in place; it returns how many
 * blocks it left out. A block is left out only if it is still the thinking
 * block that was refused (an edit of the message since sends its new
 * content, as replay does).
 */
export function dropRefused(msgs: any[], refused: RefusedBlock[]): number {
	let n = 0;
	for (const m of msgs) {
		if (m?.role !== "assistant" || !Array.isArray(m.content)) continue;
		const key = messageKey(m);
		if (!refused.some((r) => r.key === key)) continue;
		const kept = m.content.filter((b: any, j: number) => !isDropped(refused, key, j, b));
		n += m.content.length - kept.length;
		if (kept.length !== m.content.length) m.content = kept;
	}
	return n;
}
