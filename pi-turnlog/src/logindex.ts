// What the recorder knows of a Session's log, read from the head backwards
// only as far as a question reaches. A start lists the segments (a fork's
// child's include those it refers to: SegmentLog.segments) and reads
// the last one (where the log and its turn stand) and the first (the
// session/start), not the whole log: the log records one path of pi's tree
// in order, so what a start needs (the turn to close, the entries of pi's
// path the log lacks) is near the head. Older segments are read, each
// once, when a question reaches back to them: a compaction or an edit that
// names an old entry, a /tree move back.
import type { LogEvent, SegmentLog } from "./log.ts";
import type { Kind } from "./mapping.ts";

/** What the recorder needs of one event. */
export interface Noted {
	type: string;
	turn?: number;
	response?: number;
	/** The id of the pi entry the event records. */
	entry?: string;
	kind: Kind;
}

/** Where an entry is in the log: its event's seq (-1 for a binding) and kind. */
export interface Mapped {
	seq: number;
	kind: Kind;
}

/** noted is what the recorder keeps of an event. */
export function noted(e: Record<string, unknown>): Noted {
	const n: Noted = { type: String(e.type), kind: kindOf(e) };
	if (typeof e.turn === "number") n.turn = e.turn;
	if (typeof e.response === "number") n.response = e.response;
	const id = (e.piEntry as { id?: unknown } | undefined)?.id;
	if (typeof id === "string" && id !== "") n.entry = id;
	return n;
}

/** kindOf is what an event is to compactions and edits (mapping.ts, Kind). */
function kindOf(e: Record<string, unknown>): Kind {
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

export class LogIndex {
	/** The segments as listed when the log was opened. */
	private segs: { key: string; first: number }[] = [];
	/** The segments read, by their index in segs. */
	private read = new Map<number, Noted[]>();
	/** segs[indexedFrom:] are read and their entries are in entries. */
	private indexedFrom = 0;
	/** The newest event of each pi entry in the indexed segments and those added since. */
	private entries = new Map<string, Mapped>();
	/** The seq the log had reached when it was opened: added events come from here on. */
	private opened = 0;
	private added: Noted[] = [];
	/** The log's session/start, if it has one. */
	start: LogEvent | undefined;

	constructor(private log: SegmentLog) {}

	/** open lists the log and reads its last segment and its first, and returns the seq the next event gets. */
	async open(): Promise<number> {
		this.segs = await this.log.segments();
		this.indexedFrom = this.segs.length;
		if (this.segs.length === 0) return 0;
		const first = this.segs[0];
		if (first.first !== 0) throw new Error(`bad log data: ${first.key}: starts at seq ${first.first}, the log has 0 events before it`);
		const last = this.segs.length - 1;
		this.opened = this.segs[last].first + (await this.load(last)).length;
		await this.load(0);
		return this.opened;
	}

	/** The seq after the last event, added ones included. */
	get end(): number {
		return this.opened + this.added.length;
	}

	/** note keeps what the recorder needs of an event it added at seq. */
	note(seq: number, e: Record<string, unknown>): void {
		const n = noted(e);
		this.added[seq - this.opened] = n;
		if (n.entry) this.entries.set(n.entry, { seq, kind: n.kind });
	}

	/**
	 * entry is the newest event of a pi entry among the segments read from
	 * the head on (and the events added): undefined when it is not there,
	 * which says nothing of older segments.
	 */
	entry(id: string): Mapped | undefined {
		return this.entries.get(id);
	}

	/** locate is the newest event of a pi entry, reading older segments until one records it. */
	async locate(id: string): Promise<Mapped | undefined> {
		for (;;) {
			const m = this.entries.get(id);
			if (m || !(await this.older())) return m;
		}
	}

	/**
	 * older reads the segment before those read from the head on; false when
	 * there is none, or when they reach back to floor already.
	 */
	async older(floor = 0): Promise<boolean> {
		const indexed = this.segs[this.indexedFrom];
		if (this.indexedFrom === 0 || (indexed && indexed.first <= floor)) return false;
		await this.load(this.indexedFrom - 1);
		return true;
	}

	/** typeAt is the type of the event at seq, undefined when the log has none there. */
	async typeAt(seq: number): Promise<string | undefined> {
		if (seq < 0 || seq >= this.end) return undefined;
		if (seq >= this.opened) return this.added[seq - this.opened].type;
		const i = this.segmentOf(seq);
		return (await this.load(i))[seq - this.segs[i].first]?.type;
	}

	/** before yields the events before seq, newest first, down to floor. */
	async *before(seq: number, floor = 0): AsyncGenerator<[number, Noted]> {
		for (let s = Math.min(seq, this.end) - 1; s >= Math.max(this.opened, floor); s--) yield [s, this.added[s - this.opened]];
		for (let i = this.segs.length - 1; i >= 0; i--) {
			const first = this.segs[i].first;
			if (first >= seq) continue;
			const events = await this.load(i);
			for (let s = Math.min(seq, first + events.length) - 1; s >= Math.max(first, floor); s--) yield [s, events[s - first]];
			if (first <= floor) return;
		}
	}

	/** segmentOf is the index of the segment that holds seq (< opened). */
	private segmentOf(seq: number): number {
		let lo = 0;
		let hi = this.segs.length - 1;
		while (lo < hi) {
			const mid = (lo + hi + 1) >> 1;
			if (this.segs[mid].first <= seq) lo = mid;
			else hi = mid - 1;
		}
		return lo;
	}

	/** load reads segment i once, checking that the next one starts where it ends. */
	private async load(i: number): Promise<Noted[]> {
		let events = this.read.get(i);
		if (events) return events;
		const { key, first } = this.segs[i];
		const got = await this.log.readSegment(key, first);
		const next = this.segs[i + 1];
		if (next && next.first !== first + got.length) {
			throw new Error(`bad log data: ${next.key}: starts at seq ${next.first}, the log has ${first + got.length} events before it`);
		}
		if (first === 0 && got[0]?.type === "session/start") this.start = got[0];
		events = got.map(noted);
		this.read.set(i, events);
		this.indexTail();
		return events;
	}

	/**
	 * indexTail adds the entries of the segments read right before the
	 * indexed ones, so that entries always covers the log from some seq to
	 * the head: an entry of pi's path found there is the newest the log has.
	 */
	private indexTail(): void {
		while (this.indexedFrom > 0 && this.read.has(this.indexedFrom - 1)) {
			this.indexedFrom--;
			const first = this.segs[this.indexedFrom].first;
			const events = this.read.get(this.indexedFrom) as Noted[];
			for (let k = events.length - 1; k >= 0; k--) {
				const id = events[k].entry;
				if (id && !this.entries.has(id)) this.entries.set(id, { seq: first + k, kind: events[k].kind });
			}
		}
	}
}
