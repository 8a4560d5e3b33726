// Drop, live: with refusedBlocks Drop — the Session's
// spec.adapter.refusedBlocks, or TURNLOG_REFUSED_BLOCKS — pi stops sending
// the thinking blocks the provider refused. Before each request, pi's
// context (a copy pi makes for its context handlers) loses the blocks the
// reports on earlier responses name, exactly as replay of a dropping Session
// leaves them out of the stored transcript, so what pi sends is what a host
// resuming from that transcript sends. pi's own entries, and its session
// file, keep every block.
import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { buildSessionContext, convertToLlm } from "@earendil-works/pi-coding-agent";
import { BINDING } from "./commands.ts";
import type { Kube } from "./kube.ts";
import type { Location } from "./log.ts";
import type { Entry } from "./mapping.ts";
import { dropRefused, type RefusedBlock, refusedBy, reportsRefusals, sameModel } from "./requestlayout.ts";

export interface DropDeps {
	kube: () => Kube | undefined;
	/** The Session recorded into, once the log is open. */
	where: () => Location | undefined;
	/** Resolves once what the package queued (the log's opening) is done. */
	settle?: () => Promise<void>;
}

const CHOICES = ["Drop", "Keep"];

export function registerDrop(pi: ExtensionAPI, deps: DropDeps) {
	const fromEnv = process.env.TURNLOG_REFUSED_BLOCKS || undefined;
	const badEnv = fromEnv !== undefined && !CHOICES.includes(fromEnv);

	// The Session's choice is read through the API server when a request
	// has a refused block to leave out (never for one without), at most
	// once per prompt: the value read is kept until pi starts a session or
	// the agent starts on a prompt, and for the Session it was read for. So
	// a kubectl patch of the Session applies from the next prompt on, with
	// no API request per provider request.
	let read: { key: string; value: string | undefined } | undefined;
	let stale = true;
	let reading: Promise<void> | undefined;
	let said = new Set<string>();

	const say = (ctx: ExtensionContext, msg: string) => {
		if (said.has(msg)) return; // once: it would repeat with every request
		said.add(msg);
		if (ctx.hasUI) ctx.ui.notify(`turnlog: ${msg}`, "error");
		else process.stderr.write(`turnlog: ${msg}\n`);
	};

	const sessionChoice = async (ctx: ExtensionContext): Promise<string | undefined> => {
		let kube: Kube | undefined;
		try {
			kube = deps.kube();
		} catch {
			return undefined; // a kubeconfig that does not load: the log's opening said so
		}
		if (!kube) return undefined;
		let at = deps.where();
		if (!at && deps.settle) {
			await deps.settle(); // the log is opening: it says which Session
			at = deps.where();
		}
		if (!at) return undefined;
		const key = `${at.namespace}/${at.session}`;
		if (stale || read?.key !== key) {
			reading ??= kube
				.refusedBlocks(at.namespace, at.session)
				.then(
					(value) => {
						read = { key, value };
						stale = false;
					},
					(err) => {
						// Kept, until the next prompt asks again.
						read = { key, value: undefined };
						stale = false;
						say(ctx, `read refusedBlocks of Session ${key}: ${(err as Error).message}; refused blocks are sent as pi keeps them`);
					},
				)
				.finally(() => {
					reading = undefined;
				});
			await reading;
		}
		return read?.key === key ? read.value : undefined;
	};

	const drops = async (ctx: ExtensionContext): Promise<boolean> => {
		if (badEnv) return false; // said at the session's start
		// The package's setting wins: it is the user's for this process.
		if (fromEnv) return fromEnv === "Drop";
		return (await sessionChoice(ctx)) === "Drop";
	};

	// What a response's report names, by the response's entry: the context
	// its request was built from is fixed by the entry's place on pi's tree
	// (the entries before it, and the blocks left out of them), so it is
	// mapped once.
	const mapped = new Map<string, RefusedBlock[]>();

	// refused are the blocks the responses on pi's current branch refused,
	// for requests to model. Only a response of that model counts, as replay
	// reads only the target's: another model's thinking is not sent to it.
	// The messages /turnlog-open brought in are the stored transcript's,
	// which already left out what their reports name; the reports index
	// requests built from the log's blocks, not from those messages.
	const refused = (ctx: ExtensionContext, branch: Entry[], model: { api?: string; provider?: string; id?: string }): RefusedBlock[] => {
		const brought = new Set<string>();
		for (const e of branch) {
			if (e.type === "custom" && e.customType === BINDING) for (const id of Object.keys(e.data?.seqs ?? {})) brought.add(id);
		}
		let all: any[] | undefined;
		let byId: Map<string, any> | undefined;
		const out: RefusedBlock[] = [];
		for (const e of branch) {
			const m = e.type === "message" ? e.message : undefined;
			if (!reportsRefusals(m) || !sameModel(m, model) || brought.has(e.id)) continue;
			let found = mapped.get(e.id);
			if (!found) {
				all ??= ctx.sessionManager.getEntries() as unknown[];
				byId ??= new Map(all.map((x: any) => [x.id, x]));
				// The context the request went out with: pi's context at the
				// entry before the response, converted as pi converts it,
				// without the blocks refused before it.
				const before = buildSessionContext(all as any, e.parentId, byId as any).messages;
				found = refusedBy(m, convertToLlm(before), out);
				mapped.set(e.id, found);
			}
			for (const r of found) if (!out.some((o) => o.key === r.key && o.index === r.index)) out.push(r);
		}
		return out;
	};

	pi.on("session_start", (_e, ctx) => {
		stale = true;
		said = new Set();
		if (badEnv) say(ctx, `TURNLOG_REFUSED_BLOCKS ${JSON.stringify(fromEnv)} is not "Drop" or "Keep"; refused blocks are sent as pi keeps them`);
	});
	pi.on("agent_start", () => {
		stale = true;
	});

	pi.on("context", async (event, ctx) => {
		const model = ctx.model;
		if (!model) return;
		const branch = ctx.sessionManager.getBranch() as unknown as Entry[];
		// Most requests follow no report: nothing to read, nothing to ask.
		if (!branch.some((e) => e.type === "message" && reportsRefusals(e.message) && sameModel(e.message, model))) return;
		if (!(await drops(ctx))) return;
		const blocks = refused(ctx, branch, model);
		// The messages are pi's copy for this request: editing them changes
		// what is sent, not pi's entries. They are edited in place and the
		// same list is returned, message for message: pi keeps its system
		// messages where they are only for a context it recognises as its
		// own, and would fold them into one leading system message for a
		// list of other messages, which changes more than the blocks.
		if (blocks.length === 0 || dropRefused(event.messages, blocks) === 0) return;
		return { messages: event.messages };
	});
}
