// openStore: the store a URL names, the one place that knows every kind
// (store.ts is what the package uses of any of them).
import { openFileStore } from "./filestore.ts";
import { openS3Store } from "./s3store.ts";
import type { Store, StoreOptions } from "./store.ts";

/**
 * openStore opens a file:///path URL (the local directory `make dev` and
 * the manager's file store use; see filestore.ts), or an s3:// URL in the
 * form the Go side takes (see s3store.ts).
 */
export function openStore(url: string, opts: StoreOptions = {}): Store {
	let u: URL;
	try {
		u = new URL(url);
	} catch {
		throw new Error(`turnlog store URL ${JSON.stringify(url)}: not a URL`);
	}
	if (u.protocol === "file:") return openFileStore(url, u);
	if (u.protocol === "s3:") return openS3Store(url, u, opts);
	throw new Error(`turnlog store URL ${JSON.stringify(url)}: the pi package records into s3:// and file:// stores`);
}
