// The stores as the log protocol uses them: openStore's URLs, and the
// file:// store's create-if-absent writes, reads, writer tokens, listing
// and refusals, in the layout of turnlog's Go file store
// (internal/store/file.go), whose objects it must read and write alike.
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { openStore } from "../src/openstore.ts";
import { META_WRITER, type Store, StoreError, withGetHook } from "../src/store.ts";
import { fileStore, scratch } from "./helpers.ts";

const work = scratch();

/** failure is the StoreError kind op fails with. */
async function failure(op: () => Promise<unknown>): Promise<string> {
	try {
		await op();
	} catch (err) {
		assert.ok(err instanceof StoreError, `not a StoreError: ${err}`);
		return err.kind;
	}
	assert.fail("no error");
}

test("openStore takes the URLs the Go side takes, and says what is wrong with others", () => {
	assert.match(openStore(`file://${work}`).describe(), /^file:\/\//);
	assert.equal(openStore("s3://bucket?region=eu-west-1&endpoint=http://127.0.0.1:9000&use_path_style=true").describe(), "s3://bucket");
	for (const [url, why] of [
		["not a url", /not a URL/],
		["gs://bucket", /records into s3:\/\/ and file:\/\/ stores/],
		["s3://bucket?acl=private", /unknown parameter "acl"/],
		["file://host/dir", /file:\/\/\/path/],
		[`file://${work}?mode=0700`, /unknown parameter "mode"/],
		[`file://${work}?create_dir=maybe`, /create_dir: want true or false/],
		[`file://${join(work, "missing")}`, /ENOENT/],
	] as const) {
		assert.throws(() => openStore(url), why, url);
	}
	const made = join(work, "made", "here");
	openStore(`file://${made}?create_dir=true`);
	assert.ok(openStore(`file://${made}`));
});

test("a key is created once: the second writer is told it exists, and the first one's token stays", async () => {
	const { store, dir } = fileStore(work);
	await store.putIfAbsent("ns/s/uid/log/00000000000000000000.jsonl", '{"seq":0}\n', { [META_WRITER]: "w1.1" });
	assert.equal(await failure(() => store.putIfAbsent("ns/s/uid/log/00000000000000000000.jsonl", "other\n", { [META_WRITER]: "w2.1" })), "exists");
	assert.equal(await store.get("ns/s/uid/log/00000000000000000000.jsonl"), '{"seq":0}\n');
	assert.equal(await store.writer("ns/s/uid/log/00000000000000000000.jsonl"), "w1.1");
	// The sidecar is gocloud fileblob's, as the Go store writes it.
	const attrs = JSON.parse(readFileSync(join(dir, "ns/s/uid/log/00000000000000000000.jsonl.attrs"), "utf8"));
	assert.deepEqual(attrs["user.metadata"], { [META_WRITER]: "w1.1" });
	assert.equal(attrs["user.content_type"], "application/jsonl");
});

test("what is not there is notFound; an object without its sidecar has no writer", async () => {
	const { store, dir } = fileStore(work);
	assert.equal(await failure(() => store.get("ns/missing")), "notFound");
	assert.equal(await failure(() => store.writer("ns/missing")), "notFound");
	mkdirSync(join(dir, "ns"));
	writeFileSync(join(dir, "ns", "bare"), "x");
	assert.equal(await store.writer("ns/bare"), undefined);
	assert.equal((await store.getBytes("ns/bare")).toString(), "x");
});

test("list gives the keys under a prefix, sorted, without sidecars or the temporary directory", async () => {
	const { store } = fileStore(work);
	assert.deepEqual(await store.list("ns/"), []);
	for (const key of ["ns/b/2.jsonl", "ns/a/1.jsonl", "ns/a/0.jsonl", "other/x", "nsx/y"]) await store.putIfAbsent(key, "", {});
	assert.deepEqual(await store.list("ns/"), ["ns/a/0.jsonl", "ns/a/1.jsonl", "ns/b/2.jsonl"]);
	assert.deepEqual(await store.list("ns"), ["ns/a/0.jsonl", "ns/a/1.jsonl", "ns/b/2.jsonl", "nsx/y"]);
	assert.deepEqual(await store.list("ns/a/1"), ["ns/a/1.jsonl"]);
	assert.deepEqual(await store.list(""), ["ns/a/0.jsonl", "ns/a/1.jsonl", "ns/b/2.jsonl", "nsx/y", "other/x"]);
});

test("keys the Go store refuses are refused, permanently", async () => {
	const { store } = fileStore(work);
	for (const key of ["", "a.attrs", "a//b", "a/../b", "./a", "a\u0001b", "a\\b", ".turnlog-tmp/x"]) {
		assert.equal(await failure(() => store.putIfAbsent(key, "", {})), "permanent", JSON.stringify(key));
	}
});

test("a symbolic link is refused with its name, never followed", async () => {
	const { store, dir } = fileStore(work);
	await store.putIfAbsent("real/obj", "secret", {});
	symlinkSync(join(dir, "real"), join(dir, "linked"));
	symlinkSync(join(dir, "real", "obj"), join(dir, "real", "alias"));
	await assert.rejects(store.get("linked/obj"), /"linked" is a symbolic link/);
	await assert.rejects(store.get("real/alias"), /it is a symbolic link/);
	await assert.rejects(store.putIfAbsent("linked/new", "x", {}), /"linked" is a symbolic link/);
	await assert.rejects(store.list("real/"), /symbolic link/);
});

test("withGetHook is told every read", async () => {
	const { store: inner } = fileStore(work);
	await inner.putIfAbsent("k", "v", {});
	const read: string[] = [];
	const store: Store = withGetHook(inner, (key) => read.push(key));
	await store.get("k");
	await store.getBytes("k");
	await store.writer("k");
	await store.list("");
	assert.deepEqual(read, ["k", "k"]);
});
