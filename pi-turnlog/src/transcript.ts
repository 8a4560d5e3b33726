// Reads the transcript turnlog's workers stored for a Session
// (docs/log-format.md, "Storage layout"): derived/transcript/<target>/
// checkpoint.json and the parts it lists (a forked Session's first ones
// may be its source's, shared), each checked against its CRC-32C and
// header, then the synthetic results of the tool calls still open.
import { createHash } from "node:crypto";
import type { Store } from "./store.ts";

export interface Target {
	kind: string;
	api: string;
	provider: string;
	model: string;
	releaseLine: string;
	/** The Session's spec.adapter.refusedBlocks: "Drop" has a transcript of its own. */
	refusedBlocks?: string;
}

export interface StoredMessage {
	seq: number;
	role: string;
	origin?: string;
	synthetic?: boolean;
	message: any;
}

export interface StoredTranscript {
	/** The seq after the last turn the workers replayed. */
	next: number;
	messages: StoredMessage[];
}

export class NotReplayedError extends Error {}

/** The directory of a target's transcript, as the workers name it. */
export function transcriptDir(root: string, t: Target): string {
	const drop = t.refusedBlocks === "Drop" ? "\0refused=Drop" : "";
	const sum = createHash("sha256")
		.update(`${t.kind}\0${t.api}\0${t.provider}\0${t.model}\0line=${t.releaseLine}${drop}`)
		.digest("hex")
		.slice(0, 16);
	return `${root}derived/transcript/${sum}/`;
}

interface PartRef {
	start: number;
	count: number;
	bytes: number;
	crc32c: number;
	/** The transcript's rewrite the part was written in; none before the first. */
	epoch?: number;
	/** The Session, of the log's namespace, whose derived data holds a part a fork's child shares. */
	session?: string;
	uid?: string;
}

/**
 * partKey is where a part is: under the checkpoint's own root, or, for a
 * part a fork's child shares with its source, under the root of the
 * Session that holds it, beside the log's own in its prefix and namespace.
 */
function partKey(root: string, dir: string, ref: PartRef, i: number, checkpoint: string): string {
	const range = `${String(ref.start).padStart(20, "0")}-${String(ref.start + ref.count).padStart(20, "0")}`;
	const epoch = ref.epoch ?? 0;
	if (!Number.isSafeInteger(epoch) || epoch < 0) throw new Error(`read ${checkpoint}: parts[${i}].epoch: ${JSON.stringify(ref.epoch)}: want a non-negative integer`);
	const name = epoch ? `${range}.e${epoch}.jsonl` : `${range}.jsonl`;
	if (ref.session === undefined && ref.uid === undefined) return `${dir}${name}`;
	for (const field of ["session", "uid"] as const) {
		const v = ref[field];
		if (typeof v !== "string" || v === "" || v === "." || v === ".." || v.includes("/")) {
			throw new Error(`read ${checkpoint}: parts[${i}].${field}: ${JSON.stringify(v) ?? "missing"}: want a non-empty name without '/'`);
		}
	}
	// The root is [prefix/]namespace/session/uid/: the holder's replaces
	// the last two, and stays in the log's prefix and namespace.
	const base = root.replace(/\/+$/, "").split("/").slice(0, -2).join("/");
	return `${dir.replace(root, `${base}/${ref.session}/${ref.uid}/`)}${name}`;
}

export async function loadTranscript(store: Store, root: string, target: Target): Promise<StoredTranscript> {
	const dir = transcriptDir(root, target);
	const name = `${dir}checkpoint.json`;
	let cp: any;
	try {
		cp = JSON.parse(await store.get(name));
	} catch (err) {
		if ((err as { kind?: string }).kind === "notFound") {
			throw new NotReplayedError(`not replayed yet for ${target.provider}/${target.model} (${target.api}): no ${name}`);
		}
		throw err;
	}
	if (!cp?.next) throw new NotReplayedError(`not replayed yet for ${target.provider}/${target.model}: no turn replayed`);
	const refs: PartRef[] = cp.parts ?? [];
	const messages: StoredMessage[] = [];
	let expect = 0;
	for (const [i, ref] of refs.entries()) {
		const key = partKey(root, dir, ref, i, name);
		if (ref.start !== expect) throw new Error(`read ${name}: part ${key} does not follow the one before it`);
		expect = ref.start + ref.count;
		const data = await store.getBytes(key);
		if (crc32c(data) !== ref.crc32c) throw new Error(`read ${key}: the object's CRC-32C does not match the checkpoint's: not the part the replay run wrote`);
		const nl = data.indexOf(10);
		if (nl < 0) throw new Error(`read ${key}: line 1: no header line`);
		const h = JSON.parse(data.subarray(0, nl).toString("utf8"));
		const body = data.subarray(nl + 1);
		if (h.start !== ref.start || h.bytes?.length !== ref.count || body.length !== ref.bytes) {
			throw new Error(`read ${key}: line 1: the header does not match the checkpoint's entry`);
		}
		let off = 0;
		h.bytes.forEach((n: number, i: number) => {
			if (n <= 0 || off + n >= body.length || body[off + n] !== 10) {
				throw new Error(`read ${key}: line ${i + 2}: the message does not end at a line's end`);
			}
			messages.push({
				seq: h.seqs[i],
				role: h.roles[i],
				origin: h.origins?.[i] || undefined,
				synthetic: h.synthetic[i] || undefined,
				message: JSON.parse(body.subarray(off, off + n).toString("utf8")),
			});
			off += n + 1;
		});
	}
	// The tool calls of the last assistant message that got no result yet:
	// a request built now answers them as pi-ai does.
	const open = cp.open ?? {};
	const answered = new Set<string>(open.answered ?? []);
	for (const c of open.calls ?? []) {
		if (answered.has(c.id)) continue;
		messages.push({
			seq: open.seq ?? 0,
			role: "toolResult",
			synthetic: true,
			message: { role: "toolResult", toolCallId: c.id, toolName: c.name, content: [{ type: "text", text: "No result provided" }], isError: true, timestamp: open.time ?? 0 },
		});
	}
	for (const m of open.held ?? []) messages.push({ ...m, message: m.message });
	return { next: cp.next, messages };
}

const CRC_TABLE = (() => {
	const t = new Uint32Array(256);
	for (let i = 0; i < 256; i++) {
		let c = i;
		for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
		t[i] = c >>> 0;
	}
	return t;
})();

/** CRC-32C (Castagnoli), as the workers sum a part. */
export function crc32c(data: Uint8Array): number {
	let c = 0xffffffff;
	for (let i = 0; i < data.length; i++) c = CRC_TABLE[(c ^ data[i]) & 0xff] ^ (c >>> 8);
	return (c ^ 0xffffffff) >>> 0;
}
