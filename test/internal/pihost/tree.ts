// A pi extension that moves pi in its session tree as /tree does
// (ctx.navigateTree), for RPC mode, which has no /tree:
// /tree-to ENTRY_ID [summarize].
export default function (pi: any) {
	pi.registerCommand("tree-to", {
		description: "Move to an entry of the session tree: /tree-to ENTRY_ID [summarize]",
		handler: async (args: string, ctx: any) => {
			const [id, how] = args.trim().split(/\s+/);
			const result = await ctx.navigateTree(id, { summarize: how === "summarize" });
			if (result.cancelled) ctx.ui.notify(`tree-to ${id}: cancelled`, "error");
		},
	});
}
