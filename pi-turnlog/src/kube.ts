// The Kubernetes side, when a kubeconfig is given: the Session is found (or
// created) by name through the API server, which gives its uid, follows
// pi's model (spec.adapter), and is nudged
// (the turnlog.dev/requested-at annotation) after each write that ended a
// turn, so the workers replay it at once instead of at the manager's next
// poll. Credentials are the kubeconfig's, applied by the Kubernetes
// client's own loader (certificates, tokens, exec plugins).
import * as http from "node:http";
import * as https from "node:https";
import { KubeConfig } from "@kubernetes/client-node";
import type { Adapter } from "./recorder.ts";

const GROUP = "/apis/turnlog.dev/v1alpha1";
export const ANNOTATION_REQUESTED_AT = "turnlog.dev/requested-at";

/** The label of the Sessions the package creates: the pi session they record. */
export const LABEL_PI_SESSION = "turnlog.dev/pi-session";
/** The label of a Session a branch of pi's tree got: the pi entry the branch leaves from. */
export const LABEL_PI_BRANCH_POINT = "turnlog.dev/pi-branch-point";

export class Kube {
	private kc = new KubeConfig();
	private server: string;

	constructor(private file: string) {
		try {
			this.kc.loadFromFile(file);
		} catch (err) {
			throw new Error(`kubeconfig ${file}: ${(err as Error).message}`);
		}
		const server = this.kc.getCurrentCluster()?.server;
		if (!server) throw new Error(`kubeconfig ${file}: no current cluster`);
		this.server = server.replace(/\/+$/, "");
	}

	private async request(method: string, path: string, body?: unknown, contentType = "application/json"): Promise<{ status: number; body: any }> {
		const url = new URL(this.server + path);
		const opts: https.RequestOptions = { method, headers: { Accept: "application/json" } };
		if (body !== undefined) (opts.headers as Record<string, string>)["Content-Type"] = contentType;
		await this.kc.applyToHTTPSOptions(opts);
		const mod = url.protocol === "https:" ? https : http;
		return new Promise((resolve, reject) => {
			const req = mod.request(url, opts, (res) => {
				const chunks: Buffer[] = [];
				res.on("data", (c: Buffer) => chunks.push(c));
				res.on("end", () => {
					const text = Buffer.concat(chunks).toString("utf8");
					let parsed: any = text;
					try {
						parsed = JSON.parse(text);
					} catch {}
					resolve({ status: res.statusCode ?? 0, body: parsed });
				});
				res.on("error", reject);
			});
			req.on("error", reject);
			req.setTimeout(15_000, () => req.destroy(new Error(`${method} ${path}: no answer within 15 s`)));
			if (body !== undefined) req.write(JSON.stringify(body));
			req.end();
		});
	}

	/**
	 * session returns the uid of the log of the Session namespace/name (its
	 * own, or the one `turnlog adopt` pointed it at), creating it for
	 * adapter (the model pi records with) if it does not exist and create is
	 * set.
	 */
	async session(namespace: string, name: string, adapter: Adapter | undefined, labels: Record<string, string> = {}): Promise<string> {
		const path = `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessions/${encodeURIComponent(name)}`;
		let res = await this.request("GET", path);
		if (res.status === 404 && adapter) {
			const created = await this.request("POST", `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessions`, {
				apiVersion: "turnlog.dev/v1alpha1",
				kind: "Session",
				metadata: Object.keys(labels).length > 0 ? { namespace, name, labels } : { namespace, name },
				spec: { adapter },
			});
			// Created by someone else meanwhile: theirs is the one to use.
			res = created.status === 409 ? await this.request("GET", path) : created;
		}
		if (res.status < 200 || res.status > 299) {
			throw new Error(`Session ${namespace}/${name}: ${res.status} ${res.body?.message ?? res.body?.reason ?? ""}`.trim());
		}
		const uid = logUID(res.body);
		if (!uid) throw new Error(`Session ${namespace}/${name}: the API server gave no uid`);
		return uid;
	}

	/** uidOf is the uid of the log of the Session namespace/name; undefined if there is none. */
	async uidOf(namespace: string, name: string): Promise<string | undefined> {
		const res = await this.request("GET", `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessions/${encodeURIComponent(name)}`);
		if (res.status === 404) return undefined;
		if (res.status < 200 || res.status > 299 || !logUID(res.body)) {
			throw new Error(`Session ${namespace}/${name}: ${res.status} ${res.body?.message ?? res.body?.reason ?? ""}`.trim());
		}
		return logUID(res.body);
	}

	/**
	 * refusedBlocks is the Session's spec.adapter.refusedBlocks: whether its
	 * transcript leaves out the thinking blocks the provider refused.
	 */
	async refusedBlocks(namespace: string, name: string): Promise<string | undefined> {
		const path = `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessions/${encodeURIComponent(name)}`;
		const res = await this.request("GET", path);
		if (res.status < 200 || res.status > 299) {
			throw new Error(`Session ${namespace}/${name}: ${res.status} ${res.body?.message ?? res.body?.reason ?? ""}`.trim());
		}
		return res.body?.spec?.adapter?.refusedBlocks || undefined;
	}

	/**
	 * target sets the Session's spec.adapter, the model its transcript is
	 * replayed for: a merge patch of that field alone.
	 */
	async target(namespace: string, name: string, adapter: Adapter): Promise<void> {
		const path = `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessions/${encodeURIComponent(name)}`;
		const res = await this.request("PATCH", path, { spec: { adapter } }, "application/merge-patch+json");
		if (res.status < 200 || res.status > 299) {
			throw new Error(`set spec.adapter of Session ${namespace}/${name}: ${res.status} ${res.body?.message ?? ""}`.trim());
		}
	}

	/** nudge sets turnlog.dev/requested-at: a merge patch of that annotation alone. */
	async nudge(namespace: string, name: string): Promise<void> {
		const path = `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessions/${encodeURIComponent(name)}`;
		const res = await this.request(
			"PATCH",
			path,
			{ metadata: { annotations: { [ANNOTATION_REQUESTED_AT]: new Date().toISOString() } } },
			"application/merge-patch+json",
		);
		if (res.status < 200 || res.status > 299) throw new Error(`nudge Session ${namespace}/${name}: ${res.status} ${res.body?.message ?? ""}`.trim());
	}

	describe(): string {
		return this.file;
	}

	/**
	 * fork creates the SessionFork name: source forked at atSeq into a
	 * child Session of the same name (with labels), as `kubectl apply` of
	 * one does, and
	 * waits until the controller says it succeeded or failed. A SessionFork
	 * of that name that forks the same source at the same seq (a command
	 * run again) is waited for as it is; one that forks anything else is
	 * an error.
	 */
	async fork(namespace: string, name: string, source: string, atSeq: string, labels: Record<string, string> = {}, timeoutMs = 120_000): Promise<ForkStatus> {
		const base = `${GROUP}/namespaces/${encodeURIComponent(namespace)}/sessionforks`;
		const spec = { source: { name: source }, atSeq, target: Object.keys(labels).length > 0 ? { name, labels } : { name } };
		let res = await this.request("POST", base, { apiVersion: "turnlog.dev/v1alpha1", kind: "SessionFork", metadata: { namespace, name }, spec });
		if (res.status === 409) {
			res = await this.request("GET", `${base}/${encodeURIComponent(name)}`);
			const s = res.body?.spec;
			if (res.status === 200 && (s?.source?.name !== source || s?.atSeq !== atSeq)) {
				throw new Error(`SessionFork ${namespace}/${name} exists and forks ${s?.source?.name} at ${s?.atSeq}: pick another child name`);
			}
		}
		if (res.status < 200 || res.status > 299) {
			throw new Error(`create SessionFork ${namespace}/${name}: ${res.status} ${res.body?.message ?? ""}`.trim());
		}
		const deadline = Date.now() + timeoutMs;
		for (;;) {
			const got = await this.request("GET", `${base}/${encodeURIComponent(name)}`);
			if (got.status !== 200) throw new Error(`SessionFork ${namespace}/${name}: ${got.status} ${got.body?.message ?? ""}`.trim());
			const st = got.body?.status ?? {};
			const done = (st.conditions ?? []).find((c: { type: string }) => c.type === "Succeeded");
			if (done?.status === "True") return { childName: st.childName, cutSeq: Number(st.cutSeq), cutTurn: Number(st.cutTurn) };
			if (done?.status === "False") throw new Error(`SessionFork ${namespace}/${name} failed: ${done.reason}: ${done.message}`);
			if (Date.now() > deadline) {
				const why = done ? `${done.reason}: ${done.message}` : "no status yet";
				throw new Error(`SessionFork ${namespace}/${name} has not succeeded after ${timeoutMs / 1000} s (${why}); see kubectl get sessionfork ${name} -n ${namespace}`);
			}
			await new Promise((r) => setTimeout(r, 300));
		}
	}
}

/** What a SessionFork that succeeded says. */
export interface ForkStatus {
	childName: string;
	cutSeq: number;
	cutTurn: number;
}

/**
 * logUID is the uid whose root holds a Session's log: spec.storage.logUID
 * for a Session `turnlog adopt` adopted or restored with a new uid, else
 * its own (docs/backup-restore.md).
 */
function logUID(session: any): string | undefined {
	return session?.spec?.storage?.logUID || session?.metadata?.uid;
}
