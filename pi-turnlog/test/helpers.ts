// What the package's tests share: a scratch file:// store, and the log a
// recorder wrote there as the lines of a log file.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after } from "node:test";
import { type Location, rootOf } from "../src/log.ts";
import { openStore } from "../src/openstore.ts";
import type { Store } from "../src/store.ts";

/** scratch is a directory the test file's run removes when it ends. */
export function scratch(): string {
	const dir = mkdtempSync(join(tmpdir(), "pi-turnlog-test-"));
	after(() => rmSync(dir, { recursive: true, force: true }));
	return dir;
}

/** fileStore is a file:// store in a directory of its own below dir. */
export function fileStore(dir: string): { store: Store; dir: string } {
	const root = mkdtempSync(join(dir, "store-"));
	return { store: openStore(`file://${root}`), dir: root };
}

export const LOCATION: Location = { namespace: "test", session: "s", uid: "u" };

/** logText is the log at loc as a log file: its segments' lines, in seq order. */
export async function logText(store: Store, loc: Location = LOCATION): Promise<string> {
	const keys = await store.list(`${rootOf(loc)}log/`);
	return (await Promise.all(keys.map((k) => store.get(k)))).join("");
}

/** logEvents is the log at loc, decoded. */
export async function logEvents(store: Store, loc: Location = LOCATION): Promise<Record<string, any>[]> {
	return (await logText(store, loc))
		.split("\n")
		.filter((l) => l !== "")
		.map((l) => JSON.parse(l));
}
