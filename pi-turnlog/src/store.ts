// The object store a turnlog Session's log lives in, as the package uses
// it: only what the log protocol needs (create-if-absent writes, reads,
// metadata and listing), with failures sorted the way the protocol treats
// them (docs/log-format.md, "Appending safely"). The stores themselves are
// s3store.ts and filestore.ts; openstore.ts opens one by its URL.

/** The metadata key of a segment's writer token (x-amz-meta-turnlog-writer). */
export const META_WRITER = "turnlog-writer";

/** What a failed request means for the protocol. */
export type FailureKind =
	| "exists" // precondition failed: the key is taken (or the service says so)
	| "notFound"
	| "transient" // worth retrying; the request may have taken effect
	| "permanent";

export class StoreError extends Error {
	constructor(
		message: string,
		readonly kind: FailureKind,
		readonly status?: number,
	) {
		super(message);
	}
}

/**
 * TooLargeError: an object read with a limit is larger than the limit. It
 * is not read whole: the reader says what the object is too large to be.
 */
export class TooLargeError extends StoreError {
	constructor(
		op: string,
		readonly key: string,
		readonly size: number,
		readonly limit: number,
	) {
		super(`${op} ${JSON.stringify(key)}: ${size} bytes, larger than ${limit} bytes`, "permanent");
	}
}

export interface StoreOptions {
	/** How long one request may take before it counts as a timeout. */
	requestTimeoutMs?: number;
}

export interface Store {
	putIfAbsent(key: string, body: string, metadata: Record<string, string>): Promise<void>;
	get(key: string): Promise<string>;
	/** getBytes reads the object key; one larger than limit bytes is refused (TooLargeError) without being read whole. */
	getBytes(key: string, limit?: number): Promise<Buffer>;
	writer(key: string): Promise<string | undefined>;
	list(prefix: string): Promise<string[]>;
	describe(): string;
}

/**
 * withGetHook tells onGet the key of every object read from store: a test
 * hook that counts what the package reads (TURNLOG_DEBUG_GETS).
 */
export function withGetHook(store: Store, onGet: (key: string) => void): Store {
	return {
		putIfAbsent: (key, body, metadata) => store.putIfAbsent(key, body, metadata),
		get: (key) => {
			onGet(key);
			return store.get(key);
		},
		getBytes: (key, limit) => {
			onGet(key);
			return store.getBytes(key, limit);
		},
		writer: (key) => store.writer(key),
		list: (prefix) => store.list(prefix),
		describe: () => store.describe(),
	};
}
