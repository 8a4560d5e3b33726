// Recorder turns what one pi session does into events of its turnlog
// Session's log. Entries pi persists are mapped as the importer maps them
// (mapping.ts); an assistant response is also streamed, as response/start
// and chunks while the provider delivers it, then pi's finished message
// (inline signatures and all, which replay prefers over its own assembly)
// and a response/finish.
import { type Location, OwnedAppender, rootOf, SegmentLog } from "./log.ts";
import { LogIndex, type Mapped } from "./logindex.ts";
import {
	BRANCH_SUMMARY_PREFIX,
	BRANCH_SUMMARY_SUFFIX,
	bashExecutionText,
	COMPACTION_PREFIX,
	COMPACTION_SUFFIX,
	type Entry,
	type Ev,
	type Kind,
	MESSAGE_TYPES,
	messageTime,
	STOP_REASONS,
	textBlocks,
} from "./mapping.ts";
import type { Store } from "./store.ts";

export interface Adapter {
	kind: "pi-ai";
	api: string;
	provider: string;
	model: string;
	releaseLine?: string;
}

/** adapterOf is turnlog's adapter for a pi model: what replay targets. */
export function adapterOf(model: { api?: string; provider?: string; id?: string } | undefined): Required<Adapter> {
	return { kind: "pi-ai", api: model?.api ?? "", provider: model?.provider ?? "", model: model?.id ?? "", releaseLine: "1" };
}

interface Streaming {
	response: number;
	named: Set<number>; // tool-call blocks whose id and name went out
}

export interface RecorderHooks {
	/** Told after every write: the log's acknowledged head, and whether the write ended a turn. */
	written?: (next: number, endsTurn: boolean) => void;
	/** Told of a write that failed; it is retried by the next flush. */
	failed?: (err: Error) => void;
}

export class Recorder {
	readonly log: SegmentLog;
	private index: LogIndex;
	private app!: OwnedAppender;
	/** Entries that are the log's without an event there: bindings (seq -1) and the messages /turnlog-open brought in. */
	private adopted = new Map<string, Mapped>();
	/** Entries of this pi session come after this seq: the log before it is what /turnlog-open brought in. */
	private floor = 0;
	private turn = 0;
	private inTurn = false; // a turn is open
	private reason = "aborted";
	private responses = 0; // responses of the open turn
	private streaming: Streaming | undefined;
	private stopped = false;
	/** The pi session the log was recorded from, as its session/start says. */
	piSessionId: string | undefined;

	constructor(
		store: Store,
		readonly location: Location,
		private hooks: RecorderHooks = {},
	) {
		this.log = new SegmentLog(store, rootOf(location));
		this.index = new LogIndex(this.log);
	}

	/**
	 * open continues the log at its head, from its last segment and its
	 * first (logindex.ts). A turn the previous process left open (it was
	 * killed, or lost the store) ends here: its cut response as aborted,
	 * then the turn.
	 */
	async open(adapter: Adapter, piSession: unknown, check?: (recordedFrom: string | undefined) => void): Promise<void> {
		const head = await this.index.open();
		this.app = new OwnedAppender(this.log, head, {
			onWritten: (next, endsTurn) => this.hooks.written?.(next, endsTurn),
			onError: (err) => this.hooks.failed?.(err),
		});
		this.piSessionId = (this.index.start?.piSession as { id?: string } | undefined)?.id;
		if (head === 0) {
			this.add({ type: "session/start", time: now(), adapter, piSession });
		} else {
			check?.(this.piSessionId);
			const at = await this.headTurn();
			this.turn = at.turn;
			if (at.open) {
				this.inTurn = true;
				if (at.streaming !== undefined) this.streaming = { response: at.streaming, named: new Set() };
				this.endTurn();
			}
		}
		// Written at once; a failure is reported and retried by the next flush.
		this.app.flush().catch(() => {});
	}

	/**
	 * headTurn is the turn at the log's head: its number, whether it is
	 * open, and the response it was streaming (a response/start or chunk
	 * with no response/finish after it). Every event inside a turn carries
	 * its number, so the newest events say it: the log is read back to its
	 * last turn/end or, in a turn, to the newest event of a response.
	 */
	private async headTurn(): Promise<{ turn: number; open: boolean; streaming?: number }> {
		let turn: number | undefined;
		let open: boolean | undefined;
		let streaming: number | null | undefined; // null: none
		for await (const [, e] of this.index.before(this.index.end)) {
			turn ??= e.turn;
			if (open === undefined && (e.type === "turn/start" || e.type === "turn/end" || e.turn !== undefined)) open = e.type !== "turn/end";
			if (streaming === undefined && ["response/finish", "turn/start", "turn/end"].includes(e.type)) streaming = null;
			if (streaming === undefined && (e.type === "response/start" || e.type === "chunk")) streaming = e.response ?? null;
			if (turn !== undefined && open !== undefined && (!open || streaming !== undefined)) break;
		}
		return { turn: turn ?? 0, open: open ?? false, streaming: streaming ?? undefined };
	}

	/**
	 * adopt marks entries as the log's already: the binding entry, and the
	 * messages it brought in at their seqs (those the log holds: a branch's
	 * log may end before them).
	 */
	adopt(bindingId: string, seqs: Record<string, number>, kinds: Record<string, Kind>): void {
		this.adopted.set(bindingId, { seq: -1, kind: "" });
		for (const [id, seq] of Object.entries(seqs)) {
			if (seq >= this.app.next) continue;
			this.adopted.set(id, { seq, kind: kinds[id] ?? "message" });
			this.floor = Math.max(this.floor, seq + 1);
		}
	}

	/** seqOf is the seq of the event a pi entry became, if it is in the log. */
	async seqOf(entryId: string): Promise<number | undefined> {
		const m = this.adopted.get(entryId) ?? (await this.index.locate(entryId));
		return m && m.seq >= 0 ? m.seq : undefined;
	}

	/**
	 * offPath is the seq of the first event that records an entry of pi's
	 * tree (inTree) not on path: from there on the log holds another branch.
	 * undefined when every entry of the tree the log records is on path.
	 * (A log /turnlog-open continues holds another pi session's entries:
	 * they are not in this tree.) The entries of the tree the log records
	 * lie on one path, in order: read back from the head, the first one on
	 * path says that all before it are too.
	 */
	async offPath(path: Entry[], inTree: (id: string) => boolean): Promise<number | undefined> {
		const on = new Set(path.map((e) => e.id));
		let first: number | undefined;
		for await (const [seq, e] of this.index.before(this.index.end, this.floor)) {
			if (!e.entry || !inTree(e.entry)) continue;
			if (on.has(e.entry)) break;
			first = seq;
		}
		return first;
	}

	/** lastTurnEndBefore is the seq of the last turn/end before seq, -1 if there is none. */
	async lastTurnEndBefore(seq: number): Promise<number> {
		for await (const [s, e] of this.index.before(seq)) if (e.type === "turn/end") return s;
		return -1;
	}

	/** record maps the entries of pi's current path that are not in the log yet. */
	async record(branch: Entry[]): Promise<void> {
		if (this.stopped) return; // nothing more is written
		const from = (await this.lastInLog(branch)) + 1;
		for (const e of branch.slice(from)) {
			if (!this.adopted.has(e.id) && !this.index.entry(e.id)) await this.entry(e, branch);
		}
	}

	/**
	 * lastInLog is the index in branch of the deepest entry the log
	 * records, -1 for none. The log records one path in order, so the
	 * entries of branch before it are in the log too (or adopted); read back
	 * from the head, the first segment that records an entry of branch
	 * records the deepest.
	 */
	private async lastInLog(branch: Entry[]): Promise<number> {
		do {
			for (let i = branch.length - 1; i >= 0; i--) if (this.index.entry(branch[i].id)) return i;
		} while (await this.index.older(this.floor));
		return -1;
	}

	/**
	 * earlier is the event of entry id if it comes before e on branch, as
	 * the entry a compaction keeps from or an edit changes does; undefined
	 * otherwise, as pi then keeps or changes nothing.
	 */
	private async earlier(id: string, e: Entry, branch: Entry[]): Promise<Mapped | undefined> {
		const at = branch.indexOf(e);
		if (at < 0 || !branch.slice(0, at).some((x) => x.id === id)) return undefined;
		return this.adopted.get(id) ?? (await this.index.locate(id));
	}

	/** responseStart: pi started streaming an assistant message. */
	responseStart(message: any): void {
		if (!this.inTurn) this.startTurn();
		if (this.streaming) {
			// The previous response never became a message pi kept.
			this.add({ type: "response/finish", turn: this.turn, time: now(), response: this.streaming.response, stopReason: "aborted" });
		}
		const response = this.responses++;
		this.streaming = { response, named: new Set() };
		this.add({
			type: "response/start",
			turn: this.turn,
			time: now(),
			response,
			adapter: { kind: "pi-ai", api: message.api, provider: message.provider, model: message.model },
		});
	}

	/** delta: one stream event of the message pi is streaming. */
	delta(ev: any): void {
		const s = this.streaming;
		if (!s) return;
		const block = ev.contentIndex;
		let delta: Ev | undefined;
		switch (ev.type) {
			case "text_delta":
				delta = { type: "text", text: ev.delta };
				break;
			case "thinking_delta": {
				delta = { type: "thinking", thinking: ev.delta };
				if (ev.partial?.content?.[block]?.redacted) delta.redacted = true;
				break;
			}
			case "toolcall_delta":
			case "toolcall_end": {
				const call = ev.type === "toolcall_end" ? ev.toolCall : ev.partial?.content?.[block];
				if (ev.type === "toolcall_end" && s.named.has(block)) return;
				delta = { type: "toolCall", argumentsDelta: ev.type === "toolcall_delta" ? ev.delta : JSON.stringify(call?.arguments ?? {}) };
				if (!s.named.has(block)) {
					delta.id = call?.id ?? "";
					delta.name = call?.name ?? "";
					s.named.add(block);
				}
				break;
			}
			default:
				return;
		}
		this.add({ type: "chunk", turn: this.turn, time: now(), response: s.response, block, delta });
	}

	/** endTurnIfOpen closes the open turn with its last response's stop reason: pi is idle. */
	endTurnIfOpen(): void {
		if (this.inTurn) this.endTurn();
	}

	flush(): Promise<void> {
		return this.app.flush();
	}

	close(): Promise<void> {
		return this.app.close();
	}

	get next(): number {
		return this.app.next;
	}

	private add(...events: Ev[]): number {
		for (const e of events) if (e.time === undefined || e.time === "") delete e.time;
		if (this.stopped) return -1; // reported once, when it stopped
		let added: ReturnType<OwnedAppender["add"]>;
		try {
			added = this.app.add(...events);
		} catch (err) {
			this.stopped = true;
			throw err;
		}
		const { seqs, flushed } = added;
		flushed?.catch(() => {}); // kept and retried by the next flush
		events.forEach((e, i) => {
			this.index.note(seqs[i], e);
		});
		return seqs[0];
	}

	private startTurn(time?: string): void {
		this.turn++;
		this.inTurn = true;
		this.reason = "aborted";
		this.responses = 0;
		this.streaming = undefined;
		this.add({ type: "turn/start", turn: this.turn, time: time ?? now() });
	}

	private endTurn(): void {
		if (this.streaming) {
			// A response cut off (pi stopped, or was killed, mid-stream):
			// its partial text stays out of the transcript.
			this.add({ type: "response/finish", turn: this.turn, time: now(), response: this.streaming.response, stopReason: "aborted" });
			this.reason = "aborted";
		}
		this.add({ type: "turn/end", turn: this.turn, time: now(), reason: this.reason });
		this.inTurn = false;
		this.streaming = undefined;
	}

	private async firstMessageFrom(seq: number, limit: number): Promise<number> {
		for (; seq < limit; seq++) {
			const t = await this.index.typeAt(seq);
			if (t && MESSAGE_TYPES.has(t) && t !== "response/finish") return seq;
		}
		return limit;
	}

	/** firstKeptSeq is where a compaction keeps history from: its own seq when it keeps nothing, as in pi. */
	private async firstKeptSeq(e: Entry, branch: Entry[]): Promise<number> {
		const self = this.app.next;
		const kept = await this.earlier(e.firstKeptEntryId, e, branch);
		return kept ? this.firstMessageFrom(kept.seq, self) : self;
	}

	/** contextEdit is the context/edit a context_edit entry is; undefined when pi changes nothing for it either. */
	private async contextEdit(e: Entry, branch: Entry[]): Promise<Ev | undefined> {
		const target = await this.earlier(e.targetId, e, branch);
		const none = e.replacement === undefined || e.replacement === null;
		if (!target || target.kind === "" || (target.kind === "fixed" && !none)) return undefined;
		if (none) return { type: "context/edit", targetSeq: target.seq, replacement: null };
		let replacement = e.replacement;
		if ((await this.index.typeAt(target.seq)) === "context/message") replacement = { content: textBlocks(replacement?.content) };
		return { type: "context/edit", targetSeq: target.seq, replacement };
	}

	private async entry(e: Entry, branch: Entry[]): Promise<void> {
		const ev: Ev = { time: e.timestamp, piEntry: { id: e.id, parentId: e.parentId } };
		const m = e.type === "message" ? e.message : undefined;
		const keep = () => {
			ev.type = `pi/${e.type}`;
			ev.entry = e;
		};
		const contextMessage = (origin: string, content: unknown, at: string | undefined) => {
			ev.type = "context/message";
			ev.origin = origin;
			ev.content = content;
			ev.time = at;
		};
		let finish: Ev | undefined;
		if (m?.role === "user") {
			if (this.inTurn) this.endTurn();
			this.startTurn(e.timestamp);
			ev.type = "user/message";
			ev.content = m.content ?? null;
			ev.time = messageTime(m, e.timestamp);
		} else if (m?.role === "assistant") {
			if (!this.inTurn) this.startTurn(e.timestamp);
			let response: number;
			if (this.streaming) {
				response = this.streaming.response;
				this.streaming = undefined;
				finish = { type: "response/finish", turn: this.turn, time: now(), response, stopReason: m.stopReason };
				if (m.usage) finish.usage = m.usage;
			} else {
				response = this.responses++;
			}
			ev.type = "assistant/message";
			ev.response = response;
			ev.message = m.content === undefined ? { ...m, content: [] } : m; // a null content is kept: replay reads it by release line
			if (STOP_REASONS.has(m.stopReason)) this.reason = m.stopReason;
		} else if (m?.role === "toolResult") {
			if (!this.inTurn) this.startTurn(e.timestamp);
			Object.assign(ev, { type: "tool/result", toolCallId: m.toolCallId, toolName: m.toolName, content: m.content ?? null, isError: !!m.isError });
			ev.time = messageTime(m, e.timestamp);
			for (const k of ["details", "usage", "nestedCalls", "durationMs"]) if (m[k] !== undefined && m[k] !== null) ev[k] = m[k];
		} else if (m?.role === "system") {
			ev.type = "system/message";
			ev.content = m.content ?? "";
			ev.time = messageTime(m, e.timestamp);
			for (const k of ["sections", "toolsAdded", "toolsRemoved"]) if (m[k] !== undefined && m[k] !== null) ev[k] = m[k];
		} else if (m?.role === "custom") {
			contextMessage(`extension:${m.customType}`, textBlocks(m.content), messageTime(m, e.timestamp));
		} else if (m?.role === "bashExecution" && !m.excludeFromContext) {
			contextMessage("bash", [{ type: "text", text: bashExecutionText(m) }], messageTime(m, e.timestamp));
		} else if (e.type === "custom_message") {
			contextMessage(`extension:${e.customType}`, textBlocks(e.content), e.timestamp);
		} else if (e.type === "branch_summary" && e.summary) {
			contextMessage("branchSummary", [{ type: "text", text: BRANCH_SUMMARY_PREFIX + e.summary + BRANCH_SUMMARY_SUFFIX }], e.timestamp);
		} else if (e.type === "compaction") {
			Object.assign(ev, {
				type: "context/compaction",
				content: [{ type: "text", text: COMPACTION_PREFIX + e.summary + COMPACTION_SUFFIX }],
				firstKeptSeq: await this.firstKeptSeq(e, branch),
			});
			if (e.tokensBefore !== undefined && e.tokensBefore !== null) ev.tokensBefore = e.tokensBefore;
			if (e.systemMessage !== undefined && e.systemMessage !== null) ev.systemMessage = e.systemMessage;
		} else if (e.type === "context_edit") {
			const edit = await this.contextEdit(e, branch);
			if (edit) Object.assign(ev, edit);
			else keep(); // pi changes nothing for it either
		} else {
			keep();
		}
		if (this.inTurn) ev.turn = this.turn;
		this.add(order(ev));
		if (finish) this.add(finish);
	}
}

/** The members in the order the importer writes them, so both logs read alike. */
const ORDER = ["type", "turn", "time", "adapter", "response", "origin", "content", "sections", "toolsAdded", "toolsRemoved",
	"toolCallId", "toolName", "isError", "details", "usage", "nestedCalls", "durationMs", "message",
	"firstKeptSeq", "tokensBefore", "systemMessage", "targetSeq", "replacement", "reason", "entry", "piSession", "piEntry"];

function order(ev: Ev): Ev {
	const out: Ev = {};
	for (const k of ORDER) if (k in ev && ev[k] !== undefined) out[k] = ev[k];
	return out;
}

function now(): string {
	return new Date().toISOString();
}
