// The s3:// store: an S3 bucket (or a service that speaks S3, such as
// versitygw or MinIO), reached through the AWS SDK's S3 client.
import {
	GetObjectCommand,
	HeadObjectCommand,
	ListObjectsV2Command,
	PutObjectCommand,
	S3Client,
} from "@aws-sdk/client-s3";

import { META_WRITER, type Store, StoreError, type StoreOptions, TooLargeError } from "./store.ts";

/**
 * openS3Store opens an s3:// URL in the form the Go side takes:
 * s3://bucket?region=R[&endpoint=http://host:port&use_path_style=true&disable_https=true].
 * Credentials come from the AWS default chain (AWS_ACCESS_KEY_ID, ...).
 */
export function openS3Store(url: string, u: URL, opts: StoreOptions): Store {
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

	async getBytes(key: string, limit = Number.POSITIVE_INFINITY): Promise<Buffer> {
		let body: Uint8Array;
		try {
			const out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: key }));
			// The size comes with the response's headers: an object over the
			// limit is refused before its body is read, and the body dropped.
			if (out.ContentLength !== undefined && out.ContentLength > limit) {
				(out.Body as { destroy?: () => void } | undefined)?.destroy?.();
				throw new TooLargeError("get", key, out.ContentLength, limit);
			}
			body = (await out.Body?.transformToByteArray()) ?? new Uint8Array();
		} catch (err) {
			if (err instanceof StoreError) throw err;
			throw classify(err, `get ${key}`);
		}
		// A response without a length is held to the limit once read.
		if (body.length > limit) throw new TooLargeError("get", key, body.length, limit);
		return Buffer.from(body);
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
