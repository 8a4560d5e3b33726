// A Session's log as segments under <root>log/, written with the protocol of
// docs/log-format.md ("Storage layout", "Appending safely"), the same as
// turnlog's Go appender (internal/sessionlog, agenthost.Appender). A fork's
// child refers to its sources' segments (log/references.json, "Forks by
// reference"): the log is those and its own, and every reader here goes
// through segments(), which lists both.
import { randomBytes } from "node:crypto";
import { type Store, StoreError, TooLargeError } from "./store.ts";

/** Writers split a batch into segments of at most this many bytes. */
export const SPLIT_BYTES = 4 << 20;
/** Readers refuse a longer line. */
export const MAX_LINE_BYTES = 16 << 20;
const ATTEMPTS = 20;
/** A references.json larger than this is refused unread. */
export const MAX_REFERENCES_BYTES = 1 << 20;
/** A log refers to at most this many ranges. */
export const MAX_REFERENCES = 1024;
/** How many referenced roots are listed at once. */
const LIST_CONCURRENCY = 8;

export interface Location {
	prefix?: string;
	namespace: string;
	session: string;
	uid: string;
}

/** sameLocation reports whether a and b are the same Session's log. */
export function sameLocation(a: Location, b: Location): boolean {
	return (a.prefix ?? "") === (b.prefix ?? "") && a.namespace === b.namespace && a.session === b.session && a.uid === b.uid;
}

export function rootOf(loc: Location): string {
	for (const [name, v] of [
		["namespace", loc.namespace],
		["session", loc.session],
		["uid", loc.uid],
	] as const) {
		if (!v || v.includes("/")) throw new Error(`turnlog location ${name} ${JSON.stringify(v)}: must be a non-empty name without '/'`);
	}
	const root = `${loc.namespace}/${loc.session}/${loc.uid}/`;
	return loc.prefix ? `${loc.prefix.replace(/\/+$/, "")}/${root}` : root;
}

export function segmentKey(root: string, first: number): string {
	return `${root}log/${String(first).padStart(20, "0")}.jsonl`;
}

/** The name, under log/, of a fork's manifest of references: not a segment. */
const REFERENCES = "references.json";

/** One range of a log's references.json: seqs after the previous one's through, through this one's. */
export interface Reference {
	session: string;
	uid: string;
	through: number;
}

/**
 * parseReferences checks a references.json (the object key, its text) and
 * returns its references. self is the log's own Session and uid, which no
 * reference may name. Anything but the documented shape is refused as bad
 * data naming key and the member at fault, on one line: a manifest is
 * written once by the manager, so a wrong one is damage or forgery, and
 * reading a log through it would read the wrong events.
 */
export function parseReferences(key: string, text: string, self: { session: string; uid: string }): Reference[] {
	const bad = (why: string) => new Error(`bad log data: ${key}: ${why}`);
	let m: any;
	try {
		m = JSON.parse(text);
	} catch (err) {
		// JSON.parse quotes the text it stopped at, which may hold newlines.
		throw bad(`invalid JSON: ${(err as Error).message.replace(/[\r\n]+/g, " ")}`);
	}
	if (typeof m !== "object" || m === null || Array.isArray(m)) throw bad("not a JSON object");
	// Members this reader does not know may change what the log is: a
	// newer shape has a newer version, and any other is not the manager's.
	const unknown = (o: object, at: string, known: string[]) => {
		const extra = Object.keys(o).find((k) => !known.includes(k));
		if (extra !== undefined) throw bad(`${at}unknown member ${JSON.stringify(extra)}`);
	};
	unknown(m, "", ["version", "refs"]);
	if (m.version !== 1) throw bad(`version ${JSON.stringify(m.version) ?? "missing"}: this reader knows version 1`);
	if (!Array.isArray(m.refs)) throw bad(`refs: ${m.refs === undefined ? "missing" : "not an array"}`);
	// A manifest is written only for a fork that refers to something.
	if (m.refs.length === 0) throw bad("refs: no references");
	if (m.refs.length > MAX_REFERENCES) throw bad(`refs: ${m.refs.length} references, more than ${MAX_REFERENCES}`);
	const out: Reference[] = [];
	let start = 0;
	m.refs.forEach((r: any, i: number) => {
		if (typeof r !== "object" || r === null || Array.isArray(r)) throw bad(`refs[${i}]: not a JSON object`);
		unknown(r, `refs[${i}]: `, ["session", "uid", "through"]);
		// A name, never a path: the root is built from the log's own
		// prefix and namespace, and no reference may leave them.
		for (const name of ["session", "uid"] as const) {
			const v = r[name];
			if (typeof v !== "string" || v === "" || v === "." || v === ".." || v.includes("/")) {
				throw bad(`refs[${i}].${name}: ${JSON.stringify(v) ?? "missing"}: want a non-empty name without '/'`);
			}
		}
		if (r.session === self.session && r.uid === self.uid) throw bad(`refs[${i}]: names the log's own Session ${r.session}/${r.uid}`);
		if (!Number.isSafeInteger(r.through)) throw bad(`refs[${i}].through: ${JSON.stringify(r.through) ?? "missing"}: want an integer seq`);
		if (r.through < start) {
			throw bad(`refs[${i}].through: ${r.through}: the range starts at seq ${start}${i > 0 ? ", after the previous one's through" : ""}, and ends before it`);
		}
		out.push({ session: r.session, uid: r.uid, through: r.through });
		start = r.through + 1;
	});
	return out;
}

/** One event as read back: its seq, type and the rest of its members. */
export type LogEvent = { seq: number; type: string; [k: string]: unknown };

export class SegmentLog {
	/**
	 * The last seq each referenced segment listed so far may hold: the end
	 * of the range the log takes it for. A segment past it would put
	 * events the manifest does not refer to into the log.
	 */
	private limits = new Map<string, { through: number; manifest: string }>();

	constructor(
		readonly store: Store,
		readonly root: string,
	) {}

	/**
	 * The log's segments in seq order: their keys and first seqs. For a
	 * fork's child, they are the segments its log/references.json refers
	 * to and its own, merged; the callers check that seqs are dense across
	 * them, as for any log.
	 */
	async segments(): Promise<{ key: string; first: number }[]> {
		const own = await this.listLog(this.root);
		const out = own.segments;
		if (!own.references) return out;
		out.push(...(await this.referenced(own.references)));
		out.sort((a, b) => a.first - b.first);
		// The callers' density checks see only the segments they read; two
		// that start at the same seq (one referenced, one the log's own)
		// would have one of them skipped unseen.
		for (let i = 1; i < out.length; i++) {
			if (out[i].first === out[i - 1].first) throw new Error(`bad log data: ${out[i].key}: starts at seq ${out[i].first}, as ${out[i - 1].key} does`);
		}
		return out;
	}

	/**
	 * listLog lists <root>log/: its segments, and the key of its
	 * references.json if it has one. Anything else there is a stray object.
	 */
	private async listLog(root: string): Promise<{ segments: { key: string; first: number }[]; references?: string }> {
		const prefix = `${root}log/`;
		const segments: { key: string; first: number }[] = [];
		let references: string | undefined;
		for (const key of await retry(() => this.store.list(prefix))) {
			const name = key.slice(prefix.length);
			if (name === REFERENCES) {
				references = key;
				continue;
			}
			const m = /^(\d{20})\.jsonl$/.exec(name);
			if (!m) throw new Error(`bad log data: ${key}: not a segment`);
			segments.push({ key, first: Number(m[1]) });
		}
		return { segments, references };
	}

	/**
	 * referenced reads the manifest key and lists the segments it refers
	 * to: for each range, those of the named root whose first seq lies in
	 * it. References are flattened by the manager, so a referenced root's
	 * own references.json is never followed (listLog's answer for it is
	 * dropped), and each root is listed once however many ranges name it.
	 */
	private async referenced(key: string): Promise<{ key: string; first: number }[]> {
		const parts = this.root.replace(/\/+$/, "").split("/");
		const [session, uid] = parts.slice(-2);
		// The root is [prefix/]namespace/session/uid/: a reference replaces
		// the last two, and stays in the log's prefix and namespace.
		const base = parts.slice(0, -2).join("/");
		let text: string;
		try {
			text = (await retry(() => this.store.getBytes(key, MAX_REFERENCES_BYTES))).toString("utf8");
		} catch (err) {
			if (err instanceof TooLargeError) throw new Error(`bad log data: ${key}: ${err.size} bytes, over the ${MAX_REFERENCES_BYTES} a references.json may have`);
			throw err;
		}
		const refs = parseReferences(key, text, { session, uid });
		const ranges = new Map<string, { from: number; through: number }[]>();
		const starts: { root: string; from: number }[] = [];
		let from = 0;
		for (const r of refs) {
			const root = `${base}/${r.session}/${r.uid}/`;
			ranges.set(root, [...(ranges.get(root) ?? []), { from, through: r.through }]);
			starts.push({ root, from });
			from = r.through + 1;
		}
		const roots = [...ranges.keys()];
		const listed = new Map((await mapLimit(roots, LIST_CONCURRENCY, (root) => this.listLog(root))).map((l, i) => [roots[i], l.segments]));
		// A range starts with a segment of its root, as a fork refers only
		// to whole segments: a root without one there is gone or is not
		// the one the fork referred to, which the manifest is to blame for.
		starts.forEach(({ root, from }, i) => {
			if (!listed.get(root)?.some((s) => s.first === from)) {
				throw new Error(`bad log data: ${key}: refs[${i}]: ${root}log/ has no segment starting at seq ${from}`);
			}
		});
		const out: { key: string; first: number }[] = [];
		for (const [root, segs] of listed) {
			for (const s of segs) {
				const range = ranges.get(root)?.find((r) => r.from <= s.first && s.first <= r.through);
				if (!range) continue;
				this.limits.set(s.key, { through: range.through, manifest: key });
				out.push(s);
			}
		}
		return out;
	}

	/** The events of the segment key, whose first seq is first. */
	async readSegment(key: string, first: number): Promise<LogEvent[]> {
		return (await this.readLines(key, first)).events;
	}

	private async readLines(key: string, first: number): Promise<{ events: LogEvent[]; lines: string[] }> {
		const text = await retry(() => this.store.get(key));
		if (text.length > 0 && !text.endsWith("\n")) throw new Error(`bad log data: ${key}: last line has no newline`);
		const events: LogEvent[] = [];
		const lines = text.split("\n").slice(0, -1);
		for (let i = 0; i < lines.length; i++) {
			let e: LogEvent;
			try {
				e = JSON.parse(lines[i]);
			} catch (err) {
				throw new Error(`bad log data: ${key} line ${i + 1} (seq ${first + i}): invalid JSON: ${(err as Error).message}`);
			}
			if (e?.seq !== first + i) throw new Error(`bad log data: ${key} line ${i + 1} (seq ${first + i}): seq ${JSON.stringify(e?.seq)}`);
			events.push(e);
		}
		const limit = this.limits.get(key);
		if (limit && first + lines.length - 1 > limit.through) {
			throw new Error(
				`bad log data: ${key} line ${limit.through - first + 2} (seq ${limit.through + 1}): past seq ${limit.through}, the end of the range ${limit.manifest} refers to this segment for`,
			);
		}
		return { events, lines };
	}

	/**
	 * forkTo writes the log's events 0..cut, byte for byte, as the log of
	 * child, which must be empty: the offline form of a SessionFork
	 * (docs/log-format.md, "Forks"). Segments are created if absent, so a
	 * child that already has a log is refused, not overwritten. The source
	 * is read through its references like any log; the child gets a full
	 * copy, not references: only the manager writes the pins that keep
	 * referenced segments alive.
	 */
	async forkTo(child: SegmentLog, cut: number): Promise<void> {
		if ((await child.segments()).length > 0) throw new Error(`the fork's child ${child.root} already has a log`);
		const lines: string[] = [];
		for (const s of await this.segments()) {
			if (s.first > cut) break;
			// The lines are copied as they are: a gap or an overlap between
			// segments (from different roots, for a child) would renumber them.
			if (s.first !== lines.length) throw new Error(`bad log data: ${s.key}: starts at seq ${s.first}, the log has ${lines.length} events before it`);
			lines.push(...(await this.readLines(s.key, s.first)).lines);
		}
		if (lines.length <= cut) throw new Error(`the log ends at seq ${lines.length - 1}, before the cut at seq ${cut}`);
		const app = new OwnedAppender(child, 0, { flushIntervalMs: -1 });
		app.addLines(lines.slice(0, cut + 1));
		await app.close();
	}

	/** Every event of the log, checking that seqs are dense across segments. */
	async readAll(): Promise<LogEvent[]> {
		const segs = await this.segments();
		const out: LogEvent[] = [];
		for (const s of segs) {
			if (s.first !== out.length) throw new Error(`bad log data: ${s.key}: starts at seq ${s.first}, the log has ${out.length} events before it`);
			out.push(...(await this.readSegment(s.key, s.first)));
		}
		return out;
	}
}

/**
 * recordedFrom is the id of the pi session the log at loc was recorded
 * from, as its session/start says; undefined for a log that does not
 * exist or was not recorded from pi.
 */
export async function recordedFrom(store: Store, loc: Location): Promise<string | undefined> {
	const log = new SegmentLog(store, rootOf(loc));
	const [first] = await log.segments();
	if (first?.first !== 0) return undefined;
	const [start] = await log.readSegment(first.key, 0);
	const id = start?.type === "session/start" ? (start.piSession as { id?: unknown } | undefined)?.id : undefined;
	return typeof id === "string" ? id : undefined;
}

/** StaleWriterError: another writer appended where this one owns the log. */
export class StaleWriterError extends Error {
	constructor(
		readonly expected: number,
		readonly key: string,
	) {
		super(`another writer appended at seq ${expected} (${key}): the log moved on; re-read it before writing again`);
	}
}

interface Piece {
	first: number;
	lines: string[];
	token: string;
	// An earlier attempt may have stored this piece: a precondition failure
	// then needs the token compared before anything else.
	uncertain: boolean;
}

export interface AppenderOptions {
	/** Longest an added event waits before it is written; 100 ms. Negative: no timer. */
	flushIntervalMs?: number;
	/** Told the next seq after each write that stored events. */
	onWritten?: (next: number, endsTurn: boolean) => void;
	/** Told of a write that failed (it is retried by the next flush). */
	onError?: (err: Error) => void;
}

/**
 * OwnedAppender appends to a log this host owns, as agenthost's AppenderAt:
 * events get their seqs when they are added, from next on, and each segment
 * must land right after the previous one. Events are written as one segment
 * per flush: every flushIntervalMs after the first event of a batch, and at
 * once when a response/finish or a turn/end is added. A failed write keeps
 * its events, and the next flush retries them first, at the same key with
 * the same writer token, so the store never holds them twice.
 */
export class OwnedAppender {
	private pending: string[] = [];
	private pendingFirst: number;
	private inflight: Piece[] = [];
	private writerName = randomBytes(12).toString("base64url");
	private batches = 0;
	private timer: NodeJS.Timeout | undefined;
	private chain: Promise<void> = Promise.resolve();
	private fatal: Error | undefined;
	private closed = false;
	/** The seq the next added event gets. */
	next: number;
	/** Everything before this seq is acknowledged: in the log, once. */
	acked: number;

	constructor(
		private log: SegmentLog,
		next: number,
		private opts: AppenderOptions = {},
	) {
		this.next = next;
		this.pendingFirst = next;
		this.acked = next;
	}

	/** add numbers events from next on and returns their seqs. A response/finish or turn/end flushes. */
	add(...events: Record<string, unknown>[]): { seqs: number[]; flushed?: Promise<void> } {
		if (this.fatal) throw this.fatal;
		if (this.closed) throw new Error("turnlog appender closed");
		const seqs: number[] = [];
		let ends = false;
		for (const e of events) {
			const seq = this.next++;
			seqs.push(seq);
			const line = JSON.stringify({ seq, ...e });
			if (Buffer.byteLength(line) > MAX_LINE_BYTES) {
				throw new Error(`turnlog: event ${String(e.type)} at seq ${seq} is ${Buffer.byteLength(line)} bytes, over the 16 MiB line limit`);
			}
			this.pending.push(line);
			ends ||= e.type === "response/finish" || e.type === "turn/end";
		}
		if (ends) return { seqs, flushed: this.flush() };
		const interval = this.opts.flushIntervalMs ?? 100;
		if (!this.timer && interval >= 0 && this.pending.length > 0) {
			this.timer = setTimeout(() => {
				this.timer = undefined;
				this.flush().catch(() => {}); // kept and retried by the next flush
			}, interval);
		}
		return { seqs };
	}

	/** addLines adds events already numbered from next on, as the lines to store. */
	addLines(lines: string[]): void {
		if (this.fatal) throw this.fatal;
		this.pending.push(...lines);
		this.next += lines.length;
	}

	/** flush writes everything added so far; it resolves when all of it is acknowledged. */
	flush(): Promise<void> {
		if (this.timer) {
			clearTimeout(this.timer);
			this.timer = undefined;
		}
		const run = this.chain.then(() => this.flushNow());
		this.chain = run.catch(() => {});
		return run;
	}

	private async flushNow(): Promise<void> {
		if (this.fatal) throw this.fatal;
		if (this.pending.length > 0) {
			this.inflight.push(...this.split(this.pendingFirst, this.pending));
			this.pendingFirst += this.pending.length;
			this.pending = [];
		}
		while (this.inflight.length > 0) {
			const p = this.inflight[0];
			try {
				await this.write(p);
			} catch (err) {
				if (err instanceof StaleWriterError) this.fatal = err;
				this.opts.onError?.(err as Error);
				throw err;
			}
			this.inflight.shift();
			this.acked = p.first + p.lines.length;
			const endsTurn = p.lines.some((l) => l.includes('"type":"turn/end"'));
			this.opts.onWritten?.(this.acked, endsTurn);
		}
	}

	/** split cuts a batch into segments of at most SPLIT_BYTES (a bigger line gets one of its own). */
	private split(first: number, lines: string[]): Piece[] {
		const out: Piece[] = [];
		let cur: string[] = [];
		let size = 0;
		let start = first;
		for (const l of lines) {
			const n = Buffer.byteLength(l) + 1;
			if (cur.length > 0 && size + n > SPLIT_BYTES) {
				out.push(this.piece(start, cur));
				start += cur.length;
				cur = [];
				size = 0;
			}
			cur.push(l);
			size += n;
		}
		if (cur.length > 0) out.push(this.piece(start, cur));
		return out;
	}

	private piece(first: number, lines: string[]): Piece {
		return { first, lines, token: `${this.writerName}.${++this.batches}`, uncertain: false };
	}

	private async write(p: Piece): Promise<void> {
		const key = segmentKey(this.log.root, p.first);
		const body = p.lines.map((l) => `${l}\n`).join("");
		let last: Error | undefined;
		for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
			try {
				await this.log.store.putIfAbsent(key, body, { "turnlog-writer": p.token });
				return;
			} catch (err) {
				if (!(err instanceof StoreError)) throw err;
				last = err;
				if (err.kind === "exists") {
					// Ours, from an attempt whose answer was lost, or
					// another writer's. A service hiccup can also report a
					// free key as taken: then the key is not there.
					let token: string | undefined;
					try {
						token = await this.log.store.writer(key);
					} catch (herr) {
						if (!(herr instanceof StoreError) || herr.kind === "permanent") throw herr;
						last = herr;
						await backoff(attempt);
						continue;
					}
					if (token === p.token) return;
					throw new StaleWriterError(p.first, key);
				}
				if (err.kind !== "transient") throw err;
				p.uncertain = true;
			}
			await backoff(attempt);
		}
		throw new Error(`turnlog: append at seq ${p.first}: giving up after ${ATTEMPTS} attempts${p.uncertain ? " (the events may be in the log; the next flush retries them with the same token)" : ""}: ${last?.message}`);
	}

	/** close flushes what was added and stops the appender. */
	async close(): Promise<void> {
		if (this.closed) return;
		const done = this.flush();
		this.closed = true;
		await done;
	}
}

/** mapLimit is fn of each item, in order, at most limit at once. */
async function mapLimit<T, R>(items: T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
	const out: R[] = new Array(items.length);
	let next = 0;
	const worker = async () => {
		while (next < items.length) {
			const i = next++;
			out[i] = await fn(items[i]);
		}
	};
	await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
	return out;
}

function backoff(attempt: number): Promise<void> {
	const d = Math.min(2 << Math.min(attempt - 1, 10), 250);
	return new Promise((r) => setTimeout(r, Math.random() * d + 1));
}

async function retry<T>(op: () => Promise<T>): Promise<T> {
	for (let attempt = 1; ; attempt++) {
		try {
			return await op();
		} catch (err) {
			if (!(err instanceof StoreError) || err.kind !== "transient" || attempt >= ATTEMPTS) throw err;
			await backoff(attempt);
		}
	}
}
