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
//   TURNLOG_REFUSED_BLOCKS Drop: leave the thinking blocks the provider
//                          refused out of every later request, as a Session
//                          with spec.adapter.refusedBlocks Drop stores its
//                          transcript; Keep: send them, as pi does. Unset:
//                          the Session's own choice (with a kubeconfig), else Keep
//   TURNLOG_DEBUG_GETS     a test hook: a file the package appends the key
//                          of every object it reads to, one a line
import { randomUUID } from "node:crypto";
import { appendFileSync, closeSync, openSync, readSync } from "node:fs";
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { BINDING, type Binding, registerCommands } from "./commands.ts";
import { Kube, LABEL_PI_BRANCH_POINT, LABEL_PI_SESSION } from "./kube.ts";
import { type Location, recordedFrom, rootOf, SegmentLog, sameLocation } from "./log.ts";
import { type Entry, holdsContext } from "./mapping.ts";
import { openStore } from "./openstore.ts";
import { type Adapter, adapterOf, Recorder } from "./recorder.ts";
import { registerDrop } from "./refused.ts";
import { type Store, withGetHook } from "./store.ts";

// The pi session pi started with, which TURNLOG_SESSION names: kept for
// the process, as pi loads the package afresh for every session.
const ENV_SESSION_OWNER = Symbol.for("turnlog.dev/pi-turnlog/env-session-owner");
const process_ = globalThis as unknown as Record<symbol, string | undefined>;

/** piSessionOf is the id in the header of a pi session file; undefined if it cannot be read. */
function piSessionOf(file: string): string | undefined {
	let fd: number | undefined;
	try {
		fd = openSync(file, "r");
		const buf = Buffer.alloc(64 << 10);
		const n = readSync(fd, buf, 0, buf.length, 0);
		const line = buf.subarray(0, n).toString("utf8").split("\n")[0];
		const header = JSON.parse(line);
		return header?.type === "session" && typeof header.id === "string" ? header.id : undefined;
	} catch {
		return undefined;
	} finally {
		if (fd !== undefined) closeSync(fd);
	}
}

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
	// A log that could not be opened is said once, not at every event: pi
	// goes on without recording until it moves (/tree, another session).
	let openFailed = false;
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
	const idOf = (ctx: ExtensionContext) => ctx.sessionManager.getSessionId();
	// The session file pi forked or cloned this pi session from (pi's header
	// names it), if it was.
	const copiedFromFile = (ctx: ExtensionContext) => (ctx.sessionManager.getHeader() as { parentSession?: string } | null)?.parentSession;
	// owns tells the bindings this pi session wrote from those its entries
	// were copied with by pi's /fork or /clone.
	const owns = (ctx: ExtensionContext, b: Entry) => {
		const by = (b.data as Binding).piSession;
		return by !== undefined ? by === idOf(ctx) : !copiedFromFile(ctx);
	};
	const bindingOf = (ctx: ExtensionContext) => [...branch(ctx)].reverse().find((e) => isBinding(e) && owns(ctx, e));
	// rootBindingOf names the first Session of a pi session forked or cloned
	// from a recorded one, wherever on pi's tree it is.
	const rootBindingOf = (ctx: ExtensionContext) =>
		(ctx.sessionManager.getEntries() as unknown as Entry[]).find((e) => isBinding(e) && owns(ctx, e) && (e.data as Binding).root);
	// The Sessions the package creates say which pi session they record:
	// `kubectl get sessions -l turnlog.dev/pi-session=ID` lists its tree.
	const labelsOf = (ctx: ExtensionContext, branchPoint?: string): Record<string, string> => ({
		[LABEL_PI_SESSION]: idOf(ctx),
		...(branchPoint ? { [LABEL_PI_BRANCH_POINT]: branchPoint } : {}),
	});
	const namespace = () => process.env.TURNLOG_NAMESPACE || "default";
	// nudges are the nudges sent and not yet answered.
	const nudges = new Set<Promise<void>>();
	const prefix = () => process.env.TURNLOG_STORE_PREFIX || undefined;
	// rootName is the Session the pi session records into before any
	// branch: TURNLOG_SESSION for the pi session pi started with, pi-<id>
	// for the others (/new, /fork, /clone, /resume of another file). pi
	// loads the package afresh for each session it switches to, so which
	// one pi started with is kept for the process, not in this closure.
	const rootName = (ctx: ExtensionContext) => {
		const named = process.env.TURNLOG_SESSION;
		return named && !copiedFromFile(ctx) && process_[ENV_SESSION_OWNER] === idOf(ctx) ? named : `pi-${idOf(ctx)}`;
	};
	// locationFor is where pi's current branch is recorded: the Session its
	// latest binding names (/turnlog-open, or a branch the package forked),
	// else the pi session's own: the Session a fork or clone of it got, or
	// the one of its name, created through the API server if missing.
	const locationFor = async (ctx: ExtensionContext, adapter: Adapter): Promise<Location> => {
		const bound = bindingOf(ctx) ?? rootBindingOf(ctx);
		if (bound) return (bound.data as Binding).location;
		const session = rootName(ctx);
		let uid = (session === process.env.TURNLOG_SESSION && process.env.TURNLOG_SESSION_UID) || "";
		// The API server gives a Session its uid: found or created by name.
		const k = getKube();
		if (!uid && k) uid = await k.session(namespace(), session, adapter, labelsOf(ctx));
		return { prefix: prefix(), namespace: namespace(), session, uid: uid || idOf(ctx) };
	};

	// openAt opens the log at loc and continues it at its head. Unless
	// copied, the log must be this pi session's: a copied path is looked up
	// in the log of the pi session it was copied from.
	const openAt = async (ctx: ExtensionContext, loc: Location, adapter: Adapter, copied = false): Promise<Recorder> => {
		const k = getKube();
		const r = new Recorder(getStore(), loc, {
			written: (next, endsTurn) => {
				status(`turnlog ${loc.namespace}/${loc.session}: ${next} events`);
				// Best effort: without it the turn is replayed at the manager's next poll.
				if (endsTurn && k) {
					const sent: Promise<void> = k
						.nudge(loc.namespace, loc.session)
						.catch(() => {})
						.finally(() => nudges.delete(sent));
					nudges.add(sent);
				}
			},
			failed: (err) => report(err.message),
		});
		const bindings = branch(ctx).filter(isBinding);
		const bound = bindingOf(ctx) ?? rootBindingOf(ctx);
		const id = idOf(ctx);
		await r.open(adapter, ctx.sessionManager.getHeader(), (from) => {
			// Two pi sessions in one log would make a context neither has.
			if (!copied && !bound && from !== undefined && from !== id) {
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

	// branchOff gives pi's current branch a Session of its own (named name,
	// by default after the branch point): the log of r's Session through
	// the last turn it shares with the branch, the one before seq off or
	// the last one (a SessionFork with an API server, a copy of the log
	// without), or a new Session when they part in the first turn.
	const branchOff = async (ctx: ExtensionContext, r: Recorder, off: number | undefined, adapter: Adapter, name?: string): Promise<Location> => {
		r.endTurnIfOpen();
		await r.flush();
		const cut = await r.lastTurnEndBefore(off ?? r.next);
		const parent = r.location;
		const point = ctx.sessionManager.getLeafId() ?? "root";
		name ??= `${rootName(ctx).slice(0, 40).replace(/-+$/, "")}-${point.slice(0, 8)}-${randomUUID().slice(0, 4)}`.toLowerCase();
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

	// recordedRoot is the Session pi session piSession recorded into before
	// any branch, if the package recorded it: the Session of its name whose
	// session/start says it was recorded from that pi session.
	const recordedRoot = async (piSession: string): Promise<Location | undefined> => {
		const named = process.env.TURNLOG_SESSION;
		const k = getKube();
		for (const session of named ? [named, `pi-${piSession}`] : [`pi-${piSession}`]) {
			let uid = (session === named && process.env.TURNLOG_SESSION_UID) || "";
			if (!uid && k) uid = (await k.uidOf(namespace(), session)) ?? "";
			if (!uid && k) continue;
			const loc: Location = { prefix: prefix(), namespace: namespace(), session, uid: uid || piSession };
			if ((await recordedFrom(getStore(), loc)) === piSession) return loc;
		}
		return undefined;
	};

	// copiedFrom is the Session that holds the path pi's /fork or /clone
	// copied this pi session's entries from: the one the latest copied
	// binding names, else the first Session of the pi session it was copied
	// from. undefined when there is none, or nothing to record yet.
	const copiedFrom = async (ctx: ExtensionContext, path: Entry[]): Promise<Location | undefined> => {
		if (!path.some(holdsContext)) return undefined;
		const copied = [...path].reverse().find((e) => isBinding(e) && !owns(ctx, e));
		if (copied) return (copied.data as Binding).location;
		const file = copiedFromFile(ctx);
		const parent = file ? piSessionOf(file) : undefined;
		return parent ? recordedRoot(parent) : undefined;
	};

	// forkCopied gives a pi session forked or cloned from a recorded one its
	// own first Session, pi-<id>: forked from the Session that holds the
	// copied path at the last turn both hold, and bound by a root binding.
	const forkCopied = async (ctx: ExtensionContext, from: Location, path: Entry[], adapter: Adapter): Promise<Location> => {
		const parent = await openAt(ctx, from, adapter, true);
		try {
			// The copy holds only its path: whatever the parent's log holds
			// beyond it is another branch's.
			const off = await parent.offPath(path, () => true);
			const child = await branchOff(ctx, parent, off, adapter, `pi-${idOf(ctx)}`);
			pi.appendEntry(BINDING, { location: child, piSession: idOf(ctx), root: true, seqs: {}, kinds: {} } satisfies Binding);
			report(`this pi session is recorded into ${child.namespace}/${child.session}, forked from ${from.namespace}/${from.session}`, "info");
			return child;
		} finally {
			await parent.close();
		}
	};

	// attach makes rec the recorder of the Session that holds pi's current
	// branch (path). When the branch leaves what that Session's log holds
	// (/tree went back, or pi resumed an earlier leaf), the branch gets a
	// Session of its own, bound to it by an entry on the branch; when pi
	// comes back to a branch a Session holds, recording goes on there. So
	// no Session holds two branches, and each one's transcript is what pi
	// sends on its branch. A pi session with nothing to record yet gets no
	// Session until it has (false).
	const attach = async (ctx: ExtensionContext, path: Entry[]): Promise<boolean> => {
		const adapter = adapterOf(ctx.model);
		if (!rec && !bindingOf(ctx) && !rootBindingOf(ctx)) {
			const from = await copiedFrom(ctx, path);
			if (from) await forkCopied(ctx, from, path, adapter);
			else if (!path.some(holdsContext)) return false;
		}
		const loc = await locationFor(ctx, adapter);
		if (!rec || !sameLocation(rec.location, loc)) await switchTo(ctx, loc, adapter);
		const off = await rec!.offPath(path, (id) => ctx.sessionManager.getEntry(id) !== undefined);
		if (off !== undefined) {
			const child = await branchOff(ctx, rec!, off, adapter);
			pi.appendEntry(BINDING, { location: child, piSession: idOf(ctx), seqs: {}, kinds: {} } satisfies Binding);
			await switchTo(ctx, child, adapter);
			report(`pi's branch is recorded into ${child.namespace}/${child.session}`, "info");
		}
		return true;
	};

	// follow records pi's current branch into the Session that holds it.
	// path is the branch when the event that calls it fired: later entries
	// are recorded by the events that follow.
	const follow = async (ctx: ExtensionContext, path: Entry[]) => {
		let attached: boolean;
		try {
			attached = await attach(ctx, path);
		} catch (err) {
			openFailed = true;
			throw err;
		}
		openFailed = false;
		if (!attached) return;
		await rec!.record(path);
		// Entries the previous process persisted but never logged, or the
		// branch's turn up to where pi went back to, end up in a turn of
		// their own.
		rec!.endTurnIfOpen();
	};

	// recording is the recorder of pi's current branch, opened when pi
	// first has something to record (entries: the branch then).
	const recording = async (ctx: ExtensionContext, entries: Entry[]): Promise<Recorder | undefined> => {
		if (rec || openFailed) return rec;
		try {
			if (!(await attach(ctx, entries))) return undefined;
		} catch (err) {
			openFailed = true;
			report(`open the log: ${(err as Error).message}`);
			return undefined;
		}
		return rec;
	};

	// pi does not wait for the store: what happens meanwhile is queued
	// behind the opening and recorded once the log is open.
	pi.on("session_start", async (_event, ctx) => {
		ctxRef = ctx;
		process_[ENV_SESSION_OWNER] ??= idOf(ctx); // the session pi started with
		const path = branch(ctx); // what pi resumed with
		const opening = serial("open the log", () => follow(ctx, path));
		// A pi session /fork or /clone just made gets its Session before pi
		// goes on, as a /tree branch does: its binding then follows the
		// copied path at once, so a prompt lands in that Session and a copy
		// made of it next holds the binding.
		if (copiedFromFile(ctx) && !bindingOf(ctx) && !rootBindingOf(ctx)) await opening;
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
			const r = await recording(ctx, entries);
			await r?.record(entries);
			r?.responseStart(event.message);
		});
	});
	pi.on("message_update", (event) => {
		serial("record", () => rec?.delta(event.assistantMessageEvent));
	});
	const afterPersist = (ctx: ExtensionContext) => {
		const entries = soon(ctx);
		serial("record", async () => {
			const es = await entries;
			await (await recording(ctx, es))?.record(es);
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
			const es = await entries;
			const r = await recording(ctx, es);
			await r?.record(es);
			r?.endTurnIfOpen(); // a turn/end is written at once
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
			// The last turn is often written as pi quits: its nudge must
			// go out before the process ends, or the Session's status
			// waits for the manager's next poll.
			await Promise.all([...nudges]);
		});
	});

	registerCommands(pi, {
		store: getStore,
		kube: getKube,
		current: () => rec,
		settle: () => chain,
	});
	registerDrop(pi, { kube: getKube, where: () => where, settle: () => chain });
}
