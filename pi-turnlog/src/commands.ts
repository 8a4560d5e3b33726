// Commands: /turnlog-fork forks the Session at a turn — with an API server
// as a SessionFork, which the controller cuts into a child Session, else
// by cutting the log offline into a new Session's log, as a SessionFork
// would; /turnlog-open continues a turnlog Session in pi, its stored
// transcript as the context.
import { randomUUID } from "node:crypto";
import type { ExtensionAPI, ExtensionCommandContext } from "@earendil-works/pi-coding-agent";
import { type Location, rootOf, SegmentLog } from "./log.ts";
import type { Kube } from "./kube.ts";
import { adapterOf, type Recorder } from "./recorder.ts";
import type { Store } from "./store.ts";
import { loadTranscript, type StoredMessage } from "./transcript.ts";

/** The custom entry that binds a pi session to a turnlog Session. */
export const BINDING = "turnlog";

export interface Binding {
	location: Location;
	/**
	 * The pi session that wrote the binding. pi's /fork and /clone copy a
	 * branch's entries, bindings included, into a new pi session: a binding
	 * another pi session wrote names the Session the copied path came from,
	 * not one this pi session records into. (Bindings written before this
	 * field existed belong to the pi session whose file holds them, unless
	 * that file was forked from another.)
	 */
	piSession?: string;
	/**
	 * The pi session's own first Session, when it is not the one named by
	 * default (pi-<id>): that of a pi session forked or cloned from one the
	 * package recorded.
	 */
	root?: boolean;
	/** The entries the binding brought in from the stored transcript, by id: the seqs of their events. */
	seqs: Record<string, number>;
	/** What the entries are, as the recorder tells them apart. */
	kinds: Record<string, "message" | "fixed">;
}

export interface Deps {
	store: () => Store;
	kube: () => Kube | undefined;
	current: () => Recorder | undefined;
	settle: () => Promise<void>;
}

/** cutAt is where a fork at atSeq cuts the log: the first turn/end at or after floor(atSeq). */
export function cutAt(events: { seq: number; type: string }[], atSeq: string): number {
	if (!/^\d+(\.\d+)?$/.test(atSeq)) throw new Error(`atSeq ${JSON.stringify(atSeq)}: want a non-negative decimal such as 41 or 40.1`);
	const anchor = Math.floor(Number(atSeq));
	const end = events.find((e) => e.seq >= anchor && e.type === "turn/end");
	if (!end) throw new Error(`no turn ends at or after seq ${anchor} (the log's last seq is ${events.length - 1})`);
	return end.seq;
}

export function parseLocation(arg: string, prefix: string | undefined): Location {
	const parts = arg.split("/");
	if (parts.length !== 3 || parts.some((p) => p === "")) throw new Error(`${JSON.stringify(arg)}: want NAMESPACE/SESSION/UID`);
	return { prefix, namespace: parts[0], session: parts[1], uid: parts[2] };
}

/** locate reads NAMESPACE/SESSION/UID, or NAMESPACE/SESSION when the API server can say the uid. */
async function locate(arg: string, prefix: string | undefined, kube: Kube | undefined): Promise<Location> {
	const parts = arg.split("/");
	if (kube && parts.length === 2 && parts.every((p) => p !== "")) {
		return { prefix, namespace: parts[0], session: parts[1], uid: await kube.session(parts[0], parts[1], undefined) };
	}
	if (parts.length !== 3 || parts.some((p) => p === "")) {
		throw new Error(`${JSON.stringify(arg)}: want NAMESPACE/SESSION/UID${kube ? " or NAMESPACE/SESSION" : ""}`);
	}
	return parseLocation(arg, prefix);
}

export function registerCommands(pi: ExtensionAPI, deps: Deps) {
	const fail = (ctx: ExtensionCommandContext, cmd: string, err: unknown) =>
		ctx.ui.notify(`${cmd}: ${(err as Error).message ?? String(err)}`, "error");

	pi.registerCommand("turnlog-fork", {
		description: "Fork this turnlog Session at a seq or a pi entry into a new Session: /turnlog-fork AT_SEQ|@ENTRY_ID [CHILD_NAME | NAMESPACE/SESSION/UID]",
		handler: async (args, ctx) => {
			try {
				const [atSeq, name, extra] = args.trim().split(/\s+/);
				if (!atSeq || extra !== undefined) throw new Error("usage: /turnlog-fork AT_SEQ|@ENTRY_ID [CHILD_NAME | NAMESPACE/SESSION/UID]");
				await ctx.waitForIdle();
				await deps.settle();
				const rec = deps.current();
				if (!rec) throw new Error("this pi session is not recorded (set TURNLOG_STORE_URL)");
				await rec.flush();
				let at = atSeq;
				if (at.startsWith("@")) {
					// A message as pi names it: the event it became.
					const seq = await rec.seqOf(at.slice(1));
					if (seq === undefined) throw new Error(`no pi entry ${at.slice(1)} in ${rec.location.namespace}/${rec.location.session}'s log`);
					at = String(seq);
				}
				const parent = rec.location;
				const kube = deps.kube();
				if (kube && !name?.includes("/")) {
					// With an API server, a fork is a SessionFork: the controller
					// cuts it, creates the child Session (spec.forkedFrom) and
					// raises the Forked Event, as for kubectl apply.
					if (!/^\d+(\.\d+)?$/.test(at)) throw new Error(`atSeq ${JSON.stringify(at)}: want a non-negative decimal such as 41 or 40.1`);
					const fork = name || `${parent.session}-fork-${Math.floor(Number(at))}`;
					const st = await kube.fork(parent.namespace, fork, parent.session, at);
					const uid = await kube.session(parent.namespace, st.childName, undefined);
					ctx.ui.notify(
						`turnlog: forked ${parent.namespace}/${parent.session} at seq ${st.cutSeq} into ${parent.namespace}/${st.childName}/${uid} (SessionFork ${fork}); continue it with /turnlog-open ${parent.namespace}/${st.childName}`,
						"info",
					);
					return;
				}
				const cut = cutAt(await rec.log.readAll(), at);
				// A child Session that exists already (its uid from the API
				// server) is named in full; otherwise the child gets a new uid.
				const child: Location = name?.includes("/")
					? await locate(name, parent.prefix, deps.kube())
					: { ...parent, session: name || `${parent.session}-fork-${cut}`, uid: randomUUID() };
				await rec.log.forkTo(new SegmentLog(deps.store(), rootOf(child)), cut);
				ctx.ui.notify(`turnlog: forked ${parent.namespace}/${parent.session} at seq ${cut} into ${child.namespace}/${child.session}/${child.uid}`, "info");
			} catch (err) {
				fail(ctx, "turnlog-fork", err);
			}
		},
	});

	pi.registerCommand("turnlog-open", {
		description: "Continue a turnlog Session in a new pi session, its stored transcript as the context: /turnlog-open NAMESPACE/SESSION/UID",
		handler: async (args, ctx) => {
			try {
				const arg = args.trim();
				if (!arg || /\s/.test(arg)) throw new Error("usage: /turnlog-open NAMESPACE/SESSION/UID");
				const location = await locate(arg, process.env.TURNLOG_STORE_PREFIX || undefined, deps.kube());
				const model = ctx.model;
				if (!model) throw new Error("no model selected: the stored transcript is read for the current model");
				// A Session that drops refused blocks keeps its transcript
				// apart; only the API server says which it is.
				const kube = deps.kube();
				const target = { ...adapterOf(model), refusedBlocks: kube ? await kube.refusedBlocks(location.namespace, location.session) : undefined };
				const tr = await loadTranscript(deps.store(), rootOf(location), target);
				await ctx.waitForIdle();
				const result = await ctx.newSession({
					setup: async (sm) => {
						const binding: Binding = { location, piSession: sm.getSessionId(), seqs: {}, kinds: {} };
						for (const m of tr.messages) {
							const id = sm.appendMessage(m.message);
							if (!m.synthetic) {
								binding.seqs[id] = m.seq;
								binding.kinds[id] = kindOf(m);
							}
						}
						sm.appendCustomEntry(BINDING, binding);
					},
				});
				if (result.cancelled) throw new Error("cancelled");
			} catch (err) {
				fail(ctx, "turnlog-open", err);
			}
		},
	});
}

function kindOf(m: StoredMessage): "message" | "fixed" {
	if (m.role === "system" || m.origin === "compaction" || m.origin === "bash" || m.origin === "branchSummary") return "fixed";
	return "message";
}
