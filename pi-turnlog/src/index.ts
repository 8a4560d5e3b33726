// pi-turnlog: records a live pi-coding-agent session into a turnlog
// Session's log, continues it when pi resumes the session, gives each
// branch pi's /tree moves to a Session of its own, and opens or forks
// turnlog Sessions in pi. Configured by environment (see
// docs/agent-hosts.md, "pi"):
//
//   TURNLOG_STORE_URL      file:///dir, or s3://bucket?region=...[&endpoint=...&use_path_style=true]
//   TURNLOG_STORE_PREFIX   the store's prefix on the manager, if any
//   TURNLOG_NAMESPACE      the Session's namespace (default "default")
//   TURNLOG_SESSION        the Session of the pi session pi starts with
//                          (default pi-<pi session id>)
//   TURNLOG_SESSION_UID    its uid (default the pi session id)
//   TURNLOG_KUBECONFIG     a kubeconfig: the Session is found or created by
//                          name through the API server, nudged, and its
//                          spec.adapter follows pi's model
//   TURNLOG_DEBUG_GETS     a test hook: a file the package appends the key
//                          of every object it reads to, one a line
import { randomUUID } from "node:crypto";
import { appendFileSync } from "node:fs";
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { BINDING, type Binding, registerCommands } from "./commands.ts";
import { Kube, LABEL_PI_BRANCH_POINT, LABEL_PI_SESSION } from "./kube.ts";
import { type Location, rootOf, SegmentLog, sameLocation } from "./log.ts";
import type { Entry } from "./mapping.ts";
import { type Adapter, adapterOf, Recorder } from "./recorder.ts";
import { openStore, type Store, withGetHook } from "./store.ts";

export default function (pi: ExtensionAPI) {
	const url = process.env.TURNLOG_STORE_URL;
	if (!url) return; // nothing to record into
	let store: Store | undefined;
	const getStore = () => {
		if (!store) {
			store = openStore(url, { requestTimeoutMs: Number(process.env.TURNLOG_S3_TIMEOUT_MS) || undefined });
			const gets = process.env.TURNLOG_DEBUG_GETS;
			if (gets) store = withGetHook(store, (key) => appendFileSync(gets, `${key}\n`));
		}
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
	const report = (msg: string, level: "error" | "info" = "error") => {
		if (ctxRef?.hasUI) ctxRef.ui.notify(`turnlog: ${msg}`, level);
		else if (level === "error") process.stderr.write(`turnlog: ${msg}\n`);
	};
	const status = (text: string) => ctxRef?.ui.setStatus("turnlog", text);
	const branch = (ctx: ExtensionContext) => ctx.sessionManager.getBranch() as unknown as Entry[];

	const isBinding = (e: Entry) => e.type === "custom" && e.customType === BINDING;
	const bindingOf = (ctx: ExtensionContext) => [...branch(ctx)].reverse().find(isBinding);
	// The Sessions the package creates say which pi session they record:
	// `kubectl get sessions -l turnlog.dev/pi-session=ID` lists its tree.
	const labelsOf = (ctx: ExtensionContext, branchPoint?: string): Record<string, string> => ({
		[LABEL_PI_SESSION]: ctx.sessionManager.getSessionId(),
		...(branchPoint ? { [LABEL_PI_BRANCH_POINT]: branchPoint } : {}),
	});
	// rootName is the Session the pi session records into before any
	// branch: TURNLOG_SESSION for the first pi session, pi-<id> otherwise.
	const rootName = (ctx: ExtensionContext) => {
		const id = ctx.sessionManager.getSessionId();
		const named = process.env.TURNLOG_SESSION;
		if (named && (envSessionUsed === undefined || envSessionUsed === id)) {
			envSessionUsed = id;
			return named;
		}
		return `pi-${id}`;
	};
	// locationFor is where pi's current branch is recorded: the Session its
	// latest binding names (/turnlog-open, or a branch the package forked),
	// else the pi session's own.
	const locationFor = async (ctx: ExtensionContext, adapter: Adapter): Promise<Location> => {
		const bound = bindingOf(ctx);
		if (bound) return (bound.data as Binding).location;
		const id = ctx.sessionManager.getSessionId();
		const session = rootName(ctx);
		const namespace = process.env.TURNLOG_NAMESPACE || "default";
		let uid = (session === process.env.TURNLOG_SESSION && process.env.TURNLOG_SESSION_UID) || "";
		// The API server gives a Session its uid: found or created by name.
		const k = getKube();
		if (!uid && k) uid = await k.session(namespace, session, adapter, labelsOf(ctx));
		return { prefix: process.env.TURNLOG_STORE_PREFIX || undefined, namespace, session, uid: uid || id };
	};

	// openAt opens the log at loc and continues it at its head.
	const openAt = async (ctx: ExtensionContext, loc: Location, adapter: Adapter): Promise<Recorder> => {
		const k = getKube();
		const r = new Recorder(getStore(), loc, {
			written: (next, endsTurn) => {
				status(`turnlog ${loc.namespace}/${loc.session}: ${next} events`);
				// Best effort: without it the turn is replayed at the manager's next poll.
				if (endsTurn && k) k.nudge(loc.namespace, loc.session).catch(() => {});
			},
			failed: (err) => report(err.message),
		});
		const bindings = branch(ctx).filter(isBinding);
		const bound = bindings.at(-1);
		const id = ctx.sessionManager.getSessionId();
		await r.open(adapter, ctx.sessionManager.getHeader(), (from) => {
			// Two pi sessions in one log would make a context neither has.
			if (!bound && from !== undefined && from !== id) {
				throw new Error(
					`${loc.namespace}/${loc.session} was recorded from pi session ${from}, not this one (${id}): resume that session, or record into another Session`,
				);
			}
		});
		// The bindings are no events, and the entries /turnlog-open brought
		// in are the log's already (a branch's log starts with its parent's).
		for (const b of bindings) r.adopt(b.id, (b.data as Binding).seqs ?? {}, (b.data as Binding).kinds ?? {});
		return r;
	};

	// switchTo makes loc the Session recorded into.
	const switchTo = async (ctx: ExtensionContext, loc: Location, adapter: Adapter) => {
		const old = rec;
		rec = undefined;
		if (old) {
			old.endTurnIfOpen();
			await old.close();
		}
		rec = await openAt(ctx, loc, adapter);
		where = loc;
	};

	// branchOff gives pi's current branch a Session of its own: the log of
	// r's Session through the last turn it shares with the branch (a
	// SessionFork with an API server, a copy of the log without), or a new
	// Session when they part in the first turn.
	const branchOff = async (ctx: ExtensionContext, r: Recorder, off: number, adapter: Adapter): Promise<Location> => {
		r.endTurnIfOpen();
		await r.flush();
		const cut = await r.lastTurnEndBefore(off);
		const parent = r.location;
		const point = ctx.sessionManager.getLeafId() ?? "root";
		const name = `${rootName(ctx).slice(0, 40).replace(/-+$/, "")}-${point.slice(0, 8)}-${randomUUID().slice(0, 4)}`.toLowerCase();
		const k = getKube();
		if (cut < 0) {
			const uid = k ? await k.session(parent.namespace, name, adapter, labelsOf(ctx, point)) : randomUUID();
			return { ...parent, session: name, uid };
		}
		if (k) {
			const st = await k.fork(parent.namespace, name, parent.session, String(cut), labelsOf(ctx, point));
			return { ...parent, session: st.childName, uid: await k.session(parent.namespace, st.childName, undefined) };
		}
		const child: Location = { ...parent, session: name, uid: randomUUID() };
		await r.log.forkTo(new SegmentLog(getStore(), rootOf(child)), cut);
		return child;
	};

	// follow records pi's current branch into the Session that holds it.
	// When the branch leaves what that Session's log holds (/tree went back,
	// or pi resumed an earlier leaf), the branch gets a Session of its own,
	// bound to it by an entry on the branch; when pi comes back to a branch
	// a Session holds, recording goes on there. So no Session holds two
	// branches, and each one's transcript is what pi sends on its branch.
	// path is the branch when the event that calls it fired: later entries
	// are recorded by the events that follow.
	const follow = async (ctx: ExtensionContext, path: Entry[]) => {
		const adapter = adapterOf(ctx.model);
		const loc = await locationFor(ctx, adapter);
		if (!rec || !sameLocation(rec.location, loc)) await switchTo(ctx, loc, adapter);
		const off = await rec!.offPath(path, (id) => ctx.sessionManager.getEntry(id) !== undefined);
		if (off !== undefined) {
			const child = await branchOff(ctx, rec!, off, adapter);
			pi.appendEntry(BINDING, { location: child, seqs: {}, kinds: {} } satisfies Binding);
			await switchTo(ctx, child, adapter);
			report(`pi's branch is recorded into ${child.namespace}/${child.session}`, "info");
		}
		await rec!.record(path);
		// Entries the previous process persisted but never logged, or the
		// branch's turn up to where pi went back to, end up in a turn of
		// their own.
		rec!.endTurnIfOpen();
	};

	// pi does not wait for the store: what happens meanwhile is queued
	// behind the opening and recorded once the log is open.
	pi.on("session_start", (_event, ctx) => {
		ctxRef = ctx;
		const path = branch(ctx); // what pi resumed with
		serial("open the log", () => follow(ctx, path));
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
		serial("record", async () => {
			await rec?.record(entries);
			rec?.responseStart(event.message);
		});
	});
	pi.on("message_update", (event) => {
		serial("record", () => rec?.delta(event.assistantMessageEvent));
	});
	const afterPersist = (ctx: ExtensionContext) => {
		const entries = soon(ctx);
		serial("record", async () => {
			await rec?.record(await entries);
		});
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
	// pi waits for this handler before it goes on, so the binding of a new
	// branch is on it before anything else is.
	pi.on("session_tree", async (_e, ctx) => {
		const path = branch(ctx); // pi persisted the move and its summary before telling
		await serial("follow pi to the branch", () => follow(ctx, path));
	});
	pi.on("agent_settled", (_e, ctx) => {
		const entries = soon(ctx);
		serial("record", async () => {
			await rec?.record(await entries);
			rec?.endTurnIfOpen(); // a turn/end is written at once
		});
	});
	pi.on("session_shutdown", async (_e, ctx) => {
		await serial("close the log", async () => {
			const r = rec;
			rec = undefined;
			if (!r) return;
			await r.record(branch(ctx));
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
