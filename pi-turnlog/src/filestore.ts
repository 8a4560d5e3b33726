// The file:// store, in the layout turnlog's Go store keeps
// (internal/store/file.go), so that the manager, its workers, the CLI and
// this package read one another's objects: a key is a path below the
// store's directory, its metadata a JSON sidecar "<file>.attrs" in the
// format of gocloud's fileblob. A create links a fully written temporary
// file (in .turnlog-tmp, below the directory, so link(2) stays on one
// filesystem) to its name; link(2) fails if the name exists, so exactly
// one writer wins, across processes too.
//
// As in the Go store, every directory on a key's way must be a directory
// and every object a regular file: a symbolic link (even one that stays
// inside the store), a FIFO, a device or a socket is refused with an error
// naming it, never followed or opened.
import { createHash, randomBytes } from "node:crypto";
import { constants, type Dirent, promises as fsp, mkdirSync, type Stats, statSync } from "node:fs";
import type { FileHandle } from "node:fs/promises";
import { join } from "node:path";

import { META_WRITER, type Store, StoreError, TooLargeError } from "./store.ts";

/** The temporary directory, below the store's directory. */
const TMP_DIR = ".turnlog-tmp";

/** A metadata sidecar larger than this is not read (as in the Go store). */
const MAX_ATTRS_BYTES = 1 << 20;

/**
 * openFileStore opens a file:///path URL as the Go side does: the path is
 * a local directory; ?create_dir=true makes it if it is missing.
 */
export function openFileStore(url: string, u: URL): Store {
	if (u.host !== "" && u.host !== "localhost") {
		throw new Error(`turnlog store URL ${JSON.stringify(url)}: file URLs name a local directory: file:///path`);
	}
	for (const k of u.searchParams.keys()) {
		if (k !== "create_dir") throw new Error(`turnlog store URL ${JSON.stringify(url)}: unknown parameter ${JSON.stringify(k)}`);
	}
	const dir = decodeURIComponent(u.pathname);
	if (!dir || dir === "/") throw new Error(`turnlog store URL ${JSON.stringify(url)}: no directory`);
	const create = u.searchParams.get("create_dir");
	if (create !== null && !["true", "false", "1", "0"].includes(create)) {
		throw new Error(`turnlog store URL ${JSON.stringify(url)}: create_dir: want true or false, got ${JSON.stringify(create)}`);
	}
	let st: Stats;
	try {
		if (create === "true" || create === "1") mkdirSync(dir, { recursive: true, mode: 0o755 });
		st = statSync(dir);
	} catch (err) {
		throw new Error(`turnlog store URL ${JSON.stringify(url)}: ${(err as Error).message}`);
	}
	if (!st.isDirectory()) throw new Error(`turnlog store URL ${JSON.stringify(url)}: ${dir} is not a directory`);
	return new FileStore(dir);
}

/** What an entry is, in the words the Go store refuses it with. */
function refusedKind(st: Stats | Dirent): string {
	if (st.isSymbolicLink()) return "a symbolic link";
	if (st.isFIFO()) return "a named pipe (FIFO)";
	if (st.isSocket()) return "a socket";
	if (st.isBlockDevice() || st.isCharacterDevice()) return "a device";
	return "not a regular file or directory";
}

function refused(op: string, key: string, at: string, kind: string): StoreError {
	const what = at === key ? `it is ${kind}` : `${JSON.stringify(at)} is ${kind}`;
	return new StoreError(
		`${op} ${JSON.stringify(key)}: refused: ${what}; the file store opens only regular files and directories and follows no symbolic links`,
		"permanent",
	);
}

function code(err: unknown): string | undefined {
	return (err as NodeJS.ErrnoException)?.code;
}

/** checkKey refuses a key the Go store refuses (store.ValidateKey). */
function checkKey(key: string): void {
	const bad = (why: string) => new StoreError(`invalid object key ${JSON.stringify(key)}: ${why}`, "permanent");
	if (key === "") throw bad("empty");
	if (key.endsWith(".attrs")) throw bad("the suffix .attrs is reserved");
	for (const ch of key) {
		const c = ch.codePointAt(0) ?? 0;
		if (c < 0x20 || c === 0x7f || ch === "\\") throw bad("control character or backslash");
	}
	for (const seg of key.split("/")) {
		if (seg === "" || seg === "." || seg === "..") throw bad("empty, '.' or '..' path segment");
	}
	if (key === TMP_DIR || key.startsWith(`${TMP_DIR}/`)) throw bad(`${TMP_DIR}/ is reserved by the file backend`);
}

function contentType(key: string): string {
	if (key.endsWith(".jsonl")) return "application/jsonl";
	if (key.endsWith(".json")) return "application/json";
	return "application/octet-stream";
}

class FileStore implements Store {
	constructor(private dir: string) {}

	describe(): string {
		return `file://${this.dir}`;
	}

	/** dirs checks (and with create, makes) the directories of key. */
	private dirs(op: string, key: string, create: boolean): Promise<string> {
		return this.walkDirs(op, key, key.split("/").slice(0, -1), create);
	}

	/**
	 * walkDirs checks (and with create, makes) the directories parts, one
	 * component at a time, and returns the path of the last; errors name
	 * key, what op was about.
	 */
	private async walkDirs(op: string, key: string, parts: string[], create: boolean): Promise<string> {
		let path = this.dir;
		for (let i = 0; i < parts.length; i++) {
			path = join(path, parts[i]);
			const at = parts.slice(0, i + 1).join("/");
			let st: Stats;
			try {
				st = await fsp.lstat(path);
			} catch (err) {
				if (code(err) !== "ENOENT") throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
				if (!create) throw new StoreError(`${op} ${JSON.stringify(key)}: not found`, "notFound");
				try {
					await fsp.mkdir(path, { mode: 0o755 });
				} catch (err) {
					if (code(err) !== "EEXIST") throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
				}
				st = await fsp.lstat(path);
			}
			if (st.isDirectory()) continue;
			if (st.isFile()) {
				if (create) throw new StoreError(`${op} ${JSON.stringify(key)}: ${JSON.stringify(at)} is an object, not a directory`, "permanent");
				throw new StoreError(`${op} ${JSON.stringify(key)}: not found`, "notFound");
			}
			throw refused(op, key, at, refusedKind(st));
		}
		return path;
	}

	/**
	 * openRegular opens the regular file path (the object key, or its
	 * sidecar) for reading, and returns it with its size.
	 */
	private async openRegular(op: string, key: string, path: string): Promise<{ fh: FileHandle; size: number }> {
		let st: Stats;
		try {
			st = await fsp.lstat(path);
		} catch (err) {
			if (code(err) === "ENOENT") throw new StoreError(`${op} ${JSON.stringify(key)}: not found`, "notFound");
			throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
		}
		if (st.isDirectory()) throw new StoreError(`${op} ${JSON.stringify(key)}: not found`, "notFound");
		if (!st.isFile()) throw refused(op, key, key, refusedKind(st));
		// O_NOFOLLOW and O_NONBLOCK: a link or a FIFO swapped in since the
		// lstat is neither followed nor waited on, and the file opened must
		// be the one looked at.
		const fh = await fsp.open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK).catch((err) => {
			if (code(err) === "ELOOP") throw refused(op, key, key, "a symbolic link");
			if (code(err) === "ENOENT") throw new StoreError(`${op} ${JSON.stringify(key)}: not found`, "notFound");
			throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
		});
		const now = await fh.stat();
		if (now.ino !== st.ino || now.dev !== st.dev || !now.isFile()) {
			await fh.close();
			throw refused(op, key, key, "an entry that changed while it was being opened");
		}
		return { fh, size: now.size };
	}

	/** readRegular reads the regular file path, refusing one larger than limit bytes. */
	private async readRegular(op: string, key: string, path: string, limit = Infinity): Promise<Buffer> {
		const { fh, size } = await this.openRegular(op, key, path);
		try {
			if (size > limit) throw new TooLargeError(op, key, size, limit);
			return await fh.readFile();
		} finally {
			await fh.close();
		}
	}

	private async tmpDir(op: string, key: string): Promise<string> {
		const path = join(this.dir, TMP_DIR);
		try {
			await fsp.mkdir(path, { mode: 0o755 });
		} catch (err) {
			if (code(err) !== "EEXIST") throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
		}
		const st = await fsp.lstat(path);
		if (!st.isDirectory()) throw refused(op, key, TMP_DIR, refusedKind(st));
		return path;
	}

	private async writeTemp(tmp: string, data: Buffer, sync: boolean): Promise<string> {
		const path = join(tmp, `w-${randomBytes(12).toString("hex")}`);
		const fh = await fsp.open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o644);
		try {
			await fh.writeFile(data);
			if (sync) await fh.sync();
			// Objects are shared like any other file, whatever the umask.
			await fh.chmod(0o644);
		} finally {
			await fh.close();
		}
		return path;
	}

	async putIfAbsent(key: string, body: string, metadata: Record<string, string>): Promise<void> {
		const op = "create";
		checkKey(key);
		const dir = await this.dirs(op, key, true);
		const name = key.split("/").at(-1) as string;
		const final = join(dir, name);
		const existing = await fsp.lstat(final).catch((err) => {
			if (code(err) === "ENOENT") return undefined;
			throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
		});
		if (existing && !existing.isFile() && !existing.isDirectory()) throw refused(op, key, key, refusedKind(existing));
		if (existing) throw new StoreError(`${op} ${JSON.stringify(key)}: the key exists`, "exists");
		const tmp = await this.tmpDir(op, key);
		const data = Buffer.from(body, "utf8");
		const attrs = Buffer.from(
			JSON.stringify({
				"user.content_type": contentType(key),
				"user.metadata": metadata,
				md5: createHash("md5").update(data).digest("base64"),
			}),
		);
		let dataTmp: string | undefined;
		let attrsTmp: string | undefined;
		try {
			dataTmp = await this.writeTemp(tmp, data, true);
			// The sidecar is not synced: after a crash an object may lack its
			// metadata, which costs a writer its token, never the data.
			attrsTmp = await this.writeTemp(tmp, attrs, false);
			try {
				await fsp.link(dataTmp, final);
			} catch (err) {
				if (code(err) === "EEXIST") throw new StoreError(`${op} ${JSON.stringify(key)}: the key exists`, "exists");
				throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
			}
			try {
				await fsp.rename(attrsTmp, `${final}.attrs`);
				attrsTmp = undefined;
			} catch (err) {
				// Not retryable: the object exists, only its metadata is missing.
				throw new StoreError(`${op} ${JSON.stringify(key)}: object written but its metadata was not: ${(err as Error).message}`, "permanent");
			}
		} catch (err) {
			if (err instanceof StoreError) throw err;
			throw new StoreError(`${op} ${JSON.stringify(key)}: ${(err as Error).message}`, "transient");
		} finally {
			for (const t of [dataTmp, attrsTmp]) if (t) await fsp.rm(t, { force: true });
		}
	}

	async get(key: string): Promise<string> {
		return (await this.getBytes(key)).toString("utf8");
	}

	async getBytes(key: string, limit?: number): Promise<Buffer> {
		checkKey(key);
		const dir = await this.dirs("get", key, false);
		return this.readRegular("get", key, join(dir, key.split("/").at(-1) as string), limit);
	}

	async writer(key: string): Promise<string | undefined> {
		checkKey(key);
		const dir = await this.dirs("head", key, false);
		const path = join(dir, key.split("/").at(-1) as string);
		// The object must be there (a regular file); its metadata is beside it.
		await (await this.openRegular("head", key, path)).fh.close();
		let raw: Buffer;
		try {
			raw = await this.readRegular("head", key, `${path}.attrs`, MAX_ATTRS_BYTES);
		} catch (err) {
			if (err instanceof StoreError && err.kind === "notFound") return undefined; // no metadata
			throw err;
		}
		try {
			return JSON.parse(raw.toString("utf8"))?.["user.metadata"]?.[META_WRITER];
		} catch (err) {
			throw new StoreError(`head ${JSON.stringify(key)}: metadata: ${(err as Error).message}`, "permanent");
		}
	}

	async list(prefix: string): Promise<string[]> {
		const cut = prefix.lastIndexOf("/");
		const dirKey = cut < 0 ? "" : prefix.slice(0, cut);
		const match = prefix.slice(cut + 1);
		let start = this.dir;
		if (dirKey !== "") {
			try {
				start = await this.walkDirs("list", prefix, dirKey.split("/"), false);
			} catch (err) {
				if (err instanceof StoreError && err.kind === "notFound") return [];
				throw err;
			}
		}
		const keys: string[] = [];
		await this.walk(start, dirKey, match, prefix, keys);
		return keys.sort();
	}

	private async walk(path: string, dirKey: string, match: string, prefix: string, out: string[]): Promise<void> {
		let entries: Dirent[];
		try {
			// Each entry's type comes with its name, as lstat would say it:
			// a log of thousands of segments lists without a stat of each.
			entries = await fsp.readdir(path, { withFileTypes: true });
		} catch (err) {
			if (code(err) === "ENOENT") return;
			throw new StoreError(`list ${JSON.stringify(prefix)}: ${(err as Error).message}`, "transient");
		}
		for (const d of entries) {
			const name = d.name;
			if (!name.startsWith(match) || name.endsWith(".attrs") || (dirKey === "" && name === TMP_DIR)) continue;
			const key = dirKey === "" ? name : `${dirKey}/${name}`;
			if (d.isFile()) out.push(key);
			else if (d.isDirectory()) await this.walk(join(path, name), key, "", prefix, out);
			else throw refused("list", prefix, key, refusedKind(d));
		}
	}
}
