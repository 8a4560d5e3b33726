// pi-turnlog: records a live pi-coding-agent session into a turnlog
// Session's log, continues it when pi resumes the session, and opens or
// forks turnlog Sessions in pi. Configured by environment (see
// docs/agent-hosts.md, "pi"):
//
//   TURNLOG_STORE_URL      s3://bucket?region=...[&endpoint=...&use_path_style=true]
//   TURNLOG_STORE_PREFIX   the store's prefix on the manager, if any
//   TURNLOG_NAMESPACE      the Session's namespace (default "default")
//   TURNLOG_SESSION        the Session of the pi session pi starts with
//                          (default pi-<pi session id>)
//   TURNLOG_SESSION_UID    its uid (default the pi session id)
//   TURNLOG_KUBECONFIG     a kubeconfig: the Session is found or created by
//                          name through the API server, nudged, and its
//                          spec.adapter follows pi's model
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { BINDING, type Binding, registerCommands } from "./commands.ts";
import type { Location } from "./log.ts";
import { Kube } from "./kube.ts";
import type { Entry } from "./mapping.ts";
import { type Adapter, adapterOf, Recorder } from "./recorder.ts";
import { openStore, type Store } from "./store.ts";

export default function (pi: ExtensionAPI) {
	const url = process.env.TURNLOG_STORE_URL;
	if (!url) return; // nothing to record into
	let store: Store | undefined;
	const getStore = () => {
		store ??= openStore(url, { requestTimeoutMs: Number(process.env.TURNLOG_S3_TIMEOUT_MS) || undefined });
		return store;
	};
	let kube: Kube | undefined;
	const getKube = () => {
		const file = process.env.TURNLOG_KUBECONFIG;
		if (file) kube ??= new Kube(file);
		return kube;
	};
	let rec: Recorder | undefined;
	// where is the Session being recorded into, once the log is open.
	let where: Location | undefined;
	let chain: Promise<void> = Promise.resolve();
	let envSessionUsed: string | undefined;
	let ctxRef: ExtensionContext | undefined;

	// Everything that touches the recorder runs in order, one at a time.
	// A failure is reported once, here; callers that wait get nothing thrown.
	const serial = (what: string, fn: () => void | Promise<void>): Promise<void> => {
		chain = chain.then(fn).catch((err) => report(`${what}: ${(err as Error).message}`));
		return chain;
	};
	const report = (msg: string) => {
		if (ctxRef?.hasUI) ctxRef.ui.notify(`turnlog: ${msg}`, "error");
		else process.stderr.write(`turnlog: ${msg}\n`);
	};
	const status = (text: string) => ctxRef?.ui.setStatus("turnlog", text);
	const branch = (ctx: ExtensionContext) => ctx.sessionManager.getBranch() as unknown as Entry[];

	const bindingOf = (ctx: ExtensionContext) => [...branch(ctx)].reverse().find((e) => e.type === "custom" && e.customType === BINDING);
	const locationFor = async (ctx: ExtensionContext, adapter: Adapter): Promise<Location> => {
		const bound = bindingOf(ctx);
		if (bound) return (bound.data as Binding).location;
		const id = ctx.sessionManager.getSessionId();
		const named = process.env.TURNLOG_SESSION;
		let session = `pi-${id}`;
		if (named && (envSessionUsed === undefined || envSessionUsed === id)) {
			envSessionUsed = id;
			session = named;
		}
		const namespace = process.env.TURNLOG_NAMESPACE || "default";
		let uid = (session === named && process.env.TURNLOG_SESSION_UID) || "";
		// The API server gives a Session its uid: found or created by name.
		const k = getKube();
		if (!uid && k) uid = await k.session(namespace, session, adapter);
		return { prefix: process.env.TURNLOG_STORE_PREFIX || undefined, namespace, session, uid: uid || id };
	};

	// pi does not wait for the store: what happens meanwhile is queued
	// behind the opening and recorded once the log is open.
	pi.on("session_start", (_event, ctx) => {
		ctxRef = ctx;
		const entries = branch(ctx); // what pi resumed with; later entries are later events
		serial("open the log", async () => {
			const adapter = adapterOf(ctx.model);
			const store = getStore();
			const loc = await locationFor(ctx, adapter);
			where = loc;
			const k = getKube();
			const r = new Recorder(store, loc, {
				written: (next, endsTurn) => {
					status(`turnlog ${loc.namespace}/${loc.session}: ${next} events`);
					// Best effort: without it the turn is replayed at the manager's next poll.
					if (endsTurn && k) k.nudge(loc.namespace, loc.session).catch(() => {});
				},
				failed: (err) => report(err.message),
			});
			const bound = bindingOf(ctx);
			const id = ctx.sessionManager.getSessionId();
			await r.open(adapter, ctx.sessionManager.getHeader(), (from) => {
				// Two pi sessions in one log would make a context neither has.
				if (!bound && from !== undefined && from !== id) {
					throw new Error(
						`${loc.namespace}/${loc.session} was recorded from pi session ${from}, not this one (${id}): resume that session, or record into another Session`,
					);
				}
			});
			if (bound) {
				// The entries /turnlog-open brought in are the log's already.
				const b = bound.data as Binding;
				r.adopt(bound.id, b.seqs ?? {}, b.kinds ?? {});
			}
			rec = r;
			r.record(entries);
			// Entries the previous process persisted but never logged end
			// up in a turn of their own.
			r.endTurnIfOpen();
		});
	});

	// The entries each event knows of are read when it fires, so that a
	// task that runs later records no entry an event after it made. pi
	// persists an entry right after the handlers of the event that made it
	// return: those events read the branch a tick later.
	const now = (ctx: ExtensionContext) => branch(ctx);
	const soon = (ctx: ExtensionContext) => new Promise<Entry[]>((r) => setImmediate(() => r(branch(ctx))));

	pi.on("message_start", (event, ctx) => {
		if (event.message.role !== "assistant") return;
		const entries = now(ctx);
		serial("record", () => {
			rec?.record(entries);
			rec?.responseStart(event.message);
		});
	});
	pi.on("message_update", (event) => {
		serial("record", () => rec?.delta(event.assistantMessageEvent));
	});
	const afterPersist = (ctx: ExtensionContext) => {
		const entries = soon(ctx);
		serial("record", async () => rec?.record(await entries));
	};
	pi.on("message_end", (_e, ctx) => {
		afterPersist(ctx);
	});
	pi.on("turn_end", (_e, ctx) => {
		afterPersist(ctx);
	});
	pi.on("session_compact", (_e, ctx) => {
		afterPersist(ctx);
	});
	pi.on("model_select", (e, ctx) => {
		afterPersist(ctx);
		// The transcript is replayed for the Session's spec.adapter: from now
		// on the model pi talks to is this one.
		const k = getKube();
		if (!k) return;
		const adapter = adapterOf(e.model);
		serial("set the Session's spec.adapter", async () => {
			if (where) await k.target(where.namespace, where.session, adapter);
		});
	});
	pi.on("thinking_level_select", (_e, ctx) => {
		afterPersist(ctx);
	});
	pi.on("session_tree", (_e, ctx) => {
		afterPersist(ctx);
	});
	pi.on("agent_settled", (_e, ctx) => {
		const entries = soon(ctx);
		serial("record", async () => {
			rec?.record(await entries);
			rec?.endTurnIfOpen(); // a turn/end is written at once
		});
	});
	pi.on("session_shutdown", async (_e, ctx) => {
		await serial("close the log", async () => {
			const r = rec;
			rec = undefined;
			if (!r) return;
			r.record(branch(ctx));
			r.endTurnIfOpen();
			await r.close();
			where = undefined;
		});
	});

	registerCommands(pi, {
		store: getStore,
		kube: getKube,
		current: () => rec,
		settle: () => chain,
	});
}
