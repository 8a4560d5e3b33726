// The object store a turnlog Session's log lives in, reached through the AWS
// SDK's S3 client. Only what the log protocol needs: create-if-absent
// writes, reads, metadata and listing, with failures sorted the way the
// protocol treats them (docs/log-format.md, "Appending safely").
import {
	GetObjectCommand,
	HeadObjectCommand,
	ListObjectsV2Command,
	PutObjectCommand,
	S3Client,
} from "@aws-sdk/client-s3";

import { openFileStore } from "./filestore.ts";

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

export interface StoreOptions {
	/** How long one request may take before it counts as a timeout. */
	requestTimeoutMs?: number;
}

export interface Store {
	putIfAbsent(key: string, body: string, metadata: Record<string, string>): Promise<void>;
	get(key: string): Promise<string>;
	getBytes(key: string): Promise<Buffer>;
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
		getBytes: (key) => {
			onGet(key);
			return store.getBytes(key);
		},
		writer: (key) => store.writer(key),
		list: (prefix) => store.list(prefix),
		describe: () => store.describe(),
	};
}

/**
 * openStore opens a file:///path URL (the local directory `make dev` and
 * the manager's file store use; see filestore.ts), or an s3:// URL in the
 * form the Go side takes:
 * s3://bucket?region=R[&endpoint=http://host:port&use_path_style=true&disable_https=true].
 * Credentials come from the AWS default chain (AWS_ACCESS_KEY_ID, ...).
 */
export function openStore(url: string, opts: StoreOptions = {}): Store {
	let u: URL;
	try {
		u = new URL(url);
	} catch {
		throw new Error(`turnlog store URL ${JSON.stringify(url)}: not a URL`);
	}
	if (u.protocol === "file:") return openFileStore(url, u);
	if (u.protocol !== "s3:") {
		throw new Error(`turnlog store URL ${JSON.stringify(url)}: the pi package records into s3:// and file:// stores`);
	}
	const bucket = u.hostname;
	if (!bucket) throw new Error(`turnlog store URL ${JSON.stringify(url)}: no bucket`);
	const known = new Set(["region", "endpoint", "use_path_style", "disable_https"]);
	for (const k of u.searchParams.keys()) {
		if (!known.has(k)) throw new Error(`turnlog store URL ${JSON.stringify(url)}: unknown parameter ${JSON.stringify(k)}`);
	}
	return new S3Store(bucket, u.searchParams, opts);
}

class S3Store implements Store {
	private client: S3Client;

	constructor(
		private bucket: string,
		q: URLSearchParams,
		opts: StoreOptions,
	) {
		const endpoint = q.get("endpoint") ?? undefined;
		this.client = new S3Client({
			region: q.get("region") ?? process.env.AWS_REGION ?? "us-east-1",
			endpoint,
			forcePathStyle: q.get("use_path_style") === "true",
			// The log protocol retries itself, with the same key and token;
			// the SDK's own retries would hide which attempts were uncertain.
			maxAttempts: 1,
			requestChecksumCalculation: "WHEN_REQUIRED",
			responseChecksumValidation: "WHEN_REQUIRED",
			requestHandler: { requestTimeout: opts.requestTimeoutMs ?? 30_000, connectionTimeout: 10_000 },
		});
	}

	describe(): string {
		return `s3://${this.bucket}`;
	}

	async putIfAbsent(key: string, body: string, metadata: Record<string, string>): Promise<void> {
		try {
			await this.client.send(
				new PutObjectCommand({
					Bucket: this.bucket,
					Key: key,
					Body: Buffer.from(body, "utf8"),
					IfNoneMatch: "*",
					Metadata: metadata,
					ContentType: "application/jsonl",
				}),
			);
		} catch (err) {
			throw classify(err, `put ${key}`);
		}
	}

	async get(key: string): Promise<string> {
		try {
			const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
			return (await out.Body?.transformToString("utf8")) ?? "";
		} catch (err) {
			throw classify(err, `get ${key}`);
		}
	}

	async getBytes(key: string): Promise<Buffer> {
		try {
			const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
			return Buffer.from((await out.Body?.transformToByteArray()) ?? []);
		} catch (err) {
			throw classify(err, `get ${key}`);
		}
	}

	async writer(key: string): Promise<string | undefined> {
		try {
			const out = await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key }));
			return out.Metadata?.[META_WRITER];
		} catch (err) {
			throw classify(err, `head ${key}`);
		}
	}

	async list(prefix: string): Promise<string[]> {
		const keys: string[] = [];
		let token: string | undefined;
		try {
			do {
				const out = await this.client.send(
					new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, ContinuationToken: token }),
				);
				for (const o of out.Contents ?? []) if (o.Key) keys.push(o.Key);
				token = out.IsTruncated ? out.NextContinuationToken : undefined;
			} while (token);
		} catch (err) {
			throw classify(err, `list ${prefix}`);
		}
		return keys.sort();
	}
}

function classify(err: unknown, what: string): StoreError {
	const e = err as { name?: string; code?: string; message?: string; $metadata?: { httpStatusCode?: number } };
	const status = e?.$metadata?.httpStatusCode;
	const msg = `${what}: ${e?.name ?? "error"}${status ? ` (HTTP ${status})` : ""}: ${e?.message ?? String(err)}`;
	if (status === 412 || e?.name === "PreconditionFailed") return new StoreError(msg, "exists", status);
	if (status === 404 || e?.name === "NoSuchKey" || e?.name === "NotFound") return new StoreError(msg, "notFound", status);
	// S3 reports racing conditional writes as 409 ConditionalRequestConflict.
	if (status === 409 || status === 429 || (status !== undefined && status >= 500)) {
		return new StoreError(msg, "transient", status);
	}
	if (status === undefined) {
		// No answer: a timeout or a dropped connection. The request may
		// have landed.
		return new StoreError(msg, "transient");
	}
	return new StoreError(msg, "permanent", status);
}
