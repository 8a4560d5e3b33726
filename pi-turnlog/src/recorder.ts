// Recorder turns what one pi session does into events of its turnlog
// Session's log. Entries pi persists are mapped as the importer maps them
// (mapping.ts); an assistant response is also streamed, as response/start
// and chunks while the provider delivers it, then pi's finished message
// (inline signatures and all, which replay prefers over its own assembly)
// and a response/finish.
import { type Location, type LogEvent, OwnedAppender, rootOf, SegmentLog } from "./log.ts";
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
	private app!: OwnedAppender;
	private types: string[] = []; // event type by seq
	private mapped = new Map<string, { seq: number; kind: Kind }>();
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
	}

	/**
	 * open reads the log and continues it at its head. A turn the previous
	 * process left open (it was killed, or lost the store) ends here: its
	 * cut response as aborted, then the turn.
	 */
	async open(adapter: Adapter, piSession: unknown, check?: (recordedFrom: string | undefined) => void): Promise<void> {
		const events = await this.log.readAll();
		this.app = new OwnedAppender(this.log, events.length, {
			onWritten: (next, endsTurn) => this.hooks.written?.(next, endsTurn),
			onError: (err) => this.hooks.failed?.(err),
		});
		let responseOpen: number | undefined;
		const start = events[0]?.type === "session/start" ? (events[0].piSession as { id?: string } | undefined) : undefined;
		this.piSessionId = start?.id;
		if (events.length > 0) check?.(this.piSessionId);
		for (const e of events) {
			this.types[e.seq] = e.type;
			const ref = e.piEntry as { id?: string } | undefined;
			if (ref?.id) this.mapped.set(ref.id, { seq: e.seq, kind: kindOf(e) });
			switch (e.type) {
				case "turn/start":
					this.turn = Number(e.turn);
					this.inTurn = true;
					this.reason = "aborted";
					this.responses = 0;
					break;
				case "turn/end":
					this.inTurn = false;
					break;
				case "response/start":
					responseOpen = Number(e.response);
					this.responses = Math.max(this.responses, responseOpen + 1);
					break;
				case "response/finish":
					responseOpen = undefined;
					break;
				case "assistant/message": {
					this.responses = Math.max(this.responses, Number(e.response) + 1);
					const r = (e.message as { stopReason?: string })?.stopReason;
					if (r) this.reason = r;
					break;
				}
			}
		}
		if (events.length === 0) {
			this.add({ type: "session/start", time: now(), adapter, piSession });
		}
		if (this.inTurn) {
			if (responseOpen !== undefined) this.streaming = { response: responseOpen, named: new Set() };
			this.reason = "aborted";
			this.endTurn();
		}
		// Written at once; a failure is reported and retried by the next flush.
		this.app.flush().catch(() => {});
	}

	/**
	 * adopt marks entries as the log's already: the binding entry, and the
	 * messages it brought in at their seqs (those the log holds: a branch's
	 * log may end before them).
	 */
	adopt(bindingId: string, seqs: Record<string, number>, kinds: Record<string, Kind>): void {
		this.mapped.set(bindingId, { seq: -1, kind: "" });
		for (const [id, seq] of Object.entries(seqs)) if (seq < this.types.length) this.mapped.set(id, { seq, kind: kinds[id] ?? "message" });
	}

	/** seqOf is the seq of the event a pi entry became, if it is in the log. */
	seqOf(entryId: string): number | undefined {
		const m = this.mapped.get(entryId);
		return m && m.seq >= 0 ? m.seq : undefined;
	}

	/**
	 * offPath is the seq of the first event that records an entry of pi's
	 * tree (inTree) not on path: from there on the log holds another branch.
	 * undefined when every entry of the tree the log records is on path.
	 * (A log /turnlog-open continues holds another pi session's entries:
	 * they are not in this tree.)
	 */
	offPath(path: Entry[], inTree: (id: string) => boolean): number | undefined {
		const on = new Set(path.map((e) => e.id));
		let first: number | undefined;
		for (const [id, m] of this.mapped) {
			if (m.seq >= 0 && !on.has(id) && inTree(id) && (first === undefined || m.seq < first)) first = m.seq;
		}
		return first;
	}

	/** lastTurnEndBefore is the seq of the last turn/end before seq, -1 if there is none. */
	lastTurnEndBefore(seq: number): number {
		for (let s = seq - 1; s >= 0; s--) if (this.types[s] === "turn/end") return s;
		return -1;
	}

	/** record maps the entries of pi's current path that are not in the log yet. */
	record(branch: Entry[]): void {
		for (const e of branch) {
			if (!this.mapped.has(e.id)) this.entry(e, branch);
		}
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
			this.types[seqs[i]] = String(e.type);
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

	private firstMessageFrom(seq: number, limit: number): number {
		for (; seq < limit; seq++) {
			const t = this.types[seq];
			if (MESSAGE_TYPES.has(t) && t !== "response/finish") return seq;
		}
		return limit;
	}

	private entry(e: Entry, branch: Entry[]): void {
		const ev: Ev = { time: e.timestamp, piEntry: { id: e.id, parentId: e.parentId } };
		let kind: Kind = "message";
		const m = e.type === "message" ? e.message : undefined;
		const keep = () => {
			ev.type = `pi/${e.type}`;
			ev.entry = e;
			kind = "";
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
			ev.message = m.content == null ? { ...m, content: [] } : m;
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
			kind = "fixed";
		} else if (m?.role === "custom") {
			contextMessage(`extension:${m.customType}`, textBlocks(m.content), messageTime(m, e.timestamp));
		} else if (m?.role === "bashExecution" && !m.excludeFromContext) {
			contextMessage("bash", [{ type: "text", text: bashExecutionText(m) }], messageTime(m, e.timestamp));
			kind = "fixed";
		} else if (e.type === "custom_message") {
			contextMessage(`extension:${e.customType}`, textBlocks(e.content), e.timestamp);
		} else if (e.type === "branch_summary" && e.summary) {
			contextMessage("branchSummary", [{ type: "text", text: BRANCH_SUMMARY_PREFIX + e.summary + BRANCH_SUMMARY_SUFFIX }], e.timestamp);
			kind = "fixed";
		} else if (e.type === "compaction") {
			const self = this.app.next;
			let firstKept = self; // an entry not on the path keeps nothing, as in pi
			const at = branch.indexOf(e);
			for (const kept of at >= 0 ? branch.slice(0, at) : []) {
				const k = this.mapped.get(kept.id);
				if (kept.id === e.firstKeptEntryId && k) firstKept = this.firstMessageFrom(k.seq, self);
			}
			Object.assign(ev, {
				type: "context/compaction",
				content: [{ type: "text", text: COMPACTION_PREFIX + e.summary + COMPACTION_SUFFIX }],
				firstKeptSeq: firstKept,
			});
			if (e.tokensBefore !== undefined && e.tokensBefore !== null) ev.tokensBefore = e.tokensBefore;
			if (e.systemMessage !== undefined && e.systemMessage !== null) ev.systemMessage = e.systemMessage;
			kind = "fixed";
		} else if (e.type === "context_edit") {
			const target = this.mapped.get(e.targetId);
			const none = e.replacement === undefined || e.replacement === null;
			if (!target || target.kind === "" || (target.kind === "fixed" && !none)) {
				keep(); // pi changes nothing for it either
			} else if (none) {
				Object.assign(ev, { type: "context/edit", targetSeq: target.seq, replacement: null });
			} else {
				let replacement = e.replacement;
				if (this.types[target.seq] === "context/message") replacement = { content: textBlocks(replacement?.content) };
				Object.assign(ev, { type: "context/edit", targetSeq: target.seq, replacement });
			}
			kind = "";
		} else {
			keep();
		}
		if (this.inTurn) ev.turn = this.turn;
		const ordered = order(ev);
		const seq = this.add(ordered);
		this.mapped.set(e.id, { seq, kind });
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

function kindOf(e: LogEvent): Kind {
	switch (e.type) {
		case "user/message":
		case "assistant/message":
		case "tool/result":
			return "message";
		case "context/message":
			return e.origin === "bash" || e.origin === "branchSummary" ? "fixed" : "message";
		case "system/message":
		case "context/compaction":
			return "fixed";
	}
	return "";
}

function now(): string {
	return new Date().toISOString();
}
